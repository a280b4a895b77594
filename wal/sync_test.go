package wal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

func TestAppendWrittenDoesNotWaitForFdatasync(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	dur := watchDurability(fs)
	// A long interval: nothing but an explicit Sync may sync in this test.
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20, SyncInterval: time.Hour})
	defer l.Close()
	syncs := l.Stats().Syncs
	pos, err := l.AppendWritten([]byte("written"))
	require.NoError(t, err)
	require.Equal(t, syncs, l.Stats().Syncs, "AppendWritten must not run an fdatasync")
	rec, err := l.Read(pos[0])
	require.NoError(t, err, "a written record is readable at once")
	require.Equal(t, "written", string(rec))
	off := int64(pos[0].Offset())
	require.False(t, dur.covered(segFile(dir, 1), off, off+1))

	// The next synced append covers it too.
	pos2, err := l.Append([]byte("synced"))
	require.NoError(t, err)
	require.Equal(t, syncs+1, l.Stats().Syncs)
	require.True(t, dur.covered(segFile(dir, 1), off, off+1), "the fdatasync of the next append covers the written record")
	off2 := int64(pos2[0].Offset())
	require.True(t, dur.covered(segFile(dir, 1), off2, off2+1))
	require.NoError(t, l.Sync())
	require.Equal(t, syncs+1, l.Stats().Syncs, "Sync with nothing new to sync does not fdatasync")
}

func TestSyncModes(t *testing.T) {
	for _, mode := range []SyncMode{SyncInterval, SyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{Sync: mode, SegmentBytes: 1 << 20, SyncInterval: 5 * time.Millisecond})
			syncs := l.Stats().Syncs
			es := appendRecords(t, l, 0, 20)
			if mode == SyncInterval {
				// The background commit comes by itself.
				require.Eventually(t, func() bool { return l.Stats().Syncs > syncs }, 10*time.Second, time.Millisecond)
			} else {
				require.Equal(t, syncs, l.Stats().Syncs, "SyncNever appends never fdatasync")
				require.NoError(t, l.Sync())
				require.Equal(t, syncs+1, l.Stats().Syncs)
			}
			require.NoError(t, l.Close())
			l = mustOpen(t, dir, Options{Sync: mode})
			defer l.Close()
			requireEntries(t, es, readAll(t, l))
		})
	}
}

// The lock holds across processes: a child process (this test binary run
// again) cannot open a directory this process has open.
func TestSecondOpenFromAnotherProcessIsLocked(t *testing.T) {
	if dir := os.Getenv("WAL_TEST_LOCK_CHILD"); dir != "" {
		_, err := Open(dir, Options{})
		if err == nil {
			os.Exit(0)
		}
		if isLocked(err) {
			os.Exit(3)
		}
		os.Exit(4)
	}
	dir := t.TempDir()
	child := func() int {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSecondOpenFromAnotherProcessIsLocked$")
		cmd.Env = append(os.Environ(), "WAL_TEST_LOCK_CHILD="+dir)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	}
	l := mustOpen(t, dir, Options{})
	require.Equal(t, 3, child(), "the child must see the lock")
	require.NoError(t, l.Close())
	require.Equal(t, 0, child(), "the child opens once the lock is released")
}

// Records reach the log in the order Enqueue was called, so a caller that
// enqueues under its own lock gets its lock's order, then waits outside it.
func TestEnqueueKeepsCallOrder(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	var mu sync.Mutex
	var order []int
	var pend []*Pending
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				mu.Lock()
				n := len(order)
				order = append(order, n)
				p := l.Enqueue(true, record(n))
				pend = append(pend, p)
				mu.Unlock()
				_, err := p.Wait()
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	got := readAll(t, l)
	require.Len(t, got, len(order))
	for i, e := range got {
		require.Equal(t, string(record(i)), string(e.rec), "record %d out of order", i)
	}
	// Wait gives the positions the records landed at.
	for i, p := range pend {
		pos, err := p.Wait()
		require.NoError(t, err)
		require.Equal(t, got[i].pos, pos[0])
	}
}

func TestBarrierCoversEverythingQueuedBefore(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	dur := watchDurability(fs)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20, SyncInterval: time.Hour})
	defer l.Close()
	p := l.Enqueue(false, []byte("written only"))
	require.NoError(t, l.Barrier(false))
	pos, err := p.Wait()
	require.NoError(t, err)
	off := int64(pos[0].Offset())
	require.False(t, dur.covered(segFile(dir, 1), off, off+1))
	require.NoError(t, l.Barrier(true))
	require.True(t, dur.covered(segFile(dir, 1), off, off+1))
	_, err = l.Enqueue(true, make([]byte, 2<<20)).Wait()
	require.ErrorIs(t, err, ErrTooLarge)
}

