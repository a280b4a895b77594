package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestDecodeOfAnEmptyRecordSaysSo: an empty record has no kind byte; the
// error says the record is empty, not that its kind is unknown.
func TestDecodeOfAnEmptyRecordSaysSo(t *testing.T) {
	for _, rec := range [][]byte{nil, {}} {
		_, err := Decode(rec)
		require.ErrorIs(t, err, ErrBadEvent)
		require.ErrorContains(t, err, "empty record")
		require.NotContains(t, err.Error(), "kind")
	}
}

// TestAnEventOfUnknownKindIsRefusedAndChangesNothing: an unknown kind
// about a stream message once took the message out of the stream and put
// it nowhere: never delivered, still counted live. It is refused, and the
// message is where it was.
func TestAnEventOfUnknownKindIsRefusedAndChangesNothing(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "")))
	before := q.Dump(0)
	for _, k := range []Kind{0, KindSalvaged + 1, 99, 255} {
		err := x.Apply(wal.MakePosition(1, 200), &Event{Kind: k, Queue: 1, Seq: 1})
		require.ErrorIs(t, err, ErrBadEvent, "kind %d", k)
		require.ErrorContains(t, err, "unknown kind")
	}
	require.Equal(t, before, q.Dump(0))
	require.Equal(t, uint64(1), q.NextReady().Seq)
	require.Zero(t, x.Orphans)
	require.Equal(t, uint64(2), x.PeekNextSeq(), "a refused event took a sequence")
}

// TestQueueApplyRefusesWhatItDoesNotHandle: Queue.Apply takes the message
// events of its own queue. An evict (which Index.Apply handles), a kind
// that is no message event, another queue's event or a sequence out of
// range is refused before anything changes.
func TestQueueApplyRefusesWhatItDoesNotHandle(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "")))
	before := q.Dump(0)
	for _, e := range []*Event{
		nil,
		{Kind: KindEvict, Queue: 1, Seq: 1},
		{Kind: KindMeta, Queue: 1, Seq: 1},
		{Kind: KindDeclare, Queue: 1, Seq: 1},
		{Kind: KindMark, Queue: 1, Seq: 1},
		{Kind: KindSalvaged, Queue: 1, Seq: 1},
		{Kind: 99, Queue: 1, Seq: 1},
		{Kind: KindLease, Queue: 2, Seq: 1, Deliveries: 1, Time: 50},
		{Kind: KindPublish, Queue: 1, Seq: 0},
		{Kind: KindPublish, Queue: 1, Seq: math.MaxUint64},
		{Kind: KindLease, Queue: 1, Seq: math.MaxUint64},
	} {
		held, err := q.Apply(wal.MakePosition(1, 200), e)
		require.ErrorIs(t, err, ErrBadEvent, "%+v", e)
		require.False(t, held)
	}
	require.Equal(t, before, q.Dump(0))
	require.Equal(t, uint64(1), q.NextReady().Seq)
	require.Equal(t, []uint64{1}, x.LiveIn(1, 0, 1<<20))
}

// TestAPublishOfTheLastSequenceLeavesTheWalksFinite: a publish of sequence
// MaxUint64 applied to a queue made every walk of its stream (from seq+1
// on) wrap to 0 and never end. It is refused, as Index.Apply refuses it.
func TestAPublishOfTheLastSequenceLeavesTheWalksFinite(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	_, err := q.Apply(wal.MakePosition(1, 64), &Event{Kind: KindPublish, Queue: 1, Seq: math.MaxUint64, Time: 1})
	require.ErrorIs(t, err, ErrBadEvent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.LargestLive()
		q.Dump(0)
		q.Pinning(1, 1, math.MaxUint64)
		x.LiveIn(1, 0, 1<<20)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a walk of the stream does not end")
	}
	seq, size := x.LargestLive()
	require.Zero(t, seq)
	require.Zero(t, size)
}

// TestApplyOfANilEventIsAnError: a nil event is refused, not a panic.
func TestApplyOfANilEventIsAnError(t *testing.T) {
	x := declared(t)
	require.ErrorIs(t, x.Apply(0, nil), ErrBadEvent)
	_, err := x.Queue("q").Apply(0, nil)
	require.ErrorIs(t, err, ErrBadEvent)
}

