package broker_test

import (
	"context"
	"fmt"
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

// Backup's doc: "ctx is checked between files", the index's as well as
// the log's segments. A Backup canceled once the first index file (the
// checkpoint) is copied opens no other (a table file is 2 MiB, one per
// 65,536 messages) and fails with ctx's error; index.CopyCheckpoint used
// to copy every table file before Backup noticed.
func TestABackupCanceledWhileItCopiesTheIndexCopiesNoMoreFiles(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	dst := filepath.Join(t.TempDir(), "b")
	idx := filepath.Join(dst+".partial", "index")
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	var canceled atomic.Bool
	var after []string
	ffs.Observe(func(ev vfs.Event) {
		if filepath.Dir(ev.Name) != idx {
			return
		}
		if canceled.Load() && ev.Op == vfs.OpOpen {
			after = append(after, filepath.Base(ev.Name))
		}
		if ev.Op == vfs.OpSync && canceled.CompareAndSwap(false, true) {
			cancel() // the first index file is copied
		}
	})
	err := e.s.Backup(c, dst)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, after, "index files copied after ctx was canceled")
}

// Backup's doc: "an existing dir, or a file or a symbolic link to nothing
// in its place, is refused with an error that wraps fs.ErrExist, before
// anything is copied". The check and the copy must look at one place: the
// check used to read dir's text as the kernel takes it (ReadDir, Lstat)
// while the copy went where vfs.Resolve puts it, and the two disagreed. A
// trailing "/" (or "/.") made Lstat follow a final link to nothing, so
// "dangling/" was not refused and its copy landed at the link's target; a
// ".." after a name that does not exist is ENOENT for the kernel while
// Resolve climbs back to an existing place, so "missing/../exists" was
// refused only by the final rename, after a checkpoint and a whole copy,
// and "<store>/../x/.." wrote "<the store's parent>.partial". Each is
// refused now, with no checkpoint made and nothing written.
func TestABackupRefusesAnExistingDirHoweverItIsNamed(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	root := t.TempDir()
	sep := string(filepath.Separator)
	via := func(name string) string { return root + sep + "missing" + sep + ".." + sep + name }
	requireNothingMade := func(t *testing.T, err error, before int64) {
		t.Helper()
		require.ErrorIs(t, err, iofs.ErrExist)
		require.Equal(t, before, e.s.Stats().Checkpoints, "refused only after a checkpoint and a copy: %v", err)
	}

	dangling := filepath.Join(root, "dangling")
	for _, name := range []string{dangling + sep, dangling + sep + ".", via("dangling")} {
		t.Run("a link to nothing as "+name[len(root):], func(t *testing.T) {
			nowhere := filepath.Join(t.TempDir(), "nowhere")
			_ = os.Remove(dangling)
			require.NoError(t, os.Symlink(nowhere, dangling))
			before := e.s.Stats().Checkpoints
			err := e.s.Backup(ctx(t), name)
			requireNothingMade(t, err, before)
			require.ErrorContains(t, err, "as a symbolic link to nothing")
			_, statErr := os.Lstat(nowhere)
			require.ErrorIs(t, statErr, os.ErrNotExist, "a copy was written at the link's target")
			_, statErr = os.Lstat(nowhere + ".partial")
			require.ErrorIs(t, statErr, os.ErrNotExist, "a partial copy was written beside the link's target")
		})
	}

	t.Run("an existing directory as /missing/../exists", func(t *testing.T) {
		require.NoError(t, os.Mkdir(filepath.Join(root, "exists"), 0o700))
		before := e.s.Stats().Checkpoints
		requireNothingMade(t, e.s.Backup(ctx(t), via("exists")), before)
		require.NoDirExists(t, filepath.Join(root, "exists.partial"))
	})

	t.Run("the store's parent as <store>/../x/..", func(t *testing.T) {
		parent := filepath.Dir(e.dir)
		before := e.s.Stats().Checkpoints
		requireNothingMade(t, e.s.Backup(ctx(t), e.dir+sep+".."+sep+"x"+sep+".."), before)
		require.NoDirExists(t, parent+".partial")
		require.NoDirExists(t, filepath.Join(parent, "x"))
	})

	t.Run("a new directory as /missing/../new/ is made there", func(t *testing.T) {
		require.NoError(t, e.s.Backup(ctx(t), via("new")+sep))
		require.DirExists(t, filepath.Join(root, "new"))
		require.NoDirExists(t, filepath.Join(root, "missing"))
	})
}

