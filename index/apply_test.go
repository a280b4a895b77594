package index

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/wal"
)

// TestAMarkTakesEverySequenceBelowIt: a mark event says every message
// sequence below it is taken, so the next one handed out is not below it;
// an older mark moves nothing back.
func TestAMarkTakesEverySequenceBelowIt(t *testing.T) {
	x := New()
	require.NoError(t, x.Apply(0, &Event{Kind: KindMark, Seq: 500}))
	require.Equal(t, uint64(500), x.PeekNextSeq())
	require.NoError(t, x.Apply(0, &Event{Kind: KindMark, Seq: 20}))
	require.Equal(t, uint64(500), x.PeekNextSeq(), "an older mark moved the next sequence back")
	seq, err := x.NextSeq()
	require.NoError(t, err)
	require.Equal(t, uint64(500), seq)
	require.Equal(t, uint64(501), x.PeekNextSeq())
}

// TestASalvagedEventChangesNoState: a salvaged event is for the open that
// replays the log (a checkpoint before it is not used); applied, it leaves
// the queues, the orphans and the next sequence as they were, and its
// record decodes to nothing but its kind.
func TestASalvagedEventChangesNoState(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "k")))
	before, next := x.Queue("q").Dump(0), x.PeekNextSeq()
	rec := (&Event{Kind: KindSalvaged, Queue: 1, Seq: 99}).Append(nil)
	require.Equal(t, []byte{byte(KindSalvaged)}, rec, "a salvaged event carries no fields")
	require.NoError(t, x.ApplyRecord(wal.MakePosition(1, 200), rec))
	require.Equal(t, before, x.Queue("q").Dump(0))
	require.Equal(t, next, x.PeekNextSeq())
	require.Zero(t, x.Orphans)
	_, err := Decode([]byte{byte(KindSalvaged), 0})
	require.ErrorIs(t, err, ErrBadEvent)
	require.ErrorContains(t, err, "salvaged event: index: malformed event: 1 trailing bytes")
}

// TestADeclareGivingANameASecondNumberIsRefused: a queue name finds one
// queue number; a declaration giving it another is a malformed log, not a
// second queue.
func TestADeclareGivingANameASecondNumberIsRefused(t *testing.T) {
	x := declared(t)
	err := x.Apply(wal.MakePosition(1, 64), &Event{Kind: KindDeclare, Queue: 2, Name: "q"})
	require.ErrorIs(t, err, ErrBadEvent)
	require.Nil(t, x.QueueByID(2))
	require.Equal(t, uint32(1), x.Queue("q").ID)
	require.Equal(t, []string{"q"}, x.Queues())
}

// TestNextQueueIDIsPastEveryNumberAnEventNamed: a message event of a queue
// whose declaration the index never saw (lost to salvage) still takes its
// number: the next queue declared gets a later one.
func TestNextQueueIDIsPastEveryNumberAnEventNamed(t *testing.T) {
	x := declared(t)
	id, ok := x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(2), id)
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), &Event{Kind: KindAck, Queue: 7, Seq: 3}))
	require.Equal(t, 1, x.Orphans)
	id, ok = x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(8), id)
}

