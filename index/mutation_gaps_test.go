package index

// Tests for promises that mutation testing of the index found unchecked:
// each one broken by hand (a maximum taken from the last value instead of
// the largest, a bound moved by one) let every test of the index, the
// broker (-short) and the fuzz package pass.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/wal"
)

// TestLiveInFindsAStreamMessageCommittedBeforeALowerSequence: queues draw
// their sequences from one counter and commit their publishes in whatever
// order the log takes them, so a segment can count message 2 (of one
// queue) before message 1 (of another). Its MaxSeq is still the highest
// sequence counted there: taken from the last one counted, it shrank to 1,
// and LiveIn and Pinning, which walk a stream only within the segment's
// bounds, missed message 2: a salvage that lost the segment would not have
// reported it, and the reclamation would not have copied it forward.
func TestLiveInFindsAStreamMessageCommittedBeforeALowerSequence(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 2, Name: "other"}))
	q, other := x.Queue("q"), x.Queue("other")
	one := pub(1, 10, "")
	one.Queue = 2
	require.NoError(t, x.Apply(0, one))
	require.NoError(t, x.Apply(0, pub(2, 20, "")))
	require.NoError(t, q.Commit(2, wal.MakePosition(1, 100)))
	require.NoError(t, other.Commit(1, wal.MakePosition(1, 200)))
	require.Zero(t, q.Active()+other.Active(), "both messages are in their streams")

	use := x.SegmentUses()[1]
	require.Equal(t, 2, use.Messages)
	require.Equal(t, uint64(1), use.MinSeq)
	require.Equal(t, uint64(2), use.MaxSeq, "the bounds cover every message counted in the segment")
	require.Equal(t, []uint64{1, 2}, x.LiveIn(1, 0, 1000))
	msgs, _ := q.Pinning(1, use.MinSeq, use.MaxSeq)
	require.Len(t, msgs, 1, "queue q's message pins the segment")
}

// TestAMessageEventOfQueueTwoToTheThirtyOneIsRefused: the first number
// with the stream bit, exactly, is out of range for a message event as for
// a declaration. Taken as an orphan, it raised the highest queue number to
// 2³¹: NextQueueID said no number was left, and the next checkpoint held a
// number Load refuses.
func TestAMessageEventOfQueueTwoToTheThirtyOneIsRefused(t *testing.T) {
	x := declared(t)
	for _, k := range []Kind{KindPublish, KindAck, KindEvict} {
		err := x.Apply(wal.MakePosition(1, 64), &Event{Kind: k, Queue: 1 << 31, Seq: 1, Time: 1, Payload: []byte("p")})
		require.ErrorIs(t, err, ErrBadEvent, "%s", k)
	}
	require.Zero(t, x.Orphans)
	require.Equal(t, uint64(1), x.PeekNextSeq(), "a refused event took a sequence")
	id, ok := x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(2), id, "a refused event took a queue number")
}
