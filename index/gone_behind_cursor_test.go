package index

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestAJumpOverADroppedTableFileLeavesNothingGoneBehindTheCursor: a replay
// takes a stream message out of the stream away from the cursor (a lease),
// so the queue marks it gone until its cursor gets there. When every
// message of that message's table file is acknowledged, and the file
// dropped, before the cursor gets there, the cursor's jump to the next
// entry of its stream passes over the missing file: it must forget the
// gone message it passed. Kept, it lay below the cursor in every later
// checkpoint, which Load refused as damage, so that every open rebuilt the
// index from the log.
func TestAJumpOverADroppedTableFileLeavesNothingGoneBehindTheCursor(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "a", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 5}}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 2, Name: "b", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 5}}))

	off := 0
	at := func() wal.Position { off += 64; return wal.MakePosition(1+uint32(off/(1<<20)), off%(1<<20)+64) }
	apply := func(e *Event) { t.Helper(); require.NoError(t, x.Apply(at(), e)) }

	// Queue b's messages fill table file 0 around a's message g; a's
	// next, h, is in table file 1.
	const g, h = uint64(10), uint64(ChunkEntries + 10)
	for seq := uint64(1); seq <= h+5; seq++ {
		q := uint32(2)
		if seq == g || seq == h {
			q = 1
		}
		apply(&Event{Kind: KindPublish, Queue: q, Seq: seq, Time: 1000})
	}
	// As a replay applies them: g is leased away from a's cursor (at 1),
	// so it is gone, and acknowledged.
	apply(&Event{Kind: KindLease, Queue: 1, Seq: g, Deliveries: 1, Time: 5000, Nonce: 1})
	apply(&Event{Kind: KindAck, Queue: 1, Seq: g})
	a := x.Queue("a")
	require.Equal(t, map[uint64]struct{}{g: {}}, a.gone)
	checkpointAt(t, x, dir, at())
	require.Equal(t, []uint64{0, 1}, x.Table.Chunks())

	// Every message of b in table file 0 is acknowledged, and the
	// checkpointer drops the file, as Store.checkpointLocked does.
	for seq := uint64(1); seq < ChunkEntries; seq++ {
		if seq != g {
			apply(&Event{Kind: KindLease, Queue: 2, Seq: seq, Deliveries: 1, Time: 5000, Nonce: seq})
			apply(&Event{Kind: KindAck, Queue: 2, Seq: seq})
		}
	}
	require.Equal(t, []uint64{1}, x.LiveChunks())
	snap, err := x.Snapshot(at(), map[uint32]int{1: 4096})
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, []uint64{1}))
	require.NoError(t, x.Table.Remove(0))

	// A Receive on a walks its stream from 1 to h, over the missing file.
	m := a.NextReady()
	require.NotNil(t, m)
	require.Equal(t, h, m.Seq)
	require.NoError(t, x.Damaged())
	require.Equal(t, h, a.cursor)
	require.Empty(t, a.gone, "a gone message behind the cursor")

	checkpointAt(t, x, dir, at())
	loaded, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the checkpoint after the walk loads")
	defer loaded.Table.Close()
	require.Equal(t, dumpAll(x, 0), dumpAll(loaded, 0))
}

// TestACheckpointWithAMessageGoneBehindItsCursorLoadsWithoutIt: the walk
// over a dropped table file once left a gone message below the cursor,
// and every checkpoint written after holds it. Nothing reads the stream
// there, so Load drops it rather than refuse the checkpoint (a gone
// message past the stream's end is still refused: see
// TestACheckpointHoldingWhatNoIndexHoldsIsRefused).
func TestACheckpointWithAMessageGoneBehindItsCursorLoadsWithoutIt(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	for i := 1; i <= 6; i++ {
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*i), pub(uint64(i), int64(i), "")))
	}
	// 3 and 5 leased away from the cursor, 3 acknowledged; 1 and 2 leased
	// at it.
	for i, e := range []*Event{
		{Kind: KindLease, Queue: 1, Seq: 3, Deliveries: 1, Time: 99, Nonce: 1},
		{Kind: KindAck, Queue: 1, Seq: 3},
		{Kind: KindLease, Queue: 1, Seq: 5, Deliveries: 1, Time: 99, Nonce: 2},
		{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 99, Nonce: 3},
		{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 99, Nonce: 4},
	} {
		require.NoError(t, x.Apply(wal.MakePosition(1, 700+100*i), e))
	}
	q := x.Queue("q")
	require.Equal(t, uint64(3), q.cursor)
	require.Equal(t, map[uint64]struct{}{3: {}, 5: {}}, q.gone)
	// What the walk once did when 3's entry was missing: it jumped to 4
	// and kept 3.
	q.cursor = 4
	checkpointAt(t, x, dir, wal.MakePosition(1, 1200))

	loaded, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer loaded.Table.Close()
	lq := loaded.Queue("q")
	require.Equal(t, uint64(4), lq.cursor)
	require.Equal(t, []uint64{5}, slices.Sorted(maps.Keys(lq.gone)))
	require.Equal(t, dumpAll(x, 0), dumpAll(loaded, 0))
	m := lq.NextReady()
	require.NotNil(t, m)
	require.Equal(t, uint64(4), m.Seq)
}

// TestPassGoneForgetsWhatTheCursorJumpsOver: every gone message in the
// range the cursor jumps over is forgotten, and none past it, whether
// passGone looks up the range (shorter than the map) or goes through the
// map (smaller than the range).
func TestPassGoneForgetsWhatTheCursorJumpsOver(t *testing.T) {
	for _, c := range []struct {
		name     string
		gone     []uint64
		from, to uint64
		left     []uint64
	}{
		{"nothing gone", nil, 5, 1 << 40, nil},
		{"a range shorter than the map", []uint64{5, 7, 9, 20}, 5, 8, []uint64{9, 20}},
		{"a range as long as the map", []uint64{5, 7, 9, 20}, 5, 9, []uint64{9, 20}},
		{"a map smaller than the range", []uint64{5, 7, 9, 20}, 5, 10, []uint64{20}},
		{"a range far longer than the map", []uint64{6, 1 << 20, 1<<40 + 1}, 5, 1 << 40, []uint64{1<<40 + 1}},
		{"a range passing nothing gone", []uint64{9, 20}, 5, 9, []uint64{9, 20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newQueue(New(), 1, "q", Policy{})
			for _, s := range c.gone {
				q.gone[s] = struct{}{}
			}
			q.passGone(c.from, c.to)
			require.Equal(t, c.left, slices.Sorted(maps.Keys(q.gone)))
		})
	}
}
