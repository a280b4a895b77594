package vfs

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"syscall"

	"github.com/edsrzf/mmap-go"
)

// crashFile is a File of a CrashFS. Its fields but closed are set once at
// open; the node and closed are guarded by CrashFS.mu.
type crashFile struct {
	fs       *CrashFS
	node     *crashNode
	inner    File
	readable bool // opened for reading (the inner file always is)
	writable bool
	closed   bool
}

func (f *crashFile) Name() string { return f.inner.Name() }

// Close closes the inner file. From then on WriteAt, Sync, Truncate and
// Allocate fail with os.ErrClosed, uncounted, and change nothing: in
// particular the inner file's EBADF is never taken for a failed writeback.
func (f *crashFile) Close() error {
	f.fs.mu.Lock()
	f.closed = true
	f.fs.mu.Unlock()
	return f.inner.Close()
}

// closedLocked returns the error of op on the file if it is closed.
func (f *crashFile) closedLocked(op string) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.Name(), Err: os.ErrClosed}
	}
	return nil
}

func (f *crashFile) Size() (int64, error) { return f.inner.Size() }

func (f *crashFile) ReadAt(p []byte, off int64) (int, error) {
	if !f.readable {
		return 0, &os.PathError{Op: "read", Path: f.Name(), Err: syscall.EBADF}
	}
	return f.inner.ReadAt(p, off)
}

func (f *crashFile) Map(length int) (mmap.MMap, error) {
	if !f.readable {
		return nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: syscall.EACCES}
	}
	return f.inner.Map(length)
}

// WriteAt writes through to the inner file, first recording the bytes and
// size it replaces.
func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	if !f.writable || off < 0 {
		return f.inner.WriteAt(p, off) // let the inner file refuse it
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.closedLocked("write"); err != nil {
		return 0, err
	}
	if err := f.fs.beginLocked(); err != nil {
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return f.writeLocked(p, off)
}

// writeLocked is WriteAt after the operation has been counted.
//
// After a failed fdatasync (the node has a base), the record is widened
// to the whole pages the write touches, with the rest of each page as the
// page cache holds it, bytes of the failed writes included: the write
// dirties those pages, and writeback sends each of them whole. It is not
// widened past the size a crash would leave (see imageSizeLocked), which
// an extension the failed fdatasync lost does not reach.
func (f *crashFile) writeLocked(p []byte, off int64) (int, error) {
	prevSize, err := f.inner.Size()
	if err != nil {
		return 0, err
	}
	from, to := off, off+int64(len(p))
	if f.node.hasBase {
		from = off / crashBlockSize * crashBlockSize
		to = min((to+crashBlockSize-1)/crashBlockSize*crashBlockSize, max(f.node.imageSizeLocked(), to))
	}
	prev, err := readRange(f.inner, from, min(to, prevSize))
	if err != nil {
		return 0, err
	}
	n, err := f.inner.WriteAt(p, off)
	if n <= 0 {
		return n, err
	}
	if !f.node.hasBase {
		to = off + int64(n)
	}
	// What the range [from, to) holds now: its old bytes, zeros in a
	// hole the write left past the old end, and the bytes written, up to
	// the file's new end.
	end := min(to, max(prevSize, off+int64(n)))
	data := make([]byte, end-from)
	copy(data, prev)
	copy(data[off-from:], p[:n])
	if int64(len(prev)) > end-from {
		prev = prev[:end-from]
	}
	f.node.log = append(f.node.log, crashRecord{off: from, data: data, prev: prev, prevSize: prevSize})
	return n, err
}

// imageSizeLocked is the size of n, which has a base, that a crash
// keeping every unsynced change would leave: the base's, changed by the
// log.
func (n *crashNode) imageSizeLocked() int64 {
	size := int64(len(n.base))
	for i := range n.log {
		if r := &n.log[i]; r.truncate {
			size = r.off
		} else {
			size = max(size, r.off+int64(len(r.data)))
		}
	}
	return size
}

// Sync fdatasyncs the inner file and, if that succeeds, makes the node's
// current content and size durable.
func (f *crashFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.closedLocked("fdatasync"); err != nil {
		return err
	}
	if err := f.fs.beginLocked(); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	if f.node.unknown != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: f.node.unknown}
	}
	if err := f.inner.Sync(); err != nil {
		// The writes are in the page cache, marked clean: lost to any
		// power loss from now on, whatever later fdatasyncs report.
		// Some of them may have reached the device before the error
		// (SetFailedWriteback): those are durable, the others never.
		if base, cur, _, derr := f.fs.durableContentLocked(f.node); derr == nil {
			f.fs.reachedLocked(f.node, base, cur)
			f.node.base, f.node.hasBase = base, true
			f.node.syncedSize = int64(len(base))
			f.node.log = nil
		} else {
			f.node.unknown = fmt.Errorf("vfs: CrashFS: an fdatasync failed (%v), and reading the file to record what it left durable failed too: %w", err, derr)
		}
		return err
	}
	if f.node.hasBase {
		// The pages written again since the failure go to the device
		// whole, as their widened records hold them (see writeLocked);
		// the others keep their durable content.
		durable, cur, name, err := f.fs.durableContentLocked(f.node)
		if err != nil {
			return err
		}
		img, err := replayLocked(f.node, durable, cur, name, &CrashOptions{KeepUnsyncedFraction: 1})
		if err != nil {
			return err
		}
		f.node.base, f.node.syncedSize, f.node.log = img, int64(len(img)), nil
		return nil
	}
	if len(f.node.log) > 0 {
		f.node.syncedSize = f.node.log[len(f.node.log)-1].endSize()
		f.node.log = nil
	}
	return nil
}