// Under SyncNever nothing syncs in the background: an fdatasync happens
// only at rotation, Sync and Close, however long the records wait (here,
// many times SyncInterval, which the mode ignores).
func TestSyncNeverHasNoBackgroundFdatasync(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncNever, SegmentBytes: 1 << 20, SyncInterval: time.Millisecond})
	defer l.Close()
	syncs := l.Stats().Syncs
	appendRecords(t, l, 0, 3)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, syncs, l.Stats().Syncs, "a background fdatasync under SyncNever")
}

// Close makes every written record durable: under SyncNever, records
// appended without any fdatasync survive a power loss right after Close.
func TestCloseMakesWrittenRecordsDurable(t *testing.T) {
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: cfs, Sync: SyncNever, SegmentBytes: 1 << 20})
	es := appendRecords(t, l, 0, 10)
	require.NoError(t, l.Close())

	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir})) // power lost now
	l = mustOpen(t, clone, Options{SegmentBytes: 1 << 20})
	defer l.Close()
	requireEntries(t, es, readAll(t, l))
}

// A failed background fdatasync (of records appended without waiting for
// one) poisons the log: Err reports it before any call meets it, and the
// fdatasync is never tried again.
func TestAFailedBackgroundFdatasyncIsReportedByErr(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.Default)
	var synced atomic.Int64 // completed fdatasyncs of segment 1
	fs.OnSync(func(name string) {
		if firstSegment(name) {
			synced.Add(1)
		}
	})
	l := mustOpen(t, t.TempDir(), Options{FS: fs, SegmentBytes: 1 << 20, SyncInterval: time.Millisecond})
	defer l.Close()
	require.NoError(t, l.Err())
	poisoned := l.Poisoned()
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: firstSegment, Times: 1})
	before := synced.Load()
	_, err := l.AppendWritten(record(1))
	require.NoError(t, err, "the write itself succeeded")
	// Poisoned says so without a call, and Err then has the poison.
	select {
	case <-poisoned:
	case <-time.After(10 * time.Second):
		t.Fatal("Poisoned was not closed")
	}
	require.Error(t, l.Err())
	require.ErrorIs(t, l.Err(), ErrPoisoned)
	require.ErrorIs(t, l.Err(), syscall.EIO)
	time.Sleep(20 * time.Millisecond) // twenty intervals
	require.Equal(t, before, synced.Load(), "the failed fdatasync is not retried")
	_, err = l.AppendWritten(record(2))
	require.ErrorIs(t, err, ErrPoisoned)
}

// The poison is the first failure: a later one (here the failed directory
// sync of a RemoveBelow that began before the writer's failure) does not
// replace it, and RemoveBelow on the poisoned log returns it without
// syncing the directory again.
func TestThePoisonIsTheFirstFailure(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, t.TempDir(), Options{FS: fs, SegmentBytes: 1024})
	defer l.Close()
	es := appendRecords(t, l, 0, 40)
	// The writer's next fdatasync is of the active segment (its commit, or
	// its seal when the append rotates); the next segment, which may be
	// being prepared meanwhile, must not take the failure.
	active := segName(es[len(es)-1].pos.Segment())
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: func(n string) bool { return strings.Contains(n, active) }, Times: 1, Err: syscall.EIO})
	_, err := l.Append(record(100))
	require.ErrorIs(t, err, syscall.EIO)
	later := l.fail(fmt.Errorf("remove segments: sync dir: %w", syscall.ENOSPC))
	require.ErrorIs(t, later, ErrPoisoned)
	fs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Times: 1, Err: syscall.ENOSPC})
	_, err = l.RemoveBelow(es[len(es)-1].pos)
	require.ErrorIs(t, err, ErrPoisoned)
	require.Zero(t, fs.Injected(vfs.OpSyncDir), "a poisoned log syncs no directory")
	for _, err := range []error{later, err, l.Err(), l.Sync()} {
		require.ErrorIs(t, err, syscall.EIO)
		require.NotErrorIs(t, err, syscall.ENOSPC)
	}
}

// TestARotationsSealAloneIsNoCommit: Stats.Syncs counts every fdatasync of
// a segment, the one a rotation runs on its seal included; Commits only
// those that made appended records durable. Appends one at a time, each
// synced before the next: one commit each, whatever the rotations.
func TestARotationsSealAloneIsNoCommit(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: MinSegmentBytes})
	defer l.Close()
	before := l.Stats()
	const n = 40
	rec := make([]byte, 900)
	for range n {
		_, err := l.Append(rec)
		require.NoError(t, err)
	}
	after := l.Stats()
	rotations := after.Rotations - before.Rotations
	require.Positive(t, rotations, "test setup: no rotation")
	require.Equal(t, int64(n), after.Commits-before.Commits, "one commit per append; %d rotations", rotations)
	require.Equal(t, int64(n)+rotations, after.Syncs-before.Syncs, "and one fdatasync more per rotation, of its seal")
}
