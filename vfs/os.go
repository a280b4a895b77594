//go:build linux || darwin

package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// Default is the real file system.
//
// It opens (and locks) only what a store's directory should hold: files
// made by the process's own user or by root. A symbolic link as the last
// element of a name, a named pipe, socket or device, and a file another
// user owns, are refused with an error that wraps [ErrForeign] and says
// what to do: in a directory others can write, such a file was planted,
// and a store that read a planted segment would deliver messages, and
// accept receipts, someone else made up. The directory named may itself
// be a link: that is the operator's choice, not something planted inside
// the store.
var Default FS = osFS{}

// ErrForeign is wrapped by the errors of [Default] for a symbolic link or
// a special file where a file is expected, or a file another user owns.
// It wraps fs.ErrPermission.
var ErrForeign = fmt.Errorf("vfs: refused a file this user did not make: %w", fs.ErrPermission)

// ownerOf returns the user who owns fi, if the system says; a variable
// so that tests can see their own files as another user's.
var ownerOf = func(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

type osFS struct{}

type osFile struct {
	*os.File
}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := openOwn(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// openOwn opens name as os.OpenFile does, but only a regular file (or a
// directory) that this process's user or root owns, and never through a
// symbolic link in its last element: see [Default]. The name is looked at
// before it is opened (so that a planted named pipe is refused rather
// than waited on) and the open file after (so that a file swapped in
// between is refused too).
func openOwn(name string, flag int, perm os.FileMode) (*os.File, error) {
	if li, err := os.Lstat(name); err == nil {
		if err := ownFile(name, li); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(name, flag|unix.O_NOFOLLOW, perm)
	if err != nil {
		if li, lerr := os.Lstat(name); lerr == nil {
			if ferr := ownFile(name, li); ferr != nil {
				return nil, ferr
			}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = ownFile(name, fi)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// ownFile returns an error wrapping [ErrForeign] unless fi, the file
// name, is a regular file (or a directory) of an owner [trustedOwner]
// accepts.
func ownFile(name string, fi fs.FileInfo) error {
	refuse := func(format string, args ...any) error {
		return &os.PathError{Op: "open", Path: name, Err: fmt.Errorf(format+": %w", append(args, ErrForeign)...)}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		dest, _ := os.Readlink(name)
		return refuse("is a symbolic link (to %s); a store opens none inside its directory: remove it if it does not belong there", dest)
	}
	// (A directory fails its reads and writes on its own, with EISDIR.)
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return refuse("is not a regular file (%s); a store's directory holds only files it made: remove it if it does not belong there", fi.Mode().Type())
	}
	uid, ok := ownerOf(fi)
	if !ok || trustedOwner(uid) {
		return nil
	}
	return refuse("is owned by uid %d, not by this process's user (uid %d) or root; another user may have planted it: check it, and chown it if it belongs to this store", uid, os.Geteuid())
}

// trustedOwner reports whether a file of uid's could be one the store
// made: uid is this process's user, or root (who can change anything
// anyway). Not the owner of the file's directory: in a store directory
// others can write, another user can replace a subdirectory (index/) with
// one of their own.
func trustedOwner(uid uint32) bool {
	return uid == 0 || int64(uid) == int64(os.Geteuid())
}

// CheckDir refuses dir, as [Default] refuses a file, when it is a
// symbolic link, not a directory, or another user's: a store's index/
// replaced by a link would have the store write, and remove, files
// wherever the link points; one of another user's would hold files that
// user can replace.
func (osFS) CheckDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().IsRegular() {
		return &os.PathError{Op: "open", Path: dir, Err: fmt.Errorf("is a regular file, not a directory; a store's directory holds only what it made: remove it if it does not belong there: %w", ErrForeign)}
	}
	return ownFile(dir, fi)
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
	err = syncDir(d)
	return errors.Join(err, d.Close())
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := openOwn(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// flock locks belong to the open file description, so a second open of
	// the same file in this process conflicts exactly as another process
	// would.
	beforeFlock(name)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := make([]byte, 64)
		n, _ := f.ReadAt(holder, 0)
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if h := strings.TrimSpace(string(holder[:n])); h != "" && utf8.ValidString(h) {
				if h == lockHolder() {
					// The caller's own pid reads like someone else's.
					h = "this process, " + h + ": an earlier Lock of it here is still held (a store still open, or a Backup still running)"
				}
				return nil, fmt.Errorf("%s (held by %s): %w", name, h, ErrLocked)
			}
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("flock %s: %w", name, err)
	}
	// The lock is on the file opened, which another holder may have
	// removed, or replaced at name, between the open and the flock (and
	// then released): such a lock guards nothing at name, and a second
	// Lock of name would take the new file's lock as well.
	if err := holdsName(f, name); err != nil {
		_ = f.Close()
		return nil, err
	}
	// Who holds it, for the error of the next one to try (not synced: a
	// lock dies with its process, and a stale line names a process gone).
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(lockHolder()+"\n"), 0)
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
	m, err := mmap.MapRegion(f.File, length, mmap.RDONLY, 0, 0)
	if err != nil {
		// mmap-go returns mmap(2)'s bare errno.
		return nil, &os.PathError{Op: "mmap", Path: f.File.Name(), Err: err}
	}
	return m, nil
}

func (f osFile) Name() string { return f.File.Name() }

// beforeFlock is called by Lock between the open and the flock; a
// variable so that tests can change the name in that window.
var beforeFlock = func(name string) {}

// holdsName returns nil when name still names the open file f, and an
// error wrapping [ErrLocked] that says so when it was removed or replaced.
func holdsName(f *os.File, name string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	li, err := os.Lstat(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	if err != nil || !os.SameFile(fi, li) {
		return fmt.Errorf("%s was removed or replaced by another holder while it was being locked: %w", name, ErrLocked)
	}
	return nil
}

// lockHolder is the line a lock's holder writes into the file it locked:
// this process's pid and host.
func lockHolder() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("pid %d on %s", os.Getpid(), host)
}
