package wal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// TestASecondCloseDoesNotWaitForTheFirst pins what Close's doc says of a
// second call: it returns ErrClosed at once, even while the first is
// still making the log durable, and the directory stays locked until the
// first returns (a caller that reopens on the second's answer gets
// ErrLocked). The first returns nil once its fdatasync completes, and
// the record it synced is there.
func TestASecondCloseDoesNotWaitForTheFirst(t *testing.T) {
	dir := t.TempDir()
	h := newHoldSyncFS(vfs.Default)
	opts := Options{FS: h, SegmentBytes: MinSegmentBytes, SyncInterval: time.Hour}
	l := mustOpen(t, dir, opts)
	pos, err := l.AppendWritten([]byte("written, not yet synced"))
	require.NoError(t, err)

	h.held.Store(1) // Close's fdatasync of segment 1
	first := make(chan error, 1)
	go func() { first <- l.Close() }()
	<-h.entered

	require.ErrorIs(t, l.Close(), ErrClosed, "a second Close while the first syncs")
	_, err = Open(dir, Options{SegmentBytes: MinSegmentBytes})
	require.ErrorIs(t, err, ErrLocked, "the directory was released before the first Close returned")

	h.release <- nil
	require.NoError(t, <-first)
	l = mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
	defer l.Close()
	got, err := l.Read(pos[0])
	require.NoError(t, err)
	require.Equal(t, "written, not yet synced", string(got))
}
