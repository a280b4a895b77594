package index

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/walbroker/walbroker/vfs"
)

// suspectName is the marker a store leaves in its index directory when it
// found damage while running: the next open must verify the whole log
// (LogHints gives no hints) and rebuild the state from it, using the
// checkpoint only for what the log may no longer say (the queues'
// declarations, which messages were live where). Keeping the checkpoint,
// rather than removing it, is what lets Salvage still name every queue when
// the damage took the only declaration the log held.
const suspectName = "SUSPECT"

// MarkSuspect records durably that the index directory's checkpoint must not
// be trusted, only consulted (see Suspect).
func MarkSuspect(fs vfs.FS, dir string) error {
	f, err := fs.OpenFile(filepath.Join(dir, suspectName), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("index: mark suspect: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("index: mark suspect: %w", err)
	}
	return nil
}

// Suspect reports whether MarkSuspect marked dir and nothing cleared it.
func Suspect(fs vfs.FS, dir string) bool {
	f, err := fs.OpenFile(filepath.Join(dir, suspectName), os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// ClearSuspect removes the marker, durably; a missing one is no error.
func ClearSuspect(fs vfs.FS, dir string) error {
	if err := fs.Remove(filepath.Join(dir, suspectName)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("index: clear suspect: %w", err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("index: clear suspect: %w", err)
	}
	return nil
}
