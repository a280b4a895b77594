//go:build darwin

package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Sync is fcntl(F_FULLFSYNC): on macOS fsync(2) hands the data to the
// drive but does not make the drive write its cache, so it survives a
// crash of the process and of the kernel, not a loss of power. Where the
// file system does not support F_FULLFSYNC (it says so before doing
// anything), fsync is what there is. Neither is retried, not even on
// EINTR: see the Linux Sync.
func (f osFile) Sync() error {
	fd := int(f.Fd())
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
		err = unix.Fsync(fd)
	}
	if err != nil {
		return &os.PathError{Op: "fsync", Path: f.File.Name(), Err: err}
	}
	return nil
}

// syncDir syncs an open directory as Sync does a file, once.
func syncDir(d *os.File) error { return osFile{d}.Sync() }
