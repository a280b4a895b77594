package index

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/crc32"
	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestTableEntryLayout: an entry in its chunk file is the documented 32
// bytes, its checksum covering its sequence number, so that an entry found
// in another message's slot fails its checksum.
func TestTableEntryLayout(t *testing.T) {
	dir := t.TempDir()
	tbl, err := OpenTable(vfs.Default, dir, nil)
	require.NoError(t, err)
	e := Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: -5, Queue: 7, Stream: true, Size: 99}
	tbl.Put(e)
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	require.NoError(t, tbl.Close())

	path := filepath.Join(dir, chunkName(0))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	want := make([]byte, EntrySize)
	binary.LittleEndian.PutUint64(want[0:], uint64(e.Pos))
	binary.LittleEndian.PutUint64(want[8:], uint64(e.EnqueuedAt))
	binary.LittleEndian.PutUint32(want[16:], 7|1<<31)
	binary.LittleEndian.PutUint32(want[20:], 99)
	var seq [8]byte
	binary.LittleEndian.PutUint64(seq[:], 3)
	binary.LittleEndian.PutUint32(want[28:], crc32.Update(crc32.Checksum(seq[:], castagnoli), castagnoli, want[:28]))
	require.Equal(t, want, data[3*EntrySize:4*EntrySize])

	// The same bytes in the slot of message 5.
	copy(data[5*EntrySize:], want)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	tbl, err = OpenTable(vfs.Default, dir, []uint64{0})
	require.NoError(t, err)
	defer tbl.Close()
	got, ok, err := tbl.Get(3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, e, got)
	_, _, err = tbl.Get(5)
	require.ErrorIs(t, err, ErrDamaged, "an entry in another message's slot verified")
}

// TestATableFileOfAnotherSizeIsRefused: a chunk file is exactly its
// entries; one a byte short or a byte long is not the file the checkpoint
// names, and opening the table with it is ErrDamaged.
func TestATableFileOfAnotherSizeIsRefused(t *testing.T) {
	for _, delta := range []int64{-1, 1, EntrySize} {
		dir := t.TempDir()
		tbl, err := OpenTable(vfs.Default, dir, nil)
		require.NoError(t, err)
		tbl.Put(Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
		tbl.Detach()
		_, err = tbl.Flush(true)
		require.NoError(t, err)
		require.NoError(t, tbl.Close())

		path := filepath.Join(dir, chunkName(0))
		require.NoError(t, os.Truncate(path, chunkBytes+delta))
		_, err = OpenTable(vfs.Default, dir, []uint64{0})
		require.ErrorIs(t, err, ErrDamaged, "a file of %d bytes", chunkBytes+delta)
	}
}

// TestOpeningTheTableRemovesTheFilesItsCheckpointDoesNotName: a checkpoint
// that no longer names a table file (its messages all gone) is durable
// before the file is removed, so a crash between the two leaves the file:
// the next open removes it, and keeps the files it names.
func TestOpeningTheTableRemovesTheFilesItsCheckpointDoesNotName(t *testing.T) {
	dir := t.TempDir()
	tbl, err := OpenTable(vfs.Default, dir, nil)
	require.NoError(t, err)
	for _, seq := range []uint64{3, ChunkEntries + 3, 2*ChunkEntries + 3} {
		tbl.Put(Entry{Seq: seq, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
	}
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	require.NoError(t, tbl.Close())

	tbl, err = OpenTable(vfs.Default, dir, []uint64{1})
	require.NoError(t, err)
	defer tbl.Close()
	require.Equal(t, []uint64{1}, tbl.Chunks())
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var left []string
	for _, n := range names {
		left = append(left, n.Name())
	}
	require.Equal(t, []string{chunkName(1)}, left)
}

// TestARemovedTableFileStaysGone: once Remove dropped a chunk's file (its
// messages all gone), the table neither lists, counts nor reads that
// chunk, and later flushes do not write its entries back: the file does
// not come back for the next checkpoint to name.
func TestARemovedTableFileStaysGone(t *testing.T) {
	dir := t.TempDir()
	tbl, err := OpenTable(vfs.Default, dir, nil)
	require.NoError(t, err)
	defer tbl.Close()
	tbl.Put(Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	require.Equal(t, []uint64{0}, tbl.Chunks())

	require.NoError(t, tbl.Remove(0))
	require.NoError(t, tbl.SyncDir())
	require.Empty(t, tbl.Chunks())
	require.Zero(t, tbl.Bytes())
	_, ok, err := tbl.Get(3)
	require.NoError(t, err)
	require.False(t, ok, "the entry of a removed file")
	_, ok, err = tbl.NextStream(7, 1, 10)
	require.NoError(t, err)
	require.False(t, ok, "the entry of a removed file")

	// A later checkpoint's flush, of an entry in another chunk.
	tbl.Put(Entry{Seq: ChunkEntries + 1, Pos: wal.MakePosition(3, 4096), EnqueuedAt: 2, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	created, err := tbl.Flush(true)
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, created)
	require.Equal(t, []uint64{1}, tbl.Chunks())
	_, err = os.Stat(filepath.Join(dir, chunkName(0)))
	require.ErrorIs(t, err, os.ErrNotExist, "the removed file was written again")
}

// A queue number takes 31 bits of an entry's queue field, the top bit
// saying the message joined its queue's stream. An entry whose number
// takes that bit is refused by Flush, and never passes for a stream message
// of the queue its low bits name, in memory or in the files.
func TestAnEntryWhoseQueueNumberTakesTheStreamBitIsRefused(t *testing.T) {
	tbl, err := OpenTable(vfs.Default, t.TempDir(), nil)
	require.NoError(t, err)
	defer tbl.Close()
	e := Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 1<<31 | 5, Stream: false, Size: 99}
	tbl.Put(e)
	tbl.Detach()
	_, ferr := tbl.Flush(true)
	got, ok, gerr := tbl.Get(3)
	require.NoError(t, gerr)
	if ferr == nil {
		require.True(t, ok)
		require.Equal(t, e, got, "Flush succeeded, and the entry reads back as another queue's stream message")
	}
	_, inStream, err := tbl.NextStream(5, 1, 10)
	require.NoError(t, err)
	require.False(t, inStream, "queue 5's stream holds a message of queue %d", e.Queue)
}
