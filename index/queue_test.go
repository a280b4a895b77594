package index

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the random tests (0: pick one at random)")

// newRand returns the generator of one stream of a random test, seeded
// from -seed or at random, and logs the seed so that a failure can be
// replayed with -seed.
func newRand(t testing.TB, stream uint64) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, stream))
}

func declared(t testing.TB) *Index {
	t.Helper()
	x := New()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}))
	return x
}

func pub(seq uint64, at int64, key string) *Event {
	return &Event{Kind: KindPublish, Queue: 1, Seq: seq, Time: at, Key: key, Payload: []byte("p")}
}

// snapshot renders a queue's whole state, derived structures included, so
// two queues can be compared.
func snapshot(q *Queue, now int64) string { return q.Dump(now) }

// randomEvents returns a plausible event stream for queue 1.
func randomEvents(rng *rand.Rand, n int) []*Event {
	var es []*Event
	next := uint64(1)
	for len(es) < n {
		if next < 40 && rng.IntN(3) == 0 {
			key := ""
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("k%d", rng.IntN(8))
			}
			es = append(es, pub(next, int64(rng.IntN(100)), key))
			next++
			continue
		}
		seq := 1 + uint64(rng.IntN(int(next)))
		kinds := []Kind{KindLease, KindAck, KindNack, KindDeadLetter, KindExtend, KindReplay, KindDelete}
		e := &Event{Kind: kinds[rng.IntN(len(kinds))], Queue: 1, Seq: seq,
			Deliveries: uint32(rng.IntN(4)), Time: int64(rng.IntN(100)), Nonce: rng.Uint64(), Reason: "R", Cause: "c"}
		es = append(es, e)
	}
	return es
}

// Applying every event twice in a row gives the state applying it once
// gives: events carry absolute values.
func TestApplyIsIdempotent(t *testing.T) {
	rng := newRand(t, 0)
	for round := 0; round < 200; round++ {
		once, twice := declared(t), declared(t)
		for i, e := range randomEvents(rng, 60) {
			pos := wal.MakePosition(1, 32+i)
			require.NoError(t, once.Apply(pos, e))
			require.NoError(t, twice.Apply(pos, e))
			require.NoError(t, twice.Apply(pos, e))
		}
		require.Equal(t, snapshot(once.Queue("q"), 50), snapshot(twice.Queue("q"), 50), "round %d", round)
	}
}

func TestReadyOrderIsOldestEnqueuedFirst(t *testing.T) {
	x := declared(t)
	for i, at := range []int64{30, 10, 20, 10} {
		require.NoError(t, x.Apply(wal.MakePosition(1, 100+i), pub(uint64(i+1), at, "")))
	}
	q := x.Queue("q")
	var got []uint64
	for m := q.NextReady(); m != nil; m = q.NextReady() {
		got = append(got, m.Seq)
		q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: m.Seq, Deliveries: 1, Time: 1000})
	}
	require.Equal(t, []uint64{2, 4, 3, 1}, got)
}

func TestPromoteLapsesLeasesAtTheirInstant(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 0, "")))
	q := x.Queue("q")
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 50})
	q.Promote(49)
	require.Nil(t, q.NextReady())
	q.Promote(50)
	require.Equal(t, uint64(1), q.NextReady().Seq, "a lease lapses AT its expiry")

	// On the last allowed delivery the lapse exhausts it instead.
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 2, Time: 80})
	q.Promote(80)
	require.Nil(t, q.NextReady())
	require.Len(t, q.Exhausted(), 1)
	_, _, _, dead := q.Counts()
	require.Equal(t, 1, dead)
	q.Apply(0, &Event{Kind: KindDeadLetter, Queue: 1, Seq: 1, Deliveries: 2, Time: 80, Reason: "LEASE_EXPIRED"})
	require.Empty(t, q.Exhausted())
	require.Equal(t, uint64(1), q.DeadLetters(5)[0].Seq)
	require.Equal(t, 0, q.Live())
}