// TestEventsSetTheAbsoluteValuesTheyCarry: each message event leaves the
// message with exactly the values it carries (deliveries, instants, the
// lease's nonce, the dead letter's fields), whatever it held before, and
// in the state and place the event's kind says.
func TestEventsSetTheAbsoluteValuesTheyCarry(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	pos := wal.MakePosition(1, 100)
	require.NoError(t, x.Apply(pos, pub(1, 5, "")))
	apply := func(e Event) *Message {
		t.Helper()
		e.Queue, e.Seq = 1, 1
		require.NoError(t, x.Apply(wal.MakePosition(1, 400), &e))
		return q.Get(1)
	}
	type values struct {
		State         State
		Deliveries    uint32
		At            int64
		Nonce         uint64
		FailedAt      int64
		Code          uint32
		Reason, Cause string
		EnqueuedAt    int64
		Pos           wal.Position
	}
	of := func(m *Message) values {
		return values{m.State, m.Deliveries, m.At, m.Nonce, m.FailedAt, m.Code, m.Reason, m.Cause, m.EnqueuedAt, m.Pos}
	}

	m := apply(Event{Kind: KindLease, Deliveries: 1, Time: 40, Nonce: 77})
	require.Equal(t, values{State: Leased, Deliveries: 1, At: 40, Nonce: 77, EnqueuedAt: 5, Pos: pos}, of(m))
	m = apply(Event{Kind: KindExtend, Deliveries: 1, Time: 90, Nonce: 78})
	require.Equal(t, values{State: Leased, Deliveries: 1, At: 90, Nonce: 78, EnqueuedAt: 5, Pos: pos}, of(m))

	m = apply(Event{Kind: KindNack, Deliveries: 1, Time: 60})
	require.Equal(t, values{State: Ready, Deliveries: 1, At: 60, EnqueuedAt: 5, Pos: pos}, of(m))
	q.Promote(59)
	require.Nil(t, q.NextReady(), "a nacked message is receivable from its visibleAt, not before")
	due, ok := q.NextDue()
	require.True(t, ok)
	require.Equal(t, int64(60), due)
	q.Promote(60)
	require.Equal(t, uint64(1), q.NextReady().Seq)

	m = apply(Event{Kind: KindDeadLetter, Deliveries: 2, Time: 70, Code: 9, Reason: "R", Cause: "c"})
	require.Equal(t, values{State: Dead, Deliveries: 2, FailedAt: 70, Code: 9, Reason: "R", Cause: "c", EnqueuedAt: 5, Pos: pos}, of(m))
	require.Equal(t, []*Message{m}, q.DeadLetters(5))
	require.Zero(t, q.Live())
	require.Nil(t, q.NextReady())

	m = apply(Event{Kind: KindReplay})
	require.Equal(t, values{State: Ready, At: AtOnce, EnqueuedAt: 5, Pos: pos}, of(m))
	require.Empty(t, q.DeadLetters(5))
	require.Equal(t, uint64(1), q.NextReady().Seq)

	require.Equal(t, map[uint32]SegmentUse{1: {Messages: 1, Bytes: int64(m.Size), MinSeq: 1, MaxSeq: 1}}, x.SegmentUses())
	require.Nil(t, apply(Event{Kind: KindAck}), "an acknowledged message is gone")
	require.Nil(t, q.NextReady())
	require.Zero(t, q.Live())
	require.Empty(t, x.SegmentUses(), "its segment no longer holds it")
	require.Empty(t, x.LiveChunks())
}

// TestABacklogPublishedInOrderStaysInTheStream: messages published in
// sequence order with nondecreasing EnqueuedAt, ties included, join the
// stream (they are not active); one enqueued before the stream's last is
// active.
func TestABacklogPublishedInOrderStaysInTheStream(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	for i, at := range []int64{10, 10, 11, 11, 11, 12} {
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*(i+1)), pub(uint64(i+1), at, "")))
	}
	require.Zero(t, q.Active(), "an in-order backlog is held by the table, not on the heap")
	for seq := uint64(1); seq <= 6; seq++ {
		require.Nil(t, q.Get(seq), "message %d is active", seq)
	}
	require.NoError(t, x.Apply(wal.MakePosition(1, 700), pub(7, 11, "")))
	require.Equal(t, 1, q.Active(), "published out of order")
	require.NotNil(t, q.Get(7))
	ready, _, _, _ := q.Counts()
	require.Equal(t, 7, ready)
	require.Equal(t, 7, q.Live())
}

// TestLeasingAnyReadyMessageKeepsTheOthersInOrder: whichever receivable
// messages leave the ready set, the rest are received oldest first.
func TestLeasingAnyReadyMessageKeepsTheOthersInOrder(t *testing.T) {
	rng := newRand(t, 3)
	for round := 0; round < 200; round++ {
		x := declared(t)
		q := x.Queue("q")
		// The first message is the stream's; the others, enqueued
		// earlier, are published out of order: all active and ready.
		require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, 1000, "")))
		enq := map[uint64]int64{1: 1000}
		for seq := uint64(2); seq <= 40; seq++ {
			at := int64(rng.IntN(900))
			require.NoError(t, x.Apply(wal.MakePosition(1, 64*int(seq)), pub(seq, at, "")))
			enq[seq] = at
		}
		for range 15 {
			seq := 2 + uint64(rng.IntN(39))
			if _, ok := enq[seq]; !ok {
				continue
			}
			q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: seq, Deliveries: 1, Time: 5000})
			delete(enq, seq)
		}
		var want []uint64
		for seq := range enq {
			want = append(want, seq)
		}
		slices.SortFunc(want, func(a, b uint64) int {
			if enq[a] != enq[b] {
				return int(enq[a] - enq[b])
			}
			return int(a) - int(b)
		})
		var got []uint64
		for m := q.NextReady(); m != nil; m = q.NextReady() {
			got = append(got, m.Seq)
			q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: m.Seq, Deliveries: 1, Time: 5000})
		}
		require.Equal(t, want, got, "round %d", round)
	}
}

