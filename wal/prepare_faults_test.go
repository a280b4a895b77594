package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/internal/leakcheck"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// A segment of two and a half chunks of zeros (segment.CreatePaced writes
// 256 KiB at a time), below the pacer's lead, so that a fault may fall in
// the middle of a zero-fill and no fill is held back.
const prepFaultSeg = 640 << 10

// prepFaultRecord is the i-th record of the workload: big enough that a
// segment holds a few dozen.
func prepFaultRecord(i int) []byte {
	b := make([]byte, 15<<10)
	copy(b, record(i))
	return b
}

// prepFaultRun is what prepFaultWorkload did.
type prepFaultRun struct {
	acked        []entry
	appended     map[string]bool // every record an Append was asked for
	removedBelow Position
	failed       int   // appends that failed while the log went on
	stopped      error // the error that stopped the workload, if any
	closeErr     error
	stats        Stats // after Close
}

// prepFaultWorkload appends records across five rotations or so, and
// removes the segments below the third after the second, so that later
// rotations reuse retired files. An append that fails while the log goes
// on is counted and skipped; a poisoned log stops it.
func prepFaultWorkload(dir string, fs vfs.FS) (run prepFaultRun, err error) {
	l, err := Open(dir, Options{FS: fs, SegmentBytes: prepFaultSeg})
	if err != nil {
		return run, err
	}
	run.appended = map[string]bool{}
	for i := 0; i < 200; i++ {
		rec := prepFaultRecord(i)
		run.appended[string(rec)] = true
		pos, err := l.Append(rec)
		if err != nil {
			if l.Err() != nil {
				run.stopped = err
				break
			}
			run.failed++
			continue
		}
		run.acked = append(run.acked, entry{pos[0], rec})
		if pos[0].Segment() == 3 && run.removedBelow == 0 {
			run.removedBelow = MakePosition(3, 0)
			if _, err := l.RemoveBelow(run.removedBelow); err != nil && l.Err() != nil {
				run.stopped = err
				break
			}
		}
	}
	run.closeErr = closeWithin(l, 30*time.Second)
	run.stats = l.Stats()
	return run, nil
}

// closeWithin closes l, or panics with every goroutine's stack if Close
// has not returned within d (a hang guard, not a timing assumption).
func closeWithin(l *Log, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- l.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		panic(fmt.Sprintf("Close did not return within %v:\n%v", d, leakcheck.Running()))
	}
}

// checkPrepFaultReopen reopens dir without faults and checks that every
// acknowledged record at or after the removal is there at its position,
// that every record found is one the workload appended, in order, and
// what the directory holds then.
func checkPrepFaultReopen(t *testing.T, dir string, run prepFaultRun, what string) {
	t.Helper()
	fs := &pauseFS{FS: vfs.Default, release: make(chan struct{})}
	l, err := Open(dir, Options{FS: fs, SegmentBytes: prepFaultSeg})
	if err != nil {
		close(fs.release)
	}
	require.NoError(t, err, what)
	// What Open left, before the preparer makes or reuses anything.
	requireTidyDir(t, dir, prepFaultSeg, true, what+", reopened")
	close(fs.release)
	got := readAll(t, l)
	require.NoError(t, l.Close(), what)
	requireTidyDir(t, dir, prepFaultSeg, true, what+", reopened and closed")
	found := map[Position]string{}
	var last Position
	for _, e := range got {
		require.True(t, run.appended[string(e.rec)], "%s: a record the workload never appended at %v", what, e.pos)
		require.Greater(t, e.pos, last, what)
		last = e.pos
		found[e.pos] = string(e.rec)
	}
	for _, e := range run.acked {
		if e.pos.Segment() < run.removedBelow.Segment() {
			continue
		}
		require.Equal(t, string(e.rec), found[e.pos], "%s: acknowledged record at %v lost", what, e.pos)
	}
}

// pauseFS holds back every creation and rename the preparer goroutine
// makes until release is closed: what Open leaves in the directory can
// then be looked at before the preparer changes it.
type pauseFS struct {
	vfs.FS
	release chan struct{}
}

func (fs *pauseFS) pause(string) {
	buf := make([]byte, 64<<10)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*preparer).loop") {
		<-fs.release
	}
}

func (fs *pauseFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&os.O_CREATE != 0 {
		fs.pause(name)
	}
	return fs.FS.OpenFile(name, flag, perm)
}

func (fs *pauseFS) Rename(oldname, newname string) error {
	fs.pause(oldname)
	return fs.FS.Rename(oldname, newname)
}

// prepFaultOps are the operations the sweep fails, each at every call in
// turn.
var prepFaultOps = []vfs.Op{
	vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpMap, vfs.OpRename, vfs.OpRemove,
	vfs.OpSyncDir, vfs.OpSize, vfs.OpClose, vfs.OpWriteBack,
}

// prepFaultRule is the rule that fails the nth call of op: a write short
// of space part way, anything else with EIO.
func prepFaultRule(op vfs.Op, nth int64) vfs.Rule {
	r := vfs.Rule{Op: op, Nth: nth, Err: syscall.EIO}
	if op == vfs.OpWrite {
		r.Err, r.ShortFraction = syscall.ENOSPC, 0.5
	}
	return r
}

