package index

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/wal"
)

// TestTakingAnyMessageOutOfTheReadySetKeepsTheRestInOrder: whichever
// receivable message is leased, from anywhere in the ready set, the others
// are still received oldest first. The instants are drawn from a fixed
// seed, so every run checks the same sets, among them those where the
// message moved into the leased one's place is older than that place's
// parent.
func TestTakingAnyMessageOutOfTheReadySetKeepsTheRestInOrder(t *testing.T) {
	const seed = 20261203
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range 300 {
		n := 6 + rng.IntN(10)
		at := make([]int64, n)
		for i := range at {
			at[i] = int64(rng.IntN(50))
		}
		for taken := range n {
			x := declared(t)
			q := x.Queue("q")
			// The first message is the stream's; the others, enqueued
			// earlier, are published out of order: active and ready.
			require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, 1000, "")))
			for i, a := range at {
				require.NoError(t, x.Apply(wal.MakePosition(1, 128+64*i), pub(uint64(i+2), a, "")))
			}
			takenSeq := uint64(taken + 2)
			require.NoError(t, x.Apply(wal.MakePosition(2, 64), &Event{Kind: KindLease, Queue: 1, Seq: takenSeq, Deliveries: 1, Time: 5000}))
			var want []uint64
			for i := range at {
				if seq := uint64(i + 2); seq != takenSeq {
					want = append(want, seq)
				}
			}
			slices.SortStableFunc(want, func(a, b uint64) int { return int(at[a-2] - at[b-2]) })
			want = append(want, 1)
			var got []uint64
			for m := q.NextReady(); m != nil; m = q.NextReady() {
				got = append(got, m.Seq)
				require.NoError(t, x.Apply(wal.MakePosition(3, 64), &Event{Kind: KindLease, Queue: 1, Seq: m.Seq, Deliveries: 1, Time: 5000}))
			}
			require.Equal(t, want, got, "seed %d, round %d: instants %v, message %d leased first", seed, round, at, takenSeq)
		}
	}
}

// TestAHeapThatShrankGivesBackItsArrayAndKeepsItsOrder: once a burst has
// left a heap, its array is given back (see msgHeap.remove), and the
// messages left keep their places (heapIdx) and their order.
func TestAHeapThatShrankGivesBackItsArrayAndKeepsItsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261207, 0))
	h := msgHeap{less: byDue, id: inTimers}
	const n = 20_000
	var all []*Message
	for i := range n {
		m := &Message{Seq: uint64(i + 1), At: int64(rng.IntN(1_000_000)), heapIdx: -1}
		all = append(all, m)
		h.push(m)
	}
	peak := cap(h.items)
	// Remove most of them from anywhere in the heap.
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, m := range all[:n-100] {
		h.remove(m)
	}
	require.Less(t, cap(h.items), peak/4, "a heap of %d left holds an array of %d (its peak: %d)", h.Len(), cap(h.items), peak)
	for i, m := range h.items {
		require.Equal(t, i, m.heapIdx)
		require.Equal(t, inTimers, m.heap)
	}
	var last int64 = -1
	for h.Len() > 0 {
		m := h.pop()
		require.GreaterOrEqual(t, m.At, last)
		last = m.At
	}
}
