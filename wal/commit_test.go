package wal

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// durability follows, through a FaultFS observer, every write to each file
// and the fdatasyncs after it, so a test can ask whether the bytes of a
// record were covered by an fdatasync that ran after they were written.
type durability struct {
	mu      sync.Mutex
	seq     int64
	writes  map[string][]write
	lastSyn map[string]int64 // sequence of the file's last completed fdatasync
}

type write struct {
	from, to int64
	seq      int64
}

func watchDurability(fs *vfs.FaultFS) *durability {
	d := &durability{writes: map[string][]write{}, lastSyn: map[string]int64{}}
	fs.Observe(func(e vfs.Event) {
		// Files are opened under their temporary name and renamed: follow
		// them by their final name.
		name := strings.TrimSuffix(e.Name, tmpSuffix)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.seq++
		switch e.Op {
		case vfs.OpWrite:
			d.writes[name] = append(d.writes[name], write{e.Off, e.Off + int64(e.Len), d.seq})
		case vfs.OpSync:
			d.lastSyn[name] = d.seq
		}
	})
	return d
}

// covered reports whether the last write of any byte of [from, to) of path
// was followed by a completed fdatasync of path.
func (d *durability) covered(path string, from, to int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.writes[path]
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].from < to && from < ws[i].to {
			return ws[i].seq < d.lastSyn[path]
		}
	}
	return false
}

func TestGroupCommitSharesFdatasyncs(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	dur := watchDurability(fs)
	// Every fdatasync takes at least what a disk's does, so that the test
	// does not depend on where TempDir is: on tmpfs an fdatasync is almost
	// free, and appenders rarely find one in flight to gather behind.
	fs.OnSync(func(string) { time.Sleep(200 * time.Microsecond) })
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20})
	const appenders, each = 64, 40
	rec := make([]byte, 1024)
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for g := 0; g < appenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				pos, err := l.Append(rec)
				if err != nil {
					errs <- err
					return
				}
				// No append is acknowledged before an fdatasync covers it.
				off := int64(pos[0].Offset())
				if !dur.covered(segFile(dir, pos[0].Segment()), off, off+int64(segment.Size(len(rec)))) {
					errs <- errors.New("append acknowledged before its fdatasync")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := l.Stats()
	require.NoError(t, l.Close())
	require.Equal(t, int64(appenders*each), st.Records)
	t.Logf("%d appends, %d fdatasyncs of segments, %d through the FS, most records in one: %d",
		st.Records, st.Syncs, fs.Count(vfs.OpSync), st.MaxRecordsPerSync)
	require.Less(t, st.Syncs*4, st.Records, "64 appenders must share fdatasyncs")
	require.Greater(t, st.MaxRecordsPerSync, int64(1))
}

// firstSegment matches the file of segment 1, the active segment of a new
// log, and not the next one being prepared. (A FaultFS names a file by the
// name it was opened with: segments are opened under their temporary name.)
func firstSegment(name string) bool { return strings.Contains(name, segName(1)) }

// activeSegment returns the name of the log's active segment: the
// highest-numbered segment file in dir. The next one, which the log
// prepares in the background from its first write on, is still under its
// temporary name until the rotation renames it into place; a FaultFS
// names its file by that temporary name, which contains this one's only
// for the segment itself.
func activeSegment(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	active := ""
	for _, e := range entries {
		if _, ok := parseSegName(e.Name()); ok {
			active = max(active, e.Name())
		}
	}
	require.NotEmpty(t, active, "no segment in %s", dir)
	return active
}

