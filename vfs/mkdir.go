package vfs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
)

// MkdirAllDurable is fs.MkdirAll(dir, perm) made durable: it syncs the
// parent of every directory it creates, from the top down, so that a power
// loss cannot take the new directory, and everything later made durable in
// it, away. A directory that already exists costs one ReadDir and no sync.
// A nil fs is refused with an error wrapping io/fs.ErrInvalid.
func MkdirAllDurable(fs FS, dir string, perm os.FileMode) error {
	if fs == nil {
		return fmt.Errorf("vfs: mkdir %s: %w", dir, errNilFS)
	}
	var missing []string // dir first, then the parents it needs
	for d := filepath.Clean(dir); ; {
		_, err := fs.ReadDir(d)
		if err == nil || !errors.Is(err, iofs.ErrNotExist) {
			break // there (or unreadable: MkdirAll will say why)
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := fs.MkdirAll(dir, perm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fs.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}
