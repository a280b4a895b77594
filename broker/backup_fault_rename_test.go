package broker_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// "A Backup that fails or is canceled removes what it wrote and leaves no
// dir", when what fails is the directory sync after the copy took its
// name and then a removal of the copy too: the copy is renamed back
// before it is removed, so what is left is a partial copy the next Backup
// recognises and removes, never a marked copy under dir's name that
// would open as a store missing messages; and the error does not say the
// copy was removed.
func TestABackupFailingAfterItsRenameLeavesNoMarkedShortCopyAsDir(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	root := t.TempDir()
	dst := filepath.Join(root, "backup")
	// The first sync of root is the partial copy's creation, the second
	// the one after the rename.
	ffs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Match: func(n string) bool { return filepath.Clean(n) == root }, Nth: 2})
	// The removal of the copy's second segment fails.
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Nth: 1, Match: func(n string) bool {
		d := filepath.Dir(n)
		return (d == dst || d == dst+".partial") && strings.HasSuffix(n, "0000000002.seg")
	}})
	err := e.s.Backup(ctx(t), dst)
	require.ErrorIs(t, err, syscall.EIO)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpRemove), "the removal of the copy failed part way")
	ffs.Clear()

	if _, statErr := os.Stat(dst); statErr == nil {
		msg := "the failed Backup (" + err.Error() + ") left " + dst
		if b, oerr := broker.Open(dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes}); oerr == nil {
			q, qerr := b.Queue("jobs", keyedJobs)
			require.NoError(t, qerr)
			msg += ", which opens as a good store holding " + strconv.Itoa(q.Stats().Ready) + " of the 100 messages"
			require.NoError(t, b.Close())
		}
		t.Fatal(msg)
	}
	require.NotContains(t, err.Error(), "the copy is removed")
	require.DirExists(t, dst+".partial", "the removal that failed left the partial copy")
	require.NoError(t, e.s.Backup(ctx(t), dst), "the next Backup removes the partial copy and makes its own")
	b, err := broker.Open(dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	q, err := b.Queue("jobs", keyedJobs)
	require.NoError(t, err)
	require.Equal(t, 100, q.Stats().Ready)
	require.NoError(t, b.Close())
}