// A failed fdatasync of the active segment fails every appender waiting
// on it, and every call after, and is never retried. Only the active
// segment's fdatasyncs are failed and counted: the preparer syncs the
// next segment's file when it is done, at a moment of its own, and that
// fdatasync, which is not a commit's, must neither take the failure nor
// count as a retry.
func TestFailedFdatasyncPoisonsTheLog(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20})
	acked := appendRecords(t, l, 0, 20)

	active := activeSegment(t, dir)
	var activeSyncs atomic.Int64 // the active segment's fdatasyncs that succeeded
	fs.Observe(func(e vfs.Event) {
		if e.Op == vfs.OpSync && strings.Contains(e.Name, active) {
			activeSyncs.Add(1)
		}
	})
	// The next fdatasync of the active segment fails: a batch of waiting
	// appenders.
	fs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: active, Times: 1})
	const waiters = 16
	var wg sync.WaitGroup
	results := make(chan error, waiters)
	for g := 0; g < waiters; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Append(record(100 + g))
			results <- err
		}()
	}
	wg.Wait()
	close(results)
	failed := 0
	for err := range results {
		if err != nil {
			failed++
			require.ErrorIs(t, err, ErrPoisoned)
			require.ErrorIs(t, err, syscall.EIO)
			require.Contains(t, err.Error(), "reopen")
		}
	}
	require.Equal(t, waiters, failed, "every appender of the failed batch, and every one after, fails")
	require.Equal(t, int64(1), fs.Injected(vfs.OpSync), "the one fdatasync failed is the active segment's")
	require.Zero(t, activeSyncs.Load(), "no fdatasync of the active segment succeeded after the failed one: the batches after it were failed, not synced")

	// The disk "works" again, but the log never retries: every later
	// call fails too, Close included, and none syncs the active segment.
	_, err := l.Append([]byte("after"))
	require.ErrorIs(t, err, ErrPoisoned)
	require.ErrorIs(t, l.Sync(), ErrPoisoned)
	require.ErrorIs(t, l.Close(), ErrPoisoned)
	require.Zero(t, activeSyncs.Load(), "no fdatasync of the active segment is retried")

	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	defer l.Close()
	got := readAll(t, l)
	require.GreaterOrEqual(t, len(got), len(acked))
	requireEntries(t, acked, got[:len(acked)])
}

func TestFailedWritePoisonsTheLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule vfs.Rule
	}{
		{"EIO", vfs.Rule{Op: vfs.OpWrite, Match: firstSegment, Times: 1, Err: syscall.EIO}},
		{"short write", vfs.Rule{Op: vfs.OpWrite, Match: firstSegment, Times: 1, ShortFraction: 0.5, Err: io.ErrShortWrite}},
		{"ENOSPC", vfs.Rule{Op: vfs.OpWrite, Match: firstSegment, Times: 1, ShortBytes: 7, Err: syscall.ENOSPC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := vfs.NewFaultFS(vfs.Default)
			l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20})
			acked := appendRecords(t, l, 0, 10)
			fs.Inject(tc.rule)
			// Not zeros: half a frame of zeros followed by the zeros of
			// preallocated space would be the whole frame.
			_, err := l.Append([]byte(strings.Repeat("x", 3000)))
			require.ErrorIs(t, err, ErrPoisoned)
			require.ErrorIs(t, err, tc.rule.Err)
			_, err = l.Append([]byte("later"))
			require.ErrorIs(t, err, ErrPoisoned)
			require.Error(t, l.Close())

			// Reopen: the acknowledged records, and nothing of the
			// failed write.
			l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
			defer l.Close()
			requireEntries(t, acked, readAll(t, l))
			more := appendRecords(t, l, 10, 5)
			requireEntries(t, append(acked, more...), readAll(t, l))
		})
	}
}

// A full disk while the next segment is prepared fails the appends that
// need it, but the log is not poisoned: once space is back, appends work.
func TestNoSpaceForTheNextSegmentIsNotFatal(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	// Every write to a file being prepared fails, from the start.
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return strings.HasSuffix(n, tmpSuffix) && !firstSegment(n) }, Err: syscall.ENOSPC})
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096})
	acked, rec := appendUntilNoSpace(t, l)
	require.Greater(t, len(acked), 10)
	_, err := l.Append(rec)
	require.ErrorIs(t, err, syscall.ENOSPC, "the record that did not fit still does not")

	fs.Clear()
	// The next rotation tries again, and succeeds.
	var more []entry
	for i := 0; len(more) < 60; i++ {
		rec := record(1000 + i)
		pos, err := l.Append(rec)
		require.NoError(t, err, "appends must work again once there is space")
		more = append(more, entry{pos[0], rec})
	}
	require.Greater(t, more[len(more)-1].pos.Segment(), acked[len(acked)-1].pos.Segment())
	require.NoError(t, l.Close())
	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	requireEntries(t, append(acked, more...), readAll(t, l))
}

