package wal

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// TestRecordsAcknowledgedAfterTheReopenThatFollowsAFailedFdatasyncSurviveAPowerLoss:
// an fdatasync fails with EIO (a writeback error): the log is poisoned and,
// as documented, reopened in the same process. On Linux the failed batch
// stays in the page cache, clean: the reopen reads it, and its own
// fdatasync succeeds without writing it. Records appended and acknowledged
// after the reopen must survive a power loss that then takes the pages of
// the failed batch that nothing wrote again.
func TestRecordsAcknowledgedAfterTheReopenThatFollowsAFailedFdatasyncSurviveAPowerLoss(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			cfs := vfs.NewCrashFS(ffs) // the fdatasync fails below the page-cache model
			opts := Options{FS: cfs, SegmentBytes: 1 << 16, Sync: SyncAlways}
			l, err := Open(dir, opts)
			require.NoError(t, err)
			acked := appendRecords(t, l, 0, 5)

			ffs.Inject(vfs.Rule{Op: vfs.OpSync, Match: firstSegment, Times: 1})
			// A batch of three pages: later appends dirty its last page
			// again, never the first two.
			big := make([]byte, 3*4096)
			for i := range big {
				big[i] = byte('a' + i%26)
			}
			_, err = l.Append(big)
			require.ErrorIs(t, err, ErrPoisoned)
			_ = l.Close()
			ffs.Clear()

			opts.Sync = mode
			l, err = Open(dir, opts)
			require.NoError(t, err)
			more := appendRecords(t, l, 200, 5)
			if mode == SyncNever {
				require.NoError(t, l.Sync())
			}
			acked = append(acked, more...)

			clone := filepath.Join(t.TempDir(), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir})) // power lost now
			require.NoError(t, l.Close())
			l2, err := Open(clone, Options{SegmentBytes: 1 << 16})
			require.NoError(t, err, "a power loss after the reopen")
			defer l2.Close()
			found := map[Position]string{}
			for _, e := range readAll(t, l2) {
				found[e.pos] = string(e.rec)
			}
			for _, e := range acked {
				require.Equal(t, string(e.rec), found[e.pos], "the record acknowledged at %v is gone", e.pos)
			}
		})
	}
}

// TestAFailedBatchPartlyOnTheDeviceIsReadAsTheReopenSawIt: the fdatasync
// of a batch of records spanning several pages fails, having written a
// random half of its pages before the error (vfs.CrashFS.SetFailedWriteback):
// the device holds those, as the page cache did, and not the others. The
// log is reopened in the same process, the failed pages evicted or not
// (an eviction shows the device's bytes), appended to and synced; then
// the power fails. The clone must open, hold every record acknowledged
// before the failure and after the reopen, and every record the reopened
// log showed, where it showed it.
func TestAFailedBatchPartlyOnTheDeviceIsReadAsTheReopenSawIt(t *testing.T) {
	for seed := range uint64(16) {
		evict := seed%2 == 1
		what := fmt.Sprintf("seed %d, evicted %t", seed, evict)
		dir := t.TempDir()
		ffs := vfs.NewFaultFS(vfs.Default)
		cfs := vfs.NewCrashFS(ffs)
		require.NoError(t, cfs.SetFailedWriteback(0.5, rand.New(rand.NewPCG(seed, 7))))
		opts := Options{FS: cfs, SegmentBytes: 1 << 16, Sync: SyncAlways}
		l, err := Open(dir, opts)
		require.NoError(t, err, what)
		acked := appendRecords(t, l, 0, 5)

		ffs.Inject(vfs.Rule{Op: vfs.OpSync, Match: firstSegment, Times: 1})
		var batch [][]byte
		for i := range 6 {
			rec := make([]byte, 2000+i)
			for k := range rec {
				rec[k] = byte('a' + (i+k)%26)
			}
			batch = append(batch, rec)
		}
		_, err = l.Append(batch...)
		require.ErrorIs(t, err, ErrPoisoned, what)
		_ = l.Close()
		ffs.Clear()
		if evict {
			require.NoError(t, cfs.EvictFailedWrites(), what)
		}

		l, err = Open(dir, opts)
		require.NoError(t, err, what)
		seen := readAll(t, l)
		acked = append(acked, appendRecords(t, l, 200, 5)...)
		clone := filepath.Join(t.TempDir(), "clone")
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}), what) // power lost now
		require.NoError(t, l.Close(), what)

		l2, err := Open(clone, Options{SegmentBytes: 1 << 16})
		require.NoError(t, err, "%s: a power loss after the reopen", what)
		found := map[Position]string{}
		for _, e := range readAll(t, l2) {
			found[e.pos] = string(e.rec)
		}
		require.NoError(t, l2.Close())
		for _, e := range acked {
			require.Equal(t, string(e.rec), found[e.pos], "%s: the record acknowledged at %v is gone", what, e.pos)
		}
		for _, e := range seen {
			require.Equal(t, string(e.rec), found[e.pos], "%s: the reopened log showed the record at %v, the power loss took it", what, e.pos)
		}
	}
}
