// Package vfs is the small file-system interface through which every other
// package of walbroker touches the disk.
//
// The real implementation, [Default], is a thin layer over package os and
// golang.org/x/sys/unix. Tests inject their own per instance (never through
// package globals): [FaultFS] returns chosen errors from chosen operations,
// and [CrashFS] records which bytes a completed fdatasync covered so that a
// test can clone a directory to what a power loss would have left.
//
// Only what the store needs is here: positional reads and writes,
// fdatasync, read-only memory maps, renames, removals, directory listings
// and syncs, and an exclusive lock; optionally fallocate ([Allocator]) and
// sync_file_range ([WriteBacker]). Beside them, helpers built on the
// interface: [CopyFile], [WriteFile], [ReplaceFile], [ReadFile],
// [CreateEmpty], [MkdirAllDurable] and [CheckDir]; three that ask the real
// file system only, whatever FS a caller injects: [Resolve], [IsLink] and
// [EvictPageCache]; and two checks of arguments: [CheckPath] and [IsNil].
package vfs

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"reflect"

	"github.com/edsrzf/mmap-go"
)

// ErrLocked is returned by [FS.Lock] when another holder (in this process or
// another) has the lock. Check with errors.Is.
var ErrLocked = errors.New("vfs: locked by another holder")

// errNilFS refuses a nil FS given to a function of this package, or a nil
// pointer in one (see IsNil), which would otherwise panic at its first
// file operation.
var errNilFS = fmt.Errorf("nil vfs.FS: %w", iofs.ErrInvalid)

// File is an open file. Its methods have the meaning of the os.File methods
// of the same name, except Sync, which is fdatasync(2).
//
// A File is safe for concurrent use by positional reads and writes; the log
// still gives each file exactly one writing goroutine.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync commits the file's data, and the metadata needed to read it back
	// (its size), to the device: fdatasync(2). A failed Sync leaves the
	// state of the written data unknown; callers must not retry it.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size reports the file's current size in bytes.
	Size() (int64, error)
	// Map maps the first length bytes of the file read-only and shared, so
	// that writes made through WriteAt are visible in the mapping. The
	// caller unmaps it with Unmap before closing the file. length must be
	// positive and at most the file's size (a mapped page past the end
	// faults when touched); Map fails with EINVAL otherwise.
	Map(length int) (mmap.MMap, error)
	// Name is the name the file was opened with.
	Name() string
}

// WriteBacker is implemented by files that can send a range of their
// written bytes to the device ahead of an fdatasync, and wait for it:
// sync_file_range(2). It promises no durability (no metadata is committed
// and the device's cache is not flushed); it only decides when the device
// does the work, so that a large write does not reach the device all at
// once. Files without it are written back by the next fdatasync.
type WriteBacker interface {
	WriteBack(off, n int64) error
}

// Allocator is implemented by files that can reserve space without
// writing it: fallocate(2). Allocate makes the file at least off+n bytes
// long, with [off, off+n) allocated: bytes already written there are
// kept, and the space it adds reads as zeros. On ext4 and xfs
// those blocks are "unwritten extents": the first write to each makes the
// next fdatasync commit the extent's conversion (a journal commit), which
// writing zeros ahead avoids. It promises no durability until the next
// fdatasync.
type Allocator interface {
	Allocate(off, n int64) error
}

// DirChecker is implemented by file systems that can tell whether a
// directory inside a store's directory (its index/) is one the store
// could have made: see [Default] for the files themselves.
type DirChecker interface {
	// CheckDir returns an error wrapping [ErrForeign] when dir is a
	// symbolic link, not a directory, or owned by a user other than
	// this process's or root. A dir that does not exist is no error.
	CheckDir(dir string) error
}

// IsNil reports whether fs is nil, or a nil pointer of a type that
// implements FS: a nil *FaultFS in an interface is not a nil FS, and its
// first method call would panic. Options that take an FS refuse one.
func IsNil(fs FS) bool {
	if fs == nil {
		return true
	}
	v := reflect.ValueOf(fs)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// CheckDir asks fs whether dir is a directory the store could have made
// ([DirChecker]); a file system that cannot tell accepts it. A nil fs (see
// [IsNil]) is refused with an error wrapping io/fs.ErrInvalid.
func CheckDir(fs FS, dir string) error {
	if IsNil(fs) {
		return fmt.Errorf("vfs: check %s: %w", dir, errNilFS)
	}
	if c, ok := fs.(DirChecker); ok {
		return c.CheckDir(dir)
	}
	return nil
}

// FS is a file system. Names are ordinary paths.
type FS interface {
	// OpenFile opens a file as os.OpenFile does.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file. The removal is durable only after SyncDir of
	// its directory.
	Remove(name string) error
	// Rename renames a file, replacing newname if it exists. It is durable
	// only after SyncDir of the directory.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents with perm.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir fsyncs a directory, making creations, renames and removals in
	// it durable. It fails (ENOTDIR) when dir is not a directory.
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on the file name (created
	// 0600 if missing). It fails with an error wrapping [ErrLocked] when
	// another open file description holds it, in this process or another,
	// and also when name no longer names the file it locked (another
	// holder removed or replaced it meanwhile): a lock that returns is on
	// the file name names at that instant. Closing the returned Closer
	// releases the lock; so does the death of the process.
	Lock(name string) (io.Closer, error)
}
