package index

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// countsCheckpoint writes in dir a checkpoint holding one queue, q, with
// an empty stream ([1, 0]) that counts fresh messages, and the given
// count of orphan events.
func countsCheckpoint(t *testing.T, dir string, orphans, fresh uint64) {
	t.Helper()
	var e encoder
	e.uvarint(0) // sealed segments
	e.string("") // secret
	e.uvarint(orphans)
	e.uvarint(0)  // segment uses
	e.uvarint(0)  // live chunks
	e.uvarint(1)  // queues
	e.uvarint(1)  // id
	e.string("q") // name
	e.b = Policy{}.append(e.b)
	e.uvarint(1)     // cursor
	e.uvarint(0)     // stream max: no stream
	e.varint(0)      // stream enqueuedAt
	e.uvarint(fresh) // stream count
	e.varint(math.MinInt64)
	e.uvarint(0) // gone
	e.uvarint(0) // messages
	e.uvarint(0) // keys
	snap := &Snapshot{LogPos: wal.MakePosition(1, 64), NextSeq: 1, body: e.b, taken: 1}
	require.NoError(t, WriteCheckpoint(vfs.Default, dir, snap, nil))
}

// TestACheckpointCountingMoreStreamMessagesThanItsStreamHoldsIsRefused:
// Load refuses, as ErrDamaged, a checkpoint that "fails any check
// (checksum, bounds, ...)", so that the caller rebuilds from the log. A
// stream holds at most one message per sequence between its cursor and
// its end: a count above that (or above an int, which would read as a
// negative count) is no count an index kept, and loaded it would stand
// for messages that do not exist, in Live and the ready count.
func TestACheckpointCountingMoreStreamMessagesThanItsStreamHoldsIsRefused(t *testing.T) {
	dir := t.TempDir()
	countsCheckpoint(t, dir, 0, 0)
	x, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "an empty stream counting no message")
	require.Equal(t, 0, x.Queue("q").Live())
	require.NoError(t, x.Table.Close())

	for _, fresh := range []uint64{1, 3, math.MaxInt64 + 1, math.MaxUint64} {
		dir := t.TempDir()
		countsCheckpoint(t, dir, 0, fresh)
		x, _, err := Load(vfs.Default, dir)
		if err == nil {
			q := x.Queue("q")
			ready, _, _, _ := q.Counts()
			live := q.Live()
			_ = x.Table.Close()
			t.Fatalf("stream count %d: a checkpoint whose empty stream counts it loaded (Live() = %d, ready = %d), not ErrDamaged",
				fresh, live, ready)
		}
		require.ErrorIs(t, err, ErrDamaged, "stream count %d", fresh)
		require.ErrorContains(t, err, "stream count")
	}
}

// TestACheckpointCountingMoreOrphansThanAnIntHoldsIsRefused: the count of
// orphan events is an int, which only grows: a checkpoint holding one
// above the largest int (which would read as a negative count) fails a
// bound, and Load refuses it as ErrDamaged.
func TestACheckpointCountingMoreOrphansThanAnIntHoldsIsRefused(t *testing.T) {
	dir := t.TempDir()
	countsCheckpoint(t, dir, math.MaxInt, 0)
	x, _, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the largest count an int holds")
	require.Equal(t, math.MaxInt, x.Orphans)
	require.NoError(t, x.Table.Close())

	for _, orphans := range []uint64{uint64(math.MaxInt) + 1, math.MaxUint64} {
		dir := t.TempDir()
		countsCheckpoint(t, dir, orphans, 0)
		x, _, err := Load(vfs.Default, dir)
		if err == nil {
			n := x.Orphans
			_ = x.Table.Close()
			t.Fatalf("orphan count %d loaded as %d, not ErrDamaged", orphans, n)
		}
		require.ErrorIs(t, err, ErrDamaged, "orphan count %d", orphans)
		require.ErrorContains(t, err, "orphans")
	}
}
