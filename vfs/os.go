//go:build linux || darwin

package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// Default is the real file system.
var Default FS = osFS{}

type osFS struct{}

type osFile struct {
	*os.File
}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	// O_DIRECTORY: fsync of a regular file succeeds too, and would say a
	// directory's entries are durable when none was synced.
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// flock locks belong to the open file description, so a second open of
	// the same file in this process conflicts exactly as another process
	// would.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := make([]byte, 64)
		n, _ := f.ReadAt(holder, 0)
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if h := strings.TrimSpace(string(holder[:n])); h != "" && utf8.ValidString(h) {
				return nil, fmt.Errorf("%s (held by %s): %w", name, h, ErrLocked)
			}
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("flock %s: %w", name, err)
	}
	// Who holds it, for the error of the next one to try (not synced: a
	// lock dies with its process, and a stale line names a process gone).
	host, _ := os.Hostname()
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d on %s\n", os.Getpid(), host)), 0)
	}
	return f, nil
}

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) Map(length int) (mmap.MMap, error) {
	// mmap-go maps the whole file for a negative length, and mmap(2) maps
	// past the end without complaint; both are refused here.
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if length <= 0 || int64(length) > size {
		return nil, &os.PathError{Op: "mmap", Path: f.File.Name(),
			Err: fmt.Errorf("length %d outside [1, %d], the file's size: %w", length, size, syscall.EINVAL)}
	}
	return mmap.MapRegion(f.File, length, mmap.RDONLY, 0, 0)
}

func (f osFile) Name() string { return f.File.Name() }
