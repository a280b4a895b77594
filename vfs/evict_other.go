//go:build !linux

package vfs

import (
	"errors"
	"fmt"
	"runtime"
)

// EvictPageCache would drop the files under dir from the page cache; only
// Linux lets a process ask for that (posix_fadvise), so elsewhere it
// changes nothing and says so with an error wrapping
// errors.ErrUnsupported.
func EvictPageCache(dir string) error {
	return fmt.Errorf("evict %s from the page cache: not possible on %s: %w", dir, runtime.GOOS, errors.ErrUnsupported)
}
