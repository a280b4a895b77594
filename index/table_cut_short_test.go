package index

import (
	"errors"
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A table file cut short while it is mapped (by another process, or by
// hand) leaves pages of the mapping that no file backs: reading one raises
// SIGBUS, which ends the process unless the reader asked for a panic. Get
// and NextStream read such a page as damage of that file, an ErrDamaged
// error naming it, as for an entry that fails its checksum: the store then
// stops and the next open rebuilds the table. The test asks for a panic
// itself, so that a read that faults fails it instead of ending the run.
func TestATableFileCutShortUnderItsMappingIsDamageNotACrash(t *testing.T) {
	dir := t.TempDir()
	tbl, err := OpenTable(vfs.Default, dir, nil)
	require.NoError(t, err)
	defer tbl.Close()
	const seq = ChunkEntries/2 + 7 // in a page past the first
	tbl.Put(Entry{Seq: seq, Pos: wal.MakePosition(1, 64), EnqueuedAt: 1, Queue: 3, Stream: true, Size: 40})
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	e, ok, err := tbl.Get(seq)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint32(3), e.Queue)

	path := tbl.chunkPath(0)
	require.NoError(t, os.Truncate(path, 4096))

	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	read := func(what string, f func() error) error {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s faulted on the file cut short (a SIGBUS that would end the process): %v", what, r)
				}
			}()
			err = f()
		}()
		return err
	}
	err = read("Get", func() error {
		_, ok, err := tbl.Get(seq)
		require.False(t, ok)
		return err
	})
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, path)
	err = read("NextStream", func() error {
		_, ok, err := tbl.NextStream(3, 1, 2*ChunkEntries)
		require.False(t, ok)
		return err
	})
	require.ErrorIs(t, err, ErrDamaged)
	require.ErrorContains(t, err, path)
	require.False(t, errors.Is(err, ErrClosed))

	// What lies in the part still backed reads as before.
	_, ok, err = tbl.Get(5)
	require.NoError(t, err)
	require.False(t, ok)
}
