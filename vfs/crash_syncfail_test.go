package vfs

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashFSWritesAFailedFdatasyncCoveredStayLost: on Linux (ext4, xfs) a
// writeback error fails the fdatasync and leaves the pages clean in the
// page cache: reads still see the new bytes, but nothing writes them to the
// device again, so a later fdatasync, which succeeds, does not make them
// durable. Only bytes written again after the failure are. The CrashFS
// over a file system whose fdatasync failed must leave that state.
func TestCrashFSWritesAFailedFdatasyncCoveredStayLost(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	name := filepath.Join(dir, "seg")
	f := durableFile(t, c, name, "synced..")
	writeAt(t, f, "LOST", 0)
	writeAt(t, f, "-tail", 8)
	ffs.Inject(Rule{Op: OpSync, Times: 1})
	require.Error(t, f.Sync())
	require.NoError(t, f.Sync(), "the next fdatasync succeeds: nothing is dirty")

	got := make([]byte, 13)
	_, err := f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, "LOSTed..-tail", string(got), "the page cache keeps the bytes")
	require.Equal(t, map[string]string{"seg": "synced.."}, cloneTree(t, c, keepNone), "a power loss after the failed fdatasync")
	require.Equal(t, map[string]string{"seg": "synced.."}, cloneTree(t, c, keepAll), "pages a failed writeback left clean are never written back")

	// A page written again is dirty again: the next fdatasync writes it
	// whole, with the bytes of the failed write it holds.
	writeAt(t, f, "LO", 0)
	require.NoError(t, f.Sync())
	require.Equal(t, map[string]string{"seg": "LOSTed.."}, cloneTree(t, c, keepNone))
}

// TestCrashFSAFailedFdatasyncLosesOnlyThePagesNotWrittenAgain: after the
// failure, the pages written again go to the device with the next
// fdatasync; the others keep what the device held before.
func TestCrashFSAFailedFdatasyncLosesOnlyThePagesNotWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	name := filepath.Join(dir, "seg")
	f := durableFile(t, c, name, strings.Repeat("o", 3*crashBlockSize))
	writeAt(t, f, strings.Repeat("x", 3*crashBlockSize), 0)
	ffs.Inject(Rule{Op: OpSync, Times: 1})
	require.Error(t, f.Sync())
	writeAt(t, f, "y", 2*crashBlockSize+10) // the third page only
	require.NoError(t, f.Sync())
	want := strings.Repeat("o", 2*crashBlockSize) + strings.Repeat("x", 10) + "y" + strings.Repeat("x", crashBlockSize-11)
	require.Equal(t, map[string]string{"seg": want}, cloneTree(t, c, keepNone))
}

// TestAPageWrittenAgainAfterAFailedFdatasyncSurvivesWhole: "Only the pages
// written again after the failure can become durable (whole: writeback is
// by page)". A page written again is dirty, whole, with the bytes of the
// failed write it holds: a power loss leaves it as it was durable, or
// whole as the page cache holds it, never the new byte beside the old
// durable bytes of the same page, which no device ever held.
func TestAPageWrittenAgainAfterAFailedFdatasyncSurvivesWhole(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	name := filepath.Join(dir, "seg")
	f := durableFile(t, c, name, strings.Repeat("o", 3*crashBlockSize))
	defer f.Close()
	writeAt(t, f, strings.Repeat("x", 3*crashBlockSize), 0)
	ffs.Inject(Rule{Op: OpSync, Times: 1})
	require.Error(t, f.Sync())
	writeAt(t, f, "y", 2*crashBlockSize+10) // the third page is dirty again
	durable := strings.Repeat("o", 3*crashBlockSize)
	rewritten := strings.Repeat("o", 2*crashBlockSize) + strings.Repeat("x", 10) + "y" + strings.Repeat("x", crashBlockSize-11)
	require.Equal(t, durable, cloneTree(t, c, keepNone)["seg"])
	require.Equal(t, rewritten, cloneTree(t, c, keepAll)["seg"],
		"the third page, with every unsynced write kept, is not the page the page cache would write back")
	for seed := range uint64(8) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})["seg"]
		require.Contains(t, []string{durable, rewritten}, got, "seed %d", seed)
	}
}

// TestAFailedFdatasyncMayHaveWrittenSomeOfItsPages: a writeback error
// fails the fdatasync, but each page's I/O fails or succeeds on its own,
// so the device may hold some of the pages it was to write, as the page
// cache held them, and not others; the file's durable size stays, since
// the fdatasync committed no metadata. With SetFailedWriteback the CrashFS
// leaves each such state, chosen once at the failure: every clone after
// it, and an eviction, agree on it, and a later fdatasync does not change
// it.
func TestAFailedFdatasyncMayHaveWrittenSomeOfItsPages(t *testing.T) {
	page := func(b string) string { return strings.Repeat(b, crashBlockSize) }
	durable := page("o") + page("o") + page("o")
	seen := map[string]bool{}
	for seed := range uint64(24) {
		dir := t.TempDir()
		ffs := NewFaultFS(Default)
		c := NewCrashFS(ffs)
		require.NoError(t, c.SetFailedWriteback(0.5, newRand(seed)))
		f := durableFile(t, c, filepath.Join(dir, "seg"), durable)
		writeAt(t, f, page("x")+page("x")+page("x")+page("x"), 0) // a page past the durable end too
		ffs.Inject(Rule{Op: OpSync, Times: 1})
		require.Error(t, f.Sync())

		got := cloneTree(t, c, keepNone)["seg"]
		require.Len(t, got, len(durable), "seed %d: the failed fdatasync committed no size", seed)
		for p := range 3 {
			require.Contains(t, []string{page("o"), page("x")}, got[p*crashBlockSize:(p+1)*crashBlockSize], "seed %d, page %d", seed, p)
		}
		seen[got] = true
		require.Equal(t, got, cloneTree(t, c, keepAll)["seg"], "seed %d: the pages a failed writeback left clean are never written back", seed)
		require.NoError(t, c.EvictFailedWrites())
		read := make([]byte, len(durable))
		_, err := f.ReadAt(read, 0)
		require.NoError(t, err)
		require.Equal(t, got, string(read), "seed %d: an eviction reads what the device holds", seed)
		require.NoError(t, f.Sync())
		require.Equal(t, got, cloneTree(t, c, keepNone)["seg"], "seed %d: the next fdatasync writes nothing", seed)
		require.NoError(t, f.Close())
	}
	require.Greater(t, len(seen), 4, "the pages that reached the device differ from one failure to another")
	require.True(t, seen[durable], "some failures wrote none of the pages")

	c := NewCrashFS(Default)
	require.Error(t, c.SetFailedWriteback(0.5, nil))
	require.Error(t, c.SetFailedWriteback(math.NaN(), newRand(1)))
	require.Error(t, c.SetFailedWriteback(1.5, nil))
	require.NoError(t, c.SetFailedWriteback(1, nil))
}