// A Barrier does not wait for the writer's gather of released callers (see
// gather): its caller may be what keeps them from coming back. It wakes the
// writer although the gather holds wake-ups back, and the gather ends at
// once, as if the callers had come (so it does not back off either). The
// test drives gather directly on a log with no writer goroutine, with a
// deadline an hour away.
func TestBarrierEndsTheGather(t *testing.T) {
	l := &Log{kick: make(chan struct{}, 1), open: newBatch(nil)}
	l.w.gather, l.w.gatherFrom = 4, 0
	l.w.gatherAt, l.w.gatherFor = time.Now(), time.Hour
	l.hold = 4

	l.enqueue(&queued{r: request{recs: [][]byte{[]byte("r")}, pos: make([]Position, 1), sync: true}})
	require.Empty(t, l.kick, "an append while the writer gathers does not wake it")
	l.enqueue(&queued{r: request{sync: true}}) // what Barrier queues
	require.Len(t, l.kick, 1, "a Barrier wakes the writer")

	alarm := startAlarm(l.wake)
	defer alarm.stop()
	came := make(chan bool, 1)
	go func() { came <- l.gather(alarm) }()
	select {
	case ok := <-came:
		require.True(t, ok, "a gather a Barrier ends is not one the callers let lapse")
	case <-time.After(time.Minute):
		t.Fatal("the gather went on waiting for the callers with a Barrier queued")
	}
}

// holdSyncFS holds the next fdatasyncs of segment 1, as many as held says:
// each one reports on entered, then waits for an error on release (nil
// runs it). A test can so queue appends behind an fdatasync in flight.
type holdSyncFS struct {
	vfs.FS
	held    atomic.Int32
	entered chan struct{}
	release chan error
}

func newHoldSyncFS(fs vfs.FS) *holdSyncFS {
	return &holdSyncFS{FS: fs, entered: make(chan struct{}), release: make(chan error)}
}

func (h *holdSyncFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || !firstSegment(name) {
		return f, err
	}
	return &holdSyncFile{File: f, h: h}, nil
}

type holdSyncFile struct {
	vfs.File
	h *holdSyncFS
}

func (f *holdSyncFile) Sync() error {
	for n := f.h.held.Load(); n > 0; n = f.h.held.Load() {
		if f.h.held.CompareAndSwap(n, n-1) {
			f.h.entered <- struct{}{}
			if err := <-f.h.release; err != nil {
				return err
			}
			break
		}
	}
	return f.File.Sync()
}

// An append queued while the fdatasync that poisons the log is in flight
// is in no batch that ran before the failure: it fails with ErrPoisoned,
// and nothing of it is written.
func TestAppendsQueuedBehindAFailedFdatasyncAreNotWritten(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	var writes atomic.Int64 // writes to segment 1
	fs.Observe(func(e vfs.Event) {
		if e.Op == vfs.OpWrite && firstSegment(e.Name) {
			writes.Add(1)
		}
	})
	h := newHoldSyncFS(fs)
	l := mustOpen(t, dir, Options{FS: h, SegmentBytes: 1 << 20})
	acked := appendRecords(t, l, 0, 5)

	h.held.Store(1)
	failing := l.Enqueue(true, record(100))
	<-h.entered // the writer is in the fdatasync that will fail
	written0 := writes.Load()
	behind := l.Enqueue(true, record(101))
	written := l.Enqueue(false, record(102))
	h.release <- syscall.EIO

	_, err := failing.Wait()
	require.ErrorIs(t, err, ErrPoisoned)
	_, err = behind.Wait()
	require.ErrorIs(t, err, ErrPoisoned, "an append queued behind the failed fdatasync")
	_, err = written.Wait()
	require.ErrorIs(t, err, ErrPoisoned, "a write-only append queued behind the failed fdatasync")
	require.Equal(t, written0, writes.Load(), "nothing is written after the failure")
	require.ErrorIs(t, l.Close(), ErrPoisoned)

	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	defer l.Close()
	got := readAll(t, l)
	require.LessOrEqual(t, len(got), len(acked)+1, "only the failed batch may have reached the file")
	requireEntries(t, acked, got[:len(acked)])
}