// TestAQueueNumberKeepsItsName: a declaration giving a queue number
// another name was ignored and reported applied, and Declare returned the
// queue of the old name. Both are refused, naming both names, and nothing
// changes (not the policy either).
func TestAQueueNumberKeepsItsName(t *testing.T) {
	x := declared(t)
	before := x.Queue("q").Dump(0)
	err := x.Apply(wal.MakePosition(1, 300), &Event{Kind: KindDeclare, Queue: 1, Name: "other", Policy: Policy{MaxDeliveries: 9}})
	require.ErrorIs(t, err, ErrBadEvent)
	require.ErrorContains(t, err, `"q"`)
	require.ErrorContains(t, err, `"other"`)
	q, err := x.Declare(1, "third", Policy{MaxDeliveries: 9})
	require.ErrorIs(t, err, ErrBadEvent)
	require.ErrorContains(t, err, `"q"`)
	require.ErrorContains(t, err, `"third"`)
	require.Nil(t, q)
	require.Equal(t, []string{"q"}, x.Queues())
	require.Nil(t, x.Queue("other"))
	require.Nil(t, x.Queue("third"))
	require.Equal(t, before, x.Queue("q").Dump(0))

	// A name keeps its number too, through Declare as through Apply.
	q, err = x.Declare(2, "q", Policy{})
	require.ErrorIs(t, err, ErrBadEvent)
	require.Nil(t, q)
	require.Nil(t, x.QueueByID(2))
	require.Equal(t, uint32(1), x.Queue("q").ID)

	// The same name again is a change of policy.
	q, err = x.Declare(1, "q", Policy{MaxDeliveries: 9})
	require.NoError(t, err)
	require.Equal(t, int64(9), q.Policy.MaxDeliveries)
}

// TestQueueNumbersStayBelowTheStreamBit: the table keeps the top bit of an
// entry's queue field for the stream, so queue 1<<31|1 read its entries
// back as queue 1's: queue 1 delivered the other queue's message, which
// that queue lost, and the index called itself damaged. A number at or
// past 2³¹ is refused wherever one enters: a declaration applied or made,
// a message event, a decoded record, a checkpoint; and NextQueueID stops
// below it.
func TestQueueNumbersStayBelowTheStreamBit(t *testing.T) {
	const big = 1<<31 | 1
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	defer x.Table.Close()
	require.NoError(t, x.Apply(wal.MakePosition(1, 32), &Event{Kind: KindDeclare, Queue: 1, Name: "a"}))

	err = x.Apply(wal.MakePosition(1, 40), &Event{Kind: KindDeclare, Queue: big, Name: "b"})
	require.ErrorIs(t, err, ErrBadEvent)
	require.ErrorContains(t, err, "2^31")
	q, err := x.Declare(big, "b", Policy{})
	require.ErrorIs(t, err, ErrBadEvent)
	require.Nil(t, q)
	require.Nil(t, x.Queue("b"))
	for _, k := range []Kind{KindPublish, KindAck, KindEvict} {
		err := x.Apply(wal.MakePosition(1, 64), &Event{Kind: k, Queue: big, Seq: 1, Time: 1, Payload: []byte("for b")})
		require.ErrorIs(t, err, ErrBadEvent, "%s", k)
	}
	require.Zero(t, x.Orphans)
	require.Equal(t, uint64(1), x.PeekNextSeq(), "a refused event took a sequence")
	id, ok := x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(2), id, "a refused event took a queue number")

	// Queue a keeps its own message, through a flush of the table.
	require.NoError(t, x.Apply(wal.MakePosition(1, 128), &Event{Kind: KindPublish, Queue: 1, Seq: 2, Time: 2, Payload: []byte("for a")}))
	_, err = x.Snapshot(wal.MakePosition(1, 256), nil)
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	require.Equal(t, uint64(2), x.Queue("a").NextReady().Seq)
	require.NoError(t, x.Damaged())

	// The last number below the bit is handed out, then none.
	require.NoError(t, x.Apply(0, &Event{Kind: KindAck, Queue: 1<<31 - 2, Seq: 9}))
	id, ok = x.NextQueueID()
	require.True(t, ok)
	require.Equal(t, uint32(1<<31-1), id)
	_, err = x.Declare(id, "last", Policy{})
	require.NoError(t, err)
	_, ok = x.NextQueueID()
	require.False(t, ok)
	orphans := x.Orphans
	require.NoError(t, x.Apply(wal.MakePosition(1, 300), &Event{Kind: KindPublish, Queue: id, Seq: 3, Time: 3, Payload: []byte("for last")}))
	require.Equal(t, uint64(3), x.Queue("last").NextReady().Seq, "the last number below the bit takes messages")
	require.Equal(t, orphans, x.Orphans)

	for _, e := range []Event{
		{Kind: KindDeclare, Queue: big, Name: "b"},
		{Kind: KindPublish, Queue: big, Seq: 1},
		{Kind: KindLease, Queue: 1 << 31, Seq: 1},
		{Kind: KindEvict, Queue: math.MaxUint32},
	} {
		_, err := Decode(e.Append(nil))
		require.ErrorIs(t, err, ErrBadEvent, "%s of queue %d", e.Kind, e.Queue)
		require.ErrorContains(t, err, "2^31")
	}
}

