package index

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestASegmentCountsTheEventThatRestatesEachMessage: a copy forward writes
// a message's publish and the event that restates its state (StateEvent),
// so the publish's segment counts that event's record beside the publish
// (SegmentUse.StateBytes), at its exact length whatever the lengths of its
// varints, reason and public cause: a lease with its nonce, an extend (a
// lease's layout), a nack, a dead letter. A nack back to a publish's own
// state (at once, never delivered) and a replay restate nothing, and the
// ack uncounts what was counted.
func TestASegmentCountsTheEventThatRestatesEachMessage(t *testing.T) {
	var events []*Event
	for _, seq := range []uint64{1, 128, 1 << 40} {
		for _, deliveries := range []uint32{0, 1, 127, 128, math.MaxUint32} {
			for _, at := range []int64{AtOnce, 0, 63, 64, -65, math.MaxInt64} {
				for _, kind := range []Kind{KindLease, KindExtend} {
					events = append(events, &Event{Kind: kind, Queue: 1, Seq: seq, Deliveries: deliveries, Time: at, Nonce: math.MaxUint64})
				}
				events = append(events, &Event{Kind: KindNack, Queue: 1, Seq: seq, Deliveries: deliveries, Time: at})
				events = append(events, &Event{Kind: KindDeadLetter, Queue: 1, Seq: seq, Deliveries: deliveries, Time: at, Code: 3, Reason: "R", Cause: "c"})
			}
		}
	}
	for _, code := range []uint32{0, 127, 128, math.MaxUint32} {
		for _, reason := range []string{"", strings.Repeat("r", 127), strings.Repeat("r", 128)} {
			for _, cause := range []string{"", strings.Repeat("c", 1024), strings.Repeat("c", 1<<14)} {
				events = append(events, &Event{Kind: KindDeadLetter, Queue: 1, Seq: 7, Deliveries: 2, Time: 50, Code: code, Reason: reason, Cause: cause})
			}
		}
	}
	for _, e := range events {
		what := fmt.Sprintf("%s of %d: deliveries %d, at %d, code %d, reason of %d bytes, cause of %d",
			e.Kind, e.Seq, e.Deliveries, e.Time, e.Code, len(e.Reason), len(e.Cause))
		x := declared(t)
		q := x.Queue("q")
		require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(e.Seq, 5, "")))
		publish := x.SegmentUses()[1]
		require.NoError(t, x.Apply(wal.MakePosition(1, 128), e))

		st, ok := StateEvent(q.ID, q.Get(e.Seq))
		if e.Kind == KindNack && e.Time == AtOnce && e.Deliveries == 0 {
			require.False(t, ok, what)
			require.Zero(t, x.SegmentUses()[1].StateBytes, what)
		} else {
			require.True(t, ok, what)
			want := *e
			if want.Kind == KindExtend {
				want.Kind = KindLease // the same fields; a replay gives the same lease
			}
			require.Equal(t, want, st, "the event restates what the last one said: %s", what)
			require.Equal(t, int64(segment.Size(len(e.Append(nil)))), x.SegmentUses()[1].StateBytes, what)
		}
		u := x.SegmentUses()[1]
		u.StateBytes = 0
		require.Equal(t, publish, u, "the publish is counted as before: %s", what)

		require.NoError(t, x.Apply(wal.MakePosition(1, 2048), &Event{Kind: KindReplay, Queue: 1, Seq: e.Seq}))
		require.Zero(t, x.SegmentUses()[1].StateBytes, what)
		require.NoError(t, x.Apply(wal.MakePosition(1, 2100), e))
		require.NoError(t, x.Apply(wal.MakePosition(1, 2200), &Event{Kind: KindAck, Queue: 1, Seq: e.Seq}))
		require.Empty(t, x.SegmentUses(), what)
	}
}

// TestTheRestatingEventIsCountedWhereItsCopyGoesAndAgainOnLoad: a copy
// forward moves a dead letter's publish to another segment, and with it
// the count of its dead-letter event, long public cause included; the
// segment it left holds nothing. A checkpoint does not hold that count:
// Load counts it again from the messages, so a loaded index counts what
// the one that wrote the checkpoint did, and an ack uncounts it.
func TestTheRestatingEventIsCountedWhereItsCopyGoesAndAgainOnLoad(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}))
	dead := &Event{Kind: KindDeadLetter, Queue: 1, Seq: 1, Deliveries: 2, Time: 50, Code: 9, Reason: "REFUSED", Cause: strings.Repeat("c", 1000)}
	lease := &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 90, Nonce: 7}
	for _, e := range []*Event{pub(1, 10, ""), pub(2, 20, ""), pub(3, 30, ""), dead, lease} {
		require.NoError(t, x.Apply(wal.MakePosition(1, 64*int(e.Seq)+int(e.Kind)), e))
	}
	deadBytes, leaseBytes := int64(segment.Size(len(dead.Append(nil)))), int64(segment.Size(len(lease.Append(nil))))
	require.Equal(t, deadBytes+leaseBytes, x.SegmentUses()[1].StateBytes)

	// The copies: each publish, then (for an active message) the event
	// that restates its state, as the broker writes them.
	for i, e := range []*Event{pub(1, 10, ""), dead, pub(2, 20, ""), lease, pub(3, 30, "")} {
		require.NoError(t, x.Apply(wal.MakePosition(2, 64+100*i), e))
	}
	uses := x.SegmentUses()
	require.NotContains(t, uses, uint32(1), "the segment the copies left holds nothing")
	require.Equal(t, 3, uses[2].Messages)
	require.Equal(t, deadBytes+leaseBytes, uses[2].StateBytes)

	checkpointAt(t, x, dir, wal.MakePosition(2, 1000))
	require.NoError(t, x.Table.Close())
	loaded, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer loaded.Table.Close()
	require.Equal(t, uses, loaded.SegmentUses(), "counted again on load")

	for seq := uint64(1); seq <= 3; seq++ {
		require.NoError(t, loaded.Apply(wal.MakePosition(2, 2000+int(seq)), &Event{Kind: KindAck, Queue: 1, Seq: seq}))
	}
	require.Empty(t, loaded.SegmentUses(), "the acks uncounted what Load counted")
}
