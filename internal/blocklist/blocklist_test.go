package blocklist

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

type item struct {
	key int
	seq uint64
}

func byKey(a, b *item) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.seq, b.seq)) }

func seqsOf(items []*item) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.seq
	}
	return out
}

// TestListKeepsItsOrderThroughEveryChange: insertions and removals
// anywhere, across blocks cut in two and blocks emptied, leave the list
// in order, holding what a sorted slice holds.
func TestListKeepsItsOrderThroughEveryChange(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var l List[*item]
	var want []*item
	for step := range 20_000 {
		if len(want) == 0 || rng.IntN(3) > 0 {
			it := &item{key: rng.IntN(5000), seq: uint64(step + 1)}
			l.Insert(it, byKey)
			i, _ := slices.BinarySearchFunc(want, it, byKey)
			want = slices.Insert(want, i, it)
		} else {
			i := rng.IntN(len(want))
			if rng.IntN(4) == 0 {
				i = 0 // from the front, as a user empties a dead-letter list
			}
			require.True(t, l.Remove(want[i], byKey), "step %d", step)
			require.False(t, l.Remove(want[i], byKey), "step %d: removed twice", step)
			want = slices.Delete(want, i, i+1)
		}
		require.Equal(t, len(want), l.Len())
		if step%997 == 0 || l.Len() < 3 {
			require.Equal(t, seqsOf(want), seqsOf(l.First(l.Len())), "step %d", step)
			require.Equal(t, seqsOf(want[:min(7, len(want))]), seqsOf(l.First(7)), "step %d", step)
			for _, blk := range l.blocks {
				require.NotEmpty(t, blk)
				require.LessOrEqual(t, len(blk), 2*Block)
			}
		}
	}
	require.False(t, l.Remove(&item{seq: 1 << 40}, byKey), "an element never inserted")
	require.False(t, l.Remove(&item{key: want[0].key, seq: want[0].seq}, byKey), "an equal element that is not the one inserted")
}

// TestRemovingTheFirstMovesNoOther: the index's dead-letter sweep and a
// user emptying the dead letters in DeadLetters' order both remove the
// first of a slice, again and again; shifting the rest each time made
// emptying a slice of n quadratic in n (seconds for 200,000 under the
// queue's lock). Removing the first leaves the others where they are.
func TestRemovingTheFirstMovesNoOther(t *testing.T) {
	items := []*item{{seq: 1}, {seq: 2}, {seq: 3}}
	arr := items
	items = DeleteAt(items, 0)
	require.Equal(t, []uint64{2, 3}, seqsOf(items))
	require.Same(t, &arr[1], &items[0], "removing the first moved the others")
	require.Nil(t, arr[0], "the removed item is still referenced by the array")
	items = DeleteAt(items, 1)
	require.Equal(t, []uint64{2}, seqsOf(items))
	require.Nil(t, DeleteAt(items, 0), "an emptied slice lets its array go")
}

// TestFirstOfNoneOrFewerIsEmpty: First with a max of zero or less
// returns nothing (its callers refuse such a max first; the list does
// not rely on that).
func TestFirstOfNoneOrFewerIsEmpty(t *testing.T) {
	var l List[*item]
	for i := range 3 {
		l.Insert(&item{key: i, seq: uint64(i)}, byKey)
	}
	for _, max := range []int{0, -1, math.MinInt} {
		require.Empty(t, l.First(max), "First(%d)", max)
	}
	require.Equal(t, []uint64{0, 1}, seqsOf(l.First(2)))
}