// Allocate models fallocate(2) by writing zeros past the file's end (the
// bytes before it stay as they are, as fallocate leaves them): what a
// crash keeps of them is what it keeps of any write not yet covered by an
// fdatasync. A real file system reads an allocated, unwritten range as
// zeros too, and commits the file's new size with the next fdatasync.
//
// It refuses what fallocate refuses: a negative offset or a length that is
// not positive (EINVAL), a range past the largest offset (EFBIG), a handle
// not open for writing (EBADF). Its writes are counted as mutating
// operations; after a crash it fails with ErrCrashed even where it would
// have nothing to write.
func (f *crashFile) Allocate(off, n int64) error {
	refuse := func(err error) error { return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err} }
	switch {
	case off < 0 || n <= 0:
		return refuse(syscall.EINVAL)
	case off > math.MaxInt64-n:
		return refuse(syscall.EFBIG)
	}
	// The size is read and the zeros written under one hold of the
	// mutex, so that no write through another handle falls in between
	// and is overwritten.
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	switch {
	case f.closed:
		return f.closedLocked("fallocate")
	case !f.writable:
		return refuse(syscall.EBADF)
	case f.fs.crashedLocked():
		return refuse(ErrCrashed)
	}
	size, err := f.inner.Size()
	if err != nil {
		return err
	}
	from, end := max(off, size), off+n
	zeros := make([]byte, min(max(end-from, 0), 1<<20))
	for from < end {
		if err := f.fs.beginLocked(); err != nil {
			return &os.PathError{Op: "write", Path: f.Name(), Err: err}
		}
		k := min(int64(len(zeros)), end-from)
		if _, err := f.writeLocked(zeros[:k], from); err != nil {
			return err
		}
		from += k
	}
	return nil
}

// Truncate truncates the inner file, first recording what it cuts off.
func (f *crashFile) Truncate(size int64) error {
	if !f.writable || size < 0 {
		return f.inner.Truncate(size) // let the inner file refuse it
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.closedLocked("truncate"); err != nil {
		return err
	}
	if err := f.fs.beginLocked(); err != nil {
		return &os.PathError{Op: "truncate", Path: f.Name(), Err: err}
	}
	return f.truncateLocked(size)
}

// truncateLocked is Truncate after the operation has been counted.
func (f *crashFile) truncateLocked(size int64) error {
	prevSize, err := f.inner.Size()
	if err != nil {
		return err
	}
	prev, err := readRange(f.inner, size, prevSize)
	if err != nil {
		return err
	}
	if err := f.inner.Truncate(size); err != nil {
		return err
	}
	f.node.log = append(f.node.log, crashRecord{truncate: true, off: size, prev: prev, prevSize: prevSize})
	return nil
}

// readRange reads the bytes [from, to) of f; nothing if to <= from.
func readRange(f File, from, to int64) ([]byte, error) {
	if to <= from {
		return nil, nil
	}
	buf := make([]byte, to-from)
	n, err := f.ReadAt(buf, from)
	if n == len(buf) {
		return buf, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("vfs: CrashFS reading %s [%d, %d): %w", f.Name(), from, to, err)
}
