package broker_test

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/walbroker/walbroker/vfs"
)

// fullDiskFS is a disk that fills up as a real one does: once full, a write
// or truncation that would make a file longer, and every allocation past a
// file's end, fail with ENOSPC, writing nothing; writes within a file's
// size (the log's segments are made whole when they are prepared) and
// creations of empty files go on. Full is set and cleared by the test.
type fullDiskFS struct {
	vfs.FS
	full atomic.Bool
	// refused counts the operations the full disk refused.
	refused atomic.Int64
	// synced holds the name of every file an fdatasync succeeded on.
	synced sync.Map
}

// hasSynced reports whether an fdatasync succeeded on a file whose name
// (as it was opened) contains part.
func (f *fullDiskFS) hasSynced(part string) bool {
	found := false
	f.synced.Range(func(name, _ any) bool {
		found = strings.Contains(name.(string), part)
		return !found
	})
	return found
}

func (f *fullDiskFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &fullDiskFile{File: file, fs: f}, nil
}

func (f *fullDiskFS) CheckDir(dir string) error { return vfs.CheckDir(f.FS, dir) }

// refuses reports whether the disk refuses to make name's file reach end.
func (f *fullDiskFS) refuses(file vfs.File, end int64) bool {
	if !f.full.Load() {
		return false
	}
	size, err := file.Size()
	if err != nil || end > size {
		f.refused.Add(1)
		return true
	}
	return false
}

type fullDiskFile struct {
	vfs.File
	fs *fullDiskFS
}

func (f *fullDiskFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.refuses(f.File, off+int64(len(p))) {
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(p, off)
}

func (f *fullDiskFile) Sync() error {
	err := f.File.Sync()
	if err == nil {
		f.fs.synced.Store(f.Name(), true)
	}
	return err
}

func (f *fullDiskFile) Truncate(size int64) error {
	if f.fs.refuses(f.File, size) {
		return &os.PathError{Op: "truncate", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Truncate(size)
}

func (f *fullDiskFile) Allocate(off, n int64) error {
	if f.fs.refuses(f.File, off+n) {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
	}
	if a, ok := f.File.(vfs.Allocator); ok {
		return a.Allocate(off, n)
	}
	return &os.PathError{Op: "fallocate", Path: f.Name(), Err: errors.ErrUnsupported}
}

func (f *fullDiskFile) WriteBack(off, n int64) error {
	if w, ok := f.File.(vfs.WriteBacker); ok {
		return w.WriteBack(off, n)
	}
	return nil
}
