package broker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// treeOf returns every file and directory under root, each with a digest
// of its bytes (directories with "dir"), or nil when root does not exist.
// A segment being prepared (".seg.tmp") is left out: an open store's
// preparer makes and writes it in the background.
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			tree[rel] = "dir"
			return nil
		}
		if strings.HasSuffix(path, ".seg.tmp") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tree[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return tree
}

// A Backup is refused, naming the place, when dir lies inside another
// store's directory (open or closed), inside a backup's copy, or inside
// the partial copy of another Backup (running, or left by one that did
// not finish): the copy would be among files that are not its own, and
// be renamed away with them, or removed with them. Nothing of either
// store, nor of the other copy, is changed: each opens with what it held,
// and the running Backup finishes.
func TestABackupInsideAnotherStoreOrBackupIsRefused(t *testing.T) {
	ffsA := vfs.NewFaultFS(vfs.Default)
	a := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS, o.SegmentBytes = ffsA, broker.MinSegmentBytes })
	jobs := a.queue("jobs", keyedJobs)
	for i := range 50 {
		mustPublish(t, jobs, strings.Repeat("a", 300)+string(rune('0'+i%10)))
	}
	b := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, b.queue("other", keyedJobs), "b's")
	aBefore, bBefore := broker.Dump(a.s), broker.Dump(b.s)

	refused := func(s *broker.Store, dir, holder string) {
		t.Helper()
		err := s.Backup(ctx(t), dir)
		require.Error(t, err, "a Backup to %s", dir)
		require.ErrorContains(t, err, "lies inside "+holder)
		require.NoDirExists(t, dir)
		require.NoDirExists(t, dir+".partial")
	}

	// Another store's directory, open, then closed; and a directory of
	// it not yet made.
	bTree := treeOf(t, b.dir)
	refused(a.s, filepath.Join(b.dir, "backup"), b.dir)
	refused(a.s, filepath.Join(b.dir, "nightly", "mon"), b.dir)
	refused(a.s, filepath.Join(b.dir, "index", "backup"), b.dir)
	require.Equal(t, bTree, treeOf(t, b.dir))
	b.close()
	bTree = treeOf(t, b.dir)
	refused(a.s, filepath.Join(b.dir, "backup"), b.dir)
	require.Equal(t, bTree, treeOf(t, b.dir))
	b.open()
	require.Equal(t, bBefore, broker.Dump(b.s), "the other store holds what it held")

	// A backup's copy, before its first Open (BACKUP-COPY) and after it
	// (a store's directory).
	root := t.TempDir()
	copied := filepath.Join(root, "copied")
	require.NoError(t, b.s.Backup(ctx(t), copied))
	copiedTree := treeOf(t, copied)
	refused(a.s, filepath.Join(copied, "backup"), copied)
	require.Equal(t, copiedTree, treeOf(t, copied))

	// The partial copy of a Backup of a that is running: b's Backup into
	// it is refused while a's writes its segments, and a's finishes.
	dst := filepath.Join(root, "nightly")
	var fired atomic.Bool
	inside := make(chan error, 1)
	ffsA.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpWrite && strings.HasPrefix(ev.Name, dst+".partial"+string(filepath.Separator)) &&
			strings.HasSuffix(ev.Name, ".seg") && fired.CompareAndSwap(false, true) {
			inside <- b.s.Backup(context.Background(), filepath.Join(dst+".partial", "b-backup"))
		}
	})
	require.NoError(t, a.s.Backup(ctx(t), dst))
	require.True(t, fired.Load(), "b's Backup ran while a's copied its segments")
	err := <-inside
	require.Error(t, err)
	require.ErrorContains(t, err, "lies inside "+dst+".partial")
	require.NoDirExists(t, dst+".partial")
	restored, err := broker.Open(dst, broker.Options{Now: a.clock.Now})
	require.NoError(t, err)
	require.Equal(t, aBefore, broker.Dump(restored), "a's backup holds a's state, and nothing else")
	require.NoError(t, restored.Close())
	require.NotContains(t, treeOf(t, dst), "b-backup")

	// A partial copy left by a Backup that did not finish: the next
	// Backup to its name removes it whole, so a copy inside it is refused.
	left := filepath.Join(root, "left")
	require.NoError(t, os.MkdirAll(left+".partial", 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(left+".partial", "backup-in-progress.tmp"), nil, 0o600))
	refused(b.s, filepath.Join(left+".partial", "b-backup"), left+".partial")
	require.NoError(t, a.s.Backup(ctx(t), left))
	require.Equal(t, aBefore, broker.Dump(a.s), "the backed-up store holds what it held")
	require.Equal(t, bBefore, broker.Dump(b.s), "the other store holds what it held")
}
