package vfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashCloneMayKeepASizeWithoutItsData: on a file system that commits
// metadata apart from data (ext4 with data=writeback, xfs), the size change
// of an appending write may reach the device while its blocks do not: the
// file comes back longer, the new range reading as zeros. The size changes
// are committed in order, so a power loss may also keep an earlier one
// only, and the blocks that did reach the device past it are lost.
func TestCrashCloneMayKeepASizeWithoutItsData(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "f"), "synced")
	defer f.Close()
	writeAt(t, f, "+tail", 6)            // extends the file to 11 bytes
	writeAt(t, f, "X", 2*crashBlockSize) // to 8193, leaving a hole
	cur := "synced+tail" + strings.Repeat("\x00", 2*crashBlockSize-11) + "X"

	require.Equal(t, "synced", cloneTree(t, c, keepNone)["f"], "by default the size follows the data")
	zeros := func(n int) string { return "synced" + strings.Repeat("\x00", n-6) }
	require.Equal(t, zeros(len(cur)), cloneTree(t, c, CrashOptions{KeepUnsyncedSizes: KeepAll})["f"],
		"every size change kept, no block: the file is as long as now, zeros past the synced bytes")
	require.Equal(t, cur, cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 1, KeepUnsyncedSizes: KeepAll})["f"])

	// A prefix of the size changes: 6, 11 or 8193 bytes.
	sizes := []int{6, 11, len(cur)}
	for _, keep := range []float64{0, 1} {
		seen := map[int]bool{}
		for seed := range uint64(100) {
			got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: keep, KeepUnsyncedSizes: KeepPrefix, Rand: newRand(seed)})["f"]
			require.Contains(t, sizes, len(got), "keep %v seed %d: a size no prefix of the size changes gives", keep, seed)
			want := zeros(len(got)) // no block kept
			if keep == 1 {
				want = cur[:len(got)] // every block kept, those past the end lost
			}
			require.Equal(t, want, got, "keep %v seed %d", keep, seed)
			seen[len(got)] = true
		}
		require.Len(t, seen, len(sizes), "keep %v: not every prefix of the size changes was kept by some seed: %v", keep, seen)
	}
}

// TestCrashCloneKeepsTruncationsWithTheSizeChangesInOrder: with the size
// changes kept apart from the data, a truncation is one of them: kept
// exactly when every size change before it is, and a range it cut off and
// a later write extended over again reads as zeros where the write's
// blocks are lost.
func TestCrashCloneKeepsTruncationsWithTheSizeChangesInOrder(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "f"), "0123456789")
	defer f.Close()
	require.NoError(t, f.Truncate(4))
	writeAt(t, f, "AB", 8)

	noData := map[string]bool{"0123456789": true, "0123": true, "0123\x00\x00\x00\x00\x00\x00": true}
	allData := map[string]bool{"01234567AB": true, "0123": true, "0123\x00\x00\x00\x00AB": true}
	for keep, want := range map[float64]map[string]bool{0: noData, 1: allData} {
		seen := map[string]bool{}
		for seed := range uint64(100) {
			got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: keep, KeepUnsyncedSizes: KeepPrefix, Rand: newRand(seed)})["f"]
			require.True(t, want[got], "keep %v seed %d: %q is no prefix of the size changes", keep, seed, got)
			seen[got] = true
		}
		require.Equal(t, want, seen, "keep %v: not every prefix was kept by some seed", keep)
	}
}

// TestCrashCloneKeepsTheSizeOfAFileNoSyncReached: a file created, written
// and named, with neither its data nor its directory synced, may come back
// named and at its size with none of its data: every change of names and
// of sizes committed, no data block written.
func TestCrashCloneKeepsTheSizeOfAFileNoSyncReached(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := openRW(t, c, filepath.Join(dir, "copy"))
	defer f.Close()
	writeAt(t, f, "copied bytes", 0)
	require.Equal(t, map[string]string{"copy": ""}, cloneTree(t, c, CrashOptions{KeepUnsyncedNames: KeepAll}),
		"its name kept, and its size following its data: empty")
	require.Equal(t, map[string]string{"copy": strings.Repeat("\x00", 12)},
		cloneTree(t, c, CrashOptions{KeepUnsyncedNames: KeepAll, KeepUnsyncedSizes: KeepAll}))
	require.Equal(t, map[string]string{}, cloneTree(t, c, CrashOptions{KeepUnsyncedSizes: KeepAll}),
		"its size kept, its name not")
}
