package vfs

import (
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAReplaceFileThatFailsLeavesNoTemporaryFile: ReplaceFile of the empty
// path made ".tmp" in the working directory, then failed to rename it to
// "", and left it there; a replace that failed at its write, its fdatasync
// or its rename (over a directory) left path+".tmp" beside path. The
// empty path is refused before anything is made, and any other failure
// before the rename removes the temporary file: the directory holds what
// it held, and path is as it was.
func TestAReplaceFileThatFailsLeavesNoTemporaryFile(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	err := ReplaceFile(Default, "", []byte("x"))
	require.ErrorIs(t, err, iofs.ErrInvalid)
	require.ErrorContains(t, err, "vfs: replace: empty path")
	requireEntries(t, wd)

	dir := t.TempDir()
	path := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(path, []byte("before"), 0o600))
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o700))
	for _, tc := range []struct {
		name string
		path string
		rule Rule // fires once, when Op is set
	}{
		{"write", path, Rule{Op: OpWrite, NameContains: ".tmp"}},
		{"fdatasync", path, Rule{Op: OpSync, NameContains: ".tmp"}},
		{"rename", path, Rule{Op: OpRename, NameContains: ".tmp"}},
		{"rename over a directory", sub, Rule{}},
	} {
		ffs := NewFaultFS(Default)
		if tc.rule.Op != 0 {
			tc.rule.Times = 1
			ffs.Inject(tc.rule)
		}
		err := ReplaceFile(ffs, tc.path, []byte("after"))
		require.Error(t, err, tc.name)
		if tc.rule.Op != 0 {
			require.ErrorIs(t, err, syscall.EIO, tc.name)
		}
		requireEntries(t, dir, "file", "sub")
		got, rerr := os.ReadFile(path)
		require.NoError(t, rerr)
		require.Equal(t, "before", string(got), tc.name)
	}
	require.NoError(t, ReplaceFile(Default, path, []byte("after")), "tried again")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "after", string(got))
	requireEntries(t, dir, "file", "sub")
}

// requireEntries asserts that dir holds exactly the entries names.
func requireEntries(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	got := []string{}
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if names == nil {
		names = []string{}
	}
	require.Equal(t, names, got, "entries of %s", dir)
}
