package wal

import (
	"os"
	"os/exec"
	"sync"
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
