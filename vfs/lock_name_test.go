package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Lock returns only holding the file its name names: one whose file was
// removed, or replaced by another, between its open and its flock (by a
// holder that then let go) fails with ErrLocked, naming the file, instead
// of holding a lock on a file no one else can find. Without the check, a
// Backup that took a crashed one's leftover would share its directory
// with another that locked the old, removed mark.
func TestALockWhoseFileWasReplacedMeanwhileIsRefused(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "mark.tmp")
	real := beforeFlock
	t.Cleanup(func() { beforeFlock = real })

	for _, tc := range []struct {
		what   string
		change func()
	}{
		{"removed", func() { require.NoError(t, os.Remove(name)) }},
		{"replaced", func() {
			require.NoError(t, os.Remove(name))
			require.NoError(t, os.WriteFile(name, nil, 0o600))
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			require.NoError(t, os.WriteFile(name, nil, 0o600))
			beforeFlock = func(string) { tc.change() }
			l, err := Default.Lock(name)
			if l != nil {
				_ = l.Close()
			}
			require.ErrorIs(t, err, ErrLocked)
			require.ErrorContains(t, err, name)
			require.ErrorContains(t, err, "removed or replaced")

			// Unchanged, the file at name is locked, and a second
			// Lock of it is refused while the first holds it.
			beforeFlock = func(string) {}
			l, err = Default.Lock(name)
			require.NoError(t, err)
			_, err = Default.Lock(name)
			require.ErrorIs(t, err, ErrLocked)
			require.NoError(t, l.Close())
			require.NoError(t, os.Remove(name))
		})
	}
}
