package vfs

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashFSUnsyncedNameChangesMaySurviveInOrder: a journalling file
// system (ext4, xfs) commits creations, renames and removals in the order
// they were made, at any moment, without waiting for a directory fsync: a
// power loss may keep any prefix of them, a rename whole (the new name, or
// the old one, never both or neither). A clone that keeps part of the
// unsynced state must be able to show each such prefix, and nothing else.
func TestCrashFSUnsyncedNameChangesMaySurviveInOrder(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	old := durableFile(t, c, filepath.Join(dir, "old"), "old")
	require.NoError(t, old.Close())
	cur := durableFile(t, c, filepath.Join(dir, "CURRENT"), "v1")
	require.NoError(t, cur.Close())

	// 1: a new file, its data synced, its name not.
	f := openRW(t, c, filepath.Join(dir, "new"))
	writeAt(t, f, "data", 0)
	require.NoError(t, f.Sync())
	// 2: a rename over an existing file.
	tmp := openRW(t, c, filepath.Join(dir, "CURRENT.tmp"))
	writeAt(t, tmp, "v2", 0)
	require.NoError(t, tmp.Sync())
	// (the creation of CURRENT.tmp is change 2, its rename change 3)
	require.NoError(t, c.Rename(filepath.Join(dir, "CURRENT.tmp"), filepath.Join(dir, "CURRENT")))
	// 4: a removal.
	require.NoError(t, c.Remove(filepath.Join(dir, "old")))

	prefixes := []map[string]string{
		{"old": "old", "CURRENT": "v1"},
		{"old": "old", "CURRENT": "v1", "new": "data"},
		{"old": "old", "CURRENT": "v1", "new": "data", "CURRENT.tmp": "v2"},
		{"old": "old", "CURRENT": "v2", "new": "data"},
		{"CURRENT": "v2", "new": "data"},
	}
	requireEveryPrefix(t, prefixes, 200, func(o CrashOptions) map[string]string { return cloneTree(t, c, o) })

	require.Equal(t, prefixes[0], cloneTree(t, c, keepNone), "keeping nothing unsynced keeps no unsynced name")
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, prefixes[4], cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(1)}))
}

func equalTree(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// requireEveryPrefix clones, with seeds 0 to seeds-1 and half the unsynced
// changes kept, and requires each clone to hold exactly one of prefixes —
// the state after the first i unsynced changes of names — and every one of
// them to be held by some clone.
func requireEveryPrefix(t *testing.T, prefixes []map[string]string, seeds uint64, clone func(CrashOptions) map[string]string) {
	t.Helper()
	seen := make([]bool, len(prefixes))
	for seed := range seeds {
		got := clone(CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})
		i := 0
		for i < len(prefixes) && !equalTree(prefixes[i], got) {
			i++
		}
		require.Less(t, i, len(prefixes), "seed %d: %v is no prefix of the changes", seed, got)
		seen[i] = true
	}
	for i, ok := range seen {
		require.True(t, ok, "no clone kept exactly the first %d changes: %v", i, prefixes[i])
	}
}

// TestCrashCloneMayKeepEveryUnsyncedNameWithEveryWrite: a power loss may
// come after every dirty page and every journalled change of names reached
// the device, but before the directory sync: all the names with all the
// data, the tree as the page cache holds it. KeepUnsyncedNames reaches that
// state, and each prefix of the names with all the data, or with none of
// it; left at "", it keeps what it kept before it existed, drawing the
// same prefix from the same seed.
func TestCrashCloneMayKeepEveryUnsyncedNameWithEveryWrite(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	cur := durableFile(t, c, filepath.Join(dir, "CURRENT"), "v1")
	defer cur.Close()
	f := openRW(t, c, filepath.Join(dir, "new")) // 1: a creation
	defer f.Close()
	writeAt(t, f, "data", 0)
	require.NoError(t, f.Sync())
	tmp := openRW(t, c, filepath.Join(dir, "CURRENT.tmp")) // 2
	defer tmp.Close()
	writeAt(t, tmp, "v2", 0)
	require.NoError(t, tmp.Sync())
	require.NoError(t, c.Rename(filepath.Join(dir, "CURRENT.tmp"), filepath.Join(dir, "CURRENT"))) // 3
	// Unsynced data in a file whose name is not durable.
	writeAt(t, f, "+more", 4)

	live := readTree(t, dir)
	require.Equal(t, map[string]string{"CURRENT": "v2", "new": "data+more"}, live)
	require.Equal(t, live, cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 1, KeepUnsyncedNames: KeepAll}))
	require.Equal(t, map[string]string{"CURRENT": "v1"}, cloneTree(t, c, keepAll), "by default, every write and no name")
	require.Equal(t, map[string]string{"CURRENT": "v2", "new": "data"}, cloneTree(t, c, CrashOptions{KeepUnsyncedNames: KeepAll}),
		"every name and no unsynced write")
	require.Equal(t, map[string]string{"CURRENT": "v1"}, cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, KeepUnsyncedNames: KeepNone, Rand: newRand(1)}))

	prefixes := func(newData string) []map[string]string {
		return []map[string]string{
			{"CURRENT": "v1"},
			{"CURRENT": "v1", "new": newData},
			{"CURRENT": "v1", "new": newData, "CURRENT.tmp": "v2"},
			{"CURRENT": "v2", "new": newData},
		}
	}
	for _, keep := range []float64{0, 1} {
		newData := map[float64]string{0: "data", 1: "data+more"}[keep]
		requireEveryPrefix(t, prefixes(newData), 100, func(o CrashOptions) map[string]string {
			o.KeepUnsyncedFraction, o.KeepUnsyncedNames = keep, KeepPrefix
			return cloneTree(t, c, o)
		})
	}
	for seed := range uint64(20) {
		require.Equal(t, cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)}),
			cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, KeepUnsyncedNames: KeepPrefix, Rand: newRand(seed)}),
			"seed %d: strictly between 0 and 1 the default is the drawn prefix, drawn as before", seed)
	}
}