func TestDeadLettersOrderedByFailedAt(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	for i, failed := range []int64{30, 10, 20} {
		seq := uint64(i + 1)
		require.NoError(t, x.Apply(wal.MakePosition(1, 100+i), pub(seq, 0, "")))
		q.Apply(0, &Event{Kind: KindDeadLetter, Queue: 1, Seq: seq, Time: failed})
	}
	var got []uint64
	for _, m := range q.DeadLetters(10) {
		got = append(got, m.Seq)
	}
	require.Equal(t, []uint64{2, 3, 1}, got)
	require.Len(t, q.DeadLetters(2), 2)
	q.Apply(0, &Event{Kind: KindReplay, Queue: 1, Seq: 3})
	require.Len(t, q.DeadLetters(10), 2)
	require.Equal(t, Ready, q.Get(3).State)
	require.Zero(t, q.Get(3).Deliveries)
}

func TestSeenKeysEvictStrictlyOlderThanWindowAndNeverWhenTheClockGoesBack(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	q.EvictSeen(110, 10) // a is exactly 10 old: kept
	_, _, ok := q.Seen("a")
	require.True(t, ok)
	require.True(t, q.EvictSeen(111, 10), "it reports that it forgot a key")
	_, _, ok = q.Seen("a")
	require.False(t, ok)
	require.False(t, q.EvictSeen(112, 10), "and that it forgot nothing")
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), pub(2, 150, "b")))
	q.EvictSeen(200, 100) // b is 50 old: kept; and the clock is now 200
	q.EvictSeen(170, 10)  // backwards: nothing is evicted, although b is 20 old
	_, _, ok = q.Seen("b")
	require.True(t, ok)
	// A publish instant is a clock reading too, and it survives a replay:
	// a clock behind it evicts nothing.
	y := declared(t)
	require.NoError(t, y.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	require.NoError(t, y.Apply(wal.MakePosition(1, 200), pub(2, 1000, "late")))
	y.Queue("q").EvictSeen(500, 10)
	_, _, ok = y.Queue("q").Seen("a")
	require.True(t, ok)
	// A key survives its message's ack.
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 500})
	q.Apply(0, &Event{Kind: KindAck, Queue: 1, Seq: 2})
	seq, at, ok := q.Seen("b")
	require.True(t, ok)
	require.Equal(t, uint64(2), seq)
	require.Equal(t, int64(150), at)
}

// An evict event forgets on replay what the eviction forgot live.
func TestEvictEventReplaysTheEviction(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), &Event{Kind: KindEvict, Queue: 1, Time: 200, Window: 50}))
	_, _, ok := x.Queue("q").Seen("a")
	require.False(t, ok)
	// The eviction clock is a reading too: a clock behind it evicts
	// nothing, and a key published again is new.
	require.False(t, x.Queue("q").EvictSeen(150, 1))
}

// A logged eviction replays even behind a later reading: a segment's
// preamble carries the latest reading at its rotation, ahead of records
// queued before it, and an eviction of nothing (an infinite window) only
// raises the clock.
func TestEvictEventReplaysBehindALaterReading(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	require.NoError(t, x.Apply(wal.MakePosition(2, 50), &Event{Kind: KindEvict, Queue: 1, Time: 300, Window: math.MaxInt64}))
	_, _, ok := x.Queue("q").Seen("a")
	require.True(t, ok, "an eviction of nothing forgets nothing")
	require.Equal(t, int64(300), x.Queue("q").LastEvicts())
	require.NoError(t, x.Apply(wal.MakePosition(2, 100), &Event{Kind: KindEvict, Queue: 1, Time: 200, Window: 50}))
	_, _, ok = x.Queue("q").Seen("a")
	require.False(t, ok, "the logged eviction at 200 forgot a, 100 old")
	require.Equal(t, int64(300), x.Queue("q").LastEvicts(), "the clock keeps its latest reading")
	require.False(t, x.Queue("q").EvictSeen(250, 1), "live, a clock behind 300 evicts nothing")
}

func TestPendingUntilCommit(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	q.Apply(0, pub(1, 5, "k"))
	require.Equal(t, Pending, q.Get(1).State)
	require.Equal(t, 1, q.Live(), "a pending publish holds capacity")
	require.Nil(t, q.NextReady(), "and is not receivable")
	q.Commit(1, wal.MakePosition(1, 64))
	require.Equal(t, uint64(1), q.NextReady().Seq)
	require.Equal(t, wal.MakePosition(1, 64), q.NextReady().Pos)
	ready, _, _, _ := q.Counts()
	require.Equal(t, 1, ready)
	require.Equal(t, 1, q.Live())
}

