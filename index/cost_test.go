package index

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/wal"
)

// leasedQueue returns queue q of an index holding n messages leased with
// deliveries left (MaxDeliveries 2), none lapsed.
func leasedQueue(t testing.TB, n int) *Queue {
	t.Helper()
	x := declared(t)
	q := x.Queue("q")
	for i := range n {
		seq := uint64(i + 1)
		require.NoError(t, x.Apply(wal.MakePosition(1, 100+i), pub(seq, 0, "")))
		_, err := q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: seq, Deliveries: 1, Time: 1000})
		require.NoError(t, err)
	}
	return q
}

// TestCountsAgreeWithWhatTheHeapsHold: the gauges Counts keeps agree,
// after every event of random streams and a Promote at a random instant,
// with a walk of the heaps (what Counts did before it kept them), and
// Verify agrees with the heaps' counts.
func TestCountsAgreeWithWhatTheHeapsHold(t *testing.T) {
	rng := newRand(t, 0)
	for round := range 200 {
		x := declared(t)
		q := x.Queue("q")
		for i, e := range randomEvents(rng, 80) {
			require.NoError(t, x.Apply(wal.MakePosition(1, 32+i), e))
			if rng.IntN(4) == 0 {
				q.Promote(int64(rng.IntN(120)))
			}
			if rng.IntN(10) == 0 {
				p := q.Policy
				p.MaxDeliveries = int64(1 + rng.IntN(3))
				q.setPolicy(p)
			}
			ready, leased, delayed, dead := q.Counts()
			var wantLeased, wantDelayed int
			for _, m := range q.timers.items {
				if m.State == Leased {
					wantLeased++
				} else {
					wantDelayed++
				}
			}
			wantLeased += q.finals.Len()
			require.Equal(t, [4]int{q.ready.Len() + q.fresh, wantLeased, wantDelayed, q.dead.Len() + len(slices.DeleteFunc(slices.Clone(q.exhausted.items), func(m *Message) bool { return m == nil }))},
				[4]int{ready, leased, delayed, dead}, "round %d, event %d", round, i)
			require.NoError(t, x.Verify(), "round %d, event %d", round, i)
		}
	}
}

// deadQueue returns queue q of an index holding n dead letters, failed at
// 1 to n in sequence order.
func deadQueue(t testing.TB, n int) *Queue {
	t.Helper()
	x := declared(t)
	q := x.Queue("q")
	for i := range n {
		seq := uint64(i + 1)
		require.NoError(t, x.Apply(wal.MakePosition(1, 100+i), pub(seq, 0, "")))
		_, err := q.Apply(0, &Event{Kind: KindDeadLetter, Queue: 1, Seq: seq, Deliveries: 1, Time: int64(seq), Reason: "R"})
		require.NoError(t, err)
	}
	return q
}

// TestDeadListKeepsItsOrderThroughEveryChange: insertions and removals
// anywhere, across blocks cut in two and blocks emptied, leave the list
// in byFailed order, holding what a sorted slice holds (the blocks' shape
// is checked in package blocklist).
func TestDeadListKeepsItsOrderThroughEveryChange(t *testing.T) {
	rng := newRand(t, 1)
	var l deadList
	var want []*Message
	byKey := map[uint64]*Message{}
	for step := range 20_000 {
		if len(want) == 0 || rng.IntN(3) > 0 {
			seq := uint64(step + 1)
			m := &Message{Seq: seq, FailedAt: int64(rng.IntN(5000))}
			byKey[seq] = m
			l.insert(m)
			i, _ := slices.BinarySearchFunc(want, m, byFailed)
			want = slices.Insert(want, i, m)
		} else {
			i := rng.IntN(len(want))
			if rng.IntN(4) == 0 {
				i = 0 // oldest first, as a user empties the list
			}
			require.True(t, l.remove(want[i]), "step %d", step)
			require.False(t, l.remove(want[i]), "step %d: removed twice", step)
			want = slices.Delete(want, i, i+1)
		}
		require.Equal(t, len(want), l.Len())
		if step%997 == 0 || l.Len() < 3 {
			require.Equal(t, seqsOf(want), seqsOf(l.first(l.Len())), "step %d", step)
			require.Equal(t, seqsOf(want[:min(7, len(want))]), seqsOf(l.first(7)), "step %d", step)
		}
	}
	require.False(t, l.remove(&Message{Seq: 1 << 40}), "a message never inserted")
}

// BenchmarkDeadLetterRemoval replays a dead letter from the middle of a
// list of n and dead-letters it again, at its old place: a removal and an
// insertion there. The cost should not grow with n. When the list was one
// sorted slice, each removal shifted every dead letter after it under the
// queue's lock: 1,000 deletions from the middle of 400,000 took 68 ms
// against 0.24 ms from 4,000, and this benchmark 1.8 µs at n=10,000 and
// 16.5 µs at n=100,000; in blocks (deadList), 0.3 and 0.8 µs.
func BenchmarkDeadLetterRemoval(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			q := deadQueue(b, n)
			i := 0
			for b.Loop() {
				seq := uint64(n/4 + i%(n/2))
				i++
				if _, err := q.Apply(0, &Event{Kind: KindReplay, Queue: 1, Seq: seq}); err != nil {
					b.Fatal(err)
				}
				if _, err := q.Apply(0, &Event{Kind: KindDeadLetter, Queue: 1, Seq: seq, Deliveries: 1, Time: int64(seq), Reason: "R"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCounts reads the gauges of a queue holding n leases. Queue.Stats
// reads them under the queue's lock, which every publish waits for. When
// Counts walked the heap of leases and delays to tell them apart, it took
// 273 µs a call at n=100,000; counted as they come and go, about 2 ns
// whatever n is.
func BenchmarkCounts(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("leased=%d", n), func(b *testing.B) {
			q := leasedQueue(b, n)
			for b.Loop() {
				q.Counts()
			}
		})
	}
}
