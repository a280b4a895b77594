package wal

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"

	"github.com/walbroker/walbroker/internal/mapfault"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// CopyTo writes into dir, which must exist and hold none of the files it
// writes (nor be the log's own directory, nor be named "", nor hold a NUL
// byte: an error wrapping io/fs.ErrInvalid), a copy of the log up to end, a
// position the caller knows to be durable: each segment before end's is
// copied whole, and end's own up to end, zero beyond, at its full size, so
// that the copy opens as a log that ends at end. end must be where a frame
// of its segment starts, but not a record of an Append after its first
// (the copy holds an Append's records whole or not at all), or where its
// frames end; another end is ErrNotFound. Every file is fdatasynced,
// then dir is synced. Each segment's frames are verified before it is
// copied (CRCs, order, seals): damage is a *CorruptionError naming the
// file and offset, and a header a later build wrote (a later version, a
// flag or a reserved byte set) wraps segment.ErrVersion, as at Open. ctx is checked before each segment. A CopyTo that
// fails or is canceled removes the files it wrote, so that dir holds what
// it held before and the same copy can be tried again.
//
// The caller keeps the segments up to end's from being removed (RemoveBelow)
// and the log from being closed until CopyTo returns; appends go on. A
// RemoveBelow or Close that runs all the same waits for the copy of the
// segment under way, and the copy then fails (ErrNotFound naming the
// segment removed, or ErrClosed) rather than read a segment removed.
func (l *Log) CopyTo(ctx context.Context, dir string, end Position) error {
	if l == nil {
		return errNilLog
	}
	if ctx == nil {
		return fmt.Errorf("wal: copy to %s: nil context", dir)
	}
	if dir == "" {
		return fmt.Errorf("wal: copy: the directory path is empty: %w", iofs.ErrInvalid)
	}
	if err := vfs.CheckPath(dir); err != nil {
		return fmt.Errorf("wal: copy: %w", err) // quoted there: the path holds a NUL
	}
	if l.isClosed() {
		return ErrClosed
	}
	if err := l.checkCopyEnd(end); err != nil {
		return fmt.Errorf("wal: copy to %s: %w", dir, err)
	}
	if same, err := sameDir(dir, l.dir); err != nil {
		return fmt.Errorf("wal: copy to %s: %w", dir, err)
	} else if same {
		return fmt.Errorf("wal: copy to %s: it is the log's own directory", dir)
	}
	fs := l.opts.FS
	var written []string
	// undo removes the files written before err, which a failed copy
	// leaves no use for.
	undo := func(err error) error {
		for _, name := range written {
			if rerr := fs.Remove(name); rerr != nil {
				err = errors.Join(err, fmt.Errorf("wal: copy to %s: removing what it wrote: %w", dir, rerr))
			}
		}
		return err
	}
	for _, s := range *l.segs.Load() {
		if s.seq > end.Segment() {
			break
		}
		if err := ctx.Err(); err != nil {
			return undo(err)
		}
		dst := filepath.Join(dir, segName(s.seq))
		if err := l.copySeg(s, dst, end); err != nil {
			return undo(err)
		}
		written = append(written, dst)
	}
	if err := fs.SyncDir(dir); err != nil {
		return undo(fmt.Errorf("wal: copy to %s: %w", dir, err))
	}
	return nil
}

// copySeg verifies segment s and copies it to dst, whole when it is
// before end's segment, else up to end. It reads the mapping as a reader of
// s (enter): a RemoveBelow or Close that its caller did not keep from
// running waits for the copy of s to end before it unmaps it, and s once
// removed is not read at all (ErrNotFound, or ErrClosed).
func (l *Log) copySeg(s *seg, dst string, end Position) error {
	if !s.enter() {
		if l.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("%w: segment %s removed during the copy", ErrNotFound, s.file.Path())
	}
	defer s.leave()
	if err := verifyCopy(s.file.Path(), s.file.Data(), s.seq, s.seq < end.Segment(), end.Offset()); err != nil {
		return err
	}
	fs := l.opts.FS
	var err error
	if s.seq < end.Segment() {
		err = vfs.WriteFile(fs, dst, s.file.Data())
	} else {
		// segment.Create, under writePrefix, refuses a dst that exists.
		var f *segment.File
		if f, err = writePrefix(fs, dst, s.seq, s.file.Salt(), int64(s.file.Size()), s.file.Data()[segment.HeaderSize:end.Offset()]); err == nil {
			if err = f.Close(); err != nil {
				err = errors.Join(err, fs.Remove(dst))
			}
		}
	}
	if err != nil {
		return fmt.Errorf("wal: copy %s to %s: %w", s.file.Path(), filepath.Dir(dst), err)
	}
	return nil
}

