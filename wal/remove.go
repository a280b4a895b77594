package wal

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// maxSpares bounds the retired segment files kept for reuse.
const maxSpares = 2

// sparePrefix starts the name of a retired segment file kept for reuse.
const sparePrefix = "spare-"

// RemoveBelow removes every segment before pos's segment, except the active
// one, and returns how many segments it took out of the log, those whose
// files it could not remove (below) included; files an earlier RemoveBelow
// left behind, out of the log already, are not counted again when it
// removes them. pos's own segment stays whole, even for a position past its
// last record: pass MakePosition(seq, 0) to remove the segments before seq.
// Records removed are gone for good: Read and Iterate skip them. Removed
// files of the size a new segment takes (Options.SegmentBytes) are kept
// (renamed aside) for the next rotations to reuse, up to two spares in
// all, which spares the disk the zero-filling of a new file; the rest,
// files of another size (written before a reopen with another
// SegmentBytes) included, are deleted. The removal is
// durable when RemoveBelow returns, and at every moment before that the
// files removed so far are the oldest, each removal made durable (one
// directory sync) before the next is made, so that a power loss leaves a
// gapless log even on a file system that may keep a later change of names
// without an earlier one. A file that cannot be removed stays on
// disk with every later one (the error names it), so that the files left
// are still a gapless log: out of this Log, they are removed first by the
// next RemoveBelow, which removes nothing newer until they are gone, and
// they are part of the log again at the next Open.
//
// On a poisoned log RemoveBelow removes nothing and returns the poison
// (ErrPoisoned), as Append and Sync do, whatever poisoned it: a failed
// write or fdatasync, or the failed directory sync of a rotation or of an
// earlier RemoveBelow.
//
// RemoveBelow waits for readers of the removed segments to finish.
func (l *Log) RemoveBelow(pos Position) (int, error) {
	if l == nil {
		return 0, errNilLog
	}
	l.removeMu.Lock()
	defer l.removeMu.Unlock()
	if l.isClosed() {
		return 0, ErrClosed
	}
	if err := l.poison(); err != nil {
		// A removal ends in a directory sync, which is not tried again
		// after one failed (see below); and a caller that copied
		// records forward before removing their segments may have
		// lost the copies with the failure.
		return 0, err
	}
	fs := l.opts.FS
	// Each removal is made durable before the next is made, oldest first:
	// a file system may make a later change of names durable without an
	// earlier one that waits for the same directory sync (btrfs's log of a
	// file synced meanwhile), and a later segment's removal kept without
	// an earlier one's would leave a gap, which Open refuses. One
	// directory sync per file removed, off the publish path.
	for len(l.unremoved) > 0 {
		u := l.unremoved[0]
		if err := fs.Remove(u.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("wal: remove segments: %s, out of the log, still cannot be removed, nor anything after it: %w", u.path, err)
		}
		if serr := fs.SyncDir(l.dir); serr != nil {
			return 0, l.fail(fmt.Errorf("remove segments: sync dir: %w", serr))
		}
		l.stats.bytesRemoved.Add(u.size)
		l.stats.unremoved.Add(-u.size)
		l.unremoved = l.unremoved[1:]
	}
	l.listMu.Lock()
	segs := *l.segs.Load()
	n := 0
	for n < len(segs)-1 && segs[n].seq < pos.Segment() {
		n++
	}
	if n == 0 {
		l.listMu.Unlock()
		return 0, nil
	}
	victims := segs[:n]
	rest := append([]*seg(nil), segs[n:]...)
	l.segs.Store(&rest)
	l.listMu.Unlock()

	var err error
	for _, s := range victims {
		err = errors.Join(err, s.close())
	}
	var kept []string
	for i, s := range victims {
		path := s.file.Path()
		size := s.file.Size()
		if len(l.unremoved) > 0 { // one could not be removed: the later ones stay too
			l.unremoved = append(l.unremoved, removal{path, int64(size)})
			l.stats.unremoved.Add(int64(size))
			continue
		}
		var keepErr error
		spare := ""
		if len(kept)+l.spareCount() < maxSpares && int64(size) == l.opts.SegmentBytes {
			var kerr error
			if spare, kerr = l.keepSpare(path, s.seq); kerr != nil {
				spare, keepErr = "", kerr
			}
		}
		if spare != "" {
			kept = append(kept, spare)
		} else if rerr := fs.Remove(path); rerr != nil {
			// Removing the later segments would leave a gap in the
			// sequence, which Open refuses as a missing segment: they
			// stay on disk, closed, out of the log until the next Open
			// finds them and a later removal takes them.
			err = errors.Join(err, keepErr, rerr)
			l.unremoved = append(l.unremoved, removal{path, int64(size)})
			l.stats.unremoved.Add(int64(size))
			continue
		}
		if serr := fs.SyncDir(l.dir); serr != nil {
			// The renames since the last sync may not be durable: a
			// reused file could then come back under its old name with
			// a new header. Delete instead.
			for _, p := range kept {
				err = errors.Join(err, fs.Remove(p))
			}
			l.stats.bytesRemoved.Add(int64(size))
			// The later segments stay on disk, the log gapless.
			for _, later := range victims[i+1:] {
				l.unremoved = append(l.unremoved, removal{later.file.Path(), int64(later.file.Size())})
				l.stats.unremoved.Add(int64(later.file.Size()))
			}
			// A failed fsync is not tried again, here or by the next
			// rotation's SyncDir, whose success would say nothing of what
			// this one lost: the log stops, as for a failed fdatasync.
			return n, l.fail(fmt.Errorf("remove segments: sync dir: %w", errors.Join(serr, err)))
		}
		if keepErr != nil {
			l.spareNotKept(path, keepErr)
		}
		l.stats.bytesRemoved.Add(int64(size))
	}
	// Only now may a spare be reused: its old name is durably gone.
	l.listMu.Lock()
	l.spares = append(l.spares, kept...)
	l.listMu.Unlock()
	if err != nil {
		return n, fmt.Errorf("wal: remove segments: %w", err)
	}
	return n, nil
}

