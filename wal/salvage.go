package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Options.Salvage: damaged files are copied aside (salvage/), damaged
// spans padded over, a segment that lost its seal sealed after its last
// intact record, and a segment file that is gone, or too short for a
// header, replaced by an empty segment; every span is listed durably
// first (unfinished.go).

// salvageToDurable reports, as a span salvage skips, the bytes of the last
// segment from r.End, where its valid frames end, to durable, where the log
// was known durable (a clean Close's end, Options.Verified or
// Options.Durable): they held synced records, which are lost. The scan goes
// on from durable when the file reaches it; a file cut before it (its size
// less than durable) is rewritten at full size by the salvage, so that the
// padding over the span fits, and appends go on after it.
//
// A durable end less than segment.Size(0) past r.End is the end of no
// frame (none is shorter): a position the caller got wrong
// (Options.Verified or Durable). The span then runs on to where the
// smallest frame would end, so that a padding frame covers it and the
// position: a span shorter than one cannot be padded, and the salvage
// failed on it, every Open with Salvage alike, while the bytes up to
// the position may still have held synced records (a position a little
// short of the right one), which are reported lost rather than zeroed.
func salvageToDurable(f *segment.File, seq uint32, r segment.Report, durable int) segment.Report {
	to := max(durable, r.End+segment.Size(0))
	at, cause := r.DamageAt, r.Cause
	if r.Tail == segment.EndClean || cause == nil {
		at, cause = r.End, errors.New("no frame")
	}
	if to > f.Size() {
		at, cause = f.Size(), fmt.Errorf("the file has %d bytes", f.Size())
	}
	if to != durable {
		cause = fmt.Errorf("no frame ends there, the smallest would end at %d: %w", to, cause)
	}
	span := segment.Span{From: r.End, To: to, At: at,
		Cause: fmt.Errorf("the log was durable to offset %d, its frames end at %d: synced records are gone: %w", durable, r.End, cause)}
	if to > f.Size() {
		r.Skipped = append(slices.Clone(r.Skipped), span)
		r.End, r.Tail, r.DamageAt, r.Cause = to, segment.EndClean, span.At, span.Cause
		return r
	}
	rest, _ := segment.ScanFrom(f.Data(), seq, to, true, func(segment.Frame) error { return nil })
	rest.Skipped = slices.Concat(r.Skipped, []segment.Span{span}, rest.Skipped)
	if rest.Cause == nil {
		rest.DamageAt, rest.Cause = span.At, span.Cause
	}
	rest.Records += r.Records
	return rest
}

// writtenFirstFrame reports, as a span salvage skips, the damaged first
// frame of a last segment whose scan r found no frame of its own
// (dropInterruptedRotation): from the header to where the frame's length
// field says it ends, when it gives a length that fits in the file, or
// else (a zeroed one, say) to the file's last byte that is not zero,
// which in a reused file may count bytes of the segment it held before.
// The salvage pads over it (in a file rewritten larger when the span
// leaves no room for the padding), and appends go on after it.
func writtenFirstFrame(f *segment.File, r segment.Report, cause error) segment.Report {
	data := f.Data()
	to := 0
	if at := segment.HeaderSize; at <= len(data)-segment.FrameHeaderSize {
		n := binary.LittleEndian.Uint32(data[at+4:])
		if end := int64(at) + int64(segment.Size(0)) + int64(n); n > 0 && end <= int64(len(data)) {
			to = int(end)
		}
	}
	if to == 0 {
		for to = len(data); to > segment.HeaderSize && data[to-1] == 0; to-- {
		}
	}
	to = max(to, segment.HeaderSize+segment.Size(0))
	r.Skipped = []segment.Span{{From: segment.HeaderSize, To: to, At: segment.HeaderSize, Cause: cause}}
	r.End, r.Tail, r.DamageAt, r.Cause = to, segment.EndClean, segment.HeaderSize, cause
	return r
}

