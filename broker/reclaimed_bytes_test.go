package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// segmentFileSizes returns the log segment files in dir, by name, with their
// sizes.
func segmentFileSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	out := map[string]int64{}
	for _, n := range names {
		fi, err := os.Stat(n)
		require.NoError(t, err)
		out[filepath.Base(n)] = fi.Size()
	}
	return out
}

// goneBytes is the size of the files of before no longer in after.
func goneBytes(before, after map[string]int64) int64 {
	var n int64
	for name, size := range before {
		if _, ok := after[name]; !ok {
			n += size
		}
	}
	return n
}

// faultyManualStore opens a store of the smallest segments in a temporary
// directory, through a FaultFS and with no background maintenance, and
// returns them with a policy of payloads up to 1 KiB.
func faultyManualStore(t *testing.T) (string, *vfs.FaultFS, *Store, PolicyValue) {
	t.Helper()
	dir := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := Options{Now: func() time.Time { return now }, SegmentBytes: MinSegmentBytes, FS: ffs}
	opts.manualMaintenance = true
	s, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return dir, ffs, s, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024}
}

// StoreStats.BytesReclaimed counts "segment files removed since open",
// each as it goes: those a removal that failed part way had removed
// already, and the ones it left on disk when the next removal takes them.
func TestBytesReclaimedCountsEverySegmentFileRemoved(t *testing.T) {
	dir, ffs, s, pol := faultyManualStore(t)
	churnTo(t, s, mustQueue(t, s, "churn", pol), 6)
	before := segmentFileSizes(t, dir)

	// No victim becomes a spare (each is removed), and the second
	// removal of a segment fails.
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, Match: func(n string) bool { return strings.Contains(filepath.Base(n), "spare-") }})
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Match: func(n string) bool { return strings.HasSuffix(n, ".seg") }, Nth: 2})
	err := s.Maintain()
	require.Error(t, err, "one segment could not be removed")
	after := segmentFileSizes(t, dir)
	gone := goneBytes(before, after)
	require.Positive(t, gone, "the round removed a segment file before the failure")
	assert.Equal(t, gone, s.Stats().BytesReclaimed, "BytesReclaimed after a removal that failed part way: %d bytes of segment files are gone", gone)

	ffs.Clear()
	churnTo(t, s, mustQueue(t, s, "churn", pol), s.log.Stats().LastSegment+2)
	mid := segmentFileSizes(t, dir) // the leftovers, and the segments since
	require.NoError(t, s.Maintain(), "the next removal removes the leftovers first")
	final := segmentFileSizes(t, dir)
	for name := range after {
		require.NotContains(t, final, name, "a leftover of the failed removal is removed")
	}
	assert.Equal(t, gone+goneBytes(mid, final), s.Stats().BytesReclaimed, "BytesReclaimed once the leftovers are removed too")
}

// "MaintenanceStopped is why checkpoints, and with them the removal of old
// segments, stopped": after a failed checkpoint no round removes segments
// or copies records forward, whether or not a checkpoint is due in it.
func TestNoReclamationAfterMaintenanceStopped(t *testing.T) {
	ctx := context.Background()
	_, ffs, s, pol := faultyManualStore(t)
	jobs := mustQueue(t, s, "jobs", pol)
	// Segment 1 mostly live: not worth copying forward.
	for range 12 {
		_, err := jobs.Publish(ctx, make([]byte, 1000))
		require.NoError(t, err)
	}
	require.Equal(t, uint32(1), s.log.Stats().LastSegment)
	churnTo(t, s, mustQueue(t, s, "churn", pol), 3)
	require.NoError(t, s.Maintain())
	require.Zero(t, s.Stats().BytesReclaimed, "segment 1 is live, and holds segment 2 behind it")

	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint.tmp", Nth: 1})
	require.Error(t, s.Maintain())
	stopped := s.Stats()
	require.NotEmpty(t, stopped.MaintenanceStopped)

	// The live messages of segment 1 are acknowledged: nothing pins it now.
	ds, err := jobs.Receive(ctx, 12)
	require.NoError(t, err)
	require.Len(t, ds, 12)
	for _, d := range ds {
		require.NoError(t, jobs.Ack(ctx, d.Lease.Receipt))
	}
	// Background rounds with no checkpoint due, as the ticker runs them.
	for range 2 {
		_ = s.maintain(false)
	}
	st := s.Stats()
	require.Equal(t, stopped.Segments, st.Segments, "segments removed after MaintenanceStopped: %q", st.MaintenanceStopped)
	require.Zero(t, st.BytesReclaimed, "disk space reclaimed after MaintenanceStopped said its reclaiming stopped")
}