// Two stores backed up to one dir at once (two nightly jobs given the same
// path): the second Backup, started once the first has written its index
// and first segment into dir+".partial", finds the mark there locked and
// is refused (Locked, fs.ErrExist), leaving the first's copy alone; the
// first's copy is whole. Backup's doc: a Backup that returned nil leaves
// "a complete dir" that "Open opens like a store closed at that instant".
// The second used to take the first's ".partial", mark and all, for a
// crashed Backup's leftover and remove it; the first went on writing into
// the ".partial" the second made, renamed it to dir and returned nil, and
// dir opened as a store silently missing 48 of its 100 messages.
func TestABackupToADirAnotherBackupIsWritingIsRefused(t *testing.T) {
	ffsA := vfs.NewFaultFS(vfs.Default)
	a := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS, o.SegmentBytes = ffsA, broker.MinSegmentBytes })
	jobs := a.queue("jobs", keyedJobs)
	for i := range 100 {
		mustPublish(t, jobs, fmt.Sprintf("m-%03d-%s", i, strings.Repeat("x", 300)))
	}
	require.Greater(t, a.s.Stats().Segments, 2)
	ffsB := vfs.NewFaultFS(vfs.Default)
	b := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffsB })
	mustPublish(t, b.queue("other", keyedJobs), "b's")

	dst := filepath.Join(t.TempDir(), "nightly")
	aDone := make(chan struct{})
	bStarted := make(chan struct{})
	bErr := make(chan error, 1)
	var fired atomic.Bool
	ffsB.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpMkdirAll && ev.Name == filepath.Join(dst+".partial", "index") {
			close(bStarted) // B has made its own .partial, mark and all
			<-aDone
		}
	})
	ffsA.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpWrite && strings.HasPrefix(ev.Name, dst+".partial"+string(filepath.Separator)) &&
			strings.HasSuffix(ev.Name, ".seg") && fired.CompareAndSwap(false, true) {
			go func() { bErr <- b.s.Backup(context.Background(), dst) }()
			select {
			case <-bStarted:
			case err := <-bErr:
				bErr <- err
			}
		}
	})
	errA := a.s.Backup(ctx(t), dst)
	close(aDone)
	errB := <-bErr
	require.True(t, fired.Load(), "B's Backup was started while A's copied its segments")
	require.NoError(t, errA)
	names, _ := os.ReadDir(dst)
	var listed []string
	for _, n := range names {
		listed = append(listed, n.Name())
	}
	opts := a.opts
	opts.FS = nil
	s, err := broker.Open(dst, opts)
	require.NoError(t, err, "A's Backup returned nil, yet %s (holding %v) does not open", dst, listed)
	defer s.Close()
	q, err := s.Queue("jobs", keyedJobs)
	require.NoError(t, err)
	require.Equal(t, 100, q.Stats().Ready,
		"A's Backup returned nil, yet %s (holding %v) opens as a store missing messages", dst, listed)
	require.ErrorIs(t, errB, broker.Locked, "B's Backup, to the dir A's was writing")
	require.ErrorIs(t, errB, iofs.ErrExist)
	require.ErrorContains(t, errB, "another Backup's copy in progress")
	require.NoDirExists(t, dst+".partial", "B left nothing behind")
}

// A Backup writes its copy in dir+".partial" and removes it there when it
// fails, so that place must not be, or hold, the store's own directory,
// as dir must not lie inside it: a store opened in "b.partial" and backed
// up to "b" had, after one error listing "b.partial", the Backup make its
// mark among the store's files, fail to copy the checkpoint onto itself,
// and remove the live store's segments as its failed copy. Such a dir is
// refused, saying why, before anything is made, with a fault listing the
// store's directory or not.
func TestABackupWhosePartialCopyWouldBeOrHoldTheStoreIsRefused(t *testing.T) {
	for _, r := range []struct {
		store, dst, how string
	}{
		{"b.partial", "b", "would be the store's own directory"},
		{"b.partial", "x/../b", "would be the store's own directory"},
		{"c.partial/store", "c", "would hold the store's own directory"},
	} {
		for _, fault := range []bool{false, true} {
			root := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			o := broker.Options{SegmentBytes: broker.MinSegmentBytes, FS: ffs, Logger: quiet()}
			broker.ManualMaintenance(&o)
			storeDir := filepath.Join(root, r.store)
			s, err := broker.Open(storeDir, o)
			require.NoError(t, err)
			q, err := s.Queue("jobs", keyedJobs)
			require.NoError(t, err)
			for i := range 20 {
				mustPublish(t, q, fmt.Sprintf("m-%d", i))
			}
			before := dirNames(t, storeDir)
			what := fmt.Sprintf("a store in %s backed up to %s (fault %v)", r.store, r.dst, fault)
			if fault {
				ffs.Inject(vfs.Rule{Op: vfs.OpReadDir, Match: func(n string) bool { return filepath.Clean(n) == storeDir }})
			}
			err = s.Backup(ctx(t), filepath.Join(root, r.dst))
			ffs.Clear()
			require.ErrorContains(t, err, r.how, what)
			require.Equal(t, before, dirNames(t, storeDir), "%s: the store's directory changed", what)
			require.NoDirExists(t, filepath.Join(root, filepath.Base(r.dst)), what)
			require.Equal(t, 20, mustStats(t, s, "jobs").Ready, what)
			require.NoError(t, s.Close())
		}
	}
}
