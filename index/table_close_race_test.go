package index

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A Flush that passed its closed check before Close ran, and makes a chunk
// file after it, must not keep that chunk (an open file and a 2 MiB
// mapping nothing would ever release) nor report success: Close "unmaps
// and closes every chunk file", and after it Flush fails with ErrClosed.
// The FaultFS observer holds the Flush right after the chunk file opened,
// lets Close run, then lets the Flush go on.
func TestAFlushThatMeetsCloseWhileMakingAChunkKeepsNothingAndFails(t *testing.T) {
	ffs, tbl, r := flushMeetingClose(t, vfs.OpOpen) // the Flush is creating chunk 0's file

	opens, closes := ffs.Count(vfs.OpOpen), ffs.Count(vfs.OpClose)
	require.Equal(t, opens, closes, "chunk files opened %d times, closed %d times: the table closed before the Flush finished keeps %v open and mapped (Flush returned %v, %v)",
		opens, closes, tbl.Chunks(), r.created, r.err)
	require.ErrorIs(t, r.err, ErrClosed, "a Flush into a table closed under it reported success")
}

// And a Flush with sync that meets Close after its write, before its
// fdatasync, fails with ErrClosed: Close took the chunk it wrote, and the
// entries were never made durable. The FaultFS observer holds the Flush
// right after its write, lets Close run, then lets the Flush go on.
func TestAFlushWithSyncThatMeetsCloseAfterItsWriteFails(t *testing.T) {
	ffs, _, r := flushMeetingClose(t, vfs.OpWrite) // the Flush wrote chunk 0, and has not synced it

	syncs := ffs.Count(vfs.OpSync)
	require.ErrorIs(t, r.err, ErrClosed,
		"Flush(true) returned %v (created %v) after Close, having fdatasynced %d chunk files: success reported for entries never made durable",
		r.err, r.created, syncs)
}

// flushResult is what a Flush returned.
type flushResult struct {
	created []uint64
	err     error
}

// flushMeetingClose runs a Flush(true) of one entry on a new table, holds
// it at its first op on a chunk file, closes the table, and lets the Flush
// go on: it returns what the Flush returned.
func flushMeetingClose(t *testing.T, op vfs.Op) (*vfs.FaultFS, *Table, flushResult) {
	t.Helper()
	ffs := vfs.NewFaultFS(vfs.Default)
	tbl, err := OpenTable(ffs, t.TempDir(), nil)
	require.NoError(t, err)

	reached, resume := make(chan struct{}), make(chan struct{})
	held := false
	ffs.Observe(func(e vfs.Event) {
		if e.Op == op && strings.Contains(e.Name, chunkPrefix) && !held {
			held = true
			close(reached)
			<-resume
		}
	})
	tbl.Put(Entry{Seq: 3, Pos: wal.MakePosition(2, 4096), EnqueuedAt: 1, Queue: 7, Stream: true, Size: 99})
	tbl.Detach()
	done := make(chan flushResult, 1)
	go func() {
		created, err := tbl.Flush(true)
		done <- flushResult{created, err}
	}()
	<-reached
	require.NoError(t, tbl.Close())
	close(resume)
	return ffs, tbl, <-done
}
