package wal

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// TestALogWhoseKernelRefusesSyncFileRangeRotates: where sync_file_range is
// refused as not implemented (a seccomp filter, an emulated kernel), every
// new segment is prepared without it, and the log rotates as on a file
// system without it. The refusal used to fail every preparation, and so
// every rotation.
func TestALogWhoseKernelRefusesSyncFileRangeRotates(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpWriteBack, Err: syscall.ENOSYS})
	l := mustOpen(t, t.TempDir(), Options{FS: fs, SegmentBytes: prepFaultSeg})
	defer l.Close()
	var acked []entry
	for i := 0; l.Stats().Rotations < 3; i++ {
		pos, err := l.Append(prepFaultRecord(i))
		require.NoError(t, err, "append %d", i)
		acked = append(acked, entry{pos[0], prepFaultRecord(i)})
	}
	require.Positive(t, fs.Count(vfs.OpWriteBack), "no segment was prepared with sync_file_range tried")
	requireEntries(t, acked, readAll(t, l))
}