// salvage copies a damaged segment aside, then makes it scan cleanly:
// padding frames over the skipped spans, and a seal where a segment that is
// not the last lost its own.
func (l *Log) salvage(s *seg, r *segment.Report, last bool) error {
	path := s.file.Path()
	copyTo, err := l.keepAside(s.seq, s.file.Data())
	if err != nil {
		return fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	// Every span this segment loses, listed durably before any is
	// repaired (noteSalvage).
	var lost []Damage
	for _, sp := range r.Skipped {
		n := sp.To - sp.From
		if n < segment.Size(0) {
			return fmt.Errorf("wal: salvage %s: damaged span of %d bytes at offset %d is too short to pad: %w",
				path, n, sp.From, &CorruptionError{File: path, Offset: sp.At, Cause: sp.Cause})
		}
		lost = append(lost, Damage{File: path, Segment: s.seq, Offset: sp.From, Length: n, Cause: sp.Cause, CopiedTo: copyTo})
	}
	// The damage took the end of a sealed segment: everything after the
	// valid prefix is lost. It is sealed there, in a file rewritten at a
	// size that holds the seal if it was cut too short for one. The span
	// lost runs to where the segment's records could reach: its size less
	// the room every segment keeps for its seal, or, in a file cut short,
	// every byte a segment can hold (its size is not known, and a caller
	// looks for the records it lost in the span).
	sealEarly := !last && !r.Sealed
	regrow := sealEarly && s.file.Size()-r.End < segment.Size(0)
	if sealEarly {
		length := s.file.Size() - segment.Size(0) - r.End
		if regrow || cutInFrame(s.file.Data(), r) {
			length = MaxSegmentBytes - r.End
		}
		lost = append(lost, Damage{File: path, Segment: s.seq, Offset: r.End, Length: length, Cause: unsealedCause(r), CopiedTo: copyTo})
	}
	if err := l.noteSalvage(lost...); err != nil {
		return err
	}
	if last && len(r.Skipped) > 0 && r.Skipped[len(r.Skipped)-1].To+segment.Size(0) > s.file.Size() {
		// The file was cut before the log's durable end
		// (salvageToDurable): rewritten at a size that holds the padding
		// over what was cut, and a seal after it.
		if err := l.regrowTo(s, s.file.Size(), l.regrownSize(r.Skipped[len(r.Skipped)-1].To)); err != nil {
			return fmt.Errorf("wal: salvage: %w", err)
		}
	}
	for _, d := range lost[:len(r.Skipped)] {
		pad := segment.AppendFrame(nil, s.seq, s.file.Salt(), 0, segment.KindPadding, segment.Full, make([]byte, d.Length-segment.Size(0)))
		if err := s.file.WriteAt(pad, d.Offset); err != nil {
			return fmt.Errorf("wal: salvage: %w", err)
		}
		l.opts.Logger.Error("wal: salvage skipped damaged span; its records are lost", "file", path, "offset", d.Offset, "bytes", d.Length, "copy", copyTo)
	}
	if sealEarly {
		if regrow {
			if err := l.regrow(s, r.End); err != nil {
				return fmt.Errorf("wal: salvage: %w", err)
			}
		}
		seal := segment.AppendFrame(nil, s.seq, s.file.Salt(), 0, segment.KindSeal, segment.Full, nil)
		if err := s.file.WriteAt(seal, r.End); err != nil {
			return fmt.Errorf("wal: salvage: %w", err)
		}
		l.opts.Logger.Error("wal: salvage sealed a damaged segment early; records after the offset are lost", "file", path, "offset", r.End, "copy", copyTo)
	}
	if err := s.file.Sync(); err != nil {
		return fmt.Errorf("wal: salvage: %w", err)
	}
	l.salvaged(lost...)
	// Scan again: the repaired file must now read cleanly.
	again, _ := s.file.Scan(false, func(segment.Frame) error { return nil })
	if again.Tail == segment.EndCorrupt {
		return &CorruptionError{File: path, Offset: again.DamageAt, Cause: fmt.Errorf("still damaged after salvage: %w", again.Cause)}
	}
	if !last && !again.Sealed {
		return &CorruptionError{File: path, Offset: again.End, Cause: fmt.Errorf("still damaged after salvage: %w", unsealedCause(&again))}
	}
	*r = again
	return nil
}

// cutInFrame reports whether the scan r of a segment (data, its file)
// stopped at a frame the file ends inside: its header, or the body its
// length field gives, runs past the last byte. The file was cut short
// there, and its size says nothing of where its records ended. (A length
// field that damage raised reads so too: the span salvage reports then
// runs further than the file, over no record that was not lost.)
func cutInFrame(data []byte, r *segment.Report) bool {
	if r.Tail == segment.EndClean {
		return false // no frame failed: the frames end before the file does
	}
	at := r.DamageAt
	if at > len(data)-segment.FrameHeaderSize {
		return true
	}
	n := int64(binary.LittleEndian.Uint32(data[at+4:]))
	return int64(at)+int64(segment.Size(0))+n > int64(len(data))
}

// salvageHeader copies aside a segment whose header fails its checks,
// writes a good header for segment seq over it (its frames name their
// segment themselves, and give back the salt their checksums were seeded
// with, so nothing else depends on the header) and opens it.
func (l *Log) salvageHeader(seq uint32, cause error) (*segment.File, error) {
	path := l.segPath(seq)
	f, err := segment.OpenUnread(l.opts.FS, path, seq)
	if errors.Is(err, segment.ErrBadHeader) {
		// Too short for a header (the one ErrBadHeader of a file opened
		// unread): every record is gone. Keep what there is aside and
		// put an empty segment in its place (the salvage of the segments
		// then seals it).
		return l.salvageStub(seq, cause)
	}
	if err != nil {
		// Anything else (an I/O error opening, sizing or mapping it) says
		// nothing of the file: taken for one too short, it was replaced
		// by an empty segment and every intact record in it dropped.
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	// The frames' checksums were seeded with the salt the damaged header
	// held; the frames give it back (segment.RecoverSalt). When they do
	// not (no frame, or a lone record that cannot vouch for itself), no
	// frame of the file can be read: the header gets a fresh salt, and the
	// damage reported is the whole file.
	d := Damage{File: path, Segment: seq, Offset: 0, Length: segment.HeaderSize, Cause: cause}
	salt, ok := segment.RecoverSalt(f.Data(), seq)
	if !ok {
		salt, d.Length = segment.NewSalt(), f.Size()
	}
	copyTo, err := l.keepAside(seq, f.Data())
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	d.CopiedTo = copyTo
	if err := l.noteSalvage(d); err != nil {
		return nil, err
	}
	raw, err := l.opts.FS.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	hdr := segment.EncodeHeader(seq, salt)
	_, err = raw.WriteAt(hdr[:], 0)
	if err == nil {
		err = raw.Sync()
	}
	err = errors.Join(err, raw.Close())
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: rewrite header: %w", path, err)
	}
	l.salvaged(d)
	l.opts.Logger.Error("wal: salvage rewrote a damaged segment header", "file", path, "copy", copyTo)
	return segment.Open(l.opts.FS, path, seq)
}

// salvageStub replaces a segment file too short to hold a header by an
// empty segment of full size, after copying what it held aside.
func (l *Log) salvageStub(seq uint32, cause error) (*segment.File, error) {
	fs := l.opts.FS
	path := l.segPath(seq)
	old, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	size, err := old.Size()
	var data []byte
	if err == nil {
		data = make([]byte, size)
		_, err = old.ReadAt(data, 0)
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	_ = old.Close()
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	copyTo, err := l.keepAside(seq, data)
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	d := Damage{File: path, Segment: seq, Offset: 0, Length: int(size), Cause: cause, CopiedTo: copyTo}
	if err := l.noteSalvage(d); err != nil {
		return nil, err
	}
	f, err := l.emptySegment(seq, l.opts.SegmentBytes)
	if err != nil {
		return nil, err
	}
	l.salvaged(d)
	l.opts.Logger.Error("wal: salvage replaced a segment too short for a header; its records are lost", "file", path, "copy", copyTo)
	return f, nil
}

// salvageMissing puts an empty segment in the place of segment seq, whose
// file is gone (listMissing), and reports that: a span of every byte a
// segment can hold (MaxSegmentBytes from offset 0). The scan then finds it
// empty: sealed by the salvage of the segments when a later one follows
// (at the smallest size that holds a seal: its records are gone whatever
// its size), and, as the last, reported lost up to where the log was
// known durable (salvageToDurable), its appends going on after that.
func (l *Log) salvageMissing(seq uint32, last bool) (*segment.File, error) {
	// Every byte a segment can hold is lost: its size is not known.
	d := Damage{File: l.segPath(seq), Segment: seq, Length: MaxSegmentBytes, Cause: errors.New("segment file missing")}
	if err := l.noteSalvage(d); err != nil {
		return nil, err
	}
	size := int64(segment.HeaderSize + segment.Size(0))
	if last {
		size = l.opts.SegmentBytes
	}
	f, err := l.emptySegment(seq, size)
	if err != nil {
		return nil, err
	}
	l.salvaged(d)
	l.opts.Logger.Error("wal: salvage put an empty segment in the place of a missing one; its records are lost", "file", d.File)
	return f, nil
}

// emptySegment makes an empty segment seq of size bytes in its place,
// durably (a salvage's repair of a segment without records).
func (l *Log) emptySegment(seq uint32, size int64) (*segment.File, error) {
	fs := l.opts.FS
	path := l.segPath(seq)
	// A salvage of this segment that failed before its rename left the
	// file it was making: a leftover, removed before it is made again
	// (recover removes the others only after the scan this runs in).
	if err := fs.Remove(path + tmpSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	f, err := segment.Create(fs, path+tmpSuffix, seq, segment.NewSalt(), size)
	if err == nil {
		err = f.Rename(fs, path)
		if err == nil {
			err = fs.SyncDir(l.dir)
		}
		if err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wal: salvage %s: %w", path, err)
	}
	return f, nil
}

// keepAside writes data, the bytes of segment seq as found, durably into a
// new file of the salvage/ subdirectory, and returns its path.
func (l *Log) keepAside(seq uint32, data []byte) (string, error) {
	fs := l.opts.FS
	dir := filepath.Join(l.dir, salvageDirName)
	if err := vfs.CheckDir(fs, dir); err != nil {
		return "", err
	}
	if err := vfs.MkdirAllDurable(fs, dir, 0o700); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s.%s", segName(seq), time.Now().UTC().Format("20060102T150405.000000000Z")))
	if err := vfs.WriteFile(fs, dst, data); err != nil {
		return "", err
	}
	if err := fs.SyncDir(dir); err != nil {
		return "", err
	}
	return dst, fs.SyncDir(l.dir)
}
