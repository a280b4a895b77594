package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// plWorkload is a short deterministic workload over fs: single and grouped
// appends across several rotations, and one removal of old segments. It
// stops at the first error (the file system "lost power") and returns the
// appends that were acknowledged, and the position below which segments
// may have been removed.
func plWorkload(dir string, fs vfs.FS) (acked []entry, removedBelow Position, err error) {
	l, err := Open(dir, Options{FS: fs, SegmentBytes: 1024})
	if err != nil {
		return nil, 0, err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	for i := 0; i < 45; {
		n := 1 + i%3
		var recs [][]byte
		for j := 0; j < n; j++ {
			recs = append(recs, record(i+j))
		}
		pos, err := l.Append(recs...)
		if err != nil {
			return acked, removedBelow, err
		}
		for j := range recs {
			acked = append(acked, entry{pos[j], recs[j]})
		}
		i += n
		if i == 30 {
			removedBelow = acked[15].pos
			if _, err := l.RemoveBelow(removedBelow); err != nil {
				return acked, removedBelow, err
			}
		}
	}
	return acked, removedBelow, nil
}

// checkAfterPowerLoss opens a crash clone and checks the power-loss
// invariants: it opens (no corruption), every acknowledged record at or
// after the removal point is there at its position, and every record found
// is one the workload appended, in the order it appended them.
func checkAfterPowerLoss(t *testing.T, dir string, acked []entry, removedBelow Position, what string) []entry {
	t.Helper()
	l, err := Open(dir, Options{SegmentBytes: 1024})
	require.NoError(t, err, what)
	got := readAll(t, l)
	require.NoError(t, l.Close())
	found := map[Position]string{}
	last := -1
	for _, e := range got {
		var i int
		_, err := fmt.Sscanf(string(e.rec), "record-%05d:", &i)
		require.NoError(t, err, "%s: unknown record %q", what, e.rec)
		require.Equal(t, string(record(i)), string(e.rec), what)
		require.Greater(t, i, last, "%s: records out of order", what)
		last = i
		found[e.pos] = string(e.rec)
	}
	for _, e := range acked {
		if removedBelow != 0 && e.pos.Segment() < removedBelow.Segment() {
			continue
		}
		require.Equal(t, string(e.rec), found[e.pos], "%s: acknowledged record at %v lost", what, e.pos)
	}
	return got
}

// TestPowerLossAtEveryOperation runs the workload through a CrashFS that
// loses power after its k-th mutating operation, for every k, clones the
// directory to what the device could hold (synced bytes, plus a seeded share
// of unsynced 4 KiB blocks, the last write possibly torn), and checks that
// the clone opens to every acknowledged record. It then crashes recovery
// itself once at a random operation and checks again.
func TestPowerLossAtEveryOperation(t *testing.T) {
	dry := vfs.NewCrashFS(vfs.Default)
	_, _, err := plWorkload(t.TempDir(), dry)
	require.NoError(t, err)
	total := dry.Ops()
	t.Logf("workload: %d mutating operations", total)
	rng := seededRand(t)
	step := int64(1)
	if testing.Short() {
		step = 7
	}
	for k := int64(0); k <= total; k += step {
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		dir := t.TempDir()
		acked, removedBelow, _ := plWorkload(dir, cfs)
		clone := filepath.Join(t.TempDir(), "clone")
		opts := vfs.CrashOptions{Root: dir, Rand: rand.New(rand.NewPCG(rng.Uint64(), 1))}
		switch k % 3 {
		case 1:
			opts.KeepUnsyncedFraction = 0.5
			opts.TearLastWrite = true
		case 2:
			opts.KeepUnsyncedFraction = 1
		}
		require.NoError(t, cfs.CrashClone(clone, opts))
		what := fmt.Sprintf("crash after op %d of %d (keep %.1f)", k, total, opts.KeepUnsyncedFraction)
		checkAfterPowerLoss(t, clone, acked, removedBelow, what)

		// Crash the recovery of the clone, then recover that.
		rfs := vfs.NewCrashFS(vfs.Default)
		rfs.CrashAfter(rng.Int64N(8))
		if l, err := Open(clone, Options{FS: rfs, SegmentBytes: 1024}); err == nil {
			_ = l.Close()
		}
		clone2 := filepath.Join(t.TempDir(), "clone2")
		require.NoError(t, rfs.CrashClone(clone2, vfs.CrashOptions{Root: clone, Rand: rand.New(rand.NewPCG(rng.Uint64(), 2))}))
		checkAfterPowerLoss(t, clone2, acked, removedBelow, what+", then during recovery")
	}
}
