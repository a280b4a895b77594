package vfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// newSeed returns a seed that is logged if the test fails, so that a
// failure can be replayed.
func newSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed: %d", seed)
		}
	})
	return seed
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func openRW(t *testing.T, fs FS, name string) File {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestFaultFSFailsNthSyncWithEIO(t *testing.T) {
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpSync, Nth: 3, Err: syscall.EIO})
	name := filepath.Join(t.TempDir(), "seg")
	f := openRW(t, ffs, name)

	for i := 1; i <= 4; i++ {
		_, err := f.WriteAt([]byte{byte(i)}, int64(i))
		require.NoError(t, err)
		err = f.Sync()
		if i != 3 {
			require.NoError(t, err, "sync %d", i)
			continue
		}
		require.ErrorIs(t, err, syscall.EIO)
		var pathErr *os.PathError
		require.ErrorAs(t, err, &pathErr)
		require.Equal(t, "fdatasync", pathErr.Op)
		require.Equal(t, name, pathErr.Path)
	}
	require.EqualValues(t, 4, ffs.Count(OpSync))
	require.EqualValues(t, 1, ffs.Injected(OpSync))
	require.EqualValues(t, 4, ffs.Count(OpWrite))
	require.EqualValues(t, 0, ffs.Injected(OpWrite))
}

func TestFaultFSShortWriteLeavesExactlyKBytes(t *testing.T) {
	payload := []byte("0123456789ab") // 12 bytes
	for _, tc := range []struct {
		name string
		rule Rule
		want int
	}{
		{"bytes", Rule{ShortBytes: 5, Err: syscall.ENOSPC}, 5},
		{"fraction", Rule{ShortFraction: 0.5, Err: syscall.ENOSPC}, 6},
		{"more than asked", Rule{ShortBytes: 100, Err: io.ErrShortWrite}, 12},
		{"plain failure writes nothing", Rule{Err: syscall.ENOSPC}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ffs := NewFaultFS(Default)
			tc.rule.Op = OpWrite
			ffs.Inject(tc.rule)
			name := filepath.Join(t.TempDir(), "seg")
			f := openRW(t, ffs, name)

			n, err := f.WriteAt(payload, 0)
			require.Equal(t, tc.want, n)
			require.ErrorIs(t, err, tc.rule.Err)
			got, err := os.ReadFile(name)
			require.NoError(t, err)
			require.Equal(t, payload[:tc.want], got, "the partial bytes reach the file, and no more")
		})
	}
}

func TestFaultFSAfterAndTimes(t *testing.T) {
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpWrite, After: 2, Times: 2})
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
	var failed []int
	for i := 1; i <= 6; i++ {
		if _, err := f.WriteAt([]byte("x"), 0); err != nil {
			require.ErrorIs(t, err, syscall.EIO, "EIO is the default error")
			failed = append(failed, i)
		}
	}
	require.Equal(t, []int{3, 4}, failed)

	ffs.Clear()
	ffs.Inject(Rule{Op: OpWrite, After: 1}) // every call after the first
	failed = nil
	for i := 1; i <= 4; i++ {
		if _, err := f.WriteAt([]byte("x"), 0); err != nil {
			failed = append(failed, i)
		}
	}
	require.Equal(t, []int{2, 3, 4}, failed)
	ffs.Clear()
	_, err := f.WriteAt([]byte("x"), 0)
	require.NoError(t, err, "Clear removes every rule")
}

func TestFaultFSNameFilters(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpOpen, NameContains: "wal-", Err: syscall.EACCES})
	ffs.Inject(Rule{Op: OpRemove, Match: func(name string) bool { return filepath.Ext(name) == ".tmp" }})
	ffs.Inject(Rule{Op: OpRename, NameContains: "final"})

	_, err := ffs.OpenFile(filepath.Join(dir, "wal-001"), os.O_CREATE|os.O_RDWR, 0o600)
	require.ErrorIs(t, err, syscall.EACCES)
	_, statErr := os.Stat(filepath.Join(dir, "wal-001"))
	require.ErrorIs(t, statErr, os.ErrNotExist, "a failed open creates nothing")

	tmp := filepath.Join(dir, "a.tmp")
	require.NoError(t, openRW(t, ffs, tmp).Close())
	require.Error(t, ffs.Remove(tmp))
	require.FileExists(t, tmp, "a failed remove removes nothing")

	other := filepath.Join(dir, "b")
	require.NoError(t, openRW(t, ffs, other).Close())
	require.NoError(t, ffs.Rename(other, filepath.Join(dir, "c")), "neither name matches")
	err = ffs.Rename(tmp, filepath.Join(dir, "final"))
	require.ErrorIs(t, err, syscall.EIO, "the new name matches")
	var linkErr *os.LinkError
	require.ErrorAs(t, err, &linkErr)
	require.Equal(t, "rename", linkErr.Op)
	require.FileExists(t, tmp, "a failed rename renames nothing")
	require.NoError(t, ffs.Remove(filepath.Join(dir, "c")))
}

