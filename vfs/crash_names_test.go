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
