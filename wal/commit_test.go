package wal

import (
	"errors"
	"io"
	"strings"
	"sync"
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

func TestFailedFdatasyncPoisonsTheLog(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1 << 20})
	acked := appendRecords(t, l, 0, 20)

	// The next fdatasync of a segment fails: a batch of waiting appenders.
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: firstSegment, Times: 1})
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

	// The rule fired once; the disk "works" again, but the log never
	// retries: every later call fails too.
	require.Equal(t, int64(1), fs.Injected(vfs.OpSync))
	syncsBefore := fs.Count(vfs.OpSync)
	_, err := l.Append([]byte("after"))
	require.ErrorIs(t, err, ErrPoisoned)
	require.ErrorIs(t, l.Sync(), ErrPoisoned)
	require.Equal(t, syncsBefore, fs.Count(vfs.OpSync), "no fdatasync is retried")
	require.ErrorIs(t, l.Close(), ErrPoisoned)

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
	var acked []entry
	var err error
	var rec []byte
	for i := 0; err == nil; i++ {
		var pos []Position
		rec = record(i)
		pos, err = l.Append(rec)
		if err == nil {
			acked = append(acked, entry{pos[0], rec})
		}
	}
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, ErrPoisoned)
	require.Greater(t, len(acked), 10)
	_, err = l.Append(rec)
	require.ErrorIs(t, err, syscall.ENOSPC, "the record that did not fit still does not")

	fs.Clear()
	// The preparer retries on the next rotation; the first attempt may
	// still report the last failure.
	var more []entry
	for i := 0; len(more) < 60; i++ {
		rec := record(1000 + i)
		pos, err := l.Append(rec)
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.Less(t, i, 2, "appends must work again once there is space")
			continue
		}
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
