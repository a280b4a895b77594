package vfs

import (
	"bytes"
	"io"
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

// TestCopyFileTakesAWholeReadThatReportsTheEnd: io.ReaderAt lets a read
// that fills its buffer up to the end of the file report io.EOF; the copy
// takes those bytes and succeeds.
func TestCopyFileTakesAWholeReadThatReportsTheEnd(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	require.NoError(t, os.WriteFile(src, []byte("content"), 0o600))
	require.NoError(t, CopyFile(eofAtEnd{Default}, src, dst))
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, "content", string(got))
}

// eofAtEnd reports io.EOF with every read of its files that reaches the end.
type eofAtEnd struct{ FS }

func (e eofAtEnd) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := e.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return eofAtEndFile{f}, nil
}

type eofAtEndFile struct{ File }

func (f eofAtEndFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if size, serr := f.Size(); err == nil && serr == nil && off+int64(n) == size {
		err = io.EOF
	}
	return n, err
}

// TestCreateEmptyRefusesAnExistingFile: it fails with ErrExist and leaves
// what is there as it was.
func TestCreateEmptyRefusesAnExistingFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(name, []byte("kept"), 0o600))
	require.ErrorIs(t, CreateEmpty(Default, name), os.ErrExist)
	got, err := os.ReadFile(name)
	require.NoError(t, err)
	require.Equal(t, "kept", string(got))
}