// TestFaultAtEveryPreparationStep fails one call at a time of every
// kind the log makes while it prepares, rotates to and recycles segments
// (and the others: a failed write or fdatasync of the active segment
// poisons it). Whatever failed, Close must return and release every file,
// mapping and goroutine; Stats must count the rotations the log made; the
// directory must hold no gap and only full-size spares; and a reopen must
// find every acknowledged record, only records the workload appended, and
// no temporary file.
func TestFaultAtEveryPreparationStep(t *testing.T) {
	root := shmDir(t)
	counting := vfs.NewFaultFS(vfs.Default)
	dry, err := prepFaultWorkload(freshDir(t, root), counting)
	require.NoError(t, err)
	require.NoError(t, dry.closeErr)
	require.Zero(t, dry.failed)
	require.GreaterOrEqual(t, dry.stats.Rotations, int64(4))
	require.Positive(t, dry.stats.RecycledSegments, "the workload reuses no retired file")
	step := int64(2)
	if testing.Short() {
		step = 9
	}
	runs := 0
	for _, op := range prepFaultOps {
		n := counting.Count(op)
		for i := int64(1); i <= 2*n; i += step {
			// Each call alone, then each with every later one (a disk that
			// stays full or broken).
			nth, rule := i, prepFaultRule(op, i)
			what := fmt.Sprintf("%v #%d of %d failed", op, nth, n)
			if i > n {
				nth = i - n
				rule.Nth, rule.After = 0, nth-1
				what = fmt.Sprintf("%v #%d of %d and every later one failed", op, nth, n)
			}
			before := leakcheck.Running()
			fs := vfs.NewFaultFS(vfs.Default)
			fs.Inject(rule)
			dir := freshDir(t, root)
			run, err := prepFaultWorkload(dir, fs)
			if err != nil {
				continue // Open refused: TestAFailedOpenReleasesEverything's ground
			}
			runs++
			require.NoError(t, leakcheck.Check(before, dir), what)
			st := run.stats
			require.Equal(t, int64(st.LastSegment)-1, st.Rotations, "%s: Stats.Rotations against the segments made", what)
			require.LessOrEqual(t, st.RecycledSegments, st.Rotations, what)
			requireTidyDir(t, dir, prepFaultSeg, false, what)
			checkPrepFaultReopen(t, dir, run, what)
			require.NoError(t, os.RemoveAll(dir))
		}
	}
	t.Logf("%d runs", runs)
}

// TestAcknowledgedRecordsAreDurableWhateverPreparationFailed is
// the sweep over a CrashFS outside the faults (a device that fails under a
// process that goes on: a failed fdatasync loses its writes for good): at
// the end of the workload, before Close, the power fails, and the clone,
// kept to what was synced, must hold every record an Append acknowledged.
func TestAcknowledgedRecordsAreDurableWhateverPreparationFailed(t *testing.T) {
	root := shmDir(t)
	counting := vfs.NewFaultFS(vfs.Default)
	_, err := prepFaultWorkload(freshDir(t, root), vfs.NewCrashFS(counting))
	require.NoError(t, err)
	step := int64(2)
	if testing.Short() {
		step = 9
	}
	for _, op := range prepFaultOps {
		n := counting.Count(op)
		for nth := int64(1); nth <= n; nth += step {
			what := fmt.Sprintf("%v #%d of %d failed", op, nth, n)
			ffs := vfs.NewFaultFS(vfs.Default)
			ffs.Inject(prepFaultRule(op, nth))
			cfs := vfs.NewCrashFS(ffs)
			dir := freshDir(t, root)
			var run prepFaultRun
			l, err := Open(dir, Options{FS: cfs, SegmentBytes: prepFaultSeg})
			if err != nil {
				continue
			}
			run.appended = map[string]bool{}
			for i := 0; i < 200; i++ {
				rec := prepFaultRecord(i)
				run.appended[string(rec)] = true
				pos, err := l.Append(rec)
				if err != nil {
					if l.Err() != nil {
						break
					}
					continue
				}
				run.acked = append(run.acked, entry{pos[0], rec})
				if pos[0].Segment() == 3 && run.removedBelow == 0 {
					run.removedBelow = MakePosition(3, 0)
					if _, err := l.RemoveBelow(run.removedBelow); err != nil && l.Err() != nil {
						break
					}
				}
			}
			cfs.Crash()
			_ = closeWithin(l, 30*time.Second)
			ffs.Clear() // the clone reads through it
			clone := filepath.Join(freshDir(t, root), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}), what)
			checkPrepFaultReopen(t, clone, run, what+", power lost")
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.RemoveAll(filepath.Dir(clone)))
		}
	}
}

// holdFS holds back the creation of each new segment file (not a spare)
// until the writer waits for it, as rushFS does over any file system.
type holdFS struct {
	vfs.FS
	log chan *Log // the log, once open (capacity 1, refilled)
}