// A batch that holds a durable append and, after it, a write-only one
// runs an fdatasync: the write-only request asks for less, not the batch.
func TestADurableAppendBatchedBeforeAWriteOnlyOneIsSynced(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	dur := watchDurability(fs)
	h := newHoldSyncFS(fs)
	l := mustOpen(t, dir, Options{FS: h, SegmentBytes: 1 << 20})
	defer l.Close()
	appendRecords(t, l, 0, 1)

	h.held.Store(1)
	first := l.Enqueue(true, record(100))
	<-h.entered // the next two queue behind this fdatasync: one batch
	durable := l.Enqueue(true, record(101))
	writeOnly := l.Enqueue(false, record(102))
	h.release <- nil
	_, err := first.Wait()
	require.NoError(t, err)
	_, err = writeOnly.Wait()
	require.NoError(t, err)

	done := make(chan error, 1)
	var pos []Position
	go func() {
		var err error
		pos, err = durable.Wait()
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the durable append was never released")
	}
	off := int64(pos[0].Offset())
	require.True(t, dur.covered(segFile(dir, pos[0].Segment()), off, off+int64(segment.Size(len(record(101))))),
		"the durable append was acknowledged before an fdatasync covered it")
}

// A rotation that cannot make the new segment's name durable, or cannot
// write the old segment's seal, poisons the log like a failed fdatasync: a
// later success of the same operation would say nothing of what this one
// lost.
func TestAFailedRotationStepPoisonsTheLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule vfs.Rule
	}{
		{"directory sync", vfs.Rule{Op: vfs.OpSyncDir, Times: 1}},
		{"seal write", vfs.Rule{Op: vfs.OpWrite, Match: firstSegment, Times: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := vfs.NewFaultFS(vfs.Default)
			l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096})
			var acked []entry
			for i := 0; ; i++ {
				rec := record(i)
				if l.End().Offset()+segment.Size(len(rec))+segment.Size(0) > 4096 {
					// This append rotates, and the rotation fails.
					fs.Inject(tc.rule)
					_, err := l.Append(rec)
					require.ErrorIs(t, err, ErrPoisoned)
					require.ErrorIs(t, err, syscall.EIO)
					break
				}
				pos, err := l.Append(rec)
				require.NoError(t, err)
				acked = append(acked, entry{pos[0], rec})
			}
			require.Equal(t, int64(1), fs.Injected(tc.rule.Op))
			require.ErrorIs(t, l.Err(), ErrPoisoned)
			_, err := l.Append(record(1000))
			require.ErrorIs(t, err, ErrPoisoned, "every later call fails")
			require.ErrorIs(t, l.Close(), ErrPoisoned)

			l = mustOpen(t, dir, Options{SegmentBytes: 4096})
			defer l.Close()
			requireEntries(t, acked, readAll(t, l))
		})
	}
}

// A rotation whose rename of the new segment into place fails removes the
// file; if that removal fails too, the file stays under its temporary name.
// The next attempt at the segment makes a new file, which refuses to
// replace anything: it removes the one left first, and the log goes on.
func TestARotationAfterAFailedCleanupRemovesTheFileLeft(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096})
	defer l.Close()
	tmp := segFile(dir, 2) + tmpSuffix
	var acked []entry
	for i := 0; ; i++ {
		rec := record(i)
		if l.End().Offset()+segment.Size(len(rec))+segment.Size(0) > 4096 {
			// This append rotates, and the rotation fails.
			fs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: tmp, Times: 1})
			fs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: tmp, Times: 1})
			_, err := l.Append(rec)
			require.ErrorIs(t, err, syscall.EIO)
			require.NoError(t, l.Err(), "a failed rename into place does not poison the log")
			// The removal failed; the file is left (the preparer may
			// already be at the next attempt, so it is not looked for).
			require.Equal(t, int64(1), fs.Injected(vfs.OpRemove), "the removal failed")
			pos, err := l.Append(rec)
			require.NoError(t, err, "the next rotation")
			require.Equal(t, uint32(2), pos[0].Segment())
			acked = append(acked, entry{pos[0], rec})
			break
		}
		pos, err := l.Append(rec)
		require.NoError(t, err)
		acked = append(acked, entry{pos[0], rec})
	}
	requireEntries(t, acked, readAll(t, l))
}

