package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAFileOpenedAfterTheCrashCannotBeWritten: "after a crash each of them
// [WriteAt among them] fails with ErrCrashed and does nothing". A file
// made again by other means at a name the CrashFS saw removed is opened as
// a File of the CrashFS, recorded as a creation no SyncDir made durable:
// after the crash its writes are refused, and a power loss takes it away.
func TestAFileOpenedAfterTheCrashCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "seg")
	durableFile(t, c, name, "synced").Close()
	require.NoError(t, c.Remove(name))
	require.NoError(t, os.WriteFile(name, []byte("another's"), 0o600))
	c.Crash()
	_, err := c.OpenFile(name, os.O_RDWR|os.O_TRUNC, 0)
	require.ErrorIs(t, err, ErrCrashed, "a truncation after the crash")
	f, err := c.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("after the crash"), 0)
	require.ErrorIs(t, err, ErrCrashed, "a write after the crash through a %T", f)
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	require.Equal(t, "another's", string(data), "the refused write wrote")
	require.Equal(t, map[string]string{"seg": "synced"}, cloneTree(t, c, keepNone),
		"the removal and the new file, neither made durable, are undone")
}