// TestACheckpointNamingAQueuePastTheStreamBitIsRefused: no store gives a
// queue such a number; a checkpoint that holds one is damaged.
func TestACheckpointNamingAQueuePastTheStreamBitIsRefused(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1<<31 - 1, Name: "big"}))
	checkpointAt(t, x, dir, wal.MakePosition(1, 200))
	require.NoError(t, x.Table.Close())
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, y.Table.Close())

	// 1<<31-1 and 1<<31|1 are both five bytes as uvarints.
	was := append(binary.AppendUvarint(nil, 1<<31-1), "\x03big"...)
	now := append(binary.AppendUvarint(nil, 1<<31|1), "\x03big"...)
	rewriteCheckpoint(t, dir, func(body []byte) []byte {
		require.Equal(t, 1, bytes.Count(body, was))
		return bytes.Replace(body, was, now, 1)
	})
	_, _, err = Load(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, "2^31")
}

// TestDeadLettersOfANonPositiveCountIsEmpty: a negative max sliced the
// list to a negative length and panicked.
func TestDeadLettersOfANonPositiveCountIsEmpty(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 1, Time: 20}))
	for _, n := range []int{math.MinInt, -1, 0} {
		require.Empty(t, q.DeadLetters(n), "max %d", n)
	}
	require.Len(t, q.DeadLetters(1), 1)
	require.Len(t, q.DeadLetters(math.MaxInt), 1)
}

// TestACommitAtPositionZeroIsRefused: no record lives at position 0. A
// commit there made the message Ready with no record to read, counted in
// segment 0, and its ack never uncounted it: segment 0 stayed in use for
// good. It is refused, and the message stays Pending until a real commit.
func TestACommitAtPositionZeroIsRefused(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	_, err := q.Apply(0, pub(1, 1, ""))
	require.NoError(t, err)
	err = q.Commit(1, 0)
	require.ErrorIs(t, err, ErrBadEvent)
	require.ErrorContains(t, err, "position 0")
	require.Equal(t, Pending, q.Get(1).State)
	require.Nil(t, q.NextReady())
	require.Empty(t, x.SegmentUses())

	require.NoError(t, q.Commit(1, wal.MakePosition(2, 64)))
	require.Equal(t, uint64(1), q.NextReady().Seq)
	require.NoError(t, x.Apply(wal.MakePosition(2, 128), &Event{Kind: KindAck, Queue: 1, Seq: 1}))
	require.Empty(t, x.SegmentUses())
	require.Zero(t, q.Live())
}

