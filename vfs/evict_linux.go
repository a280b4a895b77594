//go:build linux

package vfs

import (
	iofs "io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// EvictPageCache asks the kernel to drop every regular file under dir from
// the page cache, so that the next read of them comes from the device, as
// after a reboot. The kernel drops only clean pages: call it when nothing
// under dir has unsynced writes (a closed store has none). It works on the
// operating system's files directly, not through an FS: it exists to
// measure cold opens, not to be simulated.
func EvictPageCache(dir string) error {
	return filepath.WalkDir(dir, func(path string, d iofs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return &os.PathError{Op: "fadvise", Path: path, Err: err}
		}
		return nil
	})
}