// TestCrashCloneWithEveryNameAndWriteIsThePageCache: over a random
// workload, the clone that keeps every unsynced name and write is the tree
// as it is now, with or without the sizes kept apart from the data.
func TestCrashCloneWithEveryNameAndWriteIsThePageCache(t *testing.T) {
	for wseed := range uint64(8) {
		dir := t.TempDir()
		c := NewCrashFS(Default)
		open := seedWorkload(t, c, dir, wseed)
		live := readTree(t, dir)
		for _, sizes := range []KeepUnsynced{"", KeepNone, KeepAll} {
			require.Equal(t, live, cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 1, KeepUnsyncedNames: KeepAll, KeepUnsyncedSizes: sizes}),
				"workload seed %d, sizes %q", wseed, sizes)
		}
		for _, f := range open {
			require.NoError(t, f.Close())
		}
	}
}

// TestCrashCloneRefusesAnUnknownKeep: a KeepUnsynced that is none of its
// values is refused with an error naming the field and the value, and a
// drawn prefix without a Rand is refused too.
func TestCrashCloneRefusesAnUnknownKeep(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir, "f"), "x").Close()
	err := c.CrashClone(filepath.Join(t.TempDir(), "a"), CrashOptions{Root: dir, KeepUnsyncedNames: "some"})
	require.ErrorContains(t, err, `KeepUnsyncedNames "some"`)
	err = c.CrashClone(filepath.Join(t.TempDir(), "b"), CrashOptions{Root: dir, KeepUnsyncedSizes: "All"})
	require.ErrorContains(t, err, `KeepUnsyncedSizes "All"`)
	for _, opts := range []CrashOptions{{KeepUnsyncedNames: KeepPrefix}, {KeepUnsyncedSizes: KeepPrefix}, {KeepUnsyncedFraction: 1, KeepUnsyncedSizes: KeepPrefix}} {
		opts.Root = dir
		require.ErrorContains(t, c.CrashClone(filepath.Join(t.TempDir(), "c"), opts), "need a Rand", "%+v", opts)
	}
}

// TestASyncOfOneDirectoryMakesItsOwnNamesDurableOnly pins choices harsher
// than ext4 and xfs, which commit every change of names made so far with
// any directory sync (one journal): here a SyncDir makes durable the
// changes of its own directory only, so an earlier change in another
// directory may still be lost; and a rename from one directory into
// another is split by the sync of one of them, leaving the file under
// both names, or under neither, where those file systems move it whole.
// The store renames only within a directory (see "What the crash suites
// do not simulate" in docs/DESIGN.md).
func TestASyncOfOneDirectoryMakesItsOwnNamesDurableOnly(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	c := NewCrashFS(Default)
	require.NoError(t, MkdirAllDurable(c, a, 0o700))
	require.NoError(t, MkdirAllDurable(c, b, 0o700))
	opts := CrashOptions{Root: root}

	early := openRW(t, c, filepath.Join(a, "early"))
	writeAt(t, early, "e", 0)
	require.NoError(t, early.Sync())
	late := openRW(t, c, filepath.Join(b, "late"))
	writeAt(t, late, "l", 0)
	require.NoError(t, late.Sync())
	require.NoError(t, c.SyncDir(b))
	require.Equal(t, map[string]string{"b/late": "l"}, cloneTree(t, c, opts),
		"the sync of b leaves the earlier creation in a to the crash")
	require.NoError(t, c.SyncDir(a))

	require.NoError(t, c.Rename(filepath.Join(a, "early"), filepath.Join(b, "moved")))
	require.NoError(t, c.SyncDir(b))
	require.Equal(t, map[string]string{"a/early": "e", "b/late": "l", "b/moved": "e"}, cloneTree(t, c, opts),
		"with only its new directory synced, the moved file keeps its old name too")

	require.NoError(t, c.Rename(filepath.Join(b, "late"), filepath.Join(a, "back")))
	require.NoError(t, c.SyncDir(b))
	require.Equal(t, map[string]string{"a/early": "e", "b/moved": "e"}, cloneTree(t, c, opts),
		"with only its old directory synced, the moved file has no name")
}

