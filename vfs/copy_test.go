package vfs

import (
	"bytes"
	"io"
	"io/fs"
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

// ReplaceFile is all or nothing across a power loss at any of its
// operations: the file holds what it held, or the new data, whole; once
// it returns, the new data. ReadFile reads it back, and refuses a file
// above its limit and a missing one (fs.ErrNotExist).
func TestReplaceFileIsWholeAcrossAPowerLoss(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "list")
	old, next := []byte("the old list"), bytes.Repeat([]byte("the new list, longer. "), 300)
	require.NoError(t, ReplaceFile(Default, path, old))
	got, err := ReadFile(Default, path, 1<<20)
	require.NoError(t, err)
	require.Equal(t, old, got)

	c := NewCrashFS(Default)
	require.NoError(t, ReplaceFile(c, path, next))
	total := c.Ops()
	for k := int64(0); k <= total; k++ {
		for _, keep := range []float64{0, 1} {
			d := filepath.Join(t.TempDir(), "d")
			require.NoError(t, os.Mkdir(d, 0o700))
			p := filepath.Join(d, "list")
			require.NoError(t, ReplaceFile(Default, p, old))
			c := NewCrashFS(Default)
			c.CrashAfter(k)
			err := ReplaceFile(c, p, next)
			clone := filepath.Join(t.TempDir(), "clone")
			require.NoError(t, c.CrashClone(clone, CrashOptions{Root: d, KeepUnsyncedFraction: keep}))
			got, rerr := ReadFile(Default, filepath.Join(clone, "list"), 1<<20)
			require.NoError(t, rerr, "after %d operations, kept %v", k, keep)
			if err == nil {
				require.Equal(t, next, got, "returned after %d operations: the new data", k)
			} else {
				require.True(t, bytes.Equal(got, old) || bytes.Equal(got, next), "after %d operations, kept %v: %q", k, keep, got)
			}
		}
	}

	_, err = ReadFile(Default, path, 10)
	require.ErrorContains(t, err, "more than the 10 it may hold")
	_, err = ReadFile(Default, filepath.Join(dir, "missing"), 10)
	require.ErrorIs(t, err, fs.ErrNotExist)
}
