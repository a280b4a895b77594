package index

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/crc32"
	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestACheckpointKeepsWhatNoDumpShows: besides the queues' messages, a
// checkpoint keeps the orphan count and each queue's latest clock reading:
// a clock behind the reading a checkpoint loaded still evicts nothing.
func TestACheckpointKeepsWhatNoDumpShows(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), &Event{Kind: KindEvict, Queue: 1, Time: 900, Window: 1 << 62}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 300), &Event{Kind: KindAck, Queue: 1, Seq: 40}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 400), &Event{Kind: KindAck, Queue: 9, Seq: 41}))
	require.Equal(t, 2, x.Orphans)
	checkpointAt(t, x, dir, wal.MakePosition(1, 500))
	require.NoError(t, x.Table.Close())

	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	require.Equal(t, 2, y.Orphans)
	q := y.Queue("q")
	require.Equal(t, int64(900), q.LastEvicts())
	require.False(t, q.EvictSeen(800, 10), "a clock behind the loaded reading evicted")
	_, _, ok := q.Seen("a")
	require.True(t, ok)
}

// rewriteCheckpoint replaces the body of dir's checkpoint with what change
// makes of it, with a header that verifies.
func rewriteCheckpoint(t *testing.T, dir string, change func(body []byte) []byte) {
	t.Helper()
	rewriteCheckpointFile(t, dir, func([]byte) {}, change)
}

// rewriteCheckpointFile is rewriteCheckpoint that may change the header's
// fields (bytes 24 to 63) as well.
func rewriteCheckpointFile(t *testing.T, dir string, header func(hdr []byte), change func(body []byte) []byte) {
	t.Helper()
	path := filepath.Join(dir, checkpointName)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	hdr := data[:checkpointHeader:checkpointHeader]
	header(hdr)
	body := change(append([]byte(nil), data[checkpointHeader:]...))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(body)))
	binary.LittleEndian.PutUint32(hdr[12:], crc32.Update(crc32.Checksum(hdr[16:], castagnoli), castagnoli, body))
	require.NoError(t, os.WriteFile(path, append(hdr, body...), 0o600))
}

// TestACheckpointWhoseNextSequenceIsOutOfRangeIsRefused: sequence 0 is
// never a message's and the last one is never reached, so a header that
// gives either as the next was not written by this code, even for a store
// with no queue, whose body holds nothing to contradict it.
func TestACheckpointWhoseNextSequenceIsOutOfRangeIsRefused(t *testing.T) {
	for _, next := range []uint64{0, math.MaxUint64} {
		dir := t.TempDir()
		x, err := Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		checkpointAt(t, x, dir, wal.MakePosition(1, 200))
		require.NoError(t, x.Table.Close())

		rewriteCheckpointFile(t, dir, func([]byte) {}, func(body []byte) []byte { return body })
		y, _, err := Load(vfs.Default, dir)
		require.NoError(t, err, "the rewrite itself")
		require.NoError(t, y.Table.Close())

		rewriteCheckpointFile(t, dir, func(hdr []byte) { binary.LittleEndian.PutUint64(hdr[32:], next) },
			func(body []byte) []byte { return body })
		_, _, err = Load(vfs.Default, dir)
		require.ErrorIs(t, err, ErrDamaged, "next sequence %d", next)
		require.ErrorContains(t, err, fmt.Sprintf("next sequence %d", next))
	}
}

// TestACheckpointWhoseLogPositionNoSegmentHoldsIsRefused: a position in
// segment 0, or past the end of any segment, was not written by this
// code; wal.Open refuses it as a bad option, so the store would not open
// if the checkpoint were not refused as damaged (and rebuilt over).
func TestACheckpointWhoseLogPositionNoSegmentHoldsIsRefused(t *testing.T) {
	for _, pos := range []wal.Position{wal.MakePosition(0, 200), wal.MakePosition(1, wal.MaxSegmentBytes+1)} {
		dir := t.TempDir()
		x, err := Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		checkpointAt(t, x, dir, wal.MakePosition(1, 200))
		require.NoError(t, x.Table.Close())

		rewriteCheckpointFile(t, dir, func(hdr []byte) { binary.LittleEndian.PutUint64(hdr[24:], uint64(pos)) },
			func(body []byte) []byte { return body })
		_, _, err = Load(vfs.Default, dir)
		require.ErrorIs(t, err, ErrDamaged, "position %v", pos)
		require.ErrorContains(t, err, "log position")
		_, err = LoadCheckpointLog(vfs.Default, dir)
		require.ErrorIs(t, err, ErrDamaged, "position %v", pos)
	}
}