// TestCrashCloneMayKeepAnySubsetOfTheUnsyncedNames: a file system with
// logs of its own per file or directory (btrfs's fsync log) may make a
// later change of names durable without an earlier one. KeepSubset keeps
// each change, a rename whole, on its own: every subset of them turns up
// over enough seeds, a later removal kept without an earlier one among
// them, and nothing else does (no rename split, no name from nowhere).
func TestCrashCloneMayKeepAnySubsetOfTheUnsyncedNames(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durable := map[string]string{"a": "a", "b": "b", "z": "z", "CURRENT": "v1"}
	for _, name := range sortedKeys(durable) {
		require.NoError(t, durableFile(t, c, filepath.Join(dir, name), durable[name]).Close())
	}
	require.NoError(t, c.SyncDir(dir))

	require.NoError(t, c.Remove(filepath.Join(dir, "a")))  // 1
	require.NoError(t, c.Remove(filepath.Join(dir, "b")))  // 2
	tmp := openRW(t, c, filepath.Join(dir, "CURRENT.tmp")) // 3
	writeAt(t, tmp, "v2", 0)
	require.NoError(t, tmp.Sync())
	require.NoError(t, tmp.Close())
	require.NoError(t, c.Rename(filepath.Join(dir, "CURRENT.tmp"), filepath.Join(dir, "CURRENT"))) // 4
	require.NoError(t, c.Remove(filepath.Join(dir, "z")))                                          // 5

	// Each change as it acts on a tree; a subset's tree is the durable
	// one with the changes kept applied in the order they were made.
	changes := []func(map[string]string){
		func(m map[string]string) { delete(m, "a") },
		func(m map[string]string) { delete(m, "b") },
		func(m map[string]string) { m["CURRENT.tmp"] = "v2" },
		func(m map[string]string) { delete(m, "CURRENT.tmp"); m["CURRENT"] = "v2" },
		func(m map[string]string) { delete(m, "z") },
	}
	var subsets []map[string]string
	for mask := range 1 << len(changes) {
		m := make(map[string]string)
		for k, v := range durable {
			m[k] = v
		}
		for i, change := range changes {
			if mask&(1<<i) != 0 {
				change(m)
			}
		}
		subsets = append(subsets, m)
	}
	seen := make([]bool, len(subsets))
	for seed := range uint64(600) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedNames: KeepSubset, Rand: newRand(seed)})
		found := false
		for i, want := range subsets {
			if equalTree(want, got) {
				seen[i], found = true, true
			}
		}
		require.True(t, found, "seed %d: %v is the tree of no subset of the changes", seed, got)
	}
	for i, ok := range seen {
		require.True(t, ok, "no clone kept exactly the subset %05b of the changes: %v", i, subsets[i])
	}
	// The state a prefix never gives and the store must survive: the
	// second removal kept, the first lost.
	require.True(t, seen[0b00010])

	require.Equal(t, subsets[len(subsets)-1], cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 1, KeepUnsyncedNames: KeepAll}))
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, subsets[len(subsets)-1], cloneTree(t, c, CrashOptions{KeepUnsyncedNames: KeepSubset, Rand: newRand(1)}),
		"a directory sync leaves no change to draw")
}

// TestCrashCloneRefusesASubsetOfSizes: KeepSubset is for names only (a
// file's size changes out of their order are no state a file system
// leaves), and a subset is drawn, so it needs a Rand.
func TestCrashCloneRefusesASubsetOfSizes(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir, "f"), "x").Close()
	err := c.CrashClone(filepath.Join(t.TempDir(), "a"), CrashOptions{Root: dir, KeepUnsyncedSizes: KeepSubset, Rand: newRand(1)})
	require.ErrorContains(t, err, `KeepUnsyncedSizes "subset"`)
	err = c.CrashClone(filepath.Join(t.TempDir(), "b"), CrashOptions{Root: dir, KeepUnsyncedNames: KeepSubset})
	require.ErrorContains(t, err, "need a Rand")
}
