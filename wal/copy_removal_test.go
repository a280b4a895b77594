package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// copyGateFS holds CopyTo's creation of the copy of segment 1 in dir until
// release is closed.
type copyGateFS struct {
	vfs.FS
	dir              string
	entered, release chan struct{}
}

func (g *copyGateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if name == filepath.Join(g.dir, segName(1)) {
		close(g.entered)
		<-g.release
	}
	return g.FS.OpenFile(name, flag, perm)
}

// CopyTo reads each segment's mapping as a reader of it: a RemoveBelow on
// another goroutine (which its caller should have kept from running, but
// nothing stops) waits for the copy of a segment to end before it unmaps
// it, as it waits for a View. It used to read the mapping uncounted, and
// the removal unmapped segment 1 under the copy of it, which then wrote
// from memory no longer mapped (a read of it is SIGSEGV). The copy either
// succeeds or fails with ErrNotFound, naming the segment removed under it.
func TestCopyToHoldsEachSegmentAgainstARemovalWhileItCopiesIt(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, os.Mkdir(dst, 0o700))
	gate := &copyGateFS{FS: vfs.Default, dir: dst, entered: make(chan struct{}), release: make(chan struct{})}
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 2048, FS: gate})
	defer l.Close()
	appendRecords(t, l, 0, 200)
	require.Greater(t, l.Stats().Segments, 3)
	first := l.segment(1)
	require.NotNil(t, first)

	copied := make(chan error, 1)
	go func() { copied <- l.CopyTo(context.Background(), dst, l.End()) }()
	<-gate.entered
	removed := make(chan error, 1)
	go func() { _, err := l.RemoveBelow(MakePosition(3, 0)); removed <- err }()
	// Until the removal has ended, or waits for the copy, a reader of
	// segment 1.
	waiting := false
	for !waiting {
		select {
		case err := <-removed:
			removed <- err
			waiting = true
		default:
			waiting = first.readers.Load() == closingBit|1
			runtime.Gosched()
		}
	}
	close(gate.release)
	err := <-copied
	require.NoError(t, <-removed)
	if err != nil {
		require.True(t, errors.Is(err, ErrNotFound), "CopyTo under a removal: %v", err)
		require.ErrorContains(t, err, "removed")
	}
}