// TestEvictionComparesInstantsFarApartExactly: with a key enqueued at
// MinInt64, now minus its instant overflowed to a negative number, never
// past the window: that key and every key behind it were kept for good.
// The converse overflow, a clock far behind a key, forgot it.
func TestEvictionComparesInstantsFarApartExactly(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 64), pub(1, math.MinInt64, "a")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 128), pub(2, 0, "b")))
	require.True(t, q.EvictSeen(1_000_000, 10))
	require.Zero(t, q.SeenCount())

	y := declared(t)
	r := y.Queue("q")
	require.NoError(t, y.Apply(wal.MakePosition(1, 64), pub(1, math.MaxInt64, "a")))
	require.NoError(t, y.Apply(wal.MakePosition(1, 128), &Event{Kind: KindEvict, Queue: 1, Time: math.MinInt64, Window: 0}))
	require.Equal(t, 1, r.SeenCount(), "a key enqueued after the clock was forgotten")

	for _, c := range []struct {
		at, now, window int64
		older           bool
	}{
		{0, 11, 10, true},
		{0, 10, 10, false},
		{math.MinInt64, math.MaxInt64, math.MaxInt64, true},
		{math.MinInt64, math.MaxInt64, 0, true},
		{math.MaxInt64, math.MinInt64, 0, false},
		{math.MaxInt64, math.MinInt64, math.MinInt64, false},
		{5, 0, -6, true},
		{5, 0, -5, false},
		{1, 0, math.MinInt64, true},
		{0, 0, -1, true},
	} {
		require.Equal(t, c.older, OlderThan(c.at, c.now, c.window), "%d - %d > %d", c.now, c.at, c.window)
	}
}

// TestNextSeqStopsAtTheLastSequence: after a mark of MaxUint64-1 the
// counter handed out MaxUint64-1, then MaxUint64 (which Apply refuses),
// then 0 and every sequence again. It stops, with ErrNoSequence, at the
// last sequence whose next one a checkpoint can hold, and reserves
// nothing.
func TestNextSeqStopsAtTheLastSequence(t *testing.T) {
	x := New()
	require.NoError(t, x.Apply(0, &Event{Kind: KindMark, Seq: math.MaxUint64 - 2}))
	seq, err := x.NextSeq()
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxUint64-2), seq)
	for range 3 {
		seq, err = x.NextSeq()
		require.ErrorIs(t, err, ErrNoSequence)
		require.Zero(t, seq)
		require.Equal(t, uint64(math.MaxUint64-1), x.PeekNextSeq())
	}

	y := New()
	require.NoError(t, y.Apply(0, &Event{Kind: KindMark, Seq: math.MaxUint64 - 1}))
	_, err = y.NextSeq()
	require.ErrorIs(t, err, ErrNoSequence)

	// A mark of MaxUint64 leaves none to hand out, and the count would
	// wrap past it: no log this code writes holds one.
	z := New()
	err = z.Apply(0, &Event{Kind: KindMark, Seq: math.MaxUint64})
	require.ErrorIs(t, err, ErrBadEvent)
	require.Equal(t, uint64(1), z.PeekNextSeq(), "the refused mark moved the next sequence")
}

// TestAMessageAtTheLastSequencesIsRefused: a publish of MaxUint64-1 was
// applied, and made the next sequence MaxUint64: the checkpoint written
// next said so, and Load refused it. The sequences past LastSeq are
// refused, as MaxUint64 was; a checkpoint at the last one loads.
func TestAMessageAtTheLastSequencesIsRefused(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q"}))
	for _, seq := range []uint64{math.MaxUint64 - 1, math.MaxUint64} {
		err := x.Apply(wal.MakePosition(1, 40), &Event{Kind: KindPublish, Queue: 1, Seq: seq})
		require.ErrorIs(t, err, ErrBadEvent, "seq %d", seq)
		_, err = x.Queue("q").Apply(wal.MakePosition(1, 40), &Event{Kind: KindPublish, Queue: 1, Seq: seq})
		require.ErrorIs(t, err, ErrBadEvent, "seq %d", seq)
	}
	require.Equal(t, uint64(1), x.PeekNextSeq())
	require.NoError(t, x.Apply(wal.MakePosition(1, 40), &Event{Kind: KindPublish, Queue: 1, Seq: math.MaxUint64 - 2}))
	require.Equal(t, uint64(math.MaxUint64-1), x.PeekNextSeq())
	checkpointAt(t, x, dir, wal.MakePosition(1, 100))
	require.NoError(t, x.Table.Close())
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, y.Table.Close())
	require.Equal(t, uint64(math.MaxUint64-1), y.PeekNextSeq())
}

