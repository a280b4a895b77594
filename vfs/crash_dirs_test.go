package vfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// cloneDirs crash-clones c and returns the clone's directories (with a
// trailing slash) and files (with their content), by relative name.
func cloneDirs(t *testing.T, c *CrashFS, root string, opts CrashOptions) map[string]string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "clone")
	opts.Root = root
	require.NoError(t, c.CrashClone(dst, opts))
	entries := make(map[string]string)
	err := filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dst {
			return err
		}
		rel, _ := filepath.Rel(dst, path)
		if d.IsDir() {
			entries[rel+"/"] = ""
			return nil
		}
		data, err := os.ReadFile(path)
		entries[rel] = string(data)
		return err
	})
	require.NoError(t, err)
	return entries
}

// someClone reports whether one of 40 seeded clones that keep part of the
// unsynced changes satisfies ok.
func someClone(t *testing.T, c *CrashFS, root string, ok func(map[string]string) bool) bool {
	t.Helper()
	for seed := uint64(0); seed < 40; seed++ {
		if ok(cloneDirs(t, c, root, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})) {
			return true
		}
	}
	return false
}

// TestCrashFSANewDirectoryNeedsItsParentSynced: a directory that MkdirAll
// made is a name in its parent, and a power loss takes it away, with the
// files synced in it, until its parent is synced.
func TestCrashFSANewDirectoryNeedsItsParentSynced(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	sub := filepath.Join(root, "a", "b")
	require.NoError(t, c.MkdirAll(sub, 0o700))
	durableFile(t, c, filepath.Join(sub, "f"), "data").Close()

	require.Empty(t, cloneDirs(t, c, root, keepNone), "neither a nor b was synced into its parent")
	require.True(t, someClone(t, c, root, func(got map[string]string) bool {
		return equalTree(got, map[string]string{"a/": "", "a/b/": "", "a/b/f": "data"})
	}), "a power loss may also keep both creations")
	require.NoError(t, c.SyncDir(filepath.Join(root, "a")))
	require.Empty(t, cloneDirs(t, c, root, keepNone), "b is in a, but a is not in the root yet")
	require.NoError(t, c.SyncDir(root))
	require.Equal(t, map[string]string{"a/": "", "a/b/": "", "a/b/f": "data"}, cloneDirs(t, c, root, keepNone))

	other := filepath.Join(root, "c", "d")
	require.NoError(t, MkdirAllDurable(c, other, 0o700))
	require.Equal(t, map[string]string{"a/": "", "a/b/": "", "a/b/f": "data", "c/": "", "c/d/": ""},
		cloneDirs(t, c, root, keepNone), "MkdirAllDurable syncs every parent it needs")
}

// TestCrashFSARenamedDirectoryComesBackUntilItsParentIsSynced: renaming a
// directory is one change of names in its parent. A power loss before the
// parent's sync leaves the directory at its old name, holding what it
// would hold at the new one; files created in it after the rename are
// followed at their new names.
func TestCrashFSARenamedDirectoryComesBackUntilItsParentIsSynced(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	part, done := filepath.Join(root, "copy.partial"), filepath.Join(root, "copy")
	require.NoError(t, MkdirAllDurable(c, part, 0o700))
	durableFile(t, c, filepath.Join(part, "before"), "1").Close()
	unsynced := openRW(t, c, filepath.Join(part, "unsynced"))
	writeAt(t, unsynced, "lost", 0)

	require.NoError(t, c.Rename(part, done))
	_, err := os.Stat(filepath.Join(done, "before"))
	require.NoError(t, err, "the rename happened on disk")
	f := openRW(t, c, filepath.Join(done, "after"))
	writeAt(t, f, "2", 0)
	require.NoError(t, f.Sync())
	require.NoError(t, c.SyncDir(done))
	writeAt(t, unsynced, "kept", 0) // through a handle opened before the rename
	require.NoError(t, unsynced.Sync())

	require.Equal(t, map[string]string{"copy.partial/": "", "copy.partial/before": "1", "copy.partial/after": "2", "copy.partial/unsynced": "kept"},
		cloneDirs(t, c, root, keepNone), "the rename is not durable; what was synced in the directory is, under its old name")
	seen := make(map[string]bool)
	for seed := uint64(0); seed < 40; seed++ {
		got := cloneDirs(t, c, root, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})
		_, oldName := got["copy.partial/"]
		_, newName := got["copy/"]
		require.True(t, oldName != newName, "seed %d: the directory is at one name, whole: %v", seed, got)
		seen[map[bool]string{true: "old", false: "new"}[oldName]] = true
	}
	require.Len(t, seen, 2, "a power loss may keep the rename or not")

	require.NoError(t, c.SyncDir(root))
	require.Equal(t, map[string]string{"copy/": "", "copy/before": "1", "copy/after": "2", "copy/unsynced": "kept"},
		cloneDirs(t, c, root, keepNone))

	// The old name is free for a new directory, which is not durable yet.
	require.NoError(t, c.MkdirAll(part, 0o700))
	durableFile(t, c, filepath.Join(part, "again"), "3").Close()
	require.Equal(t, map[string]string{"copy/": "", "copy/before": "1", "copy/after": "2", "copy/unsynced": "kept"},
		cloneDirs(t, c, root, keepNone))
	require.NoError(t, c.SyncDir(root))
	require.Equal(t, "3", cloneDirs(t, c, root, keepNone)["copy.partial/again"])
	require.NoError(t, unsynced.Close())
	require.NoError(t, f.Close())
}

