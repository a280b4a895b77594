package vfs_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// syncedDirs records the directories SyncDir was called for.
type syncedDirs struct {
	vfs.FS
	mu   sync.Mutex
	dirs []string
}

func (s *syncedDirs) SyncDir(dir string) error {
	s.mu.Lock()
	s.dirs = append(s.dirs, dir)
	s.mu.Unlock()
	return s.FS.SyncDir(dir)
}

// TestMkdirAllDurableSyncsTheParentOfEachNewDirectory: each directory it
// creates is made durable in its parent, from the top down; one that
// exists costs no sync; and an error names what failed.
func TestMkdirAllDurableSyncsTheParentOfEachNewDirectory(t *testing.T) {
	root := t.TempDir()
	fs := &syncedDirs{FS: vfs.Default}
	dir := filepath.Join(root, "a", "b", "c")
	require.NoError(t, vfs.MkdirAllDurable(fs, dir, 0o700))
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, info.IsDir())
	require.Equal(t, []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")}, fs.dirs)

	fs.dirs = nil
	require.NoError(t, vfs.MkdirAllDurable(fs, dir, 0o700))
	require.Empty(t, fs.dirs, "an existing directory was synced again")

	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	err = vfs.MkdirAllDurable(fs, filepath.Join(file, "d"), 0o700)
	require.Error(t, err)
	require.ErrorContains(t, err, file)
}
