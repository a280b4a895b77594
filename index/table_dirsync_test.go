package index

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// Flush with sync makes the directory durable for a chunk an earlier Flush
// without sync created (an open's replay writes its entries out so): the
// chunk's data was fdatasynced by the later Flush, and a power loss must
// not take its name.
func TestAFlushWithSyncMakesDurableTheNameOfAChunkAnEarlierFlushMade(t *testing.T) {
	root := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	dir := root + "/index"
	tbl, err := OpenTable(cfs, dir, nil)
	require.NoError(t, err)
	defer tbl.Close()

	// An open's replay writes entries out without a sync.
	tbl.Put(Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	created, err := tbl.Flush(false)
	require.NoError(t, err)
	require.Equal(t, []uint64{0}, created)
	// Then the checkpoint's flush, with sync, of an entry in the same chunk.
	tbl.Put(Entry{Seq: 4, Pos: wal.MakePosition(2, 8192), EnqueuedAt: 2, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)

	clone := t.TempDir() + "/clone"
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: root}))
	after, err := OpenTable(vfs.Default, clone+"/index", []uint64{0})
	if after != nil {
		defer after.Close()
	}
	require.NoError(t, err, "Flush(true) returned, yet a power loss took the chunk file it synced")
}

// And the removal of a chunk is durable after the next Flush with sync, as
// Remove promises, even when that Flush makes no chunk of its own.
func TestAFlushWithSyncMakesAnEarlierRemovalDurable(t *testing.T) {
	root := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	dir := root + "/index"
	tbl, err := OpenTable(cfs, dir, nil)
	require.NoError(t, err)
	defer tbl.Close()

	tbl.Put(Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
	tbl.Put(Entry{Seq: ChunkEntries + 3, Pos: wal.MakePosition(2, 8192), EnqueuedAt: 2, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	created, err := tbl.Flush(true)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1}, created)

	require.NoError(t, tbl.Remove(0))
	tbl.Put(Entry{Seq: ChunkEntries + 4, Pos: wal.MakePosition(2, 12288), EnqueuedAt: 3, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	created, err = tbl.Flush(true)
	require.NoError(t, err)
	require.Empty(t, created)

	clone := t.TempDir() + "/clone"
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: root}))
	_, err = os.Stat(filepath.Join(clone, "index", chunkName(0)))
	require.ErrorIs(t, err, os.ErrNotExist, "a power loss brought back the chunk removed before a Flush with sync")
}