func TestFaultFSProbabilityIsSeeded(t *testing.T) {
	seed := newSeed(t)
	pattern := func() []bool {
		ffs := NewFaultFS(Default)
		ffs.Inject(Rule{Op: OpRead, Probability: 0.3, Rand: newRand(seed)})
		f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
		_, err := f.WriteAt([]byte("abc"), 0)
		require.NoError(t, err)
		out := make([]bool, 500)
		for i := range out {
			_, err := f.ReadAt(make([]byte, 3), 0)
			out[i] = err != nil
		}
		require.EqualValues(t, countTrue(out), ffs.Injected(OpRead))
		return out
	}
	first := pattern()
	require.Equal(t, first, pattern(), "the same seed fails the same calls")
	require.InDelta(t, 150, countTrue(first), 60)
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestFaultFSInjectRejectsMalformedRules(t *testing.T) {
	for _, r := range []Rule{
		{},
		{Op: numOps},
		{Op: OpSync, Nth: -1},
		{Op: OpSync, After: -1},
		{Op: OpSync, Times: -1},
		{Op: OpSync, Probability: 0.5},
		{Op: OpSync, Probability: 2, Rand: newRand(1)},
		{Op: OpSync, ShortBytes: 3},
		{Op: OpWrite, ShortBytes: 3, ShortFraction: 0.5},
		{Op: OpWrite, ShortFraction: 1.5},
	} {
		require.Panics(t, func() { NewFaultFS(Default).Inject(r) }, "%+v", r)
	}
}

func TestFaultFSFirstFiringRuleWinsAndAllCount(t *testing.T) {
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpSync, Nth: 1, Err: syscall.EIO})
	ffs.Inject(Rule{Op: OpSync, Nth: 2, Err: syscall.ENOSPC})
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "f"))
	require.ErrorIs(t, f.Sync(), syscall.EIO)
	require.ErrorIs(t, f.Sync(), syscall.ENOSPC, "the second rule counted the first call too")
	require.NoError(t, f.Sync())
}

func TestFaultFSFailedCloseStillCloses(t *testing.T) {
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpClose})
	f, err := ffs.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	require.ErrorIs(t, f.Close(), syscall.EIO)
	_, err = f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, os.ErrClosed)
}

func TestFaultFSEveryOpCanFail(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(name, []byte("hello"), 0o600))
	calls := map[Op]func(FS, File) error{
		OpRead:     func(_ FS, f File) error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		OpWrite:    func(_ FS, f File) error { _, err := f.WriteAt([]byte("x"), 0); return err },
		OpSync:     func(_ FS, f File) error { return f.Sync() },
		OpTruncate: func(_ FS, f File) error { return f.Truncate(1) },
		OpSize:     func(_ FS, f File) error { _, err := f.Size(); return err },
		OpMap: func(_ FS, f File) error {
			m, err := f.Map(1)
			if err != nil {
				return err
			}
			return m.Unmap()
		},
		OpSyncDir:  func(fs FS, _ File) error { return fs.SyncDir(dir) },
		OpReadDir:  func(fs FS, _ File) error { _, err := fs.ReadDir(dir); return err },
		OpMkdirAll: func(fs FS, _ File) error { return fs.MkdirAll(filepath.Join(dir, "sub"), 0o700) },
		OpLock: func(fs FS, _ File) error {
			l, err := fs.Lock(filepath.Join(dir, "LOCK"))
			if err != nil {
				return err
			}
			return l.Close()
		},
		OpUnlock: func(fs FS, _ File) error {
			l, err := fs.Lock(filepath.Join(dir, "LOCK"))
			if err != nil {
				return err
			}
			return l.Close()
		},
	}
	for op, call := range calls {
		t.Run(op.String(), func(t *testing.T) {
			ffs := NewFaultFS(Default)
			f := openRW(t, ffs, name)
			require.Equal(t, name, f.Name())
			var observed []Op
			ffs.Observe(func(e Event) {
				if e.Op == op { // a lock's call releases it too
					observed = append(observed, e.Op)
				}
			})
			require.NoError(t, call(ffs, f), "without rules the call passes")
			require.Equal(t, []Op{op}, observed)

			ffs.Inject(Rule{Op: op, Err: syscall.EROFS})
			err := call(ffs, f)
			require.ErrorIs(t, err, syscall.EROFS)
			var pathErr *os.PathError
			require.ErrorAs(t, err, &pathErr)
			require.Equal(t, op.String(), pathErr.Op)
			require.EqualValues(t, 2, ffs.Count(op))
			require.EqualValues(t, 1, ffs.Injected(op))
			require.Equal(t, []Op{op}, observed, "a failed call is not observed")
		})
	}
	require.Equal(t, "Op(99)", Op(99).String())
	require.Zero(t, NewFaultFS(Default).Count(Op(99)))
	require.Zero(t, NewFaultFS(Default).Injected(0))
}

