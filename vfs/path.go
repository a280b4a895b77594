package vfs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Resolve returns path made absolute, with its symbolic links evaluated as
// far as the path exists, so that two names of one place resolve alike even
// where the place does not exist yet: the names past the longest existing
// prefix are kept as they are, and a symbolic link to a place that does not
// exist resolves as that place (where a file created through the link
// would be). Names are taken in order, as the kernel takes them: a ".."
// after a link climbs out of the link's target, not out of the directory
// that holds the link; and a name below a file that is not a directory
// ("file/x", "file/..") is refused with ENOTDIR. The empty path names no
// place and is refused, and so is one holding a NUL byte (see CheckPath),
// each with an error wrapping io/fs.ErrInvalid.
func Resolve(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("vfs: resolve: empty path: %w", iofs.ErrInvalid)
	}
	if err := CheckPath(path); err != nil {
		return "", err
	}
	if !filepath.IsAbs(path) {
		// Joined as text, not cleaned: a ".." must meet what the names
		// before it resolve to.
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		path = wd + string(filepath.Separator) + path
	}
	return resolve(path)
}

// CheckPath refuses a path holding a NUL byte, which no file name can:
// the kernel would refuse it with a bare EINVAL, and the byte would cut
// short any log line written through a C string. The error quotes the
// path (the NUL as \x00) and wraps fs.ErrInvalid. Other paths pass, even
// empty ones.
func CheckPath(path string) error {
	if i := strings.IndexByte(path, 0); i >= 0 {
		return fmt.Errorf("path %q holds a NUL byte at %d, which no file name can: %w", path, i, iofs.ErrInvalid)
	}
	return nil
}

// maxLinks bounds the symbolic links one Resolve follows, as the kernel
// bounds them (a cycle is ELOOP).
const maxLinks = 255

// resolve is Resolve of the absolute path abs.
func resolve(abs string) (string, error) {
	sep := string(filepath.Separator)
	names := strings.Split(abs, sep)
	cur := sep    // what the names taken so far resolve to; it exists unless missing > 0
	missing := 0  // names at the end of cur that do not exist
	file := false // cur exists and is not a directory
	links := 0
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		if file {
			// No name goes below a file, ".." and "." included: the
			// kernel refuses the path, and so does Resolve.
			return "", &os.PathError{Op: "resolve", Path: abs, Err: syscall.ENOTDIR}
		}
		switch name {
		case "", ".":
			continue
		case "..":
			// cur holds no link, so its parent is the place's parent;
			// past a missing name, there is nothing to follow either.
			cur = filepath.Dir(cur)
			if missing > 0 {
				missing--
			}
			continue
		}
		next := filepath.Join(cur, name)
		if missing > 0 {
			cur, missing = next, missing+1
			continue
		}
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			cur, missing = next, 1
			continue
		case err != nil:
			return "", err
		case fi.Mode()&iofs.ModeSymlink == 0:
			cur, file = next, !fi.IsDir()
			continue
		}
		if links++; links > maxLinks {
			return "", &os.PathError{Op: "resolve", Path: abs, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = sep
		}
		names = append(strings.Split(target, sep), names...)
	}
	return cur, nil
}

// IsLink reports whether path is a symbolic link, without following it. A
// missing path is not one. The empty path names no place and is refused
// (an error wrapping io/fs.ErrInvalid), as by Resolve.
func IsLink(path string) (bool, error) {
	if path == "" {
		return false, fmt.Errorf("vfs: is link: empty path: %w", iofs.ErrInvalid)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, iofs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Mode()&iofs.ModeSymlink != 0, nil
}