// TestATableInMemoryOnlySaysSoWhenAskedForFiles: New's table has no files.
// A Flush of a detached entry, or a SyncDir, dereferenced its missing file
// system; they fail, saying the table lives in memory only, and the
// entries stay readable.
func TestATableInMemoryOnlySaysSoWhenAskedForFiles(t *testing.T) {
	x := New()
	created, err := x.Table.Flush(true)
	require.NoError(t, err, "nothing to flush")
	require.Empty(t, created)

	x.Table.Put(Entry{Seq: 1, Pos: wal.MakePosition(1, 40), Queue: 1})
	x.Table.Detach()
	for _, sync := range []bool{false, true} {
		created, err = x.Table.Flush(sync)
		require.ErrorContains(t, err, "memory only")
		require.Empty(t, created)
	}
	e, ok, err := x.Table.Get(1)
	require.NoError(t, err)
	require.True(t, ok, "a failed flush lost the entry")
	require.Equal(t, wal.MakePosition(1, 40), e.Pos)
	require.ErrorContains(t, x.Table.SyncDir(), "memory only")
}

// TestTheZeroTableIsATableInMemory: a Put on the zero Table panicked
// while it held the table's lock, so that the next call deadlocked. It
// is an empty table in memory, like New's.
func TestTheZeroTableIsATableInMemory(t *testing.T) {
	var tb Table
	tb.Put(Entry{Seq: 3, Pos: wal.MakePosition(1, 40), Queue: 1, Stream: true})
	e, ok, err := tb.Get(3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, wal.MakePosition(1, 40), e.Pos)
	seq, ok, err := tb.NextStream(1, 1, 10)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(3), seq)
	require.Equal(t, 1, tb.Unflushed())

	var detached Table
	detached.Detach()
	_, err = detached.Flush(true)
	require.NoError(t, err)
	detached.Put(Entry{Seq: 1, Queue: 1, Pos: 1})
	detached.Detach()
	_, err = detached.Flush(true)
	require.ErrorContains(t, err, "memory only")
}

// TestAClosedTableSaysItIsClosed: after Close, Get reported every entry
// absent (no error), and Flush failed with an unexplained "file exists"
// (it tried to create a chunk file it had closed). Both, and Remove and
// SyncDir, fail with ErrClosed.
func TestAClosedTableSaysItIsClosed(t *testing.T) {
	dir := t.TempDir()
	tb, err := OpenTable(vfs.Default, dir, nil)
	require.NoError(t, err)
	tb.Put(Entry{Seq: 5, Pos: wal.MakePosition(1, 40), Queue: 1, Stream: true})
	tb.Detach()
	_, err = tb.Flush(true)
	require.NoError(t, err)
	require.NoError(t, tb.Close())
	require.NoError(t, tb.Close(), "closing again")

	_, ok, err := tb.Get(5)
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, ok)
	tb.Put(Entry{Seq: 6, Pos: wal.MakePosition(1, 80), Queue: 1})
	tb.Detach()
	_, err = tb.Flush(true)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, tb.Remove(0), ErrClosed)
	require.ErrorIs(t, tb.SyncDir(), ErrClosed)
	_, err = os.Stat(filepath.Join(dir, chunkName(0)))
	require.NoError(t, err, "a closed table's Remove removed the file")
}

// checkpointFile returns dir's checkpoint file, to tell whether a refused
// write left it as it was.
func checkpointFile(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, checkpointName))
	require.NoError(t, err)
	return b
}

// goodCheckpoint writes a checkpoint of one queue and one message to dir,
// and returns the index, whose table stays open.
func goodCheckpoint(t *testing.T, dir string) *Index {
	t.Helper()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = x.Table.Close() })
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q"}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "")))
	checkpointAt(t, x, dir, wal.MakePosition(1, 200))
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, y.Table.Close())
	return x
}

