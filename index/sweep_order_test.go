package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/wal"
)

// exhaustedQueue returns queue q of an index holding n messages leased on
// their last delivery (MaxDeliveries 2) that lapsed at 100, in sequence
// order: the exhausted leases a dead-letter sweep takes.
func exhaustedQueue(t testing.TB, n int) *Queue {
	t.Helper()
	x := declared(t)
	q := x.Queue("q")
	for i := range n {
		seq := uint64(i + 1)
		require.NoError(t, x.Apply(wal.MakePosition(1, 100+i), pub(seq, 0, "")))
		_, err := q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: seq, Deliveries: 2, Time: 100})
		require.NoError(t, err)
	}
	q.Promote(100)
	require.Len(t, q.Exhausted(), n)
	return q
}

func seqsOf(ms []*Message) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

func deadLetter(t testing.TB, q *Queue, seq uint64, failed int64) {
	t.Helper()
	_, err := q.Apply(0, &Event{Kind: KindDeadLetter, Queue: 1, Seq: seq, Deliveries: 2, Time: failed, Reason: "LEASE_EXPIRED"})
	require.NoError(t, err)
}

// TestExhaustedLeasesLeaveInAnyOrderAndKeepTheRestsOrder: the sweep
// dead-letters exhausted leases first to last, but any of them may leave
// first (an ack of one, say): each leaves the list exactly once, and the
// others keep their order.
func TestExhaustedLeasesLeaveInAnyOrderAndKeepTheRestsOrder(t *testing.T) {
	q := exhaustedQueue(t, 6)
	deadLetter(t, q, 1, 100) // the first
	require.Equal(t, []uint64{2, 3, 4, 5, 6}, seqsOf(q.Exhausted()))
	deadLetter(t, q, 4, 100) // one in the middle
	require.Equal(t, []uint64{2, 3, 5, 6}, seqsOf(q.Exhausted()))
	_, err := q.Apply(0, &Event{Kind: KindAck, Queue: 1, Seq: 6}) // the last
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 3, 5}, seqsOf(q.Exhausted()))
	for _, seq := range []uint64{2, 3, 5} {
		deadLetter(t, q, seq, 100)
	}
	require.Empty(t, q.Exhausted())
	require.Equal(t, []uint64{1, 2, 3, 4, 5}, seqsOf(q.DeadLetters(10)))
	_, _, _, dead := q.Counts()
	require.Equal(t, 5, dead)
	require.Equal(t, 0, q.Live())
}

// TestDeadLettersLeaveInAnyOrderAndKeepTheRestsOrder: deleting or
// replaying the oldest dead letter, one in the middle or the newest
// leaves the others in FailedAt order.
func TestDeadLettersLeaveInAnyOrderAndKeepTheRestsOrder(t *testing.T) {
	q := exhaustedQueue(t, 5)
	for seq := uint64(1); seq <= 5; seq++ {
		deadLetter(t, q, seq, int64(100+seq))
	}
	_, err := q.Apply(0, &Event{Kind: KindDelete, Queue: 1, Seq: 1}) // the oldest
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 3, 4, 5}, seqsOf(q.DeadLetters(10)))
	_, err = q.Apply(0, &Event{Kind: KindReplay, Queue: 1, Seq: 2}) // the oldest again
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4, 5}, seqsOf(q.DeadLetters(10)))
	_, err = q.Apply(0, &Event{Kind: KindDelete, Queue: 1, Seq: 4})
	require.NoError(t, err)
	_, err = q.Apply(0, &Event{Kind: KindDelete, Queue: 1, Seq: 5})
	require.NoError(t, err)
	require.Equal(t, []uint64{3}, seqsOf(q.DeadLetters(10)))
	deadLetter(t, q, 2, 200) // the replayed one dies again, newest
	require.Equal(t, []uint64{3, 2}, seqsOf(q.DeadLetters(10)))
}

// BenchmarkDeadLetterSweep dead-letters n exhausted leases in the sweep's
// order, then deletes the dead letters oldest first; the cost per message
// should not grow with n.
func BenchmarkDeadLetterSweep(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				q := exhaustedQueue(b, n)
				b.StartTimer()
				for _, m := range append([]*Message(nil), q.Exhausted()...) {
					deadLetter(b, q, m.Seq, 100)
				}
				for seq := uint64(1); seq <= uint64(n); seq++ {
					if _, err := q.Apply(0, &Event{Kind: KindDelete, Queue: 1, Seq: seq}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

// BenchmarkExhaustedLeaveFromTheMiddle takes exhausted leases out of the
// middle of the list, in no order the sweep would take them (acks, say,
// applied from a log): the cost of each should not grow with how many
// exhausted leases the queue holds.
func BenchmarkExhaustedLeaveFromTheMiddle(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			const k = 500 // leaves per queue built
			var q *Queue
			next := uint64(0)
			left := 0
			for b.Loop() {
				if left == 0 {
					b.StopTimer()
					q = exhaustedQueue(b, n)
					next, left = uint64(n/4), k
					b.StartTimer()
				}
				// Every other one from a quarter in: each leaves the
				// middle of what is left.
				if _, err := q.Apply(0, &Event{Kind: KindAck, Queue: 1, Seq: next}); err != nil {
					b.Fatal(err)
				}
				next += 2
				left--
			}
		})
	}
}

// TestExhaustedLeasesLeaveInRandomOrder takes exhausted leases out in a
// random order, with more lapsing between, and checks after each that
// the rest keep their order and their count, and that the list's places
// agree (Verify).
func TestExhaustedLeasesLeaveInRandomOrder(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	const n = 300
	q := exhaustedQueue(t, n)
	want := seqsOf(q.Exhausted())
	next := uint64(n + 1)
	for len(want) > 0 {
		i := rng.IntN(len(want))
		if rng.IntN(2) == 0 {
			deadLetter(t, q, want[i], 100)
		} else {
			_, err := q.Apply(0, &Event{Kind: KindAck, Queue: 1, Seq: want[i]})
			require.NoError(t, err)
		}
		want = slices.Delete(want, i, i+1)
		if rng.IntN(10) == 0 && next < 2*n {
			// One more lapses on its last delivery: it joins the end.
			require.NoError(t, q.x.Apply(wal.MakePosition(1, 100+int(next)), pub(next, 0, "")))
			_, err := q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: next, Deliveries: 2, Time: 100})
			require.NoError(t, err)
			q.Promote(100)
			want = append(want, next)
			next++
		}
		require.Equal(t, len(want), q.ExhaustedLen(), "seed %d", seed)
		_, _, _, dead := q.Counts()
		require.Equal(t, q.dead.Len()+len(want), dead, "seed %d", seed)
		require.NoError(t, q.x.Verify(), "seed %d", seed)
		if rng.IntN(20) == 0 {
			require.Equal(t, want, seqsOf(q.Exhausted()), "seed %d", seed)
		}
	}
	require.Empty(t, q.Exhausted())
	require.Zero(t, q.ExhaustedLen())
}

// Exhausted hands out a slice of the caller's own: changing it, or
// appending to it, leaves the queue's list as it was.
func TestExhaustedReturnsASliceTheCallerMayChange(t *testing.T) {
	q := exhaustedQueue(t, 3)
	got := q.Exhausted()
	want := seqsOf(got)
	got[0] = nil
	slices.Reverse(got[1:])
	_ = append(got[:1], got[2])
	require.Equal(t, want, seqsOf(q.Exhausted()), "the queue's list changed with the caller's slice")
	require.NoError(t, q.exhausted.verify(), "the queue's list no longer knows its places")
}
