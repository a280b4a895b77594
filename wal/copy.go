package wal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// CopyTo writes into dir, which must exist, a copy of the log up to end, a
// position the caller knows to be durable: each segment before end's is
// copied whole, and end's own up to end, zero beyond, at its full size, so
// that the copy opens as a log that ends at end. Every file is
// fdatasynced, then dir is synced. ctx is checked before each segment.
//
// The caller keeps the segments up to end's from being removed (RemoveBelow)
// and the log from being closed until CopyTo returns; appends go on.
func (l *Log) CopyTo(ctx context.Context, dir string, end Position) error {
	if end > l.End() {
		return fmt.Errorf("wal: copy to %s: position %v is past the log's end %v", dir, end, l.End())
	}
	fs := l.opts.FS
	for _, s := range *l.segs.Load() {
		if s.seq > end.Segment() {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		dst := filepath.Join(dir, segName(s.seq))
		var err error
		if s.seq < end.Segment() {
			err = writeWhole(fs, dst, s.file.Data())
		} else {
			var f *segment.File
			if f, err = writePrefix(fs, dst, s.seq, int64(s.file.Size()), s.file.Data()[segment.HeaderSize:end.Offset()]); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("wal: copy %s to %s: %w", s.file.Path(), dir, err)
		}
	}
	return fs.SyncDir(dir)
}

// writePrefix creates at path a segment of size bytes whose frames are
// body, zeros after it, and makes it durable. It returns the segment open.
func writePrefix(fs vfs.FS, path string, seq uint32, size int64, body []byte) (*segment.File, error) {
	f, err := segment.Create(fs, path, seq, size)
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
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}
