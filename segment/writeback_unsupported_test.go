package segment_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// TestCreatePacedWritesBackAtTheSyncWhereSyncFileRangeIsRefused: a kernel
// or sandbox that refuses sync_file_range as not implemented (ENOSYS, or
// EOPNOTSUPP) refuses it for every chunk, and the call only decides when
// the zeros reach the device. The file is made as on a file system
// without it, its zeros written back by the sync that ends the
// preparation, and the call is not tried again for each chunk. Failing
// the preparation instead failed every rotation of the log for good.
func TestCreatePacedWritesBackAtTheSyncWhereSyncFileRangeIsRefused(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSYS, syscall.EOPNOTSUPP} {
		t.Run(errno.Error(), func(t *testing.T) {
			fs := vfs.NewFaultFS(vfs.Default)
			fs.Inject(vfs.Rule{Op: vfs.OpWriteBack, Err: errno})
			path := filepath.Join(t.TempDir(), "seg")
			paced := 0
			f, err := segment.CreatePaced(fs, path, 5, 0, testFileSize, func(int64) error {
				paced++
				return nil
			})
			require.NoError(t, err)
			defer f.Close()
			require.Greater(t, paced, 3, "the fill is still paced, chunk by chunk")
			require.EqualValues(t, 1, fs.Count(vfs.OpWriteBack), "sync_file_range tried again after it was refused")
			require.EqualValues(t, 1, fs.Count(vfs.OpSync))
			data := mustRead(t, path)
			require.Len(t, data, testFileSize)
			seq, err := segment.DecodeHeader(data)
			require.NoError(t, err)
			require.Equal(t, uint32(5), seq)
			require.True(t, isZero(data[segment.HeaderSize:]))
		})
	}
}