// TestAWriteThatLoadWouldRefuseIsRefused: each of these reported success
// and left a checkpoint Load refused (so the next open rebuilt from the
// whole log), in place of a good one. Each is refused, and the good
// checkpoint stays.
func TestAWriteThatLoadWouldRefuseIsRefused(t *testing.T) {
	dir := t.TempDir()
	x := goodCheckpoint(t, dir)
	good := checkpointFile(t, dir)
	chunks := x.Table.Chunks()

	x.Table.Put(Entry{Seq: 1, Pos: wal.MakePosition(1, 100), Queue: 1, Stream: true, Size: 22})
	sealeds := []map[uint32]int{{1: -1}}
	if math.MaxInt > math.MaxUint32 { // offsets of 4 GiB and more: only a 64-bit int holds them
		one := uint64(1) // a variable: as constants they would not compile for 32-bit
		sealeds = append(sealeds, map[uint32]int{1: int(one << 33)}, map[uint32]int{1: int(one << 32)})
	}
	for _, sealed := range sealeds {
		snap, err := x.Snapshot(wal.MakePosition(2, 64), sealed)
		require.ErrorContains(t, err, "offset", "sealed %v", sealed)
		require.Nil(t, snap)
		require.Equal(t, 1, x.Table.Unflushed(), "a refused snapshot detached the table's entries")
	}
	snap, err := x.Snapshot(wal.MakePosition(2, 64), map[uint32]int{1: min(math.MaxUint32, math.MaxInt)})
	require.NoError(t, err, "the largest offset")

	for name, c := range map[string]struct {
		snap   *Snapshot
		chunks []uint64
		says   string
	}{
		"nil":            {nil, nil, "nil snapshot"},
		"zero":           {&Snapshot{}, nil, "Index.Snapshot"},
		"next 0":         {&Snapshot{NextSeq: 0, body: snap.body, taken: snap.taken}, chunks, "next sequence 0"},
		"next MaxUint64": {&Snapshot{NextSeq: math.MaxUint64, body: snap.body, taken: snap.taken}, chunks, "out of range"},
		"next lowered":   {&Snapshot{NextSeq: 1, body: snap.body, taken: snap.taken}, chunks, "below"},
		"a chunk twice":  {snap, []uint64{0, 0}, "named twice"},
		"chunks 0, 1, 0": {snap, []uint64{0, 1, 0}, "named twice"},
	} {
		err := WriteCheckpoint(vfs.Default, dir, c.snap, c.chunks)
		require.ErrorContains(t, err, c.says, name)
		require.Equal(t, good, checkpointFile(t, dir), "%s: the checkpoint in place changed", name)
	}
	raised := *snap
	raised.NextSeq += 1000
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, &raised, chunks), "a raised next sequence")
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, y.Table.Close())
}

// TestASecretOfTheWrongLengthIsRefused: a meta event's secret of 3 bytes
// was applied, and the next checkpoint held it: Load refuses any secret
// but one of SecretSize bytes. The event is refused, and so is a snapshot
// of an index whose secret was set to such a length.
func TestASecretOfTheWrongLengthIsRefused(t *testing.T) {
	x := declared(t)
	for _, secret := range [][]byte{nil, []byte("abc"), make([]byte, SecretSize+1)} {
		err := x.Apply(wal.MakePosition(1, 10), &Event{Kind: KindMeta, Secret: secret})
		require.ErrorIs(t, err, ErrBadEvent, "%d bytes", len(secret))
		require.ErrorContains(t, err, "secret")
		require.Nil(t, x.Secret)
	}
	require.NoError(t, x.Apply(wal.MakePosition(1, 10), &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)}))
	require.Len(t, x.Secret, SecretSize)

	x.Secret = []byte("abc")
	_, err := x.Snapshot(wal.MakePosition(1, 100), nil)
	require.ErrorContains(t, err, "secret of 3 bytes")
}

