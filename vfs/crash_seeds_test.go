package vfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// seedWorkload runs a random workload, fixed by seed, through c in dir:
// creations, writes that overwrite and that extend, truncations, syncs,
// renames, removals and directory syncs, ending with unsynced writes and
// unsynced changes of names. It returns the files it left open.
func seedWorkload(t *testing.T, c *CrashFS, dir string, seed uint64) []File {
	t.Helper()
	rng := newRand(seed)
	names := []string{"a", "b", "c", "d", "e"}
	var open []File
	for step := 0; step < 80; step++ {
		name := filepath.Join(dir, names[rng.IntN(len(names))])
		switch rng.IntN(8) {
		case 0, 1, 2: // write, creating the file if need be
			f, err := c.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
			require.NoError(t, err)
			open = append(open, f)
			data := make([]byte, 1+rng.IntN(2*crashBlockSize))
			for k := range data {
				data[k] = byte('a' + rng.IntN(26))
			}
			writeAt(t, f, string(data), int64(rng.IntN(3*crashBlockSize)))
		case 3:
			if len(open) > 0 {
				require.NoError(t, open[rng.IntN(len(open))].Truncate(int64(rng.IntN(4*crashBlockSize))))
			}
		case 4:
			if len(open) > 0 {
				require.NoError(t, open[rng.IntN(len(open))].Sync())
			}
		case 5:
			if _, err := os.Stat(name); err == nil {
				require.NoError(t, c.Rename(name, filepath.Join(dir, names[rng.IntN(len(names))])))
			}
		case 6:
			if _, err := os.Stat(name); err == nil {
				require.NoError(t, c.Remove(name))
			}
		case 7:
			require.NoError(t, c.SyncDir(dir))
		}
	}
	return open
}

// treeDigest is a digest of the files of a clone, by relative name.
func treeDigest(files map[string]string) []byte {
	h := sha256.New()
	for _, name := range sortedKeys(files) {
		fmt.Fprintf(h, "%s\x00%d\x00%s", name, len(files[name]), files[name])
	}
	return h.Sum(nil)
}

// TestCrashCloneSeedsKeepTheirMeaning: a seed replays the clone it gave
// before CrashOptions gained KeepUnsyncedNames and KeepUnsyncedSizes, for
// the options a crash suite could name then: left at their zero values,
// the new fields draw nothing from Rand and change nothing. The digests
// were taken from the clones of seedWorkload before those fields existed.
func TestCrashCloneSeedsKeepTheirMeaning(t *testing.T) {
	want := map[uint64]string{
		1: "f2fa04501fbec789",
		2: "840165c1b3a7b9e1",
		3: "3330b2995caffea9",
	}
	for wseed := range want {
		dir := t.TempDir()
		c := NewCrashFS(Default)
		open := seedWorkload(t, c, dir, wseed)
		all := sha256.New()
		distinct := map[string]bool{}
		for seed := range uint64(6) {
			for _, opts := range []CrashOptions{
				{},
				{KeepUnsyncedFraction: 0.5, TearLastWrite: true},
				{KeepUnsyncedFraction: 1},
				{KeepUnsyncedFraction: 0.5, BlockSize: 512},
				{KeepUnsyncedFraction: 0.3},
			} {
				opts.Rand = newRand(seed)
				d := treeDigest(cloneTree(t, c, opts))
				distinct[string(d)] = true
				all.Write(d)
			}
		}
		for _, f := range open {
			require.NoError(t, f.Close())
		}
		require.Greater(t, len(distinct), 10, "workload seed %d: the clones hardly differ; the workload tests nothing", wseed)
		require.Equal(t, want[wseed], hex.EncodeToString(all.Sum(nil))[:16], "workload seed %d", wseed)
	}
}