func TestFaultFSObserveReportsSuccessfulOps(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	var events []Event
	var synced []string
	ffs.Observe(func(e Event) { events = append(events, e) })
	ffs.OnSync(func(name string) { synced = append(synced, name) })
	ffs.Inject(Rule{Op: OpWrite, Nth: 2})

	name := filepath.Join(dir, "seg")
	f := openRW(t, ffs, name)
	_, err := f.WriteAt([]byte("abcd"), 10)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("zz"), 0)
	require.Error(t, err, "the second write fails and is not observed")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Truncate(3))
	require.NoError(t, ffs.Rename(name, name+"2"))

	require.Equal(t, []Event{
		{Op: OpOpen, Name: name},
		{Op: OpWrite, Name: name, Off: 10, Len: 4},
		{Op: OpSync, Name: name},
		{Op: OpTruncate, Name: name, Off: 3},
		{Op: OpRename, Name: name, NewName: name + "2"},
	}, events)
	require.Equal(t, []string{name}, synced)
}

// TestFaultFSObserverProvesSyncBeforeAck shows the use the observer is for:
// a writer that acknowledges each append only after an fdatasync covering
// it, checked from the events alone.
func TestFaultFSObserverProvesSyncBeforeAck(t *testing.T) {
	ffs := NewFaultFS(Default)
	var mu sync.Mutex
	syncedUpTo := int64(0) // end of the data covered by a completed sync
	writtenUpTo := int64(0)
	ffs.Observe(func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Op {
		case OpWrite:
			writtenUpTo = max(writtenUpTo, e.Off+int64(e.Len))
		case OpSync:
			syncedUpTo = writtenUpTo
		}
	})
	f := openRW(t, ffs, filepath.Join(t.TempDir(), "log"))
	off := int64(0)
	for i := range 20 {
		rec := []byte(fmt.Sprintf("record %02d\n", i))
		_, err := f.WriteAt(rec, off)
		require.NoError(t, err)
		off += int64(len(rec))
		if i%3 == 2 || i == 19 { // group commit every third record
			require.NoError(t, f.Sync())
			mu.Lock()
			require.GreaterOrEqual(t, syncedUpTo, off, "acknowledging record %d", i)
			mu.Unlock()
		}
	}
}

func TestFaultFSConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	ffs.Inject(Rule{Op: OpSync, NameContains: "odd"})
	var observed sync.Map
	ffs.OnSync(func(name string) { observed.Store(name, true) })

	const workers, writes = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			kind := "even"
			if w%2 == 1 {
				kind = "odd"
			}
			f, err := ffs.OpenFile(filepath.Join(dir, fmt.Sprintf("%s-%d", kind, w)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := range writes {
				if _, err := f.WriteAt([]byte{byte(i)}, int64(i)); err != nil {
					t.Error(err)
				}
				err := f.Sync()
				if (kind == "odd") != (err != nil) {
					t.Errorf("worker %d sync %d: %v", w, i, err)
				}
			}
			if w == 0 {
				ffs.Inject(Rule{Op: OpRead}) // rules change while others run
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, workers*writes, ffs.Count(OpWrite))
	require.EqualValues(t, workers*writes, ffs.Count(OpSync))
	require.EqualValues(t, workers/2*writes, ffs.Injected(OpSync))
	n := 0
	observed.Range(func(k, _ any) bool { n++; return true })
	require.Equal(t, workers/2, n, "only the even files' syncs succeed")
}

// TestFaultFSOverCrashFS checks that a sync failed by the FaultFS never
// reaches the file system below, so its data is not durable.
func TestFaultFSOverCrashFS(t *testing.T) {
	dir := t.TempDir()
	cfs := NewCrashFS(Default)
	ffs := NewFaultFS(cfs)
	ffs.Inject(Rule{Op: OpSync, Nth: 2})
	name := filepath.Join(dir, "seg")
	f := openRW(t, ffs, name)
	require.NoError(t, ffs.SyncDir(dir))
	_, err := f.WriteAt([]byte("first"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("second"), 5)
	require.NoError(t, err)
	require.True(t, errors.Is(f.Sync(), syscall.EIO))

	got := cloneTree(t, cfs, CrashOptions{})
	require.Equal(t, map[string]string{"seg": "first"}, got)
}