// TestACheckpointWithBytesPastItsLayoutIsRefused: a body that verifies but
// holds more than the layout reads was not written by this code.
func TestACheckpointWithBytesPastItsLayoutIsRefused(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "")))
	checkpointAt(t, x, dir, wal.MakePosition(1, 200))
	require.NoError(t, x.Table.Close())

	rewriteCheckpoint(t, dir, func(body []byte) []byte { return body })
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the rewrite itself")
	require.NoError(t, y.Table.Close())

	rewriteCheckpoint(t, dir, func(body []byte) []byte { return append(body, 0) })
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "trailing")
}

// TestAWrittenCheckpointSurvivesAPowerLoss: once WriteCheckpoint returns,
// the checkpoint, and the table files its Flush synced, are durable: a
// power loss leaves an index that loads to the same state.
func TestAWrittenCheckpointSurvivesAPowerLoss(t *testing.T) {
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	x, err := Rebuild(cfs, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	for i := 1; i <= 10; i++ {
		require.NoError(t, x.Apply(wal.MakePosition(1, 32*i), pub(uint64(i), int64(i), "")))
	}
	require.NoError(t, x.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 4, Deliveries: 1, Time: 99, Nonce: 5}))
	snap, err := x.Snapshot(wal.MakePosition(1, 400), map[uint32]int{1: 4096})
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	require.NoError(t, WriteCheckpoint(cfs, dir, snap, x.Table.Chunks()))

	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	y, from, err := Load(vfs.Default, clone)
	require.NoError(t, err, "the checkpoint did not survive a power loss")
	defer y.Table.Close()
	require.Equal(t, wal.MakePosition(1, 400), from)
	require.Equal(t, dumpAll(x, 50), dumpAll(y, 50))
}

