package broker_test

import (
	iofs "io/fs"
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

// When the directory sync after the rename fails and the rename back to
// dir+".partial" fails too, the copy is left whole under dir's name, and
// the error says so: it used to be removed where it stood, segments
// oldest first and the mark last, so that a removal failing part way left
// a marked copy under dir's name, without its index and first segments,
// which Open took (it removes the mark as a .tmp file) for a good store
// rebuilt from the segments left, silently missing messages. The call
// still fails (the name may not survive a power loss), and a retry to the
// same dir is refused while the copy is there.
func TestABackupThatCannotRenameItsCopyBackLeavesItWhole(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	root := t.TempDir()
	dst := filepath.Join(root, "backup")
	// The first sync of root is the partial copy's creation, the second
	// the one after the rename.
	ffs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Match: func(n string) bool { return filepath.Clean(n) == root }, Nth: 2})
	// The rename back to dir.partial fails (the first is the rename to
	// dir).
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, Nth: 2, Match: func(n string) bool { return n == dst+".partial" }})
	// A removal of the copy's second segment, were one made, fails.
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, Nth: 1, Match: func(n string) bool {
		d := filepath.Dir(n)
		return (d == dst || d == dst+".partial") && strings.HasSuffix(n, "0000000002.seg")
	}})
	err := e.s.Backup(ctx(t), dst)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpRename), "the rename back was failed")
	ffs.Clear()
	require.ErrorIs(t, err, syscall.EIO, "Backup fails: the copy's name may not be durable")
	require.ErrorContains(t, err, "the copy is complete, and left as "+dst)
	require.NoDirExists(t, dst+".partial")

	require.ErrorIs(t, e.s.Backup(ctx(t), dst), iofs.ErrExist, "a retry to the same dir is refused while the copy is there")
	b, err := broker.Open(dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	q, err := b.Queue("jobs", keyedJobs)
	require.NoError(t, err)
	require.Equal(t, 100, q.Stats().Ready, "the copy left under %s is whole (recovery: %s)", dst, b.Recovery())
	require.NoError(t, b.Close())
}