// TestAMarkerThatCannotBeReadMakesTheCheckpointSuspect: an error opening
// a marker (other than its absence) read as "not suspect", so LogHints
// gave wal.Open the hints of a checkpoint marked suspect, and its records
// went unverified. A store that cannot tell treats the checkpoint as
// suspect: a rebuild from the log is always safe.
func TestAMarkerThatCannotBeReadMakesTheCheckpointSuspect(t *testing.T) {
	for _, marker := range []string{suspectName, writingName} {
		for _, marked := range []bool{true, false} {
			dir := t.TempDir()
			goodCheckpoint(t, dir)
			if marked && marker == suspectName {
				require.NoError(t, MarkSuspect(vfs.Default, dir))
			} else if marked {
				require.NoError(t, BeginCheckpoint(vfs.Default, dir))
			}
			ffs := vfs.NewFaultFS(vfs.Default)
			ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: marker, Err: syscall.EIO})
			require.True(t, Suspect(ffs, dir), "%s marked %v, unreadable", marker, marked)
			sealed, pos := LogHints(ffs, dir)
			require.Nil(t, sealed, "%s marked %v, unreadable", marker, marked)
			require.Zero(t, pos)
			require.NotZero(t, ffs.Injected(vfs.OpOpen))
		}
	}
	// Absent markers are no suspicion, even in a directory that is gone.
	require.False(t, Suspect(vfs.Default, filepath.Join(t.TempDir(), "gone")))
}

// TestACheckpointThatIsNoFileIsDamagedButOneThatFailsToReadIsNot: a
// directory named checkpoint opened, failed to read, and Load returned the
// bare read error, neither of the two its doc promised: it is ErrDamaged,
// wrapping the cause. An I/O error reading a checkpoint file (EIO), which
// Load used to call ErrDamaged too, says nothing of what the file holds:
// it is returned naming the file, and not ErrDamaged, so that no caller
// drops (rebuilds over) a checkpoint that may be whole. LoadCheckpointLog
// tells the same cases apart.
func TestACheckpointThatIsNoFileIsDamagedButOneThatFailsToReadIsNot(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, checkpointName), 0o700))
	_, _, err := Load(vfs.Default, dir)
	// (ext4 gives a directory a size and fails its read with EISDIR;
	// tmpfs gives it one too small for a header. Either is damage.)
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, checkpointName)
	_, err = LoadCheckpointLog(vfs.Default, dir)
	require.ErrorIs(t, err, ErrDamaged)

	dir = t.TempDir()
	goodCheckpoint(t, dir)
	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpRead, vfs.OpSize} {
		ffs := vfs.NewFaultFS(vfs.Default)
		ffs.Inject(vfs.Rule{Op: op, NameContains: checkpointName, Err: syscall.EIO})
		_, _, err = Load(ffs, dir)
		require.ErrorIs(t, err, syscall.EIO, "%v", op)
		require.NotErrorIs(t, err, ErrDamaged, "%v", op)
		require.ErrorContains(t, err, filepath.Join(dir, checkpointName), "%v", op)
		_, err = LoadCheckpointLog(ffs, dir)
		require.ErrorIs(t, err, syscall.EIO, "%v", op)
		require.NotErrorIs(t, err, ErrDamaged, "%v", op)
		_, ok := ReadCheckpointLog(ffs, dir)
		require.False(t, ok, "%v", op)
	}
	// Nor is an I/O error mapping a table file it names.
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpMap, NameContains: chunkPrefix, Err: syscall.EIO})
	_, _, err = Load(ffs, dir)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpMap))
	require.ErrorIs(t, err, syscall.EIO)
	require.NotErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, chunkPrefix)
	x, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the checkpoint is as it was")
	require.NoError(t, x.Table.Close())

	_, _, err = Load(vfs.Default, t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotErrorIs(t, err, ErrDamaged)
	_, err = LoadCheckpointLog(vfs.Default, t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestSuspectCheckReturnsAnErrorWhereSuspectReasonSuspects: a marker that
// cannot be looked for is suspicion for SuspectReason (LogHints, which
// only reads, gives no hints then), but an error for SuspectCheck, whose
// caller would otherwise drop the checkpoint.
func TestSuspectCheckReturnsAnErrorWhereSuspectReasonSuspects(t *testing.T) {
	dir := t.TempDir()
	goodCheckpoint(t, dir)
	why, err := SuspectCheck(vfs.Default, dir)
	require.NoError(t, err)
	require.Empty(t, why)
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: suspectName, Err: syscall.EIO})
	require.NotEmpty(t, SuspectReason(ffs, dir))
	_, err = SuspectCheck(ffs, dir)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, filepath.Join(dir, suspectName))
	require.NoError(t, MarkSuspect(vfs.Default, dir))
	why, err = SuspectCheck(vfs.Default, dir)
	require.NoError(t, err)
	require.NotEmpty(t, why)
	_, err = SuspectCheck(nil, dir)
	require.ErrorIs(t, err, fs.ErrInvalid)
}

