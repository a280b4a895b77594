//go:build linux

package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFaultFSFilesAllocateAndWriteBackAsTheirInnerFileDoes: a FaultFS over
// the real file system must take the paths the real one takes (fallocate
// and sync_file_range, which segment preparation uses), and be able to
// fail them.
func TestFaultFSFilesAllocateAndWriteBackAsTheirInnerFileDoes(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	f := openRW(t, ffs, filepath.Join(dir, "seg"))
	a, ok := f.(Allocator)
	require.True(t, ok, "a FaultFS file hides its inner file's fallocate")
	wb, ok := f.(WriteBacker)
	require.True(t, ok, "a FaultFS file hides its inner file's sync_file_range")

	require.NoError(t, a.Allocate(0, 8192))
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 8192, size)
	writeAt(t, f, "x", 0)
	require.NoError(t, wb.WriteBack(0, 4096))
	require.EqualValues(t, 1, ffs.Count(OpAllocate))
	require.EqualValues(t, 1, ffs.Count(OpWriteBack))

	ffs.Inject(Rule{Op: OpAllocate, Err: syscall.ENOSPC})
	ffs.Inject(Rule{Op: OpWriteBack})
	require.ErrorIs(t, a.Allocate(8192, 4096), syscall.ENOSPC)
	require.ErrorIs(t, wb.WriteBack(0, 4096), syscall.EIO)

	// Over a file system without them: fallocate is not supported, and
	// write-back is left to the fdatasync.
	c := NewCrashFS(Default)
	g := openRW(t, NewFaultFS(struct{ FS }{noExtras{c}}), filepath.Join(dir, "other"))
	err = g.(Allocator).Allocate(0, 10)
	require.True(t, errors.Is(err, syscall.EOPNOTSUPP), "%v", err)
	require.NoError(t, g.(WriteBacker).WriteBack(0, 10))
}

// noExtras hides Allocate and WriteBack of its files.
type noExtras struct{ FS }

func (n noExtras) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := n.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return struct{ File }{f}, nil
}

// TestFaultFSObservesTheRangeOfAnAllocateAndAWriteBack: the events of a
// fallocate and a sync_file_range carry the range each was given.
func TestFaultFSObservesTheRangeOfAnAllocateAndAWriteBack(t *testing.T) {
	ffs := NewFaultFS(Default)
	name := filepath.Join(t.TempDir(), "seg")
	f := openRW(t, ffs, name)
	var events []Event
	ffs.Observe(func(e Event) { events = append(events, e) })
	require.NoError(t, f.(Allocator).Allocate(4096, 8192))
	require.NoError(t, f.(WriteBacker).WriteBack(100, 4000))
	require.Equal(t, []Event{
		{Op: OpAllocate, Name: name, Off: 4096, Len: 8192},
		{Op: OpWriteBack, Name: name, Off: 100, Len: 4000},
	}, events)
}