// removal is a segment file RemoveBelow took out of the log and has yet
// to remove, with its size.
type removal struct {
	path string
	size int64
}

// keepSpare renames the retired segment file at path, of segment seq, to
// a spare's name, for a later rotation to reuse, and returns that name.
// RemoveBelow and Close call it under removeMu.
//
// A name already taken is refused (fs.ErrExist), for a rename would
// replace its file. Spare names derive from segment sequences, which a
// log numbers anew from 1 when its directory holds spares but no segment
// (its segments deleted by hand): a spare of the retired segment's name
// may then still be listed (it would be listed twice, and reused once),
// or be one the preparer has taken from the list and not yet renamed (it
// would take this file instead, before the directory sync that makes its
// retirement durable). RemoveBelow and Close give a file a spare's name
// under removeMu, so that between them a name found free stays free until
// the rename. The preparer gives a spare it failed to reuse its name back
// (segment.Recycle renames it back), outside that lock, and then removes
// it: in a log numbered anew, that rename may still replace a file kept
// here in between, which then costs a warning and a new file's zeros at
// the next rotation, never a record.
func (l *Log) keepSpare(path string, seq uint32) (string, error) {
	fs := l.opts.FS
	spare := filepath.Join(l.dir, fmt.Sprintf("%s%010d%s", sparePrefix, seq, tmpSuffix))
	if f, err := fs.OpenFile(spare, os.O_RDONLY, 0); err == nil {
		_ = f.Close()
		return "", fmt.Errorf("%s: %w", spare, iofs.ErrExist)
	} else if !errors.Is(err, iofs.ErrNotExist) {
		return "", err
	}
	if err := fs.Rename(path, spare); err != nil {
		return "", err
	}
	return spare, nil
}

// spareNotKept logs that the file at path, which was to be kept as a
// spare, was removed instead, for cause. A spare not kept costs a later
// rotation the zero-fill of a new file and loses no record, so it is a
// warning, not an error of the call that retired the file: as a retired
// file that cannot be reused is (see preparer.make), and a clean mark
// that cannot be written (see Close). A file that cannot be removed
// either is an error, with cause joined to it: it stays on disk.
func (l *Log) spareNotKept(path string, cause error) {
	l.logLater(func(log *slog.Logger) {
		log.Warn("wal: could not keep a retired segment file for reuse; removed it instead", "file", path, "err", cause)
	})
}

func (l *Log) spareCount() int {
	l.listMu.Lock()
	defer l.listMu.Unlock()
	return len(l.spares)
}
