package index

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// encodeRepeating encodes x's checkpoint body as Index.Snapshot does, but
// with the first entry of the list named repeat written twice (and counted
// so). "gone behind the cursor" adds the sequence just behind each queue's
// cursor to its gone marks, twice. With repeat empty it is Snapshot's
// body, byte for byte.
func encodeRepeating(t *testing.T, x *Index, sealed map[uint32]int, repeat string) []byte {
	t.Helper()
	var e encoder
	listed := map[string]bool{}
	list := func(name string, n int, each func(i int)) {
		listed[name] = true
		if name != repeat {
			e.uvarint(uint64(n))
			for i := range n {
				each(i)
			}
			return
		}
		require.NotZero(t, n, "no %s to repeat", name)
		e.uvarint(uint64(n + 1))
		each(0)
		for i := range n {
			each(i)
		}
	}
	segs := slices.Sorted(maps.Keys(sealed))
	list("sealed segment", len(segs), func(i int) {
		e.uvarint(uint64(segs[i]))
		e.uvarint(uint64(sealed[segs[i]]))
	})
	e.string(string(x.Secret))
	e.uvarint(uint64(x.Orphans))
	uses := slices.Sorted(maps.Keys(x.segs))
	list("segment use", len(uses), func(i int) {
		u := x.segs[uses[i]]
		e.uvarint(uint64(uses[i]))
		e.uvarint(uint64(u.Messages))
		e.uvarint(uint64(u.Bytes))
		e.uvarint(uint64(u.Keys))
		e.uvarint(u.MinSeq)
		e.uvarint(u.MaxSeq)
	})
	chunks := slices.Sorted(maps.Keys(x.chunks))
	list("live chunk", len(chunks), func(i int) {
		e.uvarint(chunks[i])
		e.uvarint(uint64(x.chunks[chunks[i]]))
	})
	ids := slices.Sorted(maps.Keys(x.queues))
	list("queue", len(ids), func(i int) {
		q := x.queues[ids[i]]
		e.uvarint(uint64(q.ID))
		e.string(q.Name)
		e.b = q.Policy.append(e.b)
		e.uvarint(q.cursor)
		e.uvarint(q.streamMax)
		e.varint(q.streamEnq)
		e.uvarint(uint64(q.fresh))
		e.varint(q.lastEvicts.Load())
		gone := slices.Sorted(maps.Keys(q.gone))
		if repeat == "gone behind the cursor" {
			require.Greater(t, q.cursor, uint64(1), "no sequence behind the cursor")
			gone = append([]uint64{q.cursor - 1, q.cursor - 1}, gone...)
		}
		list("gone message", len(gone), func(i int) { e.uvarint(gone[i]) })
		seqs := slices.Sorted(maps.Keys(q.msgs))
		list("message", len(seqs), func(i int) { q.msgs[seqs[i]].encode(&e) })
		keys := slices.Sorted(maps.Keys(q.seen))
		list("seen key", len(keys), func(i int) {
			k := q.seen[keys[i]]
			e.string(k.key)
			e.uvarint(k.seq)
			e.varint(k.enqueuedAt)
			e.uvarint(uint64(k.seg))
		})
	})
	if repeat != "" && repeat != "gone behind the cursor" {
		require.True(t, listed[repeat], "no list %q", repeat)
	}
	return e.b
}

// TestACheckpointListingAnEntryTwiceIsRefused: a checkpoint lists what it
// holds from maps, so it never names a thing twice: not a sealed segment,
// a segment's use, a table chunk's live count, a queue, a message marked
// gone (behind its stream's cursor or not), an active message or a dedup
// key. One that does was damaged, and taking it as it reads would keep
// one entry of the two, or both (a dedup key twice stood twice in its
// queue's eviction order): Load refuses it as ErrDamaged, naming the list
// and the entry, so that the store rebuilds from the log, and the log
// takes no hint from it either. Each case repeats the first entry of one
// list in the checkpoint of an index whose counts agree, which loads as
// written. (A queue or a message twice was refused before the other
// lists were checked; a table file twice: see
// TestACheckpointHoldingWhatNoIndexHoldsIsRefused.)
func TestACheckpointListingAnEntryTwiceIsRefused(t *testing.T) {
	// agreeingIndex, with message 1 leased too: its stream's cursor moves
	// past it, to 2, so that a gone mark may lie behind it.
	build := func(t *testing.T) (*Index, *Snapshot, string) {
		x, dir := agreeingIndex(t)
		require.NoError(t, x.Apply(wal.MakePosition(2, 300), &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 99, Nonce: 6}))
		require.Equal(t, uint64(2), x.Queue("q").cursor)
		require.Equal(t, map[uint64]struct{}{3: {}}, x.Queue("q").gone)
		snap, err := x.Snapshot(wal.MakePosition(2, 400), map[uint32]int{1: 4096})
		require.NoError(t, err)
		_, err = x.Table.Flush(true)
		require.NoError(t, err)
		return x, snap, dir
	}

	x, snap, dir := build(t)
	require.Equal(t, snap.body, encodeRepeating(t, x, map[uint32]int{1: 4096}, ""), "the body encodeRepeating writes is not Snapshot's")
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, x.Table.Chunks()))
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the checkpoint as written")
	require.NoError(t, y.Verify())
	require.NoError(t, y.Table.Close())

	for _, c := range []struct {
		repeat string
		says   string
	}{
		{"sealed segment", "sealed segment: 1 listed twice"},
		{"segment use", "segment: 1 listed twice"},
		{"live chunk", "live chunk: 0 listed twice"},
		{"queue", `queue 1 "q" twice`},
		{"gone message", "gone message: queue 1: message 3 listed twice"},
		{"gone behind the cursor", "gone message: queue 1: message 1 listed twice"},
		{"message", "message 1 outside the sequences taken (below 6), or twice"},
		{"seen key", `seen key: queue 1: "a" listed twice`},
	} {
		t.Run(c.repeat, func(t *testing.T) {
			x, snap, dir := build(t)
			snap.body = encodeRepeating(t, x, map[uint32]int{1: 4096}, c.repeat)
			require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, x.Table.Chunks()))
			y, _, err := Load(vfs.Default, dir)
			if err == nil {
				verr := y.Verify()
				_ = y.Table.Close()
				t.Fatalf("loaded (Verify: %v), not refused as ErrDamaged", verr)
			}
			require.ErrorIs(t, err, ErrDamaged)
			require.ErrorContains(t, err, c.says)
			if c.repeat == "sealed segment" {
				_, err := LoadCheckpointLog(vfs.Default, dir)
				require.ErrorIs(t, err, ErrDamaged)
				require.ErrorContains(t, err, c.says)
			}
		})
	}
}
