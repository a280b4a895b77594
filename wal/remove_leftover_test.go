package wal

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// "The removal is durable when RemoveBelow returns", a removal that only
// finishes what an earlier failed one left too: the directory is synced,
// or a power loss brings the removed segments back with their records.
func TestARemovalFinishedByALaterRemoveBelowIsDurable(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "log")
	cfs := vfs.NewCrashFS(vfs.Default)
	ffs := vfs.NewFaultFS(cfs)
	opts := Options{SegmentBytes: 1024, FS: ffs}
	l := mustOpen(t, dir, opts)
	es := appendRecords(t, l, 0, 200)
	_, err := l.RemoveBelow(es[30].pos) // fills the spares: the rest are deleted
	require.NoError(t, err)
	first := l.Stats().FirstSegment
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: segName(first), Err: syscall.EIO})
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: segName(first), Err: syscall.EIO})
	cut := es[120].pos
	_, err = l.RemoveBelow(cut)
	require.ErrorIs(t, err, syscall.EIO)
	ffs.Clear()
	n, err := l.RemoveBelow(cut) // removes what the failed one left
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = os.Stat(segFile(dir, first))
	require.ErrorIs(t, err, os.ErrNotExist, "the leftover file is removed")

	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	require.NoError(t, l.Close())
	l = mustOpen(t, clone, Options{SegmentBytes: 1024})
	defer l.Close()
	require.Equal(t, cut.Segment(), l.Stats().FirstSegment, "segments RemoveBelow removed are back after a power loss")
}

// A segment file RemoveBelow could not remove is out of the log, and on
// disk still: Stats counts it in UnremovedBytes, not in DiskBytes nor
// BytesRemoved, until a later RemoveBelow removes it.
func TestStatsCountASegmentFileThatCouldNotBeRemovedAsUnremoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	ffs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{SegmentBytes: 1024, FS: ffs})
	defer l.Close()
	es := appendRecords(t, l, 0, 200)
	_, err := l.RemoveBelow(es[30].pos) // fills the spares: the rest are deleted
	require.NoError(t, err)
	first := l.Stats().FirstSegment
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: segName(first), Err: syscall.EACCES})
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: segName(first), Err: syscall.EACCES})
	before := l.Stats()
	cut := es[120].pos
	n, err := l.RemoveBelow(cut)
	require.ErrorIs(t, err, syscall.EACCES)
	require.Positive(t, n)
	var onDisk int64
	for seq := first; seq < cut.Segment(); seq++ {
		fi, err := os.Stat(segFile(dir, seq))
		require.NoError(t, err, "a segment from the one that could not be removed on stays")
		onDisk += fi.Size()
	}
	st := l.Stats()
	require.Equal(t, onDisk, st.UnremovedBytes, "the files left on disk")
	require.Equal(t, before.BytesRemoved, st.BytesRemoved, "nothing removed")
	require.Equal(t, before.DiskBytes-onDisk, st.DiskBytes, "out of the log")

	_, err = l.RemoveBelow(cut) // fails again
	require.ErrorIs(t, err, syscall.EACCES)
	require.Equal(t, onDisk, l.Stats().UnremovedBytes, "counted once")
	ffs.Clear()
	_, err = l.RemoveBelow(cut)
	require.NoError(t, err)
	st = l.Stats()
	require.Zero(t, st.UnremovedBytes, "removed at last")
	require.Equal(t, before.BytesRemoved+onDisk, st.BytesRemoved)
}
