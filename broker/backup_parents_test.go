package broker_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// A store whose checkpoints stopped (a failed checkpoint: they stop until
// it is reopened) cannot be backed up, since a Backup's copy is its own
// checkpoint's. Such a Backup is refused at the start, as one of a closed
// store is: it makes nothing where the copy would go, not even the
// parents of its directory, nor removes a crashed Backup's leftover
// there. (It used to make the parents and the partial copy, with its
// mark, and then remove the partial copy, leaving the parents.)
func TestABackupOfAStoreWhoseCheckpointsStoppedMakesNothing(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: "checkpoint", Err: syscall.ENOSPC})
	require.ErrorIs(t, e.s.Maintain(), syscall.ENOSPC)
	ffs.Clear()
	require.NotEmpty(t, e.s.Stats().MaintenanceStopped)

	root := t.TempDir()
	var touched []string
	ffs.Observe(func(ev vfs.Event) {
		if strings.HasPrefix(ev.Name, root) {
			touched = append(touched, ev.Op.String()+" "+ev.Name)
		}
	})
	err := e.s.Backup(ctx(t), filepath.Join(root, "nightly", "copy"))
	require.ErrorIs(t, err, syscall.ENOSPC, "the failure that stopped the checkpoints")
	require.ErrorContains(t, err, "checkpoints")
	require.Empty(t, touched, "a Backup that cannot take its checkpoint touched where its copy would go")
	requireEmptyDir(t, root)
}

// The parents of a Backup's directory that it made stay when it fails
// once it has begun its copy (DESIGN.md, "Backups"): only what is under
// the partial copy's name is its own to remove. A directory it made may
// have been taken meanwhile (another Backup to a sibling, say), and
// removing an empty one is a race with whoever is about to use it.
func TestAFailedBackupLeavesTheParentsItMade(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	root := t.TempDir()
	dst := filepath.Join(root, "nightly", "copy")
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: ".seg", Match: func(name string) bool { return strings.HasPrefix(name, root) }})
	require.ErrorIs(t, e.s.Backup(ctx(t), dst), syscall.EIO)
	require.NoDirExists(t, dst)
	require.NoDirExists(t, dst+".partial")
	requireEmptyDir(t, filepath.Join(root, "nightly"))
}
