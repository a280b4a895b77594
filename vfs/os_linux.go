//go:build linux

package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Sync is fdatasync(2). It is called once and never retried, not even on
// EINTR (the Go runtime installs its handlers with SA_RESTART): after a
// failed fdatasync the kernel may already have dropped the dirty pages, and
// a second call that succeeds would prove nothing.
func (f osFile) Sync() error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.File.Name(), Err: err}
	}
	return nil
}

// syncDir is fsync(2) of an open directory, called once like Sync: the
// standard library's File.Sync retries it on EINTR, and a failed directory
// sync poisons the log for the same reason a failed fdatasync does.
func syncDir(d *os.File) error {
	if err := unix.Fsync(int(d.Fd())); err != nil {
		return &os.PathError{Op: "fsync", Path: d.Name(), Err: err}
	}
	return nil
}

// Allocate is fallocate(2) with mode 0: see [Allocator].
func (f osFile) Allocate(off, n int64) error {
	if err := unix.Fallocate(int(f.Fd()), 0, off, n); err != nil {
		return &os.PathError{Op: "fallocate", Path: f.File.Name(), Err: err}
	}
	return nil
}

// WriteBack is sync_file_range(2) with WAIT_BEFORE, WRITE and WAIT_AFTER:
// the range's dirty pages go to the device and the call returns once the
// device has taken them. See [WriteBacker].
func (f osFile) WriteBack(off, n int64) error {
	err := unix.SyncFileRange(int(f.Fd()), off, n,
		unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	if err != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.File.Name(), Err: err}
	}
	return nil
}
