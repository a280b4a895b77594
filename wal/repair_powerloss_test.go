package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// repairsOf names what Open repaired in a log: a torn tail zeroed, an
// empty segment after an unsealed one removed, temporary files removed.
func repairsOf(r Recovery, tmp bool) []string {
	var out []string
	if r.TornTail != nil {
		out = append(out, "torn tail")
	}
	if len(r.RemovedEmpty) > 0 {
		out = append(out, "empty segment")
	}
	if tmp {
		out = append(out, "temporary file")
	}
	return out
}

// hasTmp reports whether dir holds a temporary file other than a spare,
// which Open removes.
func hasTmp(t *testing.T, dir string) bool {
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range names {
		if strings.HasSuffix(e.Name(), tmpSuffix) && !strings.HasPrefix(e.Name(), sparePrefix) {
			return true
		}
	}
	return false
}

// secondLife opens dir through fs, appends three records (each
// acknowledged once Append returns) and closes the log. It stops at the
// first error and returns what was acknowledged.
func secondLife(dir string, fs vfs.FS) []entry {
	l, err := Open(dir, Options{FS: fs, SegmentBytes: 1024})
	if err != nil {
		return nil
	}
	defer func() { _ = l.Close() }()
	var acked []entry
	for i := 2000; i < 2003; i++ {
		pos, err := l.Append(record(i))
		if err != nil {
			break
		}
		acked = append(acked, entry{pos[0], record(i)})
	}
	return acked
}

// shmDir returns a fresh directory on tmpfs when the machine has one (the
// sweep below fdatasyncs a great deal and checks logic, not the disk),
// else under t.TempDir.
func shmDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "walbroker-wal-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// freshDir makes a new, empty directory under root.
func freshDir(t *testing.T, root string) string {
	d, err := os.MkdirTemp(root, "d-")
	require.NoError(t, err)
	return d
}

// copyInto copies the regular files of src, but the lock, into a new
// directory under root. src may be a live log's: a temporary file (a spare
// or a segment being prepared) that the preparer renamed between the
// listing and the read is no part of the log, and is left out.
func copyInto(t *testing.T, root, src string) string {
	t.Helper()
	dst, err := os.MkdirTemp(root, "copy-")
	require.NoError(t, err)
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == lockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(e.Name(), tmpSuffix) {
			continue
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600))
	}
	return dst
}

// TestPowerLossDuringOpensRepairs: the power fails after each operation of
// the workload; where the clone needs Open to repair it (a torn tail to
// zero, an empty segment a rotation left after an unsealed one, a
// segment file whose preparation was cut short), the power fails again at
// every operation of that Open, of three appends after it and of the
// Close. Each clone of that must open, hold every record the repaired
// log held (the repair drops only bytes no record was acknowledged in)
// and every record acknowledged in either life, and no record the
// workload did not append, in the order it appended them.
func TestPowerLossDuringOpensRepairs(t *testing.T) {
	root := shmDir(t)
	dry := vfs.NewCrashFS(vfs.Default)
	_, _, err := plWorkload(filepath.Join(root, "dry"), dry, nil)
	require.NoError(t, err)
	total := dry.Ops()
	rng := seededRand(t)
	// Each repair is swept in full for the first few clones that need it.
	perKind := 4
	if testing.Short() {
		perKind = 1
	}
	swept := map[string]int{}
	crashes := 0
	for k := int64(0); k <= total; k++ {
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		run := filepath.Join(root, fmt.Sprintf("run-%d", k))
		dir := filepath.Join(run, "log")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		acked, removedBelow, _ := plWorkload(dir, cfs, nil)
		for c, opts := range []vfs.CrashOptions{
			{Root: dir},
			{Root: dir, KeepUnsyncedFraction: 0.5, TearLastWrite: true, Rand: rand.New(rand.NewPCG(rng.Uint64(), 3))},
		} {
			clone := filepath.Join(run, fmt.Sprintf("clone-%d", c))
			require.NoError(t, cfs.CrashClone(clone, opts))
			probe := copyInto(t, run, clone)
			tmp := hasTmp(t, clone)
			l, err := Open(probe, Options{SegmentBytes: 1024})
			require.NoError(t, err)
			repairs := repairsOf(l.Recovery(), tmp)
			held := readAll(t, l)
			require.NoError(t, l.Close())
			var fresh []string
			for _, r := range repairs {
				if swept[r] < perKind {
					fresh = append(fresh, r)
				}
			}
			if len(fresh) == 0 {
				continue
			}
			for _, r := range repairs {
				swept[r]++
			}
			// How many operations the second life makes, then a power
			// loss after each.
			count := vfs.NewCrashFS(vfs.Default)
			secondLife(copyInto(t, run, clone), count)
			for j := int64(0); j <= count.Ops(); j++ {
				what := fmt.Sprintf("power lost after op %d of %d, clone %d (%s), then after op %d of %d of the open that repairs it",
					k, total, c, strings.Join(repairs, ", "), j, count.Ops())
				again := copyInto(t, run, clone)
				rfs := vfs.NewCrashFS(vfs.Default)
				rfs.CrashAfter(j)
				more := secondLife(again, rfs)
				clone2 := again + "-clone"
				require.NoError(t, rfs.CrashClone(clone2, vfs.CrashOptions{Root: again, KeepUnsyncedFraction: 0.5, TearLastWrite: true,
					Rand: rand.New(rand.NewPCG(rng.Uint64(), 4))}))
				got := checkAfterPowerLoss(t, clone2, append(append([]entry(nil), acked...), more...), removedBelow, what)
				found := map[Position]string{}
				for _, e := range got {
					found[e.pos] = string(e.rec)
				}
				for _, e := range held {
					require.Equal(t, string(e.rec), found[e.pos], "%s: the repaired log held the record at %v, the power loss took it", what, e.pos)
				}
				crashes++
			}
		}
		require.NoError(t, os.RemoveAll(run))
	}
	t.Logf("%d power losses during an open's repairs: %v clones swept", crashes, swept)
	for _, r := range []string{"torn tail", "empty segment", "temporary file"} {
		require.Positive(t, swept[r], "no clone needed its open to repair a %s", r)
	}
}