// When the next segment cannot be made, every call of the batch from the
// first that needed it on fails, those after it included: none is
// acknowledged without being written.
func TestACallAfterOneThatFoundNoNextSegmentFailsToo(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	// Every write to a file being prepared fails.
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return strings.HasSuffix(n, tmpSuffix) && !firstSegment(n) }, Err: syscall.ENOSPC})
	h := newHoldSyncFS(fs)
	l := mustOpen(t, dir, Options{FS: h, SegmentBytes: 4096})
	defer l.Close()
	acked := appendRecords(t, l, 0, 3)

	// Held in the fdatasync of one append, the writer takes the next
	// two as one batch: the first does not fit in segment 1, the second
	// would.
	h.held.Store(1)
	first := l.Enqueue(true, record(3))
	<-h.entered
	tooBig := l.Enqueue(true, make([]byte, 4096-acked[len(acked)-1].pos.Offset()))
	small := l.Enqueue(true, record(4))
	h.release <- nil
	pos, err := first.Wait()
	require.NoError(t, err)
	acked = append(acked, entry{pos[0], record(3)})
	_, err = tooBig.Wait()
	require.ErrorIs(t, err, syscall.ENOSPC)
	_, err = small.Wait()
	require.ErrorIs(t, err, syscall.ENOSPC, "a call after the one that needed the next segment")
	require.NoError(t, l.Err(), "the log goes on")
	requireEntries(t, acked, readAll(t, l))
}

// A call that asked only for the write is released right after the write,
// also when it shares its batch with one that waits for the fdatasync.
func TestAWriteOnlyCallDoesNotWaitForItsBatchsFdatasync(t *testing.T) {
	h := newHoldSyncFS(vfs.Default)
	l := mustOpen(t, t.TempDir(), Options{FS: h, SegmentBytes: 1 << 20, SyncInterval: time.Hour})
	defer l.Close()
	h.held.Store(2)
	first := l.Enqueue(true, record(0))
	<-h.entered
	// Queued behind the fdatasync in flight: the next batch.
	durable := l.Enqueue(true, record(1))
	written := l.Enqueue(false, record(2))
	h.release <- nil
	_, err := first.Wait()
	require.NoError(t, err)
	<-h.entered // the batch of both is written; its fdatasync is held

	done := make(chan error, 1)
	go func() { _, err := written.Wait(); done <- err }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		h.release <- nil // let Close end
		t.Fatal("the write-only call waited for the fdatasync of its batch")
	}
	h.release <- nil
	pos, err := durable.Wait()
	require.NoError(t, err)
	rec, err := l.Read(pos[0])
	require.NoError(t, err)
	require.Equal(t, record(1), rec)
}

// The rotation after space is freed tries again: it does not take a
// failure the preparer met while the disk was still full (DESIGN.md,
// "Failures": a log whose disk filled up works again once space is freed,
// without a reopen). Before, a failed rotation asked for the segment again
// at once, and the next rotation took that attempt's stale ENOSPC.
func TestTheRotationAfterSpaceIsFreedTriesAgain(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return strings.HasSuffix(n, tmpSuffix) && !firstSegment(n) }, Err: syscall.ENOSPC})
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096})
	defer l.Close()
	acked, rec := appendUntilNoSpace(t, l)

	// A preparer that tried again at once, while the disk was still full,
	// would meet the full disk again: give it the time to (it did, within
	// milliseconds, before the fix), then free the space.
	deadline := time.Now().Add(500 * time.Millisecond)
	for fs.Injected(vfs.OpWrite) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	fs.Clear() // space is freed

	// The next rotation must try again, and succeed.
	pos, err := l.Append(rec)
	require.NoError(t, err, "the first append after space was freed failed with a full disk met before")
	acked = append(acked, entry{pos[0], rec})
	requireEntries(t, acked, readAll(t, l))
}

