package vfs

import (
	"errors"
	"os"
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

// TestAReadOnlyOpenWithOTruncTruncatesAsDefaultDoes: OpenFile "opens a file
// as os.OpenFile does", and on Linux O_TRUNC truncates whatever the
// access mode. The CrashFS truncates too, as a counted and recorded
// Truncate, and the handle stays read-only.
func TestAReadOnlyOpenWithOTruncTruncatesAsDefaultDoes(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(plain, []byte("data"), 0o600))
	d, err := Default.OpenFile(plain, os.O_RDONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	size, err := d.Size()
	require.NoError(t, errors.Join(err, d.Close()))
	require.Zero(t, size, "Default left the file as it was")
	require.NoError(t, os.Remove(plain))

	c := NewCrashFS(Default)
	name := filepath.Join(dir, "seg")
	durableFile(t, c, name, "synced").Close()
	ops := c.Ops()
	f, err := c.OpenFile(name, os.O_RDONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	defer f.Close()
	size, err = f.Size()
	require.NoError(t, err)
	require.Zero(t, size, "O_TRUNC left the file as it was")
	require.Equal(t, ops+1, c.Ops(), "the truncation is a mutating operation")
	_, err = f.WriteAt([]byte("x"), 0)
	require.Error(t, err, "a read-only handle writes")
	require.Equal(t, map[string]string{"seg": "synced"}, cloneTree(t, c, keepNone))
	require.Equal(t, map[string]string{"seg": ""}, cloneTree(t, c, keepAll))
}