func TestEventsForUnknownMessagesAreOrphans(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(0, &Event{Kind: KindAck, Queue: 1, Seq: 9}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindAck, Queue: 7, Seq: 9}))
	require.Equal(t, 2, x.Orphans)
}

func TestNextSeqFollowsReplay(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(41, 0, "")))
	for _, want := range []uint64{42, 43} {
		seq, err := x.NextSeq()
		require.NoError(t, err)
		require.Equal(t, want, seq)
	}
}

// A commit the stream's cursor has not passed joins the stream; one it
// passed (a later message was looked at first) becomes active. Either way
// it is receivable in EnqueuedAt order.
func TestCommitJoinsTheStreamUnlessTheCursorPassedIt(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	q.Apply(0, pub(1, 5, ""))
	q.Apply(0, pub(2, 6, ""))
	q.Commit(2, wal.MakePosition(1, 100))
	require.Equal(t, uint64(2), q.NextReady().Seq, "1 is pending: 2 is the oldest receivable")
	q.Commit(1, wal.MakePosition(1, 64))
	require.NotNil(t, q.Get(1), "the cursor passed 1: it is active")
	require.Nil(t, q.Get(2), "2 is in the stream")
	require.Equal(t, uint64(1), q.NextReady().Seq)
	ready, _, _, _ := q.Counts()
	require.Equal(t, 2, ready)
}

// Receive order across the stream and the active messages is EnqueuedAt,
// then sequence, whatever the mix of in-order, out-of-order, nacked and
// replayed messages.
func TestReadyOrderMergesStreamAndActive(t *testing.T) {
	rng := newRand(t, 1)
	for round := 0; round < 100; round++ {
		x := declared(t)
		q := x.Queue("q")
		type ref struct {
			seq uint64
			enq int64
		}
		var want []ref
		clock := int64(1000)
		for seq := uint64(1); seq <= 50; seq++ {
			clock += int64(rng.IntN(5)) - 1 // sometimes backwards
			require.NoError(t, x.Apply(wal.MakePosition(1, 32+int(seq)*64), pub(seq, clock, "")))
			want = append(want, ref{seq, clock})
		}
		// Lease a few from the head, nack some back at once.
		for range rng.IntN(10) {
			m := q.NextReady()
			q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: m.Seq, Deliveries: 1, Time: 5000})
			q.Apply(0, &Event{Kind: KindNack, Queue: 1, Seq: m.Seq, Deliveries: 1, Time: 0})
		}
		q.Promote(0)
		slices.SortFunc(want, func(a, b ref) int {
			if a.enq != b.enq {
				return int(a.enq - b.enq)
			}
			return int(a.seq) - int(b.seq)
		})
		var got, exp []uint64
		for _, r := range want {
			exp = append(exp, r.seq)
		}
		for m := q.NextReady(); m != nil; m = q.NextReady() {
			got = append(got, m.Seq)
			q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: m.Seq, Deliveries: 2, Time: 5000})
		}
		require.Equal(t, exp, got, "round %d", round)
		ready, leased, _, _ := q.Counts()
		require.Zero(t, ready)
		require.Equal(t, 50, leased)
	}
}

// TestAPublishAppliedAtAPositionCommitsItsPendingMessage: a publish applied
// at the position of its record, while its message is Pending, is that
// message's commit there (as Commit is), not a copy of a record that was
// never written: the message becomes receivable, counted in its segment.
func TestAPublishAppliedAtAPositionCommitsItsPendingMessage(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	e := pub(1, 5, "")
	_, err := q.Apply(0, e)
	require.NoError(t, err)
	require.Equal(t, Pending, q.Get(1).State)
	pos := wal.MakePosition(1, 64)
	require.NoError(t, x.Apply(pos, e))
	m := q.NextReady()
	require.NotNil(t, m, "the committed message is receivable")
	require.Equal(t, uint64(1), m.Seq)
	require.Equal(t, pos, m.Pos)
	require.Equal(t, 1, q.Live())
	require.Equal(t, map[uint32]SegmentUse{1: {Messages: 1, Bytes: int64(m.Size), MinSeq: 1, MaxSeq: 1}}, x.SegmentUses())
}

