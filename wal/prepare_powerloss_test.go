package wal

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// checkOpenLeavesOnly opens dir (segments of size bytes), holding the
// preparer back, and checks what Open left there: segments without a gap,
// at most maxSpares spares, each of full size, and no other temporary file.
// It returns the open log, its preparer let go.
func checkOpenLeavesOnly(t *testing.T, dir string, size int64, what string) *Log {
	t.Helper()
	fs := &pauseFS{FS: vfs.Default, release: make(chan struct{})}
	l, err := Open(dir, Options{FS: fs, SegmentBytes: size})
	if err != nil {
		close(fs.release)
	}
	require.NoError(t, err, what)
	defer close(fs.release)
	requireTidyDir(t, dir, size, true, what)
	return l
}

// TestOpenAfterAPowerLossKeepsOnlyWhatItShould loses power at
// every step of plWorkload (rotations into new and into reused files, the
// retirement of old segments) and checks, in each clone (synced bytes
// only, and one of the states that keep names and sizes apart from the
// data), that Open removes every temporary file but full-size spares (at
// most maxSpares); that the clone holds every acknowledged record and
// nothing stale; and that the log then goes on through rotations that
// reuse those spares and keeps every record across a reopen.
func TestOpenAfterAPowerLossKeepsOnlyWhatItShould(t *testing.T) {
	root := shmDir(t)
	dry := vfs.NewCrashFS(vfs.Default)
	_, _, err := plWorkload(freshDir(t, root), dry, nil)
	require.NoError(t, err)
	total := dry.Ops()
	t.Logf("workload: %d mutating operations", total)
	rng := seededRand(t)
	step := int64(1)
	if testing.Short() {
		step = 7
	}
	spareSeen := false
	for k := int64(0); k <= total; k += step {
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		dir := freshDir(t, root)
		acked, removedBelow, _ := plWorkload(dir, cfs, nil)
		ms := metadataStates[k%int64(len(metadataStates))]
		for _, o := range []struct {
			name string
			opts vfs.CrashOptions
		}{
			{"synced only", vfs.CrashOptions{Root: dir}},
			{ms.Name, ms.Options(dir, rand.New(rand.NewPCG(rng.Uint64(), 4)))},
		} {
			what := fmt.Sprintf("crash after op %d of %d (%s)", k, total, o.name)
			clone := filepath.Join(freshDir(t, root), "clone")
			require.NoError(t, cfs.CrashClone(clone, o.opts), what)
			if names, _ := filepath.Glob(filepath.Join(clone, sparePrefix+"*")); len(names) > 0 {
				spareSeen = true
			}
			l := checkOpenLeavesOnly(t, clone, 1024, what)
			require.NoError(t, l.Close(), what)
			got := checkAfterPowerLoss(t, clone, acked, removedBelow, what)

			// The log goes on, into the spares it kept.
			l = mustOpen(t, clone, Options{SegmentBytes: 1024})
			more := appendRecords(t, l, 1000, 40)
			require.NoError(t, l.Close(), what)
			l = mustOpen(t, clone, Options{SegmentBytes: 1024})
			requireEntries(t, append(got, more...), readAll(t, l))
			require.NoError(t, l.Close(), what)
		}
	}
	require.True(t, spareSeen, "no clone held a spare")
}
