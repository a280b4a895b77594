package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// A checkpoint rewrites table entries in place before its file replaces
// the previous one: a copied-forward message's entry then holds its new
// position while the checkpoint in place still counts it in its old
// segment. When that checkpoint fails at its rename (the store goes on),
// an open from the previous checkpoint that replayed the copy over the
// rewritten table counted the message in neither segment, and once the
// other message in its new segment was acknowledged, removed the segment
// under it: a published, never-acknowledged message was lost. The open
// must rebuild instead (index.BeginCheckpoint).
func TestAFailedCheckpointAfterACopyForwardLosesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := Options{Now: func() time.Time { return now }, SegmentBytes: MinSegmentBytes, FS: ffs}
	opts.manualMaintenance = true
	pol := PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 3, RetryDelay: time.Second, MaxMessageBytes: 1024}

	s, err := Open(dir, opts)
	require.NoError(t, err)
	stuck, err := s.Queue("stuck", pol)
	require.NoError(t, err)
	other, err := s.Queue("other", pol)
	require.NoError(t, err)
	churn, err := s.Queue("churn", pol)
	require.NoError(t, err)

	S, err := stuck.Publish(ctx, []byte("S: published, never consumed"))
	require.NoError(t, err)
	churnTo(t, s, churn, 5)
	U, err := other.Publish(ctx, []byte("U: shares segment 5 with S's copy"))
	require.NoError(t, err)
	require.NoError(t, s.checkpoint()) // the last good checkpoint, in segment 5
	t.Logf("last good checkpoint at %v; log segments %d..%d", s.log.Stats(), s.log.Stats().FirstSegment, s.log.Stats().LastSegment)

	// The checkpoint after the copy forward fails at its rename.
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint", Nth: 1})
	err = s.reclaim(true)
	t.Logf("reclaim (copy forward, failed checkpoint): %v; copied %d", err, s.maint.copied.Load())
	require.Positive(t, s.maint.copied.Load())
	// A later round without a checkpoint due removes segments 1-4: S lives
	// at its copy now.
	require.NoError(t, s.reclaim(true))
	t.Logf("segments now %d..%d", s.log.Stats().FirstSegment, s.log.Stats().LastSegment)
	_ = s.Close()

	// Reopen: the last good checkpoint plus the log after it.
	opts.FS = nil
	s, err = Open(dir, opts)
	require.NoError(t, err)
	t.Logf("segment uses after reopen: %+v", s.idx.SegmentUses())
	other, err = s.Queue("other", pol)
	require.NoError(t, err)
	ds, err := other.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, U.ID, ds[0].Message.ID)
	require.NoError(t, other.Ack(ctx, ds[0].Lease.Receipt))
	t.Logf("segment uses after acking U: %+v", s.idx.SegmentUses())
	churn, err = s.Queue("churn", pol)
	require.NoError(t, err)
	churnTo(t, s, churn, 8)
	mErr := s.Maintain()
	t.Logf("maintain: %v; segments now %d..%d", mErr, s.log.Stats().FirstSegment, s.log.Stats().LastSegment)

	stuck, err = s.Queue("stuck", pol)
	require.NoError(t, err)
	ds, err = stuck.Receive(ctx, 1)
	t.Logf("receive S: %d deliveries, err %v", len(ds), err)
	require.NoError(t, err, "S, published and never acknowledged, must still be readable")
	require.Len(t, ds, 1)
	require.Equal(t, S.ID, ds[0].Message.ID)
	_ = s.Close()
}

// The same without a fault: the process dies at each file operation of a
// maintenance round that copies forward and checkpoints, restarts on the
// page cache, runs one round, and then the power fails. S, never
// acknowledged, must survive every crash point.
func TestACrashInACopyForwardThenRestartAndPowerLossLosesNothing(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	pol := PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 3, RetryDelay: time.Second, MaxMessageBytes: 1024}
	mkopts := func(fs vfs.FS) Options {
		o := Options{Now: func() time.Time { return now }, SegmentBytes: MinSegmentBytes, FS: fs}
		o.manualMaintenance = true
		return o
	}
	template := filepath.Join(root, "template")
	s, err := Open(template, mkopts(nil))
	require.NoError(t, err)
	stuck, _ := s.Queue("stuck", pol)
	other, _ := s.Queue("other", pol)
	S, err := stuck.Publish(ctx, []byte("S"))
	require.NoError(t, err)
	churnTo(t, s, mustQueue(t, s, "churn", pol), 5)
	_, err = other.Publish(ctx, []byte("U"))
	require.NoError(t, err)
	require.NoError(t, s.Close()) // checkpoint in segment 5

	failed := 0
	for k := int64(1); k <= 40; k++ {
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		require.NoError(t, os.CopyFS(dir, os.DirFS(template)))
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		if s, err := Open(dir, mkopts(cfs)); err == nil {
			_ = s.reclaim(true) // copy forward, checkpoint, removal
			cfs.Crash()
			_ = s.Close()
		}
		cfs.Restart() // a process crash: the page cache stays
		s, err := Open(dir, mkopts(cfs))
		require.NoError(t, err, "k=%d restart", k)
		_ = s.reclaim(true)
		clone := dir + "-clone"
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir})) // power loss: synced bytes only
		_ = s.Close()

		c, err := Open(clone, mkopts(nil))
		require.NoError(t, err, "k=%d clone", k)
		o, _ := c.Queue("other", pol)
		if ds, _ := o.Receive(ctx, 1); len(ds) == 1 {
			require.NoError(t, o.Ack(ctx, ds[0].Lease.Receipt))
		}
		churnTo(t, c, mustQueue(t, c, "churn", pol), c.log.Stats().LastSegment+3)
		_ = c.Maintain()
		q, _ := c.Queue("stuck", pol)
		ds, err := q.Receive(ctx, 1)
		if err != nil || len(ds) != 1 || ds[0].Message.ID != S.ID {
			failed++
			t.Errorf("k=%d: crash in the reclaim, restart, one maintenance round, power loss: S lost: %d deliveries, err %v", k, len(ds), err)
		}
		_ = c.Close()
		for _, d := range []string{dir, clone} {
			_ = os.RemoveAll(d)
		}
	}
	t.Logf("%d crash points lose S", failed)
}

// churnTo publishes and acknowledges messages of 1,000 bytes on q until
// the log of s reaches segment seg.
func churnTo(t *testing.T, s *Store, q *Queue, seg uint32) {
	t.Helper()
	for s.log.Stats().LastSegment < seg {
		_, err := q.Publish(context.Background(), bytes.Repeat([]byte{'c'}, 1000))
		require.NoError(t, err)
		ds, err := q.Receive(context.Background(), 1)
		require.NoError(t, err)
		require.NoError(t, q.Ack(context.Background(), ds[0].Lease.Receipt))
	}
}

func mustQueue(t *testing.T, s *Store, name string, p PolicyValue) *Queue {
	t.Helper()
	q, err := s.Queue(name, p)
	require.NoError(t, err)
	return q
}