// TestACheckpointThenTheLogAfterItGiveTheStateOfAFullReplay: every part of
// a queue's state comes back from a checkpoint — the stream's cursor, end
// and count, the stream messages that left it, each active message's
// fields, the dedup keys with their instants and segments, the log
// segments' and table files' counts, the next queue and message numbers —
// so that the events after it leave the state the whole log gives.
func TestACheckpointThenTheLogAfterItGiveTheStateOfAFullReplay(t *testing.T) {
	at := func(seg uint32, off int) wal.Position { return wal.MakePosition(seg, off) }
	type step struct {
		pos wal.Position
		e   *Event
	}
	before := []step{
		{0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}},
		{0, &Event{Kind: KindDeclare, Queue: 2, Name: "r", Policy: Policy{MaxDeliveries: 3}}},
		{at(1, 100), pub(1, 10, "a")},
		{at(1, 200), pub(2, 20, "b")},
		{at(1, 300), pub(3, 30, "")},
		{at(1, 400), pub(4, 40, "c")},
		{at(2, 100), &Event{Kind: KindPublish, Queue: 2, Seq: 5, Time: 45, Key: "x", Payload: []byte("p")}},
		{at(2, 200), pub(6, 50, "")},
		{at(2, 300), pub(7, 60, "d")},
		{at(2, 400), pub(8, 70, "")},
		{at(2, 410), &Event{Kind: KindLease, Queue: 1, Seq: 3, Deliveries: 1, Time: 99, Nonce: 77}},
		{at(2, 420), &Event{Kind: KindLease, Queue: 1, Seq: 6, Deliveries: 1, Time: 98, Nonce: 66}},
		{at(2, 430), &Event{Kind: KindAck, Queue: 1, Seq: 6}},
		{at(2, 440), &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 90, Nonce: 5}},
		{at(2, 450), &Event{Kind: KindNack, Queue: 1, Seq: 2, Deliveries: 1, Time: 80}},
		{at(2, 460), &Event{Kind: KindLease, Queue: 1, Seq: 4, Deliveries: 2, Time: 95, Nonce: 9}},
		{at(2, 470), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 4, Deliveries: 2, Time: 55, Code: 7, Reason: "R", Cause: "c"}},
		{at(2, 480), &Event{Kind: KindAck, Queue: 1, Seq: 1}},
		{at(2, 490), &Event{Kind: KindEvict, Queue: 1, Time: 1000, Window: 1 << 40}},
	}
	after := []step{
		{at(2, 600), pub(9, 65, "")}, // enqueued before the stream's end: active
		{at(2, 700), pub(10, 80, "e")},
		{at(2, 710), &Event{Kind: KindAck, Queue: 1, Seq: 3}},
		{at(2, 720), &Event{Kind: KindReplay, Queue: 1, Seq: 4}},
		{at(2, 730), &Event{Kind: KindLease, Queue: 1, Seq: 8, Deliveries: 1, Time: 200, Nonce: 12}},
		{at(2, 740), &Event{Kind: KindAck, Queue: 1, Seq: 2}},
		{at(2, 750), &Event{Kind: KindEvict, Queue: 1, Time: 1000, Window: 945}}, // forgets keys enqueued before 55
		{at(2, 760), &Event{Kind: KindAck, Queue: 2, Seq: 5}},
	}
	apply := func(x *Index, steps []step) {
		t.Helper()
		for _, s := range steps {
			require.NoError(t, x.Apply(s.pos, s.e), "%s of %d at %v", s.e.Kind, s.e.Seq, s.pos)
		}
	}

	dir := t.TempDir()
	live, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	apply(live, before)
	checkpointAt(t, live, dir, at(2, 500))
	require.NoError(t, live.Table.Close())
	loaded, from, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer loaded.Table.Close()
	require.Equal(t, at(2, 500), from)

	full := New()
	apply(full, before)
	same := func(when string) {
		t.Helper()
		require.Equal(t, dumpAll(full, 50), dumpAll(loaded, 50), when)
		for id := uint32(1); id <= 2; id++ {
			require.Equal(t, full.QueueByID(id).Active(), loaded.QueueByID(id).Active(), "%s: queue %d: messages out of the stream", when, id)
			require.Equal(t, full.QueueByID(id).LastEvicts(), loaded.QueueByID(id).LastEvicts(), "%s: queue %d: the latest clock reading", when, id)
		}
		require.Equal(t, full.SegmentUses(), loaded.SegmentUses(), when)
		require.Equal(t, full.LiveChunks(), loaded.LiveChunks(), when)
		require.Equal(t, full.PeekNextSeq(), loaded.PeekNextSeq(), when)
		fullID, _ := full.NextQueueID()
		loadedID, _ := loaded.NextQueueID()
		require.Equal(t, fullID, loadedID, when)
		require.NoError(t, full.Verify(), when)
		require.NoError(t, loaded.Verify(), when)
	}
	same("loaded")
	apply(loaded, after)
	apply(full, after)
	same("after the log that followed")
}

// TestACheckpointKeepsTheHighestQueueNumberAnEventNamed: an event naming
// an undeclared queue (one whose declaration salvage lost) keeps
// NextQueueID past its number, and so does the checkpoint of that index:
// a new queue must not take a number older events in the log still name.
// A checkpoint from before the header kept it (zero there) loads with the
// highest declared number; one naming a number above any queue's is
// refused.
func TestACheckpointKeepsTheHighestQueueNumberAnEventNamed(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), &Event{Kind: KindAck, Queue: 7, Seq: 3}))
	live, ok := x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(8), live)
	checkpointAt(t, x, dir, wal.MakePosition(1, 128))
	require.NoError(t, x.Table.Close())

	nextAfterLoad := func() (uint32, error) {
		y, _, err := Load(vfs.Default, dir)
		if err != nil {
			return 0, err
		}
		defer y.Table.Close()
		id, ok := y.NextQueueID()
		require.True(t, ok)
		return id, nil
	}
	id, err := nextAfterLoad()
	require.NoError(t, err)
	require.Equal(t, live, id, "NextQueueID after the checkpoint loads")

	rewriteCheckpointFile(t, dir, func(hdr []byte) { binary.LittleEndian.PutUint32(hdr[40:], 0) }, func(b []byte) []byte { return b })
	id, err = nextAfterLoad()
	require.NoError(t, err)
	require.Equal(t, uint32(2), id, "a checkpoint written before the header kept the number")

	rewriteCheckpointFile(t, dir, func(hdr []byte) { binary.LittleEndian.PutUint32(hdr[40:], maxQueueID+1) }, func(b []byte) []byte { return b })
	_, err = nextAfterLoad()
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "highest queue number")
}