// TestHoldsFindsEveryLiveMessageWhereverItIs: a message is held whether it
// waits in the stream (published in order, never delivered), is active
// (leased, or dead), or is published out of order; an acknowledged one,
// or one never published, is not.
func TestHoldsFindsEveryLiveMessageWhereverItIs(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	for i, at := range []int64{10, 20, 30, 5} {
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*(i+1)), pub(uint64(i+1), at, "")))
	}
	require.NoError(t, x.Apply(wal.MakePosition(1, 500), &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 50}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 600), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 3, Deliveries: 1, Time: 60}))
	require.Nil(t, q.Get(1), "1 waits in the stream")
	require.NotNil(t, q.Get(4), "4, published out of order, is active")
	for seq := uint64(1); seq <= 4; seq++ {
		require.True(t, x.Holds(seq), "message %d", seq)
	}
	require.NoError(t, x.Apply(wal.MakePosition(1, 700), &Event{Kind: KindAck, Queue: 1, Seq: 2}))
	require.False(t, x.Holds(2), "an acknowledged message is gone")
	require.False(t, x.Holds(9), "a message never published")
}

// TestLiveInIsTheMessagesWhoseRecordStartsInTheRange: the live messages
// whose publish record starts in [from, to) of a segment, in the stream or
// active, dead letters included; a record starting at to is past the range,
// and one in another segment is not in it.
func TestLiveInIsTheMessagesWhoseRecordStartsInTheRange(t *testing.T) {
	x := declared(t)
	for i, off := range []int{100, 200, 300, 400} {
		require.NoError(t, x.Apply(wal.MakePosition(1, off), pub(uint64(i+1), int64(10*(i+1)), "")))
	}
	require.NoError(t, x.Apply(wal.MakePosition(2, 200), pub(5, 50, "")))
	require.NoError(t, x.Apply(wal.MakePosition(2, 300), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 2, Deliveries: 1, Time: 60}))
	require.Equal(t, []uint64{2, 3}, x.LiveIn(1, 200, 400))
	require.Equal(t, []uint64{2, 3, 4}, x.LiveIn(1, 200, 401))
	require.Equal(t, []uint64{1}, x.LiveIn(1, 0, 200))
	require.Equal(t, []uint64{5}, x.LiveIn(2, 0, 1000))
	require.Empty(t, x.LiveIn(3, 0, 1000))
}

// TestLiveInByQueueNamesTheQueueOfEach: the messages LiveIn returns, by
// the queue that holds each, each queue's in order; a range with none is
// an empty map.
func TestLiveInByQueueNamesTheQueueOfEach(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 2, Name: "mail", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}))
	for i, off := range []int{100, 200, 300, 400, 500} {
		e := pub(uint64(i+1), int64(10*(i+1)), "")
		if i%2 == 1 {
			e.Queue = 2
		}
		require.NoError(t, x.Apply(wal.MakePosition(1, off), e))
	}
	require.NoError(t, x.Apply(wal.MakePosition(2, 100), &Event{Kind: KindDeadLetter, Queue: 2, Seq: 4, Deliveries: 1, Time: 60}))
	require.Equal(t, map[uint32][]uint64{1: {3, 5}, 2: {2, 4}}, x.LiveInByQueue(1, 200, 501))
	require.Equal(t, []uint64{2, 3, 4, 5}, x.LiveIn(1, 200, 501))
	require.Equal(t, map[uint32][]uint64{1: {1}}, x.LiveInByQueue(1, 0, 200))
	require.Empty(t, x.LiveInByQueue(1, 600, 1000))
	require.Empty(t, x.LiveInByQueue(3, 0, 1000))
}

// TestLargestLiveIsTheLongestRecordInTheLog: the largest live message is
// found in the stream or among the active ones, dead letters included; a
// Pending message, whose record is not in the log yet, is not one.
func TestLargestLiveIsTheLongestRecordInTheLog(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	publish := func(pos wal.Position, seq uint64, at int64, n int) {
		t.Helper()
		e := pub(seq, at, "")
		e.Payload = make([]byte, n)
		_, err := q.Apply(pos, e)
		require.NoError(t, err)
	}
	publish(wal.MakePosition(1, 100), 1, 10, 10)
	publish(wal.MakePosition(1, 200), 2, 20, 300)
	publish(wal.MakePosition(1, 600), 3, 30, 20)
	require.Nil(t, q.Get(2), "2 is in the stream")
	seq, size := x.LargestLive()
	require.Equal(t, uint64(2), seq)
	require.Equal(t, publishSize(&Event{Kind: KindPublish, Queue: 1, Seq: 2, Time: 20, Payload: make([]byte, 300)}), size)

	require.NoError(t, x.Apply(wal.MakePosition(1, 700), &Event{Kind: KindAck, Queue: 1, Seq: 2}))
	publish(wal.MakePosition(1, 800), 4, 5, 200) // out of order: active
	require.NoError(t, x.Apply(wal.MakePosition(1, 900), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 4, Deliveries: 1, Time: 60}))
	publish(0, 5, 40, 500) // Pending
	seq, _ = x.LargestLive()
	require.Equal(t, uint64(4), seq, "the dead letter, not the Pending message")
	require.NoError(t, q.Commit(5, wal.MakePosition(2, 100)))
	seq, _ = x.LargestLive()
	require.Equal(t, uint64(5), seq, "once committed")
}