// TestCrashFSARemovedDirectoryComesBackWithItsFiles: removing a directory,
// after its files, is durable only when its parent is synced; until then
// a power loss puts it back with every file whose removal was not synced
// either.
func TestCrashFSARemovedDirectoryComesBackWithItsFiles(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	dir := filepath.Join(root, "d")
	require.NoError(t, MkdirAllDurable(c, dir, 0o700))
	durableFile(t, c, filepath.Join(dir, "f"), "data").Close()

	require.NoError(t, c.Remove(filepath.Join(dir, "f")))
	require.NoError(t, c.Remove(dir))
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Equal(t, map[string]string{"d/": "", "d/f": "data"}, cloneDirs(t, c, root, keepNone))
	require.True(t, someClone(t, c, root, func(got map[string]string) bool { return len(got) == 0 }),
		"a power loss may also keep both removals")

	require.NoError(t, c.SyncDir(root))
	require.Empty(t, cloneDirs(t, c, root, keepNone), "d's removal is durable, and f went with it")
}

// TestCrashFSRefusesDirectoryRenamesItDoesNotModel: moving a directory to
// another parent, or over an existing entry, is refused with a reason, and
// nothing moves.
func TestCrashFSRefusesDirectoryRenamesItDoesNotModel(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	for _, d := range []string{"a", "b", "a/inner"} {
		require.NoError(t, MkdirAllDurable(c, filepath.Join(root, d), 0o700))
	}
	durableFile(t, c, filepath.Join(root, "file"), "x").Close()

	err := c.Rename(filepath.Join(root, "a", "inner"), filepath.Join(root, "b", "inner"))
	require.ErrorContains(t, err, "only within its parent")
	err = c.Rename(filepath.Join(root, "a"), filepath.Join(root, "b"))
	require.ErrorContains(t, err, "over another is not modelled")
	err = c.Rename(filepath.Join(root, "a"), filepath.Join(root, "file"))
	require.ErrorContains(t, err, "over a file is not modelled")
	_, err = os.Stat(filepath.Join(root, "a", "inner"))
	require.NoError(t, err, "nothing moved")
}

// The clone's root, found from the calls, is the parent of a directory
// that MkdirAll made: a power loss may take the new directory away.
func TestCrashFSTheRootFoundContainsTheDirectoriesMade(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	store := filepath.Join(root, "store")
	require.NoError(t, c.MkdirAll(store, 0o700)) // never synced into root
	durableFile(t, c, filepath.Join(store, "f"), "data").Close()
	require.Empty(t, cloneTree(t, c, keepNone))
}

// Once a directory's removal is durable, nothing in it can come back: the
// handles kept for its removed files are closed and its changes of names
// forgotten.
func TestCrashFSADurablyRemovedDirectoryReleasesWhatItHeld(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	dir := filepath.Join(root, "d")
	require.NoError(t, MkdirAllDurable(c, dir, 0o700))
	durableFile(t, c, filepath.Join(dir, "f"), "data").Close()
	c.mu.Lock()
	f := c.dirs[dir].cur["f"]
	c.mu.Unlock()
	require.NoError(t, c.Remove(filepath.Join(dir, "f")))
	require.NoError(t, c.Remove(dir))
	c.mu.Lock()
	held := f.held
	c.mu.Unlock()
	require.NotNil(t, held, "a crash could still bring f back")
	require.NoError(t, c.SyncDir(root))
	require.Empty(t, cloneDirs(t, c, root, keepNone))
	c.mu.Lock()
	names, held := len(c.names), f.held
	c.mu.Unlock()
	require.Zero(t, names)
	require.Nil(t, held)
}

