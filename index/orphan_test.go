package index

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// An event about a message of a queue the index does not know (its
// declaration lost to salvage) still names a sequence that was handed
// out: the next message must take a later one.
func TestOrphanEventsKeepTheirSequenceTaken(t *testing.T) {
	x, err := Rebuild(vfs.Default, t.TempDir())
	require.NoError(t, err)
	defer x.Table.Close()
	before := x.PeekNextSeq()
	e := Event{Kind: KindAck, Queue: 7, Seq: before + 99}
	require.NoError(t, x.Apply(0, &e))
	require.Equal(t, 1, x.Orphans, "the event is an orphan")
	require.Equal(t, before+100, x.PeekNextSeq())
	e = Event{Kind: KindAck, Queue: 7, Seq: before + 5}
	require.NoError(t, x.Apply(0, &e))
	require.Equal(t, before+100, x.PeekNextSeq(), "an older sequence moves nothing back")
}

// A checkpoint marked suspect gives the log no hints (the next open
// verifies every segment) and stays loadable; clearing the mark gives the
// hints back.
func TestSuspectCheckpointGivesNoHints(t *testing.T) {
	dir := hintingCheckpoint(t)

	require.False(t, Suspect(vfs.Default, dir))
	require.NoError(t, MarkSuspect(vfs.Default, dir))
	require.True(t, Suspect(vfs.Default, dir))
	sealed, pos := LogHints(vfs.Default, dir)
	require.Nil(t, sealed)
	require.Zero(t, pos)
	y, from, err := Load(vfs.Default, dir)
	require.NoError(t, err, "the checkpoint itself is kept, to be consulted")
	require.Equal(t, wal.MakePosition(2, 100), from)
	require.NoError(t, y.Table.Close())

	require.NoError(t, ClearSuspect(vfs.Default, dir))
	require.NoError(t, ClearSuspect(vfs.Default, dir), "clearing twice is no error")
	sealed, _ = LogHints(vfs.Default, dir)
	require.Equal(t, map[uint32]int{1: 4096}, sealed)
}
