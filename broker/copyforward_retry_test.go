package broker

import (
	"bytes"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A copy forward that fails and leaves the store working goes by the
// schedule a removal that fails follows: one WARN, attempts ever further
// apart on the broker's clock, one INFO when it works again. Its causes
// cannot be met from outside the package, nor by a file system fault: a
// message too large to copy is what Open's check of SegmentBytes refuses,
// and a segment still needed after its copy is an index that disagrees
// with itself. The first is made here by shrinking the segment size the
// store copies to under it, after the message was written: what a reopen
// with a smaller SegmentBytes would do if Open did not refuse it.
func TestACopyForwardThatFailsIsTriedAgainWithABackoff(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	tick := func(d time.Duration) { clock.Add(int64(d)) }
	logs := &logRecords{}
	opts := Options{
		Now:          func() time.Time { return time.Unix(0, clock.Load()) },
		SegmentBytes: MinSegmentBytes,
		Logger:       slog.New(logs),
	}
	ManualMaintenance(&opts)
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	pinned := mustQueue(t, s, "pinned", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, MaxMessageBytes: 10 << 10})
	churn := mustQueue(t, s, "churn", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, MaxMessageBytes: 1024})
	kept, err := pinned.Publish(t.Context(), bytes.Repeat([]byte{'p'}, 8<<10))
	require.NoError(t, err)
	churnTo(t, s, churn, 6)
	require.NoError(t, s.checkpoint())

	// Segments now take 8 KiB: the 8 KiB message no longer fits one.
	s.opts.SegmentBytes = 8 << 10
	s.maintenanceRound()
	st := s.Stats()
	require.Contains(t, st.ReclaimFailing, "cannot be copied forward")
	require.Zero(t, st.BytesReclaimed)
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "the first failure is logged")
	require.Equal(t, int64(1), s.maint.reclaimRetry.failed)

	for range 100 {
		tick(time.Second)
		s.maintenanceRound()
	}
	attempts := s.maint.reclaimRetry.failed - 1
	require.Positive(t, attempts, "the copy is tried again")
	require.LessOrEqual(t, attempts, int64(8), "attempts in 100 rounds of a second")
	require.Len(t, logs.at(slog.LevelWarn, ""), 1, "a failure that goes on is not logged again within 100 seconds")
	require.NoError(t, s.Err(), "the store goes on")
	require.Zero(t, s.Stats().BytesReclaimed)

	// The message fits again: the next attempt due copies it forward and
	// removes the segments it held, and says so once.
	s.opts.SegmentBytes = MinSegmentBytes
	tick(time.Minute)
	s.maintenanceRound()
	st = s.Stats()
	require.Positive(t, st.BytesReclaimed)
	require.Positive(t, st.CopiedForward)
	require.Empty(t, st.ReclaimFailing)
	require.Len(t, logs.at(slog.LevelInfo, "again"), 1, "one INFO says reclamation works again")
	require.Len(t, logs.at(slog.LevelWarn, ""), 1)
	ds, err := pinned.Receive(t.Context(), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, kept.ID, ds[0].Message.ID)
	require.NoError(t, VerifyIndex(s))
}