// waitedFor reports whether the writer of l waits for the segment being
// made, or never will (the log closing).
func waitedFor(l *Log) bool {
	select {
	case <-l.prep.quit:
		return true
	default:
		return len(l.prep.rush) > 0
	}
}

func newHoldFS(inner vfs.FS) *holdFS { return &holdFS{FS: inner, log: make(chan *Log, 1)} }

func (fs *holdFS) watch(l *Log) { fs.log <- l }

func (fs *holdFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if flag&os.O_CREATE != 0 && strings.HasSuffix(name, segSuffix+tmpSuffix) && !strings.HasPrefix(filepath.Base(name), sparePrefix) {
		select {
		case l := <-fs.log:
			fs.log <- l
			// The deadline is a hang guard, not a timing assumption.
			for deadline := time.Now().Add(30 * time.Second); !waitedFor(l) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Microsecond)
			}
		default: // before the log is open: Open's own segment
		}
	}
	return fs.FS.OpenFile(name, flag, perm)
}

// TestAFailedAllocationWritesTheRestAsZeros: when the writer waits
// for a segment and its allocation fails (a file system without
// fallocate, or one out of space), the rest is written as zeros; the file
// is whole, reads as an empty segment, and the records written to it
// survive a reopen.
func TestAFailedAllocationWritesTheRestAsZeros(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			ffs.Inject(vfs.Rule{Op: vfs.OpAllocate, Err: errno})
			var zeroWrites int64
			ffs.Observe(func(e vfs.Event) {
				if e.Op == vfs.OpWrite && strings.HasSuffix(e.Name, segSuffix+tmpSuffix) && e.Off >= segment.HeaderSize {
					zeroWrites++
				}
			})
			fs := newHoldFS(ffs)
			l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: prepFaultSeg})
			fs.watch(l)
			var acked []entry
			for i := 0; l.Stats().Rotations < 3; i++ {
				pos, err := l.Append(prepFaultRecord(i))
				require.NoError(t, err)
				acked = append(acked, entry{pos[0], prepFaultRecord(i)})
			}
			st := l.Stats()
			require.NoError(t, l.Close())
			require.Positive(t, ffs.Injected(vfs.OpAllocate), "no allocation was tried")
			require.Equal(t, ffs.Injected(vfs.OpAllocate), ffs.Count(vfs.OpAllocate))
			// Segment 2, asked for before the log was watched, may not be
			// waited for.
			require.GreaterOrEqual(t, st.ZeroFillsRushed, st.Rotations-1)
			require.Positive(t, zeroWrites, "the rest was not written")
			for seq := uint32(2); seq <= st.LastSegment; seq++ {
				fi, err := os.Stat(segFile(dir, seq))
				require.NoError(t, err)
				require.Equal(t, int64(prepFaultSeg), fi.Size(), "segment %d", seq)
			}
			l = mustOpen(t, dir, Options{SegmentBytes: prepFaultSeg})
			defer l.Close()
			requireEntries(t, acked, readAll(t, l))
			require.Nil(t, l.Recovery().TornTail)
		})
	}
}

// TestAFailedAllocationThenAFailedZeroFillFailsOnlyTheRotation:
// the writer waits for segment 3, its allocation fails, and the zeros
// written instead run out of space: the rotation fails, the log goes on,
// the file is removed, and the next rotation makes the segment.
func TestAFailedAllocationThenAFailedZeroFillFailsOnlyTheRotation(t *testing.T) {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	fs := newHoldFS(ffs)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: prepFaultSeg})
	defer l.Close()
	fs.watch(l)
	ffs.Inject(vfs.Rule{Op: vfs.OpAllocate, NameContains: segName(3) + tmpSuffix, Err: syscall.ENOSPC, Times: 1})
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: segName(3) + tmpSuffix, Err: syscall.ENOSPC, ShortFraction: 0.5, Times: 1})
	var acked []entry
	var failed error
	for i := 0; failed == nil; i++ {
		pos, err := l.Append(prepFaultRecord(i))
		if err != nil {
			failed = err
			break
		}
		acked = append(acked, entry{pos[0], prepFaultRecord(i)})
	}
	require.ErrorIs(t, failed, syscall.ENOSPC)
	require.NoError(t, l.Err(), "a failed preparation poisoned the log")
	require.Equal(t, int64(1), ffs.Injected(vfs.OpAllocate), "the writer did not wait for the segment")
	require.Equal(t, int64(1), l.Stats().Rotations)
	_, err := os.Stat(segFile(dir, 3) + tmpSuffix)
	require.ErrorIs(t, err, os.ErrNotExist, "the failed file is left")
	_, err = os.Stat(segFile(dir, 3))
	require.ErrorIs(t, err, os.ErrNotExist, "a failed file was put in place")

	pos, err := l.Append(prepFaultRecord(1000))
	require.NoError(t, err, "the next rotation")
	require.Equal(t, uint32(3), pos[0].Segment())
	acked = append(acked, entry{pos[0], prepFaultRecord(1000)})
	require.Equal(t, int64(2), l.Stats().Rotations)
	requireEntries(t, acked, readAll(t, l))
}
