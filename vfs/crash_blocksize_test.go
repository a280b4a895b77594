package vfs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestABlockSizeOf512KeepsSomeSectorsOfAPageAndNotOthers: BlockSize "512
// models a device that, losing power in the middle of a page's writeback,
// keeps some of its sectors and not others". Each sector of an unsynced
// page is kept or lost whole, and, over a few seeds, one page shows both.
func TestABlockSizeOf512KeepsSomeSectorsOfAPageAndNotOthers(t *testing.T) {
	const sector = 512
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "seg"), strings.Repeat("o", crashBlockSize))
	defer f.Close()
	writeAt(t, f, strings.Repeat("n", crashBlockSize), 0)
	mixed := 0
	for seed := range uint64(8) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, BlockSize: sector, Rand: newRand(seed)})["seg"]
		require.Len(t, got, crashBlockSize)
		var kept, lost int
		for s := 0; s < crashBlockSize; s += sector {
			switch got[s : s+sector] {
			case strings.Repeat("n", sector):
				kept++
			case strings.Repeat("o", sector):
				lost++
			default:
				t.Fatalf("seed %d: the sector at %d is neither written nor as it was: %q", seed, s, got[s:s+sector])
			}
		}
		if kept > 0 && lost > 0 {
			mixed++
		}
	}
	require.Positive(t, mixed, "no clone kept some sectors of the page and lost others")
}
