package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// CopyFile copies every byte, in more than one chunk, refuses a target that
// exists, and leaves the copy's data durable: once its directory is synced
// too, a power loss keeps it whole.
func TestCopyFileCopiesDurably(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	content := bytes.Repeat([]byte("0123456789abcdef"), (2*copyChunk+5000)/16)
	src := filepath.Join(dir, "src")
	durableFile(t, c, src, string(content)).Close()

	dst := filepath.Join(dir, "dst")
	require.NoError(t, CopyFile(c, src, dst))
	require.NoError(t, c.SyncDir(dir))
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.True(t, bytes.Equal(content, got), "the copy differs")
	info, err := os.Stat(dst)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	require.Equal(t, map[string]string{"src": string(content), "dst": string(content)}, cloneTree(t, c, keepNone))

	require.ErrorIs(t, CopyFile(c, src, dst), os.ErrExist, "the target exists")
	require.ErrorIs(t, CopyFile(c, filepath.Join(dir, "missing"), filepath.Join(dir, "other")), os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "other"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing is created for a missing source")
}
