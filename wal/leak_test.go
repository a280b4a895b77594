package wal

import (
	"context"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/internal/leakcheck"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// requireReleased fails t unless dir's log, closed, left nothing behind:
// no descriptor or mapping of its files, no goroutine started since before.
func requireReleased(t *testing.T, before leakcheck.Goroutines, dir string) {
	t.Helper()
	require.NoError(t, leakcheck.Check(before, dir))
}

// TestCloseReleasesEverything: a program may open and close logs for as
// long as it runs, so Close must release every file, mapping and goroutine
// the log took, after rotations, reads, removals and a copy.
func TestCloseReleasesEverything(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncInterval, SyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			before := leakcheck.Running()
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{Sync: mode, SegmentBytes: 16 << 10, SyncInterval: time.Millisecond})
			es := appendRecords(t, l, 0, 2000) // several rotations
			require.Greater(t, es[len(es)-1].pos.Segment(), uint32(3))
			requireEntries(t, es, readAll(t, l))
			_, err := l.Read(es[len(es)/2].pos)
			require.NoError(t, err)
			removed, err := l.RemoveBelow(es[len(es)/2].pos)
			require.NoError(t, err)
			require.Positive(t, removed)
			copied := t.TempDir()
			require.NoError(t, l.CopyTo(context.Background(), copied, l.End()))
			require.NoError(t, l.Close())
			requireReleased(t, before, dir)
			requireReleased(t, before, copied)
		})
	}
}

// TestAFailedOpenReleasesEverything fails the file operations a reopen
// makes: each call alone, and each call with every later one of its kind.
// An Open that returns an error must leave nothing behind, whichever step
// failed; one that succeeds must close clean.
func TestAFailedOpenReleasesEverything(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 16 << 10})
	appendRecords(t, l, 0, 500)
	require.NoError(t, l.Close())

	counting := vfs.NewFaultFS(vfs.Default)
	l = mustOpen(t, copyDir(t, dir), Options{FS: counting, SegmentBytes: 16 << 10})
	require.NoError(t, l.Close())

	refused, err := leakcheck.FailedOpens(counting, func(fs vfs.FS) (string, io.Closer, error) {
		d := copyDir(t, dir)
		l, err := Open(d, Options{FS: fs, SegmentBytes: 16 << 10})
		return d, l, err
	})
	require.NoError(t, err)
	require.Positive(t, refused, "no injected failure refused the Open")
}

func TestARefusedOpenReleasesEverything(t *testing.T) {
	dir, acked, _ := buildLog(t)
	before := leakcheck.Running()
	d := copyDir(t, dir)
	victim := firstIn(acked, 2)
	flipByte(t, segFile(d, 2), victim.pos.Offset()+segment.FrameHeaderSize)
	_, err := Open(d, Options{SegmentBytes: smallSeg})
	require.ErrorIs(t, err, ErrCorrupt)
	requireReleased(t, before, d)

	// Salvaged, the log opens, and closes clean.
	l, err := Open(d, Options{SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	requireReleased(t, before, d)
}

func TestALockedOpenReleasesEverything(t *testing.T) {
	dir := t.TempDir()
	before := leakcheck.Running()
	l := mustOpen(t, dir, Options{SegmentBytes: 16 << 10})
	for range 3 {
		_, err := Open(dir, Options{SegmentBytes: 16 << 10})
		require.ErrorIs(t, err, ErrLocked)
	}
	require.NoError(t, l.Close())
	requireReleased(t, before, dir)
}

func TestAPoisonedLogClosesClean(t *testing.T) {
	before := leakcheck.Running()
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 16 << 10})
	appendRecords(t, l, 0, 100)
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Err: syscall.EIO})
	_, err := l.Append([]byte("lost"))
	require.ErrorIs(t, err, syscall.EIO)
	require.Error(t, l.Close(), "Close reports the poison")
	requireReleased(t, before, dir)
}
