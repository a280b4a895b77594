package wal

import (
	"errors"
	"fmt"

	"github.com/walbroker/walbroker/segment"
)

// What Open does about what the scans found (see recover): refuse
// damage, zero a torn tail of the last segment, and rewrite at full size a
// last segment too short to take its seal. Options.Salvage repairs the
// damage first (salvage.go).

// repair acts on what the scans found: salvage (when asked) what is
// damaged, refuse mid-log corruption and an unsealed segment with a later
// one, zero a torn tail of the last segment, and grow a last segment too
// full to take a frame. It sets each segment's end.
func (l *Log) repair(segs []*seg, reports []segment.Report) error {
	for i, s := range segs {
		last := i == len(segs)-1
		r := &reports[i]
		if l.opts.Salvage && (len(r.Skipped) > 0 || r.Tail == segment.EndCorrupt || !last && !r.Sealed) {
			if err := l.salvage(s, r, last); err != nil {
				return err
			}
		}
		switch {
		case r.Tail == segment.EndCorrupt:
			return &CorruptionError{File: s.file.Path(), Offset: r.DamageAt, Cause: r.Cause}
		case !last && (r.Tail != segment.EndClean || !r.Sealed):
			return &CorruptionError{File: s.file.Path(), Offset: r.End, Cause: unsealedCause(r)}
		case last && r.Tail == segment.EndTorn:
			if err := l.zeroTail(s, r); err != nil {
				return err
			}
		}
		if last && !r.Sealed && s.file.Size()-r.End < segment.Size(0) {
			if err := l.regrow(s, r.End); err != nil {
				return err
			}
		}
		s.end.Store(int64(r.End))
		if r.Records >= 0 {
			l.recovery.Records += r.Records
		}
	}
	return nil
}

// unsealedCause is what is wrong with a segment that a later one follows
// and whose scan r did not end in its seal: what the scan met where the
// frames end, or, when they end cleanly (the file cut short, or its seal
// zeroed), that the seal is missing.
func unsealedCause(r *segment.Report) error {
	if r.Cause != nil {
		return r.Cause
	}
	return errors.New("segment is not sealed but a later segment exists")
}

// zeroTail overwrites the torn tail of the last segment with zeros, so that
// stray frames of the torn batch can never be read as part of a later one.
func (l *Log) zeroTail(s *seg, r *segment.Report) error {
	data := s.file.Data()
	end := len(data)
	for end > r.End && data[end-1] == 0 {
		end--
	}
	d := Damage{File: s.file.Path(), Segment: s.seq, Offset: r.End, Length: end - r.End, Cause: r.Cause}
	l.recovery.TornTail = &d
	l.opts.Logger.Warn("wal: discarding torn tail (bytes past the last complete frame of the last segment, taken as never synced: no append that waited for an fdatasync had them)", "file", d.File, "offset", d.Offset, "bytes", d.Length, "cause", d.Cause)
	if err := zeroRange(s.file, r.End, end); err != nil {
		return fmt.Errorf("wal: open: repair torn tail: %w", err)
	}
	r.Tail = segment.EndClean
	return nil
}

func zeroRange(f *segment.File, from, to int) error {
	zeros := make([]byte, min(1<<20, max(to-from, 0)))
	for off := from; off < to; off += len(zeros) {
		n := min(len(zeros), to-off)
		if err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
	}
	if from < to {
		return f.Sync()
	}
	return nil
}

// regrownSize is the size regrow gives a segment whose frames end at end:
// a segment's, or more if that does not leave room for one more frame
// header (a seal).
func (l *Log) regrownSize(end int) int64 {
	return max(l.opts.SegmentBytes, int64(end+segment.Size(0)))
}

// regrow replaces a last segment too short to take its seal (a file cut
// short from outside the log) with a full-size copy of its intact prefix.
func (l *Log) regrow(s *seg, end int) error {
	return l.regrowTo(s, end, l.regrownSize(end))
}

// regrowTo replaces segment s by a file of size bytes that holds its first
// end bytes.
func (l *Log) regrowTo(s *seg, end int, size int64) error {
	path := s.file.Path()
	l.opts.Logger.Warn("wal: last segment is shorter than a segment; rewriting it at full size", "file", path, "size", s.file.Size())
	f, err := writePrefix(l.opts.FS, path+tmpSuffix, s.seq, s.file.Salt(), size, s.file.Data()[segment.HeaderSize:end])
	if err != nil {
		return fmt.Errorf("wal: open: regrow %s: %w", path, err)
	}
	if err = f.Rename(l.opts.FS, path); err == nil {
		err = l.opts.FS.SyncDir(l.dir)
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("wal: open: regrow %s: %w", path, err)
	}
	_ = s.file.Close()
	s.file = f
	return nil
}
