package index

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestACheckpointHoldingWhatNoIndexHoldsIsRefused: a checkpoint whose
// checksum verifies but whose contents no index could hold — a stream
// outside the sequences taken, a message marked gone past its stream's
// end, a message in no state, at the next sequence or twice, a queue
// twice, a table file twice — was written by other code, or by a bug: Load
// refuses it, so that the store rebuilds from the log rather than trust
// it. Each case breaks one rule by the least it can. (A message marked
// gone behind the cursor is harmless, and dropped: see
// TestACheckpointWithAMessageGoneBehindItsCursorLoadsWithoutIt.)
func TestACheckpointHoldingWhatNoIndexHoldsIsRefused(t *testing.T) {
	// Messages 1 to 6 in queue q's stream, 3 leased out of it: the stream
	// is [1, 6], 3 is gone from it, and the next sequence is 7.
	build := func(t *testing.T) (*Index, string) {
		dir := t.TempDir()
		x, err := Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = x.Table.Close() })
		require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
		require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 2, Name: "r"}))
		for i := 1; i <= 6; i++ {
			require.NoError(t, x.Apply(wal.MakePosition(1, 100*i), pub(uint64(i), int64(i), "")))
		}
		require.NoError(t, x.Apply(wal.MakePosition(1, 700), &Event{Kind: KindLease, Queue: 1, Seq: 3, Deliveries: 1, Time: 99, Nonce: 5}))
		q := x.Queue("q")
		require.Equal(t, uint64(1), q.cursor)
		require.Equal(t, uint64(6), q.streamMax)
		require.Equal(t, map[uint64]struct{}{3: {}}, q.gone)
		require.Equal(t, uint64(7), x.PeekNextSeq())
		return x, dir
	}
	for _, c := range []struct {
		name   string
		break_ func(x *Index)
		says   string
	}{
		{"a stream starting at 0", func(x *Index) { x.Queue("q").cursor = 0 }, "outside the sequences taken"},
		{"a stream ending at the next sequence", func(x *Index) { x.Queue("q").streamMax = 7 }, "outside the sequences taken"},
		{"a cursor two past the stream's end", func(x *Index) {
			q := x.Queue("q")
			q.cursor, q.fresh = 8, 0
			clear(q.gone)
		}, "outside the sequences taken"},
		{"a message gone just past the stream's end", func(x *Index) { x.Queue("q").gone[7] = struct{}{} }, "gone past its stream's end"},
		{"a message in no state", func(x *Index) { x.Queue("q").msgs[3].State = 0 }, "in state 0"},
		{"a message at the next sequence", func(x *Index) {
			x.Queue("q").msgs[7] = &Message{Seq: 7, EnqueuedAt: 7, Pos: wal.MakePosition(1, 800), State: Ready, Size: 24}
		}, "outside the sequences taken"},
		{"a message twice", func(x *Index) {
			q := x.Queue("q")
			q.msgs[5] = q.msgs[3]
		}, "or twice"},
		{"a queue number twice", func(x *Index) { x.queues[2].ID = 1 }, "twice"},
		{"a queue name twice", func(x *Index) { x.queues[2].Name = "q" }, "twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, dir := build(t)
			c.break_(x)
			checkpointAt(t, x, dir, wal.MakePosition(1, 800))
			_, _, err := Load(vfs.Default, dir)
			require.ErrorIs(t, err, ErrDamaged)
			require.ErrorContains(t, err, c.says)
		})
	}

	t.Run("a table file twice", func(t *testing.T) {
		x, dir := build(t)
		checkpointAt(t, x, dir, wal.MakePosition(1, 800))
		y, _, err := Load(vfs.Default, dir)
		require.NoError(t, err, "the checkpoint as written")
		require.NoError(t, y.Table.Close())
		// The body ends with the list of table files: one, chunk 0.
		rewriteCheckpoint(t, dir, func(body []byte) []byte {
			require.True(t, bytes.HasSuffix(body, []byte{1, 0}))
			return append(body[:len(body)-2], binary.AppendUvarint(nil, 2)[0], 0, 0)
		})
		_, _, err = Load(vfs.Default, dir)
		require.ErrorIs(t, err, ErrDamaged)
		require.ErrorContains(t, err, "named twice")
	})
}

