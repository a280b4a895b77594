package index

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestACheckpointWritesNoTableEntryOfAChunkWhoseMessagesAreAllGone: the
// entries of a table chunk none of whose messages is live when the
// snapshot is taken are read by no one (every message acknowledged
// since its entry was put is behind its queue's cursor, or marked gone
// there), so the Flush after the snapshot does not write them. It used
// to: a busy queue that published and acknowledged a whole chunk between
// two checkpoints had the checkpoint create its 2 MiB file, write and
// fdatasync it, only for the broker to remove it at once, since the
// checkpoint names no file of a chunk with nothing live.
func TestACheckpointWritesNoTableEntryOfAChunkWhoseMessagesAreAllGone(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	pos := func(i int) wal.Position { return wal.MakePosition(1, 64+32*i) }
	// Chunk 0: messages 1 to 3, every one acknowledged (2 leased first,
	// away from the cursor: it is marked gone). Chunk 1: message
	// ChunkEntries+1, live.
	for seq := uint64(1); seq <= 3; seq++ {
		require.NoError(t, x.Apply(pos(int(seq)), pub(seq, int64(seq), "")))
	}
	require.NoError(t, x.Apply(pos(4), &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 100}))
	require.NoError(t, x.Apply(pos(5), &Event{Kind: KindMark, Seq: ChunkEntries + 1}))
	require.NoError(t, x.Apply(pos(6), pub(ChunkEntries+1, 10, "")))
	for i, seq := range []uint64{2, 1, 3} {
		require.NoError(t, x.Apply(pos(7+i), &Event{Kind: KindAck, Queue: 1, Seq: seq}))
	}
	require.Equal(t, []uint64{1}, x.LiveChunks())

	snap, err := x.Snapshot(pos(10), nil)
	require.NoError(t, err)
	created, err := x.Table.Flush(true)
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, created, "the flush made a table file of chunk 0, whose messages are all gone")
	require.Equal(t, []uint64{1}, x.Table.Chunks())
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, x.Table.Chunks()))

	// The queue, and the checkpoint, still hand out the live message.
	require.Equal(t, uint64(ChunkEntries+1), x.Queue("q").NextReady().Seq)
	require.NoError(t, x.Verify())
	y, from, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	require.Equal(t, pos(10), from)
	require.Equal(t, dumpAll(x, 50), dumpAll(y, 50))
	require.NoError(t, y.Verify())
}
