package index

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestNextStreamOfAClosedTableFailsAsGetDoes: after Close, NextStream
// answered from what was left in memory (an entry not yet flushed) or
// said there was none (its files gone), with a nil error, where Get fails
// with ErrClosed. A stream walk whose Get at the cursor ran before a Close
// on another goroutine, and whose jump ran after, took that "none" for
// the end of its stream, and marked the index damaged for the messages
// it still counted. It fails with ErrClosed now, whatever the table held.
func TestNextStreamOfAClosedTableFailsAsGetDoes(t *testing.T) {
	tbl, err := OpenTable(vfs.Default, t.TempDir(), nil)
	require.NoError(t, err)
	tbl.Put(Entry{Seq: 1, Pos: wal.MakePosition(1, 100), Queue: 1, Stream: true, Size: 1})
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	tbl.Put(Entry{Seq: 2, Pos: wal.MakePosition(1, 200), Queue: 1, Stream: true, Size: 1}) // in memory only
	seq, ok, err := tbl.NextStream(1, 1, 10)
	require.NoError(t, err)
	require.Equal(t, [2]any{uint64(1), true}, [2]any{seq, ok}, "the open table's answer")

	require.NoError(t, tbl.Close())
	for _, from := range []uint64{1, 2} { // from the files' entry, from the one in memory
		_, _, getErr := tbl.Get(from)
		require.ErrorIs(t, getErr, ErrClosed)
		seq, ok, err := tbl.NextStream(1, from, 10)
		require.ErrorIs(t, err, ErrClosed, "NextStream(1, %d, 10) of a closed table = %d, %v", from, seq, ok)
		require.False(t, ok)
	}
}

// TestAQueueWalkingAClosedTableFindsNoDamage: a queue whose stream jumps
// over another queue's messages, read after its table closed (Stats and
// Wake take no look at the store), finds no head and records no damage:
// neither the walk from its cursor nor the walks of Pinning and Dump.
func TestAQueueWalkingAClosedTableFindsNoDamage(t *testing.T) {
	x, err := Rebuild(vfs.Default, t.TempDir())
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "a", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 2, Name: "b", Policy: Policy{MaxDeliveries: 2}}))
	for seq := uint64(1); seq <= 6; seq++ {
		queue := uint32(1 + seq%2) // b, a, b, a, b, a
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*int(seq)), &Event{Kind: KindPublish, Queue: queue, Seq: seq, Time: int64(seq), Payload: []byte("p")}))
	}
	a := x.Queue("a")
	require.Equal(t, uint64(2), a.NextReady().Seq)
	require.NoError(t, x.Table.Close())

	require.Nil(t, a.NextReady(), "a closed table gives no head")
	ms, _ := a.Pinning(1, 1, 6)
	require.Empty(t, ms)
	a.Dump(0)
	require.NoError(t, x.Damaged(), "a read of the closed table counted as damage")
	ready, _, _, _ := a.Counts()
	require.Equal(t, 3, ready, "the stream still counts its messages")
}
