package vfs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Resolve returns path made absolute, with its symbolic links evaluated as
// far as the path exists, so that two names of one place resolve alike even
// where the place does not exist yet: the names past the longest existing
// prefix are kept as they are, and a symbolic link to a place that does not
// exist resolves as that place (where a file created through the link
// would be). The empty path names no place and is refused.
func Resolve(path string) (string, error) {
	if path == "" {
		return "", errors.New("vfs: resolve: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return resolve(abs, 0)
}

// maxDanglingLinks bounds the chain of symbolic links to missing places one
// Resolve follows (a cycle of existing ones is EvalSymlinks's to refuse).
const maxDanglingLinks = 255

// resolve is Resolve of the absolute path abs, links dangling links in.
func resolve(abs string, links int) (string, error) {
	var rest []string
	for p := abs; ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, iofs.ErrNotExist) || filepath.Dir(p) == p {
			return "", err
		}
		// p is missing, or it is a symbolic link to something missing,
		// whose place it names.
		if target, lerr := os.Readlink(p); lerr == nil {
			if links >= maxDanglingLinks {
				return "", &os.PathError{Op: "resolve", Path: abs, Err: syscall.ELOOP}
			}
			if !filepath.IsAbs(target) {
				dir, err := filepath.EvalSymlinks(filepath.Dir(p))
				if err != nil {
					return "", err
				}
				target = filepath.Join(dir, target)
			}
			r, err := resolve(target, links+1)
			if err != nil {
				return "", err
			}
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
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
