package index

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// agreeingIndex returns an index in a directory of its own, built through
// Apply: queue q holds messages 1 to 4 in log segment 1 (2 with dedup key
// "a") and 5 in segment 2, all in its stream but 3, which is leased out of
// it. Every count it keeps agrees with what it holds.
func agreeingIndex(t *testing.T) (*Index, string) {
	t.Helper()
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = x.Table.Close() })
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	for i := 1; i <= 4; i++ {
		key := ""
		if i == 2 {
			key = "a"
		}
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*i), pub(uint64(i), int64(i), key)))
	}
	require.NoError(t, x.Apply(wal.MakePosition(2, 100), pub(5, 5, "")))
	require.NoError(t, x.Apply(wal.MakePosition(2, 200), &Event{Kind: KindLease, Queue: 1, Seq: 3, Deliveries: 1, Time: 99, Nonce: 5}))
	u := x.SegmentUses()
	require.Equal(t, 4, u[1].Messages)
	require.Equal(t, 1, u[1].Keys)
	require.Equal(t, 1, u[2].Messages)
	require.Equal(t, map[uint64]int{0: 5}, x.chunks)
	require.Equal(t, 4, x.Queue("q").fresh)
	require.Equal(t, uint64(6), x.PeekNextSeq())
	require.NoError(t, x.Verify())
	return x, dir
}

// TestACheckpointWhoseCountsDisagreeWithWhatItHoldsIsRefused: Load
// refuses as ErrDamaged a checkpoint that fails any check. Besides its
// messages and keys, a checkpoint keeps counts: what each log segment
// holds (SegmentUse), which decides when the segment may be removed, and
// the live messages of each table chunk, which decides when its file may
// be dropped. Each must agree with the messages and keys the checkpoint
// holds, as far as it can be told without reading the table's entries: a
// segment counting fewer messages than the active ones there, or none, is
// removed under them, and one counting more, or keys it does not hold, is
// never removed. The messages the segments and chunks count besides the
// active ones are the stream messages, and the queues count those too.
// Each case breaks one count by the least it can; the checkpoint of the
// unbroken index loads, and agrees with itself (Verify).
func TestACheckpointWhoseCountsDisagreeWithWhatItHoldsIsRefused(t *testing.T) {
	x, dir := agreeingIndex(t)
	checkpointAt(t, x, dir, wal.MakePosition(2, 300))
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the unbroken checkpoint")
	require.NoError(t, y.Verify())
	require.Equal(t, x.SegmentUses(), y.SegmentUses())
	require.NoError(t, y.Table.Close())

	for _, c := range []struct {
		name   string
		break_ func(x *Index)
		says   string
	}{
		{"a segment counting fewer messages than its active ones", func(x *Index) { x.segs[1].Messages = 0 }, "fewer than the 1 active"},
		{"a segment counting fewer bytes than its active messages", func(x *Index) { x.segs[1].Bytes = 1 }, "fewer than the 1 active"},
		{"a segment counting a message more", func(x *Index) { x.segs[2].Messages++ }, "the log segments count 5 messages besides the active ones, and the queues' streams 4"},
		{"a segment counting a key it does not hold", func(x *Index) { x.segs[2].Keys++ }, "dedup keys"},
		{"a segment's use under another number", func(x *Index) {
			x.segs[7] = x.segs[1]
			delete(x.segs, 1)
		}, "log segment 1 holds 1 messages and 1 dedup keys, and counts none"},
		{"a segment counting nothing", func(x *Index) { x.segs[9] = &SegmentUse{} }, "counts neither"},
		{"an active message outside the sequences its segment counts", func(x *Index) { x.segs[1].MinSeq = 4 }, "outside the sequences it counts"},
		{"a segment counting sequences not taken", func(x *Index) { x.segs[2].MaxSeq = 6 }, "outside the sequences taken"},
		{"a chunk counting a message more", func(x *Index) { x.chunks[0]++ }, "the table chunks count 5 messages besides the active ones"},
		{"a chunk counting more than it has entries", func(x *Index) { x.chunks[1] = ChunkEntries + 1 }, "room for"},
		{"the active messages' chunk counted nowhere", func(x *Index) { x.chunks = map[uint64]int{3: 4} }, "table chunk 0 holds 1 active messages, and counts none"},
		{"a message committed at position 0", func(x *Index) {
			q := x.Queue("q")
			x.segs[2].Messages++ // where Load looks for it
			x.segs[1].Messages--
			q.msgs[3].Pos = 0
		}, "position 0"},
		{"a dedup key naming a message not taken", func(x *Index) {
			q := x.Queue("q")
			k := q.seen["a"]
			k.seq = 6
			q.seen["a"] = k
		}, "dedup key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, dir := agreeingIndex(t)
			c.break_(x)
			checkpointAt(t, x, dir, wal.MakePosition(2, 300))
			y, _, err := Load(vfs.Default, dir)
			if err == nil {
				verr := y.Verify()
				_ = y.Table.Close()
				t.Fatalf("loaded, with counts that disagree (Verify: %v), not refused as ErrDamaged", verr)
			}
			require.ErrorIs(t, err, ErrDamaged)
			require.ErrorContains(t, err, c.says)
		})
	}
}

// TestVerifyTellsATableThatDisagreesFromAnIndexThatContradictsItself:
// Verify counts the index again, the table's entries included. Counts that
// agree with everything but the entries (a stream message's entry naming
// another segment than its use counts) are damage to the index files,
// found only by a walk: ErrDamaged. Counts that contradict the rest of the
// index (a stream counting a message more than the segments do) are not.
func TestVerifyTellsATableThatDisagreesFromAnIndexThatContradictsItself(t *testing.T) {
	x, _ := agreeingIndex(t)
	ent, ok, err := x.Table.Get(5)
	require.NoError(t, err)
	require.True(t, ok)
	ent.Pos = wal.MakePosition(1, 500)
	x.Table.Put(ent)
	err = x.Verify()
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "log segment 1 counts 4 messages of")
	require.ErrorContains(t, err, "and holds 5 of")

	x, _ = agreeingIndex(t)
	x.Queue("q").fresh++
	err = x.Verify()
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "the log segments count 4 messages besides the active ones, and the queues' streams 5")
}
