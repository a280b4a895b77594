package vfs

import (
	"errors"
	iofs "io/fs"
	"path/filepath"
)

// Resolve returns path made absolute, with the symbolic links of its
// longest existing prefix evaluated, so that two names of one place
// resolve alike even where the place does not exist yet.
func Resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var rest []string
	for p := abs; ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, iofs.ErrNotExist) || filepath.Dir(p) == p {
			return "", err
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}
