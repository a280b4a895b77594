package index

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestAFlushRetriedAfterAFailedChunkCreateWritesTheChunk: of a flush that
// failed, Detach promises to "keep what it did not write", and Flush
// writes the detached entries "creating those [chunk files] that are
// missing". A chunk file whose creation failed after its exclusive open
// (sizing or mapping it) is removed, so that the next Flush creates it
// afresh rather than fail on the file left behind.
func TestAFlushRetriedAfterAFailedChunkCreateWritesTheChunk(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpTruncate, vfs.OpMap} {
		t.Run(op.String(), func(t *testing.T) {
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			tb, err := OpenTable(ffs, dir, nil)
			require.NoError(t, err)
			defer tb.Close()
			ent := Entry{Seq: 5, Pos: wal.MakePosition(1, 40), EnqueuedAt: 1, Queue: 1, Stream: true, Size: 30}
			tb.Put(ent)
			tb.Detach()
			ffs.Inject(vfs.Rule{Op: op, NameContains: chunkPrefix, Times: 1, Err: syscall.EIO})
			_, err = tb.Flush(true)
			require.ErrorIs(t, err, syscall.EIO, "the injected failure")
			require.Empty(t, tb.Chunks())

			// The fault was transient: the retry writes the entry.
			tb.Detach()
			created, err := tb.Flush(true)
			require.NoError(t, err, "a Flush retried after a failure creating its chunk file")
			require.Equal(t, []uint64{0}, created)
			require.Equal(t, []uint64{0}, tb.Chunks())
			require.NoError(t, tb.Close())

			reopened, err := OpenTable(vfs.Default, dir, []uint64{0})
			require.NoError(t, err)
			defer reopened.Close()
			got, ok, err := reopened.Get(5)
			require.NoError(t, err)
			require.True(t, ok, "the entry, in the chunk file the retry made")
			require.Equal(t, ent, got)
		})
	}
}
