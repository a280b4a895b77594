package index

// Tests for promises that mutation testing of the index found unchecked
// by the index's own tests: each one broken by hand (a bound moved by one,
// an update skipped, a copy made an alias) let every other test of the
// index pass. The broker's and the fuzz package's tests caught five of
// them, in minutes; two (LiveIn's bounds, the queue number 2^31) nothing
// caught.

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestACopyOfAnActiveMessageMovesItsKeyWithIt: when the reclamation copies
// the publish record of a leased (active) message forward, the message's
// dedup key lives in the copy's segment from then on, as it does for a
// message still in the stream. Left pinning the old segment, the key kept
// that segment counted as needed (Keys 1, no message) and, once the
// message was acknowledged, named it in Pinning as the key's home, so the
// reclamation would copy the key forward out of a segment the log no
// longer needs.
func TestACopyOfAnActiveMessageMovesItsKeyWithIt(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "k")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 50, Nonce: 7}))
	require.NotNil(t, q.Get(1), "a leased message is active")

	require.NoError(t, x.Apply(wal.MakePosition(2, 100), pub(1, 10, "k")))
	uses := x.SegmentUses()
	require.NotContains(t, uses, uint32(1), "segment 1 holds neither the message nor its key any more")
	require.Equal(t, 1, uses[2].Messages)
	require.Equal(t, 1, uses[2].Keys, "the key moved with its message's record")

	require.NoError(t, x.Apply(wal.MakePosition(2, 200), &Event{Kind: KindAck, Queue: 1, Seq: 1}))
	_, keys := q.Pinning(1, 0, math.MaxUint64)
	require.Empty(t, keys, "segment 1 pins no key")
	_, keys = q.Pinning(2, 0, math.MaxUint64)
	require.Equal(t, []KeyRef{{Key: "k", Seq: 1, EnqueuedAt: 10}}, keys)
}

// TestLiveInFindsAStreamMessageCommittedBeforeALowerSequence: publishes of
// two queues (or two producers of one) reach the log in either order of
// their sequences, so a segment can count message 2 before message 1. Its
// MaxSeq is still the highest sequence counted there: taken from the last
// one, it shrank to 1, and LiveIn, which walks the stream only within the
// segment's bounds, missed message 2 — a salvage would not have reported
// it lost, and the reclamation would not have copied it forward.
func TestLiveInFindsAStreamMessageCommittedBeforeALowerSequence(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(0, pub(1, 10, "")))
	require.NoError(t, x.Apply(0, pub(2, 20, "")))
	require.NoError(t, q.Commit(2, wal.MakePosition(1, 100)))
	require.NoError(t, q.Commit(1, wal.MakePosition(1, 200)))
	require.Zero(t, q.Active(), "both messages are in the stream")

	use := x.SegmentUses()[1]
	require.Equal(t, uint64(1), use.MinSeq)
	require.Equal(t, uint64(2), use.MaxSeq, "the bounds cover every message counted in the segment")
	require.Equal(t, []uint64{1, 2}, x.LiveIn(1, 0, 1000))
	msgs, _ := q.Pinning(1, use.MinSeq, use.MaxSeq)
	require.Len(t, msgs, 2)
}

// TestAMessageEventOfQueueTwoToTheThirtyOneIsRefused: the first number
// with the stream bit, exactly, is out of range for a message event as for
// a declaration. Taken as an orphan, it raised the highest queue number to
// 2³¹: NextQueueID said no number was left, and the next checkpoint held a
// number Load refuses.
func TestAMessageEventOfQueueTwoToTheThirtyOneIsRefused(t *testing.T) {
	x := declared(t)
	for _, k := range []Kind{KindPublish, KindAck, KindEvict} {
		err := x.Apply(wal.MakePosition(1, 64), &Event{Kind: k, Queue: 1 << 31, Seq: 1, Time: 1, Payload: []byte("p")})
		require.ErrorIs(t, err, ErrBadEvent, "%s", k)
	}
	require.Zero(t, x.Orphans)
	require.Equal(t, uint64(1), x.PeekNextSeq(), "a refused event took a sequence")
	id, ok := x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(2), id, "a refused event took a queue number")
}

// TestANoEvictionRecordForgetsNoKeyHoweverFarTheClockMoved: a segment's
// preamble logs an evict event with the window NoEviction for every queue,
// to carry a clock reading. It forgets nothing even when the reading and a
// key's instant are further apart than MaxInt64 nanoseconds (the broker's
// clock spans 1678 to 2262), where NoEviction taken as a window would be
// exceeded and the key forgotten at a mere rotation.
func TestANoEvictionRecordForgetsNoKeyHoweverFarTheClockMoved(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, math.MinInt64+1, "k")))
	require.NoError(t, x.Apply(wal.MakePosition(2, 64), &Event{Kind: KindEvict, Queue: 1, Time: math.MaxInt64, Window: NoEviction}))
	seq, _, ok := q.Seen("k")
	require.True(t, ok, "a clock reading forgot a key")
	require.Equal(t, uint64(1), seq)
	require.Equal(t, int64(math.MaxInt64), q.LastEvicts(), "the reading is kept")
}

// TestTheSecretOutlivesTheRecordItWasReadFrom: Decode's Secret aliases the
// record, and a log reader reuses its buffer for the next record. The
// index keeps its own copy: aliased, the store secret (which signs every
// receipt) became whatever bytes the buffer held next.
func TestTheSecretOutlivesTheRecordItWasReadFrom(t *testing.T) {
	x := New()
	secret := bytes.Repeat([]byte{5}, SecretSize)
	rec := (&Event{Kind: KindMeta, Secret: secret}).Append(nil)
	require.NoError(t, x.ApplyRecord(wal.MakePosition(1, 32), rec))
	for i := range rec {
		rec[i] = 0xee
	}
	require.Equal(t, secret, x.Secret)
}

// TestAnIndexWithoutASecretLoadsWithoutOne: a checkpoint of an index that
// holds no secret loads with a nil Secret, not an empty one: the store
// draws a secret when its index has none (Secret == nil), and an empty
// one, taken for a secret, gave receipts no key and every meta record of
// the log a secret other than the checkpoint's.
func TestAnIndexWithoutASecretLoadsWithoutOne(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q"}))
	checkpointAt(t, x, dir, wal.MakePosition(1, 100))

	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	require.Nil(t, y.Secret)
}

// TestNextStreamFindsTheLastEntryOfAChunkFile: the scan of a chunk file
// reaches its last entry (sequence ChunkEntries-1 of chunk 0). Stopping one
// short, a walk of the stream from before it jumped over that message to
// the queue's next one: the message was never delivered, and the queue
// counted one fresh message more than its stream held.
func TestNextStreamFindsTheLastEntryOfAChunkFile(t *testing.T) {
	tbl, err := OpenTable(vfs.Default, t.TempDir(), nil)
	require.NoError(t, err)
	defer tbl.Close()
	last := uint64(ChunkEntries - 1)
	for _, seq := range []uint64{last, last + 5} {
		tbl.Put(Entry{Seq: seq, Pos: wal.MakePosition(1, int(seq)), EnqueuedAt: int64(seq), Queue: 1, Stream: true, Size: 1})
	}
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	require.Zero(t, tbl.Unflushed())

	seq, ok, err := tbl.NextStream(1, 1, 3*ChunkEntries)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, last, seq, "the last entry of chunk 0 was skipped")
	seq, ok, err = tbl.NextStream(1, last, last)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, last, seq)
}
