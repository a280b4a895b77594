package vfs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashFSCrashAfterANegativeCountCrashesAtOnce: a negative k counts as
// 0, so the very next mutating operation is refused.
func TestCrashFSCrashAfterANegativeCountCrashesAtOnce(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	c.CrashAfter(-1)
	require.True(t, c.Crashed())
	_, err := c.OpenFile(filepath.Join(dir, "seg"), os.O_CREATE|os.O_RDWR, 0o600)
	require.ErrorIs(t, err, ErrCrashed)
	require.Zero(t, c.Ops())
	require.NoFileExists(t, filepath.Join(dir, "seg"))
}

// TestCrashFSAFileCreatedAndRemovedUnsyncedMayComeBack: neither the
// creation nor the removal was made durable by a SyncDir, so a crash that
// keeps the creation alone leaves the file, with its synced data, even
// though no name of it is durable.
func TestCrashFSAFileCreatedAndRemovedUnsyncedMayComeBack(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "seg")
	f := openRW(t, c, name)
	writeAt(t, f, "data", 0)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, c.Remove(name))

	seen := make(map[string]bool)
	for seed := range uint64(32) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, Rand: newRand(seed)})
		content, ok := got["seg"]
		if !ok {
			content = "(none)"
		}
		seen[content] = true
	}
	require.Len(t, seen, 2, "only the whole file or no file: %v", seen)
	require.True(t, seen["data"], "no crash kept the creation without the removal: %v", seen)
	require.True(t, seen["(none)"], "no crash dropped the file: %v", seen)
	require.Empty(t, cloneTree(t, c, keepAll), "at 1 no unsynced name is kept")
}

// TestCrashFSKeepUnsyncedFractionIsTheChanceABlockSurvives: each block of
// an unsynced write survives with the probability asked for, not with
// some fixed one.
func TestCrashFSKeepUnsyncedFractionIsTheChanceABlockSurvives(t *testing.T) {
	const blocks = 200
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), strings.Repeat("o", blocks*crashBlockSize))
	writeAt(t, f, strings.Repeat("x", blocks*crashBlockSize), 0)
	for _, fraction := range []float64{0.1, 0.9} {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: fraction, Rand: newRand(7)})["seg"]
		require.Len(t, got, blocks*crashBlockSize)
		kept := strings.Count(got, strings.Repeat("x", crashBlockSize))
		require.Equal(t, kept*crashBlockSize, strings.Count(got, "x"), "blocks survive whole")
		require.InDelta(t, fraction*blocks, kept, 0.1*blocks, "fraction %v", fraction)
	}
}

// TestCrashFSBlockSizeIsTheUnitThatSurvives: with BlockSize 512 an
// unsynced page can come back with some of its sectors and not others,
// each sector whole; a negative BlockSize is refused.
func TestCrashFSBlockSizeIsTheUnitThatSurvives(t *testing.T) {
	const sectors = 400
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), strings.Repeat("o", sectors*512))
	writeAt(t, f, strings.Repeat("x", sectors*512), 0)
	got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, BlockSize: 512, Rand: newRand(9)})["seg"]
	require.Len(t, got, sectors*512)
	mixedPages := 0
	for p := 0; p < len(got); p += crashBlockSize {
		page := got[p : p+crashBlockSize]
		for s := 0; s < len(page); s += 512 {
			sector := page[s : s+512]
			require.True(t, sector == strings.Repeat("x", 512) || sector == strings.Repeat("o", 512),
				"sector at %d is torn", p+s)
		}
		if strings.Contains(page, "x") && strings.Contains(page, "o") {
			mixedPages++
		}
	}
	require.Positive(t, mixedPages, "some page kept some of its sectors and lost others")
	require.InDelta(t, sectors/2, strings.Count(got, "x")/512, 0.15*sectors)

	require.ErrorContains(t, c.CrashClone(filepath.Join(t.TempDir(), "c"), CrashOptions{Root: dir, BlockSize: -1}), "BlockSize -1 is negative")
}

// TestCrashFSAFailedSyncDirMakesNoNameDurable: only a successful SyncDir
// makes the names of its directory durable.
func TestCrashFSAFailedSyncDirMakesNoNameDurable(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	f := openRW(t, c, filepath.Join(dir, "seg"))
	writeAt(t, f, "data", 0)
	require.NoError(t, f.Sync())
	ffs.Inject(Rule{Op: OpSyncDir, Times: 1})
	require.ErrorIs(t, c.SyncDir(dir), syscall.EIO)
	require.Empty(t, cloneTree(t, c, keepNone), "the failed SyncDir made the creation durable")
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{"seg": "data"}, cloneTree(t, c, keepNone))
}