// TestAMessageIsCountedAtTheLengthOfItsRecord: the bytes a segment's use
// counts for a message are its publish record's frame, exactly, whatever
// the lengths of its varints (each length boundary on both sides, negative
// instants included) and of its key.
func TestAMessageIsCountedAtTheLengthOfItsRecord(t *testing.T) {
	var events []*Event
	for _, seq := range []uint64{1, 127, 128, 1<<14 - 1, 1 << 14, 1 << 40} {
		for _, at := range []int64{0, 63, 64, -64, -65, 8191, 8192, -8192, -8193, math.MaxInt64, math.MinInt64} {
			for _, key := range []string{"", "k", strings.Repeat("k", 127), strings.Repeat("k", 128)} {
				events = append(events, &Event{Kind: KindPublish, Queue: 1, Seq: seq, Time: at, Key: key, Payload: []byte("payload")})
			}
		}
	}
	for _, e := range events {
		x := declared(t)
		require.NoError(t, x.Apply(wal.MakePosition(1, 64), e))
		want := int64(segment.Size(len(e.Append(nil))))
		require.Equal(t, want, x.SegmentUses()[1].Bytes, "seq %d, at %d, key of %d bytes", e.Seq, e.Time, len(e.Key))
	}
}

// TestAKeyPublishedAgainIsEvictedByItsLatestInstant: a log that publishes a
// remembered key again for a later message (the eviction between them cut
// away by salvage) leaves the key naming the later message; an eviction
// past the first instant but not the second must keep it.
func TestAKeyPublishedAgainIsEvictedByItsLatestInstant(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "k")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), pub(2, 200, "k")))
	seq, at, ok := q.Seen("k")
	require.True(t, ok)
	require.Equal(t, uint64(2), seq)
	require.Equal(t, int64(200), at)
	require.False(t, q.EvictSeen(250, 100), "k, enqueued at 200, is 50 old")
	seq, _, ok = q.Seen("k")
	require.True(t, ok)
	require.Equal(t, uint64(2), seq)
	require.True(t, q.EvictSeen(301, 100))
	_, _, ok = q.Seen("k")
	require.False(t, ok)
	require.Zero(t, q.SeenCount())
}

// TestAPendingMessageThatGoesAwayWasNeverCounted: a Pending message's
// record is not in the log, so no segment or table chunk counts it; when
// it goes (acknowledged or deleted before its commit) nothing is uncounted,
// and a committed message of the same chunk stays counted there.
func TestAPendingMessageThatGoesAwayWasNeverCounted(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, 5, "")))
	uses, chunks := x.SegmentUses(), x.LiveChunks()
	for _, kind := range []Kind{KindAck, KindDelete} {
		_, err := q.Apply(0, pub(2, 6, ""))
		require.NoError(t, err)
		require.Equal(t, Pending, q.Get(2).State)
		_, err = q.Apply(0, &Event{Kind: kind, Queue: 1, Seq: 2})
		require.NoError(t, err)
		require.Nil(t, q.Get(2))
		require.Equal(t, uses, x.SegmentUses(), "after a %s", kind)
		require.Equal(t, chunks, x.LiveChunks(), "after a %s", kind)
		require.Equal(t, 1, q.Live())
	}
}

// TestACopiedRecordIsCountedAtItsOwnLength: a message copied forward may
// get a shorter record (its key dropped once forgotten): its new segment
// counts the copy's length (and, for the active one, the lease a copy
// restates it with), and its ack uncounts exactly that, whether the
// message waited in the stream or was active. (The keys, which this test
// does not evict, still pin the first segment.)
func TestACopiedRecordIsCountedAtItsOwnLength(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	keyed := func(seq uint64, at int64) *Event {
		e := pub(seq, at, "a-key-of-some-length")
		e.Payload = []byte("payload")
		return e
	}
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), keyed(1, 10)))
	require.NoError(t, x.Apply(wal.MakePosition(1, 256), keyed(2, 20)))
	lease := &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 90}
	require.NoError(t, x.Apply(wal.MakePosition(1, 512), lease))
	require.Nil(t, q.Get(1), "1 waits in the stream")
	require.NotNil(t, q.Get(2), "2 is active")
	var want int64
	for i, seq := range []uint64{1, 2} {
		copied := keyed(seq, 10*int64(seq))
		copied.Key = ""
		require.NoError(t, x.Apply(wal.MakePosition(2, 64+256*i), copied))
		want += int64(publishSize(copied))
	}
	require.Equal(t, SegmentUse{Messages: 2, Bytes: want, StateBytes: int64(segment.Size(len(lease.Append(nil)))), MinSeq: 1, MaxSeq: 2}, x.SegmentUses()[2])
	_, size := x.LargestLive()
	require.Equal(t, publishSize(&Event{Kind: KindPublish, Queue: 1, Seq: 2, Time: 20, Payload: []byte("payload")}), size)
	require.NoError(t, x.Apply(wal.MakePosition(2, 700), &Event{Kind: KindAck, Queue: 1, Seq: 2}))
	require.NoError(t, x.Apply(wal.MakePosition(2, 800), &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 90}))
	require.NoError(t, x.Apply(wal.MakePosition(2, 900), &Event{Kind: KindAck, Queue: 1, Seq: 1}))
	for seg, u := range x.SegmentUses() {
		require.Zero(t, u.Messages, "segment %d", seg)
		require.Zero(t, u.Bytes, "segment %d: the acks uncounted other lengths than were counted", seg)
		require.Zero(t, u.StateBytes, "segment %d", seg)
	}
}