// TestASnapshotOfAPendingMessageIsRefused: a message whose publish record
// is not in the log yet has no place in a checkpoint (Load would refuse it
// for its state): the snapshot is refused, and nothing is detached.
func TestASnapshotOfAPendingMessageIsRefused(t *testing.T) {
	x, err := Rebuild(vfs.Default, t.TempDir())
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q"}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 1, "")))
	require.NoError(t, x.Apply(0, pub(2, 2, "")))
	require.Equal(t, Pending, x.Queue("q").Get(2).State)
	snap, err := x.Snapshot(wal.MakePosition(1, 200), nil)
	require.ErrorContains(t, err, "pending")
	require.Nil(t, snap)
	require.Equal(t, 1, x.Table.Unflushed(), "a refused snapshot detached the table's entries")
}

// TestACheckpointWhoseSealedSegmentsDoNotReadGivesNoHints: a checkpoint
// whose list of sealed segments ends before its last offset is one Load
// refuses, so the log must not take its word either: no segment is
// trusted as sealed, and no position as verified.
func TestACheckpointWhoseSealedSegmentsDoNotReadGivesNoHints(t *testing.T) {
	dir := hintingCheckpoint(t)

	// One sealed segment, number 1, and then nothing.
	rewriteCheckpoint(t, dir, func(body []byte) []byte {
		require.Equal(t, []byte{1, 1}, body[:2])
		return body[:2]
	})
	_, _, err := Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	sealed, pos := LogHints(vfs.Default, dir)
	require.Nil(t, sealed)
	require.Zero(t, pos)
}

// TestACheckpointHoldingASecretOfAnotherLengthIsRefused: the store's
// secret is exactly SecretSize bytes (the segments' preambles carry it so);
// a checkpoint holding a shorter or a longer one is refused.
func TestACheckpointHoldingASecretOfAnotherLengthIsRefused(t *testing.T) {
	for _, n := range []int{1, SecretSize - 1, SecretSize + 1} {
		dir := t.TempDir()
		x, err := Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		require.NoError(t, x.Apply(0, &Event{Kind: KindMeta, Secret: bytes.Repeat([]byte{7}, SecretSize)}))
		checkpointAt(t, x, dir, wal.MakePosition(2, 100))
		require.NoError(t, x.Table.Close())
		y, _, err := Load(vfs.Default, dir)
		require.NoError(t, err)
		require.NoError(t, y.Table.Close())

		was := append([]byte{SecretSize}, bytes.Repeat([]byte{7}, SecretSize)...)
		now := append([]byte{byte(n)}, bytes.Repeat([]byte{7}, n)...)
		rewriteCheckpoint(t, dir, func(body []byte) []byte {
			require.Equal(t, 1, bytes.Count(body, was))
			return bytes.Replace(body, was, now, 1)
		})
		_, _, err = Load(vfs.Default, dir)
		require.ErrorIs(t, err, ErrDamaged, "a secret of %d bytes", n)
		require.ErrorContains(t, err, "secret")
	}
}

// TestARebuildLeavesNoCheckpointToLoad: Rebuild starts the index afresh
// from the log, and the checkpoint it replaces is gone at once: until the
// rebuilt index writes its own, an open finds none to load.
func TestARebuildLeavesNoCheckpointToLoad(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q"}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "")))
	checkpointAt(t, x, dir, wal.MakePosition(1, 200))
	require.NoError(t, x.Table.Close())

	y, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	require.Empty(t, y.Queues())
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// A checkpoint whose list of table files leaves out a chunk that holds
// stream messages (it counts more than the active messages it holds) is
// refused as damage: loaded, OpenTable removed the chunk's file as
// unwanted, and the stream's walk jumped over its messages without a
// word, handing out message ChunkEntries+5 before message 5.
func TestACheckpointNamingNoFileForAChunkOfStreamMessagesIsRefused(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 5}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(5, 100, "")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), pub(ChunkEntries+5, 100, "")))
	snap, err := x.Snapshot(wal.MakePosition(1, 300), map[uint32]int{})
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1}, x.Table.Chunks())
	require.Equal(t, []uint64{0, 1}, x.LiveChunks())
	require.NoError(t, x.Table.Close())
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, []uint64{1}))
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "table chunk 0 counts 1 messages of the stream, and no table file is named for it")
	_, err = os.Stat(filepath.Join(dir, chunkName(0)))
	require.NoError(t, err, "the refused checkpoint's table file is left for the rebuild to find")
}
