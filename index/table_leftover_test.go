package index

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A chunk whose file Remove cannot unlink leaves the table all the same
// (no Chunks, no Bytes: no checkpoint names it), and stays a leftover,
// counted in LeftoverBytes, until RemoveLeftovers unlinks it; the next
// Flush with sync makes that removal durable.
func TestAChunkFileThatCannotBeUnlinkedIsALeftoverUntilRemovedAgain(t *testing.T) {
	root := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	cfs := vfs.NewCrashFS(ffs)
	dir := filepath.Join(root, "index")
	tbl, err := OpenTable(cfs, dir, nil)
	require.NoError(t, err)
	defer tbl.Close()
	tbl.Put(Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
	tbl.Put(Entry{Seq: ChunkEntries + 3, Pos: wal.MakePosition(2, 8192), EnqueuedAt: 2, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)

	path := filepath.Join(dir, chunkName(0))
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: chunkName(0), Err: syscall.EPERM})
	err = tbl.Remove(0)
	require.ErrorIs(t, err, syscall.EPERM)
	require.Contains(t, err.Error(), chunkName(0))
	require.Equal(t, []uint64{1}, tbl.Chunks(), "the chunk is out of the table")
	require.Equal(t, int64(chunkBytes), tbl.Bytes())
	require.Equal(t, []uint64{0}, tbl.Leftovers())
	require.Equal(t, int64(chunkBytes), tbl.LeftoverBytes())
	require.FileExists(t, path)

	err = tbl.RemoveLeftovers()
	require.ErrorIs(t, err, syscall.EPERM, "still refused")
	require.Equal(t, []uint64{0}, tbl.Leftovers())

	ffs.Clear()
	require.NoError(t, tbl.RemoveLeftovers())
	require.Empty(t, tbl.Leftovers())
	require.Zero(t, tbl.LeftoverBytes())
	require.NoFileExists(t, path)
	require.NoError(t, tbl.RemoveLeftovers(), "nothing left to remove")

	_, err = tbl.Flush(true)
	require.NoError(t, err)
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: root}))
	_, err = os.Stat(filepath.Join(clone, "index", chunkName(0)))
	require.ErrorIs(t, err, os.ErrNotExist, "a power loss after a Flush with sync brought the leftover back")
}
