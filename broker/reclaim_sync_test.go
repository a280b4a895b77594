package broker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestReclaimingNeverOutrunsAnUnsyncedAck: a maintenance round that
// finds no checkpoint due (no rotation, the log grown by less than half a
// segment) still reclaims, by the segment uses of the index now. Under
// SyncPublish an Ack is in the log file but not yet on the device; the
// round removed — durably — the segment holding the acked message's
// publish, which the last checkpoint still names as live. A power loss
// then keeps the removal and loses the ack: the store reopened from its
// checkpoint holds a live message whose record is gone.
func TestReclaimingNeverOutrunsAnUnsyncedAck(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfs := vfs.NewCrashFS(vfs.Default)
	opts := Options{Now: clock, SegmentBytes: MinSegmentBytes, Sync: SyncPublish, SyncInterval: time.Hour, FS: cfs}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	ctx := context.Background()
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 4096}
	q, err := s.Queue("jobs", pol)
	require.NoError(t, err)
	churn, err := s.Queue("churn", pol)
	require.NoError(t, err)
	// A backlog fills the first segment: too live to be worth copying.
	var backlog []string
	for i := 0; i < 12; i++ {
		m, err := q.Publish(ctx, append([]byte("pinned"), make([]byte, 1000)...))
		require.NoError(t, err)
		backlog = append(backlog, m.ID)
	}
	first := s.Stats().Segments
	for s.Stats().Segments < first+2 {
		_, err := churn.Publish(ctx, make([]byte, 1000))
		require.NoError(t, err)
		ds, err := churn.Receive(ctx, 1)
		require.NoError(t, err)
		require.NoError(t, churn.Ack(ctx, ds[0].Lease.Receipt))
	}
	// The round after the rotation checkpoints: the backlog is live in
	// the first segment, which stays.
	// (Two rounds: the first finds the log grown and leaves the rotation
	// for the second.)
	require.NoError(t, s.maintain(false))
	require.NoError(t, s.maintain(false))
	require.False(t, s.maint.rotated.Load())
	require.Equal(t, int64(0), s.Stats().CopiedForward)
	require.Equal(t, first+2, s.Stats().Segments)

	// The consumer drains the backlog: acks written, not synced.
	ds, err := q.Receive(ctx, 100)
	require.NoError(t, err)
	require.Len(t, ds, len(backlog))
	for _, d := range ds {
		require.NoError(t, q.Ack(ctx, d.Lease.Receipt))
	}

	// The next maintenance round: no checkpoint due, reclaim.
	t.Logf("rotated %v, grown %d of %d", s.maint.rotated.Load(), s.log.Stats().BytesWritten-s.maint.written, s.opts.segmentBytes()/2)
	segs, cks := s.Stats().Segments, s.Stats().Checkpoints
	require.NoError(t, s.maintain(false))
	t.Logf("segments %d -> %d, checkpoints %d -> %d", segs, s.Stats().Segments, cks, s.Stats().Checkpoints)

	// Power loss now: what was not synced is gone.
	cfs.Crash()
	clone := filepath.Join(root, "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	_ = s.Close()

	r, err := Open(clone, Options{Now: clock, SegmentBytes: MinSegmentBytes})
	require.NoError(t, err, "the store reopens after the power loss")
	defer r.Close()
	rq, err := r.Queue("jobs", pol)
	require.NoError(t, err)
	got, err := rq.Receive(ctx, 100)
	require.NoError(t, err, "the acks were lost with the power: the messages may come back, but the store must still work")
	t.Logf("recovery %+v; received %d", r.Recovery(), len(got))
	for _, d := range got {
		require.Equal(t, "pinned", string(d.Message.Payload[:6]))
	}
}

// Reclaiming removes only segments before the one the last checkpoint's
// position lies in: that segment stays, even once nothing in it is live
// and the log has moved on, so that an open after a crash before the next
// checkpoint still starts from the checkpoint and replays what follows
// it, rather than rebuilding the whole index from the log.
func TestAnOpenAfterReclaimingStillStartsFromTheLastCheckpoint(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfs := vfs.NewCrashFS(vfs.Default)
	opts := Options{Now: clock, SegmentBytes: MinSegmentBytes, FS: cfs}
	ManualMaintenance(&opts)
	s, err := Open(dir, opts)
	require.NoError(t, err)
	ctx := context.Background()
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 4096}
	q, err := s.Queue("jobs", pol)
	require.NoError(t, err)
	churn := func() {
		_, err := q.Publish(ctx, make([]byte, 1000))
		require.NoError(t, err)
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.NoError(t, q.Ack(ctx, ds[0].Lease.Receipt))
	}
	churn()
	require.NoError(t, s.Maintain())
	ck := wal.Position(s.maint.lastCheckpoint.Load())
	// The log moves past the checkpoint's segment, every message in it
	// acknowledged, and a message is left live after it.
	for s.log.Stats().LastSegment <= ck.Segment() {
		churn()
	}
	kept, err := q.Publish(ctx, []byte("kept"))
	require.NoError(t, err)
	// A round that finds no checkpoint due reclaims what it can.
	require.NoError(t, s.reclaim(true))
	require.Equal(t, ck, wal.Position(s.maint.lastCheckpoint.Load()), "no checkpoint since")

	// A crash now (SyncAll: everything acknowledged is on the device).
	cfs.Crash()
	clone := filepath.Join(root, "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	_ = s.Close()
	r, err := Open(clone, Options{Now: clock, SegmentBytes: MinSegmentBytes})
	require.NoError(t, err)
	defer r.Close()
	require.False(t, r.Recovery().IndexRebuilt, "the reopened store starts from its last checkpoint")
	rq, err := r.Queue("jobs", pol)
	require.NoError(t, err)
	ds, err := rq.Receive(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, kept.ID, ds[0].Message.ID)
}
