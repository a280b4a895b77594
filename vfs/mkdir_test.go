package vfs_test

import (
	"os"
	"path/filepath"
	"strings"
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

// TestMkdirAllDurableSyncsTheParentOfEachDirectoryOfThePath: every
// directory of the path is made durable in its parent, from the top down,
// whether the call made it or found it; and an error names what failed.
func TestMkdirAllDurableSyncsTheParentOfEachDirectoryOfThePath(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	fs := &syncedDirs{FS: vfs.Default}
	dir := filepath.Join("a", "b", "c")
	require.NoError(t, vfs.MkdirAllDurable(fs, dir, 0o700))
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, info.IsDir())
	parents := []string{".", "a", filepath.Join("a", "b")}
	require.Equal(t, parents, fs.dirs)

	fs.dirs = nil
	require.NoError(t, vfs.MkdirAllDurable(fs, dir, 0o700))
	require.Equal(t, parents, fs.dirs, "an existing directory may be one a call made and died before its syncs")

	fs.dirs = nil
	require.NoError(t, vfs.MkdirAllDurable(fs, filepath.Join(root, "a"), 0o700))
	require.Equal(t, filepath.Dir(root), fs.dirs[len(fs.dirs)-2])
	require.Equal(t, root, fs.dirs[len(fs.dirs)-1])
	require.Equal(t, string(filepath.Separator), fs.dirs[0], "an absolute path is synced from the root down")
	require.Len(t, fs.dirs, strings.Count(root, string(filepath.Separator))+1)

	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	err = vfs.MkdirAllDurable(fs, filepath.Join(file, "d"), 0o700)
	require.Error(t, err)
	require.ErrorContains(t, err, file)
}

// TestMkdirAllDurableMakesADirectoryAnInterruptedCallMadeDurable: a call
// that made the directories and died before syncing their parents leaves
// directories that exist and that a power loss takes away; the next call
// makes them durable.
func TestMkdirAllDurableMakesADirectoryAnInterruptedCallMadeDurable(t *testing.T) {
	root := t.TempDir()
	c := vfs.NewCrashFS(vfs.Default)
	dir := filepath.Join(root, "a", "b")
	require.NoError(t, c.MkdirAll(dir, 0o700)) // the interrupted call got this far
	require.NoError(t, vfs.MkdirAllDurable(c, dir, 0o700))
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, c.CrashClone(clone, vfs.CrashOptions{Root: root}))
	info, err := os.Stat(filepath.Join(clone, "a", "b"))
	require.NoError(t, err, "a power loss took away a directory MkdirAllDurable returned")
	require.True(t, info.IsDir())
}

// TestMkdirAllDurableTakesADirectoryInAnUnreadableParentAsDurable: a
// parent that refuses its sync for want of permission (an execute-only
// home directory) is skipped where the directory in it was already there
// (no call of this process made it); where the call made the directory,
// the refusal is its error.
func TestMkdirAllDurableTakesADirectoryInAnUnreadableParentAsDurable(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	require.NoError(t, os.Mkdir(home, 0o700))
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Match: func(name string) bool { return name == root }, Err: os.ErrPermission})

	require.NoError(t, vfs.MkdirAllDurable(ffs, filepath.Join(home, "store"), 0o700), "home was there")
	require.Equal(t, int64(1), ffs.Injected(vfs.OpSyncDir))

	err := vfs.MkdirAllDurable(ffs, filepath.Join(root, "new", "store"), 0o700)
	require.ErrorIs(t, err, os.ErrPermission, "new is made here: its name must be synced")
	require.ErrorContains(t, err, root)
}
