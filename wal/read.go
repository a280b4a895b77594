package wal

import (
	"errors"
	"fmt"

	"github.com/walbroker/walbroker/segment"
)

// Read returns a copy of the record at pos, verified against its checksum.
// A position that names no record of the log (removed, not yet written, or
// not the start of a record) is ErrNotFound.
func (l *Log) Read(pos Position) ([]byte, error) {
	var out []byte
	err := l.View(pos, func(rec []byte) error {
		out = append([]byte(nil), rec...)
		return nil
	})
	return out, err
}

// View calls fn with the record at pos without copying it: rec aliases the
// segment's read-only memory map and is valid only until fn returns. fn must
// not modify rec, and must not call RemoveBelow or Close.
func (l *Log) View(pos Position, fn func(rec []byte) error) error {
	if l == nil {
		return errNilLog
	}
	if fn == nil {
		return fmt.Errorf("wal: view %v: nil function", pos)
	}
	s := l.segment(pos.Segment())
	if s == nil {
		if l.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("%w: %v: segment not in the log", ErrNotFound, pos)
	}
	if !s.enter() {
		if l.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("%w: %v: segment removed", ErrNotFound, pos)
	}
	defer s.leave()
	if off := pos.Offset(); off < segment.HeaderSize || int64(off) >= s.end.Load() {
		return fmt.Errorf("%w: %v: offset outside the segment's records", ErrNotFound, pos)
	}
	f, cut, err := decode(s, s.file.Data()[:s.end.Load()], pos.Offset())
	if cut != nil {
		return cutShort(s.file.Path(), cut)
	}
	if err != nil {
		return fmt.Errorf("%w: %v: no frame starts there (%s offset %d): %w", ErrNotFound, pos, s.file.Path(), pos.Offset(), err)
	}
	if f.Kind != segment.KindRecord {
		return fmt.Errorf("%w: %v: a %s frame, not a record", ErrNotFound, pos, f.Kind)
	}
	return fn(f.Body)
}

// Iterate calls fn with every record at or after from, in log order, up to
// the last record written when each segment is reached (under SyncAlways
// that may include records whose Append has not returned yet: written,
// not yet covered by an fdatasync). rec aliases the
// segment's memory map and is valid only until fn returns; fn must not
// modify it and must not call RemoveBelow or Close. from must be the zero
// Position, the start of a segment (offset 0), the position of a record,
// or one just past a record, and not past the log's end (another is
// ErrNotFound, found when the walk reaches it); records of segments
// already removed are skipped. An error from fn stops the walk and is
// returned; a record that fails its checksum is a *CorruptionError, and so
// is a sealed segment whose frames do not end in its seal where the log
// holds that it ends (a wrong Options.Sealed: the records past that end
// would otherwise be skipped without a word).
func (l *Log) Iterate(from Position, fn func(pos Position, rec []byte) error) error {
	if l == nil {
		return errNilLog
	}
	if fn == nil {
		return fmt.Errorf("wal: iterate from %v: nil function", from)
	}
	if l.isClosed() {
		return ErrClosed
	}
	if off := from.Offset(); off > 0 && off < segment.HeaderSize {
		return fmt.Errorf("%w: %v: inside the segment's header", ErrNotFound, from)
	}
	if end := l.End(); from.Segment() > end.Segment() {
		return fmt.Errorf("%w: %v: past the log's end %v", ErrNotFound, from, end)
	}
	segs := *l.segs.Load()
	for i, s := range segs {
		if s.seq < from.Segment() {
			continue
		}
		start, given := segment.HeaderSize, false
		if s.seq == from.Segment() && from.Offset() > start {
			start, given = from.Offset(), true
		}
		if err := l.iterateSeg(s, start, given, i < len(segs)-1, fn); err != nil {
			return err
		}
	}
	return nil
}

// iterateSeg walks the records of s from off; given says off is the
// caller's, not known to start a frame; sealed that s is not the last
// segment, so that its end is just past its seal.
func (l *Log) iterateSeg(s *seg, off int, given, sealed bool, fn func(Position, []byte) error) error {
	if !s.enter() {
		if l.isClosed() {
			return ErrClosed
		}
		return nil // removed
	}
	defer s.leave()
	end := int(s.end.Load())
	data := s.file.Data()[:end]
	if given && off > end {
		return fmt.Errorf("%w: %v: past the segment's records (%s offset %d)", ErrNotFound, MakePosition(s.seq, off), s.file.Path(), end)
	}
	last := end - segment.Size(0) // where the seal starts, if end is right
	for first := true; off < end; first = false {
		last = off
		f, cut, err := decode(s, data, off)
		if cut != nil {
			return cutShort(s.file.Path(), cut)
		}
		if err != nil && first && given {
			return fmt.Errorf("%w: %v: no frame starts there (%s offset %d): %w", ErrNotFound, MakePosition(s.seq, off), s.file.Path(), off, err)
		}
		if err != nil {
			return &CorruptionError{File: s.file.Path(), Offset: off, Cause: err}
		}
		if f.Kind == segment.KindRecord {
			if err := fn(MakePosition(s.seq, off), f.Body); err != nil {
				return err
			}
		}
		off = f.End()
	}
	if sealed {
		return checkSeal(s, data, last)
	}
	return nil
}

// checkSeal checks that the frame at off, the last of sealed segment s
// (data, its frames), is its seal. A sealed segment's end may be one
// Options.Sealed gave and Open never read: a wrong one that falls where a
// record ends would otherwise end the walk early, and the records past it
// would be skipped as if they were not there.
func checkSeal(s *seg, data []byte, off int) error {
	err := errors.New("no room for a seal")
	if off >= segment.HeaderSize {
		var f segment.Frame
		var cut error
		if f, cut, err = decode(s, data, off); cut != nil {
			return cutShort(s.file.Path(), cut)
		}
		if err == nil && f.Kind != segment.KindSeal {
			err = fmt.Errorf("a %s frame ends there", f.Kind)
		}
	}
	if err != nil {
		return &CorruptionError{File: s.file.Path(), Offset: off,
			Cause: fmt.Errorf("a sealed segment's frames do not end in its seal at %d, where the log holds that they end (a wrong Options.Sealed, or the file changed): %w", len(data), err)}
	}
	return nil
}

// segment returns the open segment seq, or nil.
func (l *Log) segment(seq uint32) *seg {
	segs := *l.segs.Load()
	if len(segs) == 0 || seq < segs[0].seq {
		return nil
	}
	i := int(seq - segs[0].seq) // sequences are contiguous
	if i >= len(segs) {
		return nil
	}
	return segs[i]
}

// End returns the position just past the last record readers may see now.
func (l *Log) End() Position {
	if l == nil {
		return 0
	}
	segs := *l.segs.Load()
	if len(segs) == 0 {
		return 0
	}
	s := segs[len(segs)-1]
	return MakePosition(s.seq, int(s.end.Load()))
}
