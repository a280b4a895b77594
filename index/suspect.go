package index

import (
	"errors"
	"fmt"
	iofs "io/fs"
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
	if err := mark(fs, dir, suspectName); err != nil {
		return fmt.Errorf("index: mark suspect: %w", err)
	}
	return nil
}

// errNilFS refuses a nil file system given to a function of this package,
// which would otherwise panic at its first file operation.
var errNilFS = fmt.Errorf("nil vfs.FS: %w", iofs.ErrInvalid)

// mark creates the empty file name in dir, durably.
func mark(fs vfs.FS, dir, name string) error {
	if fs == nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, name), errNilFS)
	}
	f, err := fs.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.SyncDir(dir)
	}
	return err
}

// unmark removes the file name from dir, durably; a missing one is no
// error.
func unmark(fs vfs.FS, dir, name string) error {
	if fs == nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, name), errNilFS)
	}
	if err := fs.Remove(filepath.Join(dir, name)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return fs.SyncDir(dir)
}

// writingName is the marker a checkpoint leaves in the index directory
// while it writes: the table's chunk files are rewritten in place before
// the new checkpoint file replaces the old one, so from the first rewrite
// until that replacement is durable the table no longer matches the
// checkpoint in place (a message copied forward already has its new
// position there), and replaying the log over the two would count the
// message in the wrong segment. An open that finds the marker treats the
// checkpoint as suspect and rebuilds.
const writingName = "CHECKPOINTING"

// Suspect reports whether MarkSuspect marked dir and nothing cleared it,
// or a checkpoint began writing there (BeginCheckpoint) and did not end.
// When it cannot tell — looking for a marker fails other than by finding
// none — it reports true: a checkpoint wrongly suspected costs a rebuild
// from the log, one wrongly trusted costs what the damage took. A nil fs,
// through which nothing can be looked for, is such a case.
func Suspect(fs vfs.FS, dir string) bool {
	return SuspectReason(fs, dir) != ""
}

// SuspectReason is Suspect with its reason, for an operator's log: "" when
// Suspect is false, else which marker made the checkpoint suspect, and
// what leaves it, or why none could be looked for.
func SuspectReason(fs vfs.FS, dir string) string {
	why, err := SuspectCheck(fs, dir)
	if err != nil {
		return fmt.Sprintf("cannot tell whether the checkpoint is suspect: %v", err)
	}
	return why
}

// SuspectCheck is SuspectReason for a caller about to act on the answer
// by dropping the checkpoint (a rebuild removes it): a marker that cannot
// be looked for (its open fails other than by finding none: an I/O error)
// is returned as an error naming it, not taken for suspicion. Dropping a
// checkpoint that was not suspect loses what only it knows (the messages
// a later salvage names lost); the caller fails instead, and changes
// nothing.
func SuspectCheck(fs vfs.FS, dir string) (string, error) {
	if fs == nil {
		return "", fmt.Errorf("index: look for the markers in %s: %w", dir, errNilFS)
	}
	for _, m := range []struct{ name, why string }{
		{suspectName, "the store found damage in its files while running (" + suspectName + ")"},
		{writingName, "a checkpoint, or an open's rebuild, began rewriting the index and did not finish (" +
			writingName + "): a crash during one, or a checkpoint that failed"},
	} {
		path := filepath.Join(dir, m.name)
		f, err := fs.OpenFile(path, os.O_RDONLY, 0)
		if err == nil {
			_ = f.Close()
			return m.why, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("index: cannot tell whether %s is there: %w", path, err)
		}
	}
	return "", nil
}

// BeginCheckpoint records durably that a checkpoint is being written in
// dir: call it before the table's first rewrite, and EndCheckpoint once
// the new checkpoint file is durably in place.
func BeginCheckpoint(fs vfs.FS, dir string) error {
	if err := mark(fs, dir, writingName); err != nil {
		return fmt.Errorf("index: begin checkpoint: %w", err)
	}
	return nil
}

// EndCheckpoint removes BeginCheckpoint's marker, durably.
func EndCheckpoint(fs vfs.FS, dir string) error {
	if err := unmark(fs, dir, writingName); err != nil {
		return fmt.Errorf("index: end checkpoint: %w", err)
	}
	return nil
}

// ClearSuspect removes the marker, durably; a missing one is no error.
func ClearSuspect(fs vfs.FS, dir string) error {
	if err := unmark(fs, dir, suspectName); err != nil {
		return fmt.Errorf("index: clear suspect: %w", err)
	}
	return nil
}
