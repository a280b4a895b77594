package wal

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// holdWriteFS holds, once armed, the first write whose bytes hold marker
// (a record's frame carries its body as it is) until release.
type holdWriteFS struct {
	vfs.FS
	marker  []byte
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

type holdWriteFile struct {
	vfs.File
	fs *holdWriteFS
}

func (h *holdWriteFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return holdWriteFile{f, h}, nil
}

func (f holdWriteFile) WriteAt(p []byte, off int64) (int, error) {
	if bytes.Contains(p, f.fs.marker) && f.fs.armed.CompareAndSwap(true, false) {
		f.fs.entered <- struct{}{}
		<-f.fs.release
	}
	return f.File.WriteAt(p, off)
}

// A RemoveBelow whose directory sync fails poisons the log while the
// writer writes a batch: the batch's fdatasync must not run, and its
// callers must not be told success. "A failed write or fdatasync poisons
// the log: that batch and every later call fail" (DESIGN, Failures), and
// a failed directory sync does the same: fdatasync is not tried on a
// poisoned log, whose next fsync succeeding would say nothing of what the
// failed one lost.
func TestABatchWrittenWhileARemovalPoisonsTheLogFailsWithoutAnFdatasync(t *testing.T) {
	dir := t.TempDir()
	h := &holdWriteFS{FS: vfs.Default, marker: []byte("written-while-poisoned"),
		entered: make(chan struct{}), release: make(chan struct{})}
	ffs := vfs.NewFaultFS(h)
	l := mustOpen(t, dir, Options{FS: ffs, SegmentBytes: 4096})
	appendRecords(t, l, 0, 200) // three segments at least
	require.GreaterOrEqual(t, l.Stats().LastSegment, uint32(3))

	h.armed.Store(true)
	appended := make(chan error, 1)
	go func() {
		_, err := l.Append(h.marker)
		appended <- err
	}()
	<-h.entered // the writer is writing the batch, before its fdatasync

	ffs.Inject(vfs.Rule{Op: vfs.OpSyncDir})
	n, err := l.RemoveBelow(MakePosition(3, 0))
	require.ErrorIs(t, err, ErrPoisoned, "the removal's failed directory sync poisons the log")
	require.ErrorIs(t, err, syscall.EIO)
	require.Equal(t, 2, n)
	syncs := l.Stats().Syncs

	close(h.release)
	err = <-appended
	assert.ErrorIs(t, err, ErrPoisoned, "the batch written when the log was poisoned is told success")
	assert.Equal(t, syncs, l.Stats().Syncs, "the writer fdatasynced a poisoned log")
	require.True(t, errors.Is(l.Close(), ErrPoisoned), "Close returns the poison")
}
