package vfs

import (
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFaultFSALaterRuleDoesNotFireOnACallAnEarlierOneFailed: the first
// rule that fires decides the error, and a later matching rule only counts
// the call: it does not spend one of its Times on it.
func TestFaultFSALaterRuleDoesNotFireOnACallAnEarlierOneFailed(t *testing.T) {
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpSync, Nth: 1, Err: syscall.EIO})
	ffs.Inject(Rule{Op: OpSync, Times: 1, Err: syscall.ENOSPC})
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
	require.ErrorIs(t, f.Sync(), syscall.EIO)
	require.ErrorIs(t, f.Sync(), syscall.ENOSPC, "the second rule had not fired yet")
	require.NoError(t, f.Sync())
	require.EqualValues(t, 2, ffs.Injected(OpSync))
	require.EqualValues(t, 3, ffs.Count(OpSync))
}

// TestFaultFSShortFractionRoundsDown: a short write passes
// len(p)*ShortFraction bytes rounded down, never a byte more.
func TestFaultFSShortFractionRoundsDown(t *testing.T) {
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpWrite, ShortFraction: 0.25, Err: syscall.ENOSPC})
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
	n, err := f.WriteAt([]byte("0123456789"), 0)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Equal(t, 2, n, "10 * 0.25 = 2.5 rounds down to 2")
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 2, size)
}

// TestFaultFSObservesAReadThatReachesTheEnd: a ReadAt that transfers some
// bytes and reports io.EOF succeeded, and is observed with the bytes it
// transferred.
func TestFaultFSObservesAReadThatReachesTheEnd(t *testing.T) {
	ffs := NewFaultFS(Default)
	name := filepath.Join(t.TempDir(), "f")
	f := openRW(t, ffs, name)
	writeAt(t, f, "abc", 0)
	var events []Event
	ffs.Observe(func(e Event) { events = append(events, e) })
	n, err := f.ReadAt(make([]byte, 8), 1)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 2, n)
	require.Equal(t, []Event{{Op: OpRead, Name: name, Off: 1, Len: 2}}, events)
}

// TestFaultFSAnInvalidOpIsNamedByNumberAndCountsNothing: an Op outside the
// defined ones has no name of its own, and no calls.
func TestFaultFSAnInvalidOpIsNamedByNumberAndCountsNothing(t *testing.T) {
	ffs := NewFaultFS(Default)
	for _, op := range []Op{0, numOps, -1} {
		require.Equal(t, fmt.Sprintf("Op(%d)", int(op)), op.String())
		require.Zero(t, ffs.Count(op), "%v", op)
		require.Zero(t, ffs.Injected(op), "%v", op)
	}
}

// TestFaultFSDoesNotObserveAReadThatTransfersNothing: a ReadAt at the end
// of the file reads nothing and reports io.EOF; it is no successful read.
func TestFaultFSDoesNotObserveAReadThatTransfersNothing(t *testing.T) {
	ffs := NewFaultFS(Default)
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
	writeAt(t, f, "abc", 0)
	var events []Event
	ffs.Observe(func(e Event) { events = append(events, e) })
	n, err := f.ReadAt(make([]byte, 8), 3)
	require.ErrorIs(t, err, io.EOF)
	require.Zero(t, n)
	require.Empty(t, events)
}

// TestFaultFSOnSyncIsCalledForFdatasyncsOnly: a directory sync is not a
// file's fdatasync, and OnSync does not report it.
func TestFaultFSOnSyncIsCalledForFdatasyncsOnly(t *testing.T) {
	ffs := NewFaultFS(Default)
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	f := openRW(t, ffs, name)
	var synced []string
	ffs.OnSync(func(name string) { synced = append(synced, name) })
	require.NoError(t, ffs.SyncDir(dir))
	require.NoError(t, f.Sync())
	require.Equal(t, []string{name}, synced)
}