// A MkdirAll that fails after making some directories tracks those it
// made: they are not durable until their parent is synced.
func TestCrashFSAFailedMkdirAllTracksWhatItMade(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	require.NoError(t, c.SyncDir(root))
	require.Error(t, c.MkdirAll(filepath.Join(root, "a", strings.Repeat("x", 300)), 0o700))
	require.DirExists(t, filepath.Join(root, "a"))
	require.Empty(t, cloneDirs(t, c, root, keepNone))
}

// Whether a name is a directory is taken from the bookkeeping where it is
// tracked, and a failing look at the disk fails the call: a directory's
// rename is never mistaken for a file's.
func TestCrashFSAFailedLookNeverLosesADirectoryRename(t *testing.T) {
	root := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	require.NoError(t, MkdirAllDurable(c, a, 0o700))
	durableFile(t, c, filepath.Join(a, "f"), "data").Close()
	ffs.Inject(Rule{Op: OpReadDir, Times: 1})
	renameErr := c.Rename(a, b)
	ffs.Clear()
	want := map[string]string{"a/": "", "a/f": "data"}
	if renameErr == nil {
		require.DirExists(t, b)
	}
	require.Equal(t, want, cloneDirs(t, c, root, keepNone), "renamed or not, the rename is not durable")
	require.NoError(t, c.SyncDir(root))
	if renameErr == nil {
		want = map[string]string{"b/": "", "b/f": "data"}
	}
	require.Equal(t, want, cloneDirs(t, c, root, keepNone))
}

// TestCrashFSADirectoryMadeRenamedOrRemovedIsAChangeOfNamesOfItsOwn: the rename, the
// creation and the removal of a directory each take their place in the
// order of unsynced changes of names, so a power loss may keep the changes
// before one without it.
func TestCrashFSADirectoryMadeRenamedOrRemovedIsAChangeOfNamesOfItsOwn(t *testing.T) {
	root := t.TempDir()
	c := NewCrashFS(Default)
	require.NoError(t, MkdirAllDurable(c, filepath.Join(root, "a"), 0o700))
	require.NoError(t, MkdirAllDurable(c, filepath.Join(root, "e"), 0o700))
	openRW(t, c, filepath.Join(root, "x"))
	require.NoError(t, c.Rename(filepath.Join(root, "a"), filepath.Join(root, "b")))
	require.NoError(t, c.MkdirAll(filepath.Join(root, "c"), 0o700))
	require.NoError(t, c.Remove(filepath.Join(root, "e")))

	prefixes := []map[string]string{
		{"a/": "", "e/": ""},
		{"a/": "", "e/": "", "x": ""},
		{"b/": "", "e/": "", "x": ""},
		{"b/": "", "e/": "", "x": "", "c/": ""},
		{"b/": "", "x": "", "c/": ""},
	}
	requireEveryPrefix(t, prefixes, 60, func(o CrashOptions) map[string]string { return cloneDirs(t, c, root, o) })
}

// TestCrashFSADirectoryRenamedOverARemovedOneShowsOnlyItsOwnFiles: what the
// CrashFS knew of a removed directory's subdirectories stays with the
// removed directory, which a crash may bring back; a directory renamed to
// its name, with subdirectories of the same names, holds only its own.
func TestCrashFSADirectoryRenamedOverARemovedOneShowsOnlyItsOwnFiles(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "new", "sub"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(root, "new", "sub", "g"), []byte("g"), 0o600))
	c := NewCrashFS(Default)
	old := filepath.Join(root, "old")
	require.NoError(t, MkdirAllDurable(c, filepath.Join(old, "sub"), 0o700))
	durableFile(t, c, filepath.Join(old, "sub", "f"), "f").Close()
	require.NoError(t, c.Remove(filepath.Join(old, "sub", "f")))
	require.NoError(t, c.Remove(filepath.Join(old, "sub")))
	require.NoError(t, c.Remove(old))
	require.NoError(t, c.Rename(filepath.Join(root, "new"), old))

	require.Equal(t, map[string]string{
		"old/": "", "old/sub/": "", "old/sub/f": "f", // the removals are not durable
		"new/": "", "new/sub/": "", "new/sub/g": "g", // nor is the rename
	}, cloneDirs(t, c, root, keepNone))
	require.NoError(t, c.SyncDir(root))
	require.Equal(t, map[string]string{"old/": "", "old/sub/": "", "old/sub/g": "g"}, cloneDirs(t, c, root, keepNone))
}
