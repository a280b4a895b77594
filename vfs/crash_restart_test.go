package vfs

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashFSRestartKeepsThePageCacheAndOpenFiles: after a process crash
// and Restart, what was written stays, unsynced, under the names the page
// cache has; a file opened before the crash can be written and synced
// again, and a power loss then keeps what the syncs after the restart
// covered, and no unsynced name.
func TestCrashFSRestartKeepsThePageCacheAndOpenFiles(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "durable")
	writeAt(t, f, "-unsynced", 7)
	g := openRW(t, c, filepath.Join(dir, "new"))
	writeAt(t, g, "new", 0)
	c.Crash()
	_, err := f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, ErrCrashed)
	require.ErrorIs(t, f.Sync(), ErrCrashed)

	c.Restart()
	require.False(t, c.Crashed())
	require.Equal(t, map[string]string{"seg": "durable"}, cloneTree(t, c, keepNone))
	writeAt(t, f, "!", 16)
	require.NoError(t, f.Sync())
	require.Equal(t, map[string]string{"seg": "durable-unsynced!"}, cloneTree(t, c, keepNone), "the sync covers the writes made before the crash")
	require.NoError(t, g.Sync())
	require.Equal(t, map[string]string{"seg": "durable-unsynced!"}, cloneTree(t, c, keepNone), "the name of new was never synced")
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{"seg": "durable-unsynced!", "new": "new"}, cloneTree(t, c, keepNone))
}