// A preparation that failed in the background, long before the rotation
// that needs its file (a disk full for a moment while the next segment was
// being filled), is tried again by that rotation: the disk may have room
// by then, and a preparation writes no record, so trying it again risks
// nothing. It used to be handed to the rotation as its own failure, which
// stops a log opened with StopOnRotationFailure (the broker's) on a disk
// with room.
func TestAPreparationThatFailedBeforeItsRotationIsTriedAgain(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return strings.HasSuffix(n, tmpSuffix) && !firstSegment(n) }, Err: syscall.ENOSPC, Times: 1})
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096, StopOnRotationFailure: true})
	defer l.Close()
	acked := appendRecords(t, l, 1000, 1) // the first write asks for segment 2
	// The preparer of segment 2 met the full disk and its failure waits
	// for the rotation (the writer takes it only when it rotates).
	deadline := time.Now().Add(time.Minute)
	for len(l.prep.ready) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, int64(1), fs.Injected(vfs.OpWrite), "the preparation met the full disk")
	require.Len(t, l.prep.ready, 1, "the failed preparation is waiting for the rotation")

	for i := 0; l.Stats().Segments < 2; i++ {
		rec := record(i)
		pos, err := l.Append(rec)
		require.NoError(t, err, "append %d, through the rotation, on a disk with room", i)
		acked = append(acked, entry{pos[0], rec})
	}
	requireEntries(t, acked, readAll(t, l))
}

// Stats.Records counts records appended: a write that fails appends
// nothing (the log is poisoned, the call gets ErrPoisoned, Writes and
// BytesWritten do not move), and Records does not move either. The
// writer counts a batch's records, and a preamble's, once flush has
// written them.
func TestStatsRecordsDoNotCountAFailedWrite(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.Default)
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20})
	appendRecords(t, l, 0, 3)
	before := l.Stats()
	require.Equal(t, int64(3), before.Records)

	fs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: firstSegment, Times: 1})
	_, err := l.Append(record(3), record(4))
	require.ErrorIs(t, err, ErrPoisoned)
	after := l.Stats()
	require.Equal(t, before.Writes, after.Writes, "the failed write is not counted as a write")
	require.Equal(t, before.BytesWritten, after.BytesWritten)
	require.ErrorIs(t, l.Close(), ErrPoisoned)

	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	defer l.Close()
	require.Len(t, readAll(t, l), 3, "the log holds the three records appended")
	require.Equal(t, before.Records, after.Records,
		"Stats().Records counts the %d records of a write that failed and appended nothing", after.Records-before.Records)
}

// appendUntilNoSpace appends records until one fails for want of space
// (FaultFS returning ENOSPC where the next segment is prepared), and
// checks that the failure did not poison the log. It returns the records
// acknowledged and the one that failed.
func appendUntilNoSpace(t *testing.T, l *Log) ([]entry, []byte) {
	t.Helper()
	var acked []entry
	for i := 0; ; i++ {
		rec := record(i)
		pos, err := l.Append(rec)
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.NotErrorIs(t, err, ErrPoisoned)
			return acked, rec
		}
		acked = append(acked, entry{pos[0], rec})
	}
}

// A rotation that takes a preparation it asked for again, after the last
// rotation could not put its file in place, takes that attempt's result,
// even one that failed at once: it is made now, and is the rotation's
// answer. It used to take such a failure for an old one and ask a third
// time, warning that a preparation had failed before it was needed.
func TestARotationAfterAFailedOneTakesTheAttemptItAskedFor(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: func(n string) bool { return strings.HasSuffix(n, tmpSuffix) && !firstSegment(n) }, Err: syscall.ENOSPC})
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096})
	defer l.Close()
	first := appendRecords(t, l, 1000, 1) // the first write asks for segment 2
	deadline := time.Now().Add(time.Minute)
	for len(l.prep.ready) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.Len(t, l.prep.ready, 1, "the failed preparation is waiting for the rotation")

	// The rotation tries the old failure once more, and fails.
	acked, rec := appendUntilNoSpace(t, l)
	acked = append(first, acked...)
	require.Equal(t, int64(2), fs.Injected(vfs.OpWrite), "the background attempt and the rotation's")

	// The next rotation asks again; its attempt fails at once, before
	// the rotation looks for it.
	afterRetryRequest = func() {
		for len(l.prep.ready) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { afterRetryRequest = func() {} }()
	_, err := l.Append(rec)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, ErrPoisoned)
	require.Equal(t, int64(3), fs.Injected(vfs.OpWrite), "the rotation asked for more attempts than the one it made")
	requireEntries(t, acked, readAll(t, l))
}
