package segment_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// A segment is prepared under a ".tmp" name and renamed into place; the
// errors of its writes and fdatasyncs after that name the file by its
// path now, not by the name it was opened with (a file that no longer
// exists), and still wrap the system's error.
func TestErrorsOfARenamedSegmentNameItsPathNow(t *testing.T) {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	tmp, path := filepath.Join(dir, "0000000001.seg.tmp"), filepath.Join(dir, "0000000001.seg")
	f, err := segment.Create(ffs, tmp, 1, 0, 4096)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Rename(ffs, path))

	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Times: 1, Err: syscall.ENOSPC})
	werr := f.WriteAt([]byte("frame"), segment.HeaderSize)
	require.ErrorIs(t, werr, syscall.ENOSPC)
	require.Contains(t, werr.Error(), path+": write at offset 32")
	require.NotContains(t, werr.Error(), ".tmp", "the file has not been called that since its rename")

	ffs.Inject(vfs.Rule{Op: vfs.OpSync, Times: 1, Err: syscall.EIO})
	serr := f.Sync()
	require.ErrorIs(t, serr, syscall.EIO)
	require.Contains(t, serr.Error(), path+": fdatasync")
	require.NotContains(t, serr.Error(), ".tmp")
}

// So does the error of its Close, which failed naming the ".tmp" file the
// segment was prepared as, or (for the unmapping) no file at all.
func TestTheCloseErrorOfARenamedSegmentNamesItsPathNow(t *testing.T) {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	tmp, path := filepath.Join(dir, "0000000001.seg.tmp"), filepath.Join(dir, "0000000001.seg")
	f, err := segment.Create(ffs, tmp, 1, 0, 4096)
	require.NoError(t, err)
	require.NoError(t, f.Rename(ffs, path))

	ffs.Inject(vfs.Rule{Op: vfs.OpClose, Times: 1, Err: syscall.EIO})
	cerr := f.Close()
	require.ErrorIs(t, cerr, syscall.EIO)
	require.Contains(t, cerr.Error(), path+": close")
	require.NotContains(t, cerr.Error(), ".tmp", "the file has not been called that since its rename")
}