// verifyCopy checks the frames CopyTo is about to copy from segment seq
// (data, the whole file at path): a sealed segment must scan cleanly to
// its seal, the last one cleanly to end. Their records were durable, but
// a segment a checkpoint covers is not read at Open, so damage to it is
// found only where a read reaches it; a copy must not carry it unseen.
func verifyCopy(path string, data []byte, seq uint32, sealed bool, end int) error {
	var err error
	if cut := mapfault.Read(data, func() error {
		err = checkCopy(path, data, seq, sealed, end)
		return nil
	}); cut != nil {
		return cutShort(path, cut)
	}
	return err
}

// checkCopy is verifyCopy's check, reading data unguarded.
func checkCopy(path string, data []byte, seq uint32, sealed bool, end int) error {
	// A segment Options.Sealed vouched for was opened without reading
	// even its header.
	if got, err := segment.DecodeHeader(data); err != nil {
		if errors.Is(err, segment.ErrVersion) {
			// A later build's header, as Open refuses it: not damage.
			return fmt.Errorf("wal: copy: %s: %w; copy the log with a build that reads that version", path, err)
		}
		return &CorruptionError{File: path, Offset: 0, Cause: err}
	} else if got != seq {
		return &CorruptionError{File: path, Offset: 0, Cause: fmt.Errorf("its header names segment %d", got)}
	}
	if !sealed {
		data = data[:end]
	}
	r, err := segment.Scan(data, seq, false, func(segment.Frame) error { return nil })
	if err != nil {
		return &CorruptionError{File: path, Offset: 0, Cause: err}
	}
	switch {
	case r.Tail != segment.EndClean:
		return &CorruptionError{File: path, Offset: r.DamageAt, Cause: r.Cause}
	case sealed && !r.Sealed:
		return &CorruptionError{File: path, Offset: r.End, Cause: errors.New("a sealed segment ends without its seal")}
	case !sealed && r.End != end:
		return &CorruptionError{File: path, Offset: r.End, Cause: fmt.Errorf("its frames end at %d, before %d", r.End, end)}
	}
	return nil
}

// checkCopyEnd checks that end is a position CopyTo can end a copy at: in
// a segment of the log, where a group of frames starts or where its frames
// end, and not past the log's end.
func (l *Log) checkCopyEnd(end Position) error {
	if end > l.End() {
		return fmt.Errorf("%w: %v: past the log's end %v", ErrNotFound, end, l.End())
	}
	s := l.segment(end.Segment())
	if s == nil {
		return fmt.Errorf("%w: %v: segment not in the log", ErrNotFound, end)
	}
	if !s.enter() {
		return fmt.Errorf("%w: %v: segment removed", ErrNotFound, end)
	}
	defer s.leave()
	off, frames := end.Offset(), s.end.Load()
	if off < segment.HeaderSize || int64(off) > frames {
		return fmt.Errorf("%w: %v: not within the segment's frames", ErrNotFound, end)
	}
	if int64(off) < frames {
		f, cut, err := decode(s, s.file.Data()[:frames], off)
		if cut != nil {
			return cutShort(s.file.Path(), cut)
		}
		if err != nil {
			return fmt.Errorf("%w: %v: no frame starts there: %w", ErrNotFound, end, err)
		}
		if !f.Place.Opens() {
			// A copy ending there would hold part of one Append, which
			// a log holds whole or not at all.
			return fmt.Errorf("%w: %v: a record inside the group of one Append, not its first", ErrNotFound, end)
		}
	}
	return nil
}

// sameDir reports whether a and b name the same directory (or would: a
// need not exist), following symbolic links.
func sameDir(a, b string) (bool, error) {
	ra, err := vfs.Resolve(a)
	if err != nil {
		return false, err
	}
	rb, err := vfs.Resolve(b)
	return ra == rb, err
}

// writePrefix creates at path a segment of size bytes whose frames are
// body, zeros after it, and makes it durable; its header carries salt, the
// salt of the segment body was copied from, which the frames' checksums
// are seeded with. It returns the segment open. On failure it removes the
// file it created.
func writePrefix(fs vfs.FS, path string, seq, salt uint32, size int64, body []byte) (*segment.File, error) {
	f, err := segment.Create(fs, path, seq, salt, size)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		err = f.WriteAt(body, segment.HeaderSize)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return nil, errors.Join(err, f.Close(), fs.Remove(path))
	}
	return f, nil
}