// TestEvictionForgetsExactlyTheKeysPastTheWindow: however the keys'
// instants interleave, each eviction forgets every key enqueued more than
// the window before the clock, and no other.
func TestEvictionForgetsExactlyTheKeysPastTheWindow(t *testing.T) {
	for _, ats := range [][]int64{
		{70, 20, 90, 10, 60, 30, 100, 50, 80, 40, 15, 95, 5, 85, 25, 65, 45, 55, 35, 75},
		{100, 95, 90, 85, 80, 75, 70, 65, 60, 55, 50, 45, 40, 35, 30, 25, 20, 15, 10, 5},
		{5, 100, 10, 95, 15, 90, 20, 85, 25, 80, 30, 75, 35, 70, 40, 65, 45, 60, 50, 55},
	} {
		x := declared(t)
		q := x.Queue("q")
		for i, at := range ats {
			require.NoError(t, x.Apply(wal.MakePosition(1, 64*(i+1)), pub(uint64(i+1), at, fmt.Sprintf("k%d", at))))
		}
		for clock := int64(100); clock <= 205; clock += 5 {
			q.EvictSeen(clock, 100)
			for _, at := range ats {
				_, _, ok := q.Seen(fmt.Sprintf("k%d", at))
				require.Equal(t, clock-at <= 100, ok, "keys enqueued at %v: the one at %d, evicted at %d with a window of 100", ats, at, clock)
			}
		}
		require.Zero(t, q.SeenCount())
	}
}

// TestACommitOfAMessageNotPendingLeavesItAsItIs: a commit finds the
// message committed already (a checkpoint commits every queued publish)
// and, maybe, leased, dead or nacked since: it changes nothing, and the
// message's segment counts it once.
func TestACommitOfAMessageNotPendingLeavesItAsItIs(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	for seq := uint64(1); seq <= 3; seq++ {
		_, err := q.Apply(0, pub(seq, int64(seq), ""))
		require.NoError(t, err)
		require.NoError(t, q.Commit(seq, wal.MakePosition(1, 64*int(seq))))
	}
	require.NoError(t, x.Apply(wal.MakePosition(2, 64), &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 90, Nonce: 7}))
	require.NoError(t, x.Apply(wal.MakePosition(2, 128), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 2, Deliveries: 1, Time: 50}))
	require.NoError(t, x.Apply(wal.MakePosition(2, 192), &Event{Kind: KindLease, Queue: 1, Seq: 3, Deliveries: 1, Time: 90}))
	require.NoError(t, x.Apply(wal.MakePosition(2, 256), &Event{Kind: KindNack, Queue: 1, Seq: 3, Deliveries: 1, Time: 80}))
	before, uses := q.Dump(0), x.SegmentUses()
	for seq := uint64(1); seq <= 3; seq++ {
		require.NoError(t, q.Commit(seq, wal.MakePosition(3, 64*int(seq))))
	}
	require.Equal(t, before, q.Dump(0))
	require.Equal(t, uses, x.SegmentUses())
	require.Equal(t, Leased, q.Get(1).State)
	require.Equal(t, uint64(7), q.Get(1).Nonce)
}
