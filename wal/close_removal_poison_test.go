package wal

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// holdDirSyncFS holds the next directory sync once armed, until release
// says how it ends.
type holdDirSyncFS struct {
	vfs.FS
	armed   atomic.Bool
	entered chan struct{}
	release chan error
}

func (h *holdDirSyncFS) SyncDir(dir string) error {
	if h.armed.CompareAndSwap(true, false) {
		h.entered <- struct{}{}
		if err := <-h.release; err != nil {
			return err
		}
	}
	return h.FS.SyncDir(dir)
}

// Close: "Close returns the poison error if a write or fdatasync had
// failed", and a failed directory sync of RemoveBelow poisons the log
// ("the log stops, as for a failed fdatasync"). Close waits for a removal
// under way; a writer woken by its SyncInterval timer after Close marked
// the log closed stops before that removal's directory sync fails, and
// Close must still return the poison and write no clean mark.
func TestCloseReturnsThePoisonOfARemovalItWaitedFor(t *testing.T) {
	dir := t.TempDir()
	h := &holdDirSyncFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan error)}
	l := mustOpen(t, dir, Options{FS: h, SegmentBytes: 4096, SyncInterval: 20 * time.Millisecond})
	appendRecords(t, l, 0, 200) // three segments
	require.GreaterOrEqual(t, l.Stats().LastSegment, uint32(3))

	h.armed.Store(true)
	removed := make(chan error, 1)
	go func() {
		_, err := l.RemoveBelow(MakePosition(3, 0))
		removed <- err
	}()
	<-h.entered // the removal's directory sync is under way

	// Written, not synced: the writer's interval timer is armed.
	_, err := l.AppendWritten(record(1000))
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	// Close marked the log closed and waits for the removal; the
	// writer's interval timer fires, it sees the log closed and stops.
	select {
	case <-l.writerDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not stop on its interval timer after Close marked the log closed")
	}

	h.release <- syscall.EIO
	rerr := <-removed
	require.ErrorIs(t, rerr, ErrPoisoned, "the failed directory sync poisons the log")
	cerr := <-closed
	require.ErrorIs(t, cerr, ErrPoisoned, "Close returns the poison of the removal it waited for")
	_, statErr := os.Stat(filepath.Join(dir, cleanName))
	require.True(t, errors.Is(statErr, os.ErrNotExist), "no clean mark for a poisoned log")
}
