package index

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/wal"
)

// The seen-set is bounded: copying a remembered key forward (the broker's
// reclamation writes a payload-less publish of it and its ack at the head
// of the log, once per round that frees the key's segment) moves the key;
// it must not add to what the queue keeps in memory for it. A store whose
// keyed publishes have stopped never evicts, and copies its keys forward at
// every rotation: each copy that left an entry behind grew the eviction
// heap without bound.
func TestCopyingAKeyForwardKeepsOneEntryForIt(t *testing.T) {
	x := declared(t)
	q := x.QueueByID(1)
	require.True(t, x.Queue("q") == q)
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, 100, "k")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 128), &Event{Kind: KindAck, Queue: 1, Seq: 1}))
	for seg := uint32(2); seg < 1000; seg++ {
		// What Queue.copyForward applies for a key whose message is gone.
		require.NoError(t, x.Apply(wal.MakePosition(seg, 64), &Event{Kind: KindPublish, Queue: 1, Seq: 1, Time: 100, Key: "k"}))
		require.NoError(t, x.Apply(wal.MakePosition(seg, 128), &Event{Kind: KindAck, Queue: 1, Seq: 1}))
	}
	require.Equal(t, 1, q.SeenCount())
	require.LessOrEqual(t, len(q.seenOrder), 1, "one remembered key, %d entries kept for its eviction", len(q.seenOrder))
	uses := x.SegmentUses()
	require.Len(t, uses, 1, "the key pins only the segment of its last copy")
	require.Equal(t, 1, uses[999].Keys)
}

// TestAKeyCopiedForwardAfterItsMessageLeftTheStreamRevivesNothing: the key
// of a message acknowledged behind the stream's head (another message still
// waits before it) is copied forward as a publish and its ack. That publish
// is of a sequence the stream already passed: it must not rejoin the
// stream, where the ack no longer finds it and it would be counted, and
// walked to, as a message nobody can receive.
func TestAKeyCopiedForwardAfterItsMessageLeftTheStreamRevivesNothing(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, 10, "")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 128), pub(2, 20, "k")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 192), &Event{Kind: KindAck, Queue: 1, Seq: 2}))
	// What Queue.copyForward applies for a key whose message is gone.
	require.NoError(t, x.Apply(wal.MakePosition(2, 64), &Event{Kind: KindPublish, Queue: 1, Seq: 2, Time: 20, Key: "k"}))
	require.NoError(t, x.Apply(wal.MakePosition(2, 128), &Event{Kind: KindAck, Queue: 1, Seq: 2}))
	require.Zero(t, x.Orphans)
	ready, _, _, _ := q.Counts()
	require.Equal(t, 1, ready)
	require.Equal(t, 1, q.Live())
	require.Equal(t, uint64(1), q.NextReady().Seq)
	require.NoError(t, x.Apply(wal.MakePosition(2, 192), &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 50}))
	require.Nil(t, q.NextReady())
	require.NoError(t, x.Damaged())
	seq, _, ok := q.Seen("k")
	require.True(t, ok)
	require.Equal(t, uint64(2), seq)
}

// TestPinningNamesAKeyOnlyWhenItsMessageIsGone: what pins a segment is its
// live messages and the keys of the gone ones. The key of a live message,
// in the stream or active, is copied with its message; named as a key of
// its own, its copy (a publish and an ack) would acknowledge the message.
func TestPinningNamesAKeyOnlyWhenItsMessageIsGone(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, 10, "stream")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 128), pub(2, 20, "leased")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 192), pub(3, 30, "gone")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 256), &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 90}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 320), &Event{Kind: KindLease, Queue: 1, Seq: 3, Deliveries: 1, Time: 90}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 384), &Event{Kind: KindAck, Queue: 1, Seq: 3}))
	require.Nil(t, q.Get(1), "1 waits in the stream")
	require.NotNil(t, q.Get(2), "2 is active")
	u := x.SegmentUses()[1]
	msgs, keys := q.Pinning(1, u.MinSeq, u.MaxSeq)
	var seqs []uint64
	for _, m := range msgs {
		seqs = append(seqs, m.Seq)
	}
	require.Equal(t, []uint64{1, 2}, seqs)
	require.Equal(t, []KeyRef{{Key: "gone", Seq: 3, EnqueuedAt: 30}}, keys)
}
