package vfs

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashFSRefusesToRemoveOrRenameAPathWithNoParent: "", ".", ".." and
// the root name no entry of a directory. Tracked, "." would become an
// entry of itself, and the next clone would recurse without end; they are
// refused, and the tree clones as it was.
func TestCrashFSRefusesToRemoveOrRenameAPathWithNoParent(t *testing.T) {
	t.Chdir(t.TempDir())
	c := NewCrashFS(Default)
	durableFile(t, c, "f", "data").Close()
	for _, name := range []string{"", ".", "..", "/", "x/..", "../.."} {
		require.ErrorIs(t, c.Remove(name), errNoEntry, "Remove(%q)", name)
		require.ErrorIs(t, c.Rename(name, "y"), errNoEntry, "Rename(%q, ...)", name)
		require.ErrorIs(t, c.Rename("f", name), errNoEntry, "Rename(..., %q)", name)
	}
	dst := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, c.CrashClone(dst, CrashOptions{Root: "."}))
	require.Equal(t, map[string]string{"f": "data"}, readTree(t, dst))
}

// TestCrashFSAFailedFdatasyncItCannotRecordFailsWhatFollows: when an
// fdatasync fails, the CrashFS reads the file back to record what stays
// durable; if that read fails too, what a crash would leave is unknown:
// the next fdatasync and any clone fail, rather than make the lost writes
// durable.
func TestCrashFSAFailedFdatasyncItCannotRecordFailsWhatFollows(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	f := durableFile(t, c, filepath.Join(dir, "seg"), "synced")
	writeAt(t, f, "LOST", 0)
	ffs.Inject(Rule{Op: OpSync, Times: 1})
	ffs.Inject(Rule{Op: OpOpen, NameContains: "seg", Times: 1}) // the CrashFS's own read-back
	require.Error(t, f.Sync())
	require.ErrorContains(t, f.Sync(), "reading the file to record what it left durable failed too")
	require.ErrorContains(t, c.CrashClone(filepath.Join(t.TempDir(), "clone"), CrashOptions{Root: dir}),
		"reading the file to record what it left durable failed too")
}

// TestCrashCloneFindsARelativeDirectoryWhoseNameStartsWithTwoDots: "..data"
// is inside ".", not above it.
func TestCrashCloneFindsARelativeDirectoryWhoseNameStartsWithTwoDots(t *testing.T) {
	t.Chdir(t.TempDir())
	c := NewCrashFS(Default)
	require.NoError(t, MkdirAllDurable(c, "..data", 0o700))
	durableFile(t, c, filepath.Join("..data", "f"), "data").Close()
	dst := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, c.CrashClone(dst, CrashOptions{}))
	require.Equal(t, map[string]string{"..data/f": "data"}, readTree(t, dst))
}