// TestNoMessageHoldsNoLease: LeaseLive of a nil message (a Get that found
// none) panicked.
func TestNoMessageHoldsNoLease(t *testing.T) {
	require.False(t, LeaseLive(nil, 0))
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 10, "")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 50}))
	require.True(t, LeaseLive(q.Get(1), 49))
	require.False(t, LeaseLive(q.Get(2), 49))
}

// TestAnUnknownKindIsNamedByItsNumber: an error about an event of a kind
// this code does not know names the kind by its number, whether the byte
// is zero, just past the last kind, or far past it.
func TestAnUnknownKindIsNamedByItsNumber(t *testing.T) {
	require.Equal(t, "meta", KindMeta.String())
	require.Equal(t, "mark", KindMark.String())
	require.Equal(t, "salvaged", KindSalvaged.String())
	for _, k := range []Kind{0, KindSalvaged + 1, 99, 255} {
		require.Equal(t, fmt.Sprintf("kind(%d)", uint8(k)), k.String())
		_, err := declared(t).Queue("q").Apply(wal.MakePosition(1, 64), &Event{Kind: k, Queue: 1, Seq: 1})
		require.ErrorIs(t, err, ErrBadEvent)
		require.ErrorContains(t, err, fmt.Sprintf("a kind(%d) event is not a message event", uint8(k)))
	}
}

// TestANilFileSystemIsRefused: every function that takes a vfs.FS used to
// panic on a nil one at its first file operation. Each that returns an
// error refuses it with fs.ErrInvalid, naming the argument and the
// directory; Suspect, which cannot tell, says suspect; LogHints gives no
// hints; and nothing is made.
func TestANilFileSystemIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	x := New()
	snap, err := x.Snapshot(wal.MakePosition(1, 32), nil)
	require.NoError(t, err)
	calls := map[string]func() error{
		"MarkSuspect":      func() error { return MarkSuspect(nil, dir) },
		"ClearSuspect":     func() error { return ClearSuspect(nil, dir) },
		"BeginCheckpoint":  func() error { return BeginCheckpoint(nil, dir) },
		"EndCheckpoint":    func() error { return EndCheckpoint(nil, dir) },
		"WriteCheckpoint":  func() error { return WriteCheckpoint(nil, dir, snap, nil) },
		"RemoveCheckpoint": func() error { return RemoveCheckpoint(nil, dir) },
		"CopyCheckpoint":   func() error { return CopyCheckpoint(context.Background(), nil, dir, dir+"-copy") },
		"Load":             func() error { _, _, err := Load(nil, dir); return err },
		"Rebuild":          func() error { _, err := Rebuild(nil, dir); return err },
		"OpenTable":        func() error { _, err := OpenTable(nil, dir, nil); return err },
	}
	for name, call := range calls {
		err := call()
		require.ErrorIs(t, err, fs.ErrInvalid, name)
		require.ErrorContains(t, err, "nil vfs.FS", name)
		require.ErrorContains(t, err, dir, name)
		require.NoDirExists(t, dir, name)
	}
	require.True(t, Suspect(nil, dir), "a nil FS cannot tell")
	sealed, verified := LogHints(nil, dir)
	require.Nil(t, sealed)
	require.Zero(t, verified)
}
