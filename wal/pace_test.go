package wal

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

const paceTestSize = 64 << 20

// startWait runs pc.wait(written) in a goroutine of the bubble and returns
// a flag set when it has returned.
func startWait(pc *pacer, written int64) *atomic.Bool {
	var done atomic.Bool
	go func() {
		_ = pc.wait(written)
		done.Store(true)
	}()
	synctest.Wait()
	return &done
}

func TestPacerHoldsTheZerosToTheActiveSegmentsFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		pc := newPacer(2, &end, paceTestSize, paceTestSize, nil, nil)

		// The lead goes at once, with the active segment still empty.
		start := time.Now()
		require.NoError(t, pc.wait(0))
		require.NoError(t, pc.wait(paceLead-1))
		require.Equal(t, start, time.Now(), "the lead waited")

		// Past it, the zeros wait for the active segment to grow.
		done := startWait(pc, paceLead)
		time.Sleep(paceIdle / 2)
		synctest.Wait()
		require.False(t, done.Load(), "written past the lead while the active segment did not grow")

		// A third of the active segment filled lets half the new one be
		// written, and no more.
		end.Store(paceTestSize/3 + 1)
		time.Sleep(paceMaxWait)
		synctest.Wait()
		require.True(t, done.Load(), "still held after the active segment grew")
		start = time.Now()
		require.NoError(t, pc.wait(paceTestSize/2+paceLead-1))
		require.Equal(t, start, time.Now())

		done = startWait(pc, paceTestSize/2+paceLead+1)
		time.Sleep(paceIdle / 2)
		synctest.Wait()
		require.False(t, done.Load(), "written past one and a half times the active segment's fill")
		end.Store(paceTestSize/3 + 1<<20)
		time.Sleep(paceMaxWait)
		synctest.Wait()
		require.True(t, done.Load())
	})
}

func TestPacerFinishesBeforeTheActiveSegmentIsFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		// A smaller active segment (one made for a large record) counts by
		// its own size.
		pc := newPacer(2, &end, paceTestSize/4, paceTestSize, nil, nil)
		end.Store(paceTestSize / 4 * 2 / 3)
		start := time.Now()
		require.NoError(t, pc.wait(paceTestSize-1))
		require.Equal(t, start, time.Now(), "the last chunk waited with the active segment two-thirds full")
	})
}

func TestPacerSleepsUntilTheActiveSegmentShouldHaveGrown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		pc := newPacer(2, &end, paceTestSize, paceTestSize, nil, nil)
		// The writer fills 1 MiB a millisecond.
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
					end.Add(1 << 20)
				}
			}
		}()
		written := int64(paceTestSize / 2)
		start := time.Now()
		require.NoError(t, pc.wait(written))
		took := time.Since(start)
		reached := end.Load()
		close(stop)

		require.Less(t, written, pc.allowed(reached), "returned before the fill allowed the chunk")
		// 1.5 × fill + lead ≥ 32 MiB needs the active segment at 20.7 MiB:
		// 21 ms at this rate; the pacer wakes at most paceMaxWait later.
		require.GreaterOrEqual(t, took, 20*time.Millisecond)
		require.LessOrEqual(t, took, 21*time.Millisecond+paceMaxWait)
	})
}

func TestPacerWakesRarelyForASlowLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		pc := newPacer(2, &end, paceTestSize, paceTestSize, nil, nil)
		// The writer commits 10 KiB every 10 ms: 1 MB/s.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
					end.Add(10 << 10)
				}
			}
		}()
		written := int64(paceLead + 1<<20)
		start := time.Now()
		require.NoError(t, pc.wait(written))
		took := time.Since(start)
		// 1 MiB more of zeros needs 683 KiB more of the active segment:
		// about 680 ms at this rate.
		require.Less(t, written, pc.allowed(end.Load()))
		require.GreaterOrEqual(t, took, 650*time.Millisecond)
		require.LessOrEqual(t, took, 700*time.Millisecond+paceLongest)
		require.LessOrEqual(t, pc.sleeps, 12, "woke every %v", took/time.Duration(pc.sleeps))
	})
}

func TestPacerWritesTheRestAtOnceWhenTheLogIsIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		end.Store(4 << 20)
		pc := newPacer(2, &end, paceTestSize, paceTestSize, nil, nil)
		done := startWait(pc, paceTestSize/2)
		time.Sleep(paceIdle - paceMaxWait)
		synctest.Wait()
		require.False(t, done.Load(), "gave up pacing before the log was idle for paceIdle")
		time.Sleep(2 * paceMaxWait)
		synctest.Wait()
		require.True(t, done.Load(), "still pacing a log idle for paceIdle")

		// And every later chunk goes at once, even if the log wakes up.
		end.Store(5 << 20)
		start := time.Now()
		require.NoError(t, pc.wait(paceTestSize-1))
		require.Equal(t, start, time.Now())
	})
}

func TestPacerAbandonsOnQuitAndAllocatesTheRestOnARushForItsSegment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		quit := make(chan struct{})
		pc := newPacer(2, &end, paceTestSize, paceTestSize, quit, nil)
		done := startWait(pc, paceTestSize/2)
		require.False(t, done.Load())
		start := time.Now()
		close(quit)
		synctest.Wait()
		require.True(t, done.Load(), "still pacing after quit")
		require.Equal(t, start, time.Now())
		// Every chunk after it is refused: the file is abandoned.
		require.ErrorIs(t, pc.wait(0), errAbandoned)
		require.Equal(t, start, time.Now())
	})
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		end.Store(1)
		rush := make(chan uint32, 1)
		pc := newPacer(3, &end, paceTestSize, paceTestSize, nil, rush)
		done := startWait(pc, paceTestSize/2)

		// A rush left for the segment before is not this one's.
		rush <- 2
		synctest.Wait()
		require.False(t, done.Load(), "a stale rush stopped the pacing")

		start := time.Now()
		rush <- 3
		synctest.Wait()
		require.True(t, done.Load(), "still pacing after a rush for this segment")
		require.Equal(t, start, time.Now())
		// The writer waits: the rest of the file is allocated, not
		// written, from the next chunk on.
		require.ErrorIs(t, pc.wait(paceTestSize/2), segment.ErrAllocateRest)
		require.ErrorIs(t, pc.wait(paceTestSize-1), segment.ErrAllocateRest)
		require.Equal(t, start, time.Now())
	})
	synctest.Test(t, func(t *testing.T) {
		// A fill behind its pace never sleeps: it sees the rush at its
		// next chunk all the same.
		var end atomic.Int64
		end.Store(paceTestSize - 1)
		rush := make(chan uint32, 1)
		pc := newPacer(3, &end, paceTestSize, paceTestSize, nil, rush)
		require.NoError(t, pc.wait(1<<20))
		rush <- 2 // stale
		require.NoError(t, pc.wait(2<<20))
		rush <- 3
		require.ErrorIs(t, pc.wait(3<<20), segment.ErrAllocateRest)
	})
}

func TestTakeRushesOnlyAFileNotReady(t *testing.T) {
	p := &preparer{ready: make(chan prepared, 1), rush: make(chan uint32, 1)}

	// Ready: no rush is left behind.
	p.asked = 4
	p.ready <- prepared{seq: 4}
	require.Equal(t, uint32(4), p.take(nil).seq)
	require.Empty(t, p.rush)

	// Not ready: the preparer hears which segment the writer waits for.
	// A stale rush the preparer never read does not block the new one.
	synctest.Test(t, func(t *testing.T) {
		// The channels must belong to the bubble for Wait to see take
		// blocked on them.
		p := &preparer{ready: make(chan prepared, 1), rush: make(chan uint32, 1)}
		p.rush <- 4
		p.asked = 5
		got := make(chan uint32, 1)
		go func() { got <- p.take(nil).seq }()
		synctest.Wait()
		require.Len(t, p.rush, 1)
		require.Equal(t, uint32(5), <-p.rush)
		p.ready <- prepared{seq: 5}
		require.Equal(t, uint32(5), <-got)
	})
}

// preparerBeside returns a log of segments of size bytes in dir, with no
// writer, its active segment 1 (a file named "active", empty), and a
// preparer whose pacers never find the log idle: the active segment stays
// still, so a new file's zeros stop at the pace's lead.
func preparerBeside(t *testing.T, dir string, size int64) (*Log, *seg, *preparer) {
	t.Helper()
	// (Open fills in a Logger; a preparer that fails logs through it.)
	l := &Log{dir: dir, opts: Options{FS: vfs.Default, SegmentBytes: size, Logger: slog.New(slog.DiscardHandler)}}
	af, err := segment.Create(vfs.Default, filepath.Join(dir, "active"), 1, 0, size)
	require.NoError(t, err)
	t.Cleanup(func() { _ = af.Close() })
	active := &seg{file: af, seq: 1}
	active.end.Store(segment.HeaderSize)
	p := newPreparer(l)
	p.idle = time.Hour
	return l, active, p
}

// waitForZeros waits until the file being prepared at tmp holds the
// pacer's lead of zeros.
func waitForZeros(t *testing.T, tmp string) {
	t.Helper()
	require.Eventually(t, func() bool {
		fi, err := os.Stat(tmp)
		return err == nil && fi.Size() >= paceLead
	}, 10*time.Second, time.Millisecond, "the zero-fill did not start")
}

func TestStopAbandonsASegmentBeingFilled(t *testing.T) {
	dir := t.TempDir()
	const size = 8 << 20
	l, active, p := preparerBeside(t, dir, size)
	p.request(2, active)
	tmp := l.segPath(2) + tmpSuffix
	sizeOf := func() int64 {
		fi, err := os.Stat(tmp)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	require.Eventually(t, func() bool { return sizeOf() >= paceLead }, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.Less(t, sizeOf(), int64(size), "the zeros were not held back")

	require.NoError(t, p.stop())
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, names, 1, "left beside the active segment: %v", names)
	require.Equal(t, "active", names[0].Name())
}

func TestPacerGivesWayToARetiredSegmentThatArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		var spare atomic.Bool
		pc := newPacer(2, &end, paceTestSize, paceTestSize, nil, nil)
		pc.spare = spare.Load

		// Held back past the lead, the pacer looks again when it wakes.
		require.NoError(t, pc.wait(0))
		var err error
		done := make(chan struct{})
		go func() { err = pc.wait(paceTestSize / 2); close(done) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("written past the lead while the active segment did not grow")
		default:
		}
		start := time.Now()
		spare.Store(true)
		<-done
		require.ErrorIs(t, err, errSpareArrived)
		require.LessOrEqual(t, time.Since(start), paceMaxWait, "slept through the spare")

		// Unpaced (the writer waits), the spare is still taken: a rename
		// beats the rest of the zeros.
		pc.free = true
		require.ErrorIs(t, pc.wait(paceTestSize-1), errSpareArrived)
	})
}

func TestPreparerDropsItsZerosForARetiredSegmentThatArrives(t *testing.T) {
	dir := t.TempDir()
	const size = 8 << 20
	l, active, p := preparerBeside(t, dir, size)
	defer p.stop()
	p.request(3, active)
	tmp := l.segPath(3) + tmpSuffix
	waitForZeros(t, tmp)

	// A reader caught up: segment 0 is retired, as RemoveBelow leaves it.
	retired := filepath.Join(dir, sparePrefix+"0000000000"+tmpSuffix)
	rf, err := segment.Create(vfs.Default, retired, 2, 0, size)
	require.NoError(t, err)
	require.NoError(t, rf.Close())
	l.listMu.Lock()
	l.spares = append(l.spares, retired)
	l.listMu.Unlock()

	var got prepared
	select {
	case got = <-p.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the preparer neither finished the zeros nor took the spare")
	}
	require.NoError(t, got.err)
	defer got.file.Close()
	require.Equal(t, uint32(3), got.seq)
	require.Equal(t, uint32(3), got.file.Seq())
	require.True(t, got.recycled, "the retired segment was not reused")
	require.Equal(t, int64(1), l.stats.fillsDropped.Load())
	_, err = os.Stat(retired)
	require.ErrorIs(t, err, os.ErrNotExist, "the spare is still there")
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var left []string
	for _, n := range names {
		left = append(left, n.Name())
	}
	require.ElementsMatch(t, []string{"active", filepath.Base(tmp)}, left, "the dropped zeros left a file")
}

// allocFS is the OS file system with its files' Allocate calls recorded,
// and each write of zeros alone (a zero-fill's: the log's frames are never
// all zeros) slowed by zeroDelay nanoseconds, except in segment 1 (which
// Open makes before it returns, unpaced).
type allocFS struct {
	vfs.FS
	zeroDelay atomic.Int64
	mu        sync.Mutex
	calls     [][2]int64 // off, n
}

type allocFile struct {
	vfs.File
	fs    *allocFS
	first bool // segment 1's file
}

func (fs *allocFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return allocFile{f, fs, strings.HasPrefix(filepath.Base(name), segName(1))}, nil
}

func (f allocFile) WriteAt(p []byte, off int64) (int, error) {
	if d := f.fs.zeroDelay.Load(); d > 0 && !f.first && !slices.ContainsFunc(p, func(b byte) bool { return b != 0 }) {
		time.Sleep(time.Duration(d))
	}
	return f.File.WriteAt(p, off)
}

func (f allocFile) Allocate(off, n int64) error {
	f.fs.mu.Lock()
	f.fs.calls = append(f.fs.calls, [2]int64{off, n})
	f.fs.mu.Unlock()
	if a, ok := f.File.(vfs.Allocator); ok { // Linux's fallocate
		return a.Allocate(off, n)
	}
	return errors.ErrUnsupported // elsewhere the preparer writes zeros instead
}

func TestPreparerAllocatesTheRestWhenTheWriterWaits(t *testing.T) {
	dir := t.TempDir()
	const size = 8 << 20
	l, active, p := preparerBeside(t, dir, size)
	defer p.stop()
	fs := &allocFS{FS: vfs.Default}
	l.opts.FS = fs
	p.request(2, active)
	tmp := l.segPath(2) + tmpSuffix
	waitForZeros(t, tmp)

	// The active segment did not grow, so the zeros are held at the lead;
	// the writer reached its end all the same (a large record, say).
	got := p.take(active)
	require.NoError(t, got.err)
	defer got.file.Close()
	require.Equal(t, uint32(2), got.file.Seq())
	require.False(t, got.recycled)
	require.Equal(t, size, got.file.Size())
	require.Equal(t, int64(1), l.stats.fillsRushed.Load())

	fs.mu.Lock()
	calls := fs.calls
	fs.mu.Unlock()
	require.Len(t, calls, 1, "the rest was not allocated once")
	off, n := calls[0][0], calls[0][1]
	require.GreaterOrEqual(t, off, int64(paceLead), "allocated what the zeros had covered")
	require.Less(t, off, int64(size/2), "the zeros ran on before the allocation")
	require.Equal(t, int64(size), off+n, "the allocation stops short of the end")

	// The file reads as the zero-filled one would: a header, then zeros
	// (a scan finds a clean, empty segment).
	data, err := os.ReadFile(tmp)
	require.NoError(t, err)
	require.Len(t, data, size)
	require.Equal(t, make([]byte, size-segment.HeaderSize), data[segment.HeaderSize:])
	r, err := segment.Scan(data, 2, false, func(segment.Frame) error { return nil })
	require.NoError(t, err)
	require.Equal(t, segment.EndClean, r.Tail)
}

// TestRotationAllocatesTheRestOfASegmentStillBeingZeroed: a log that
// fills its segment before the next one's zeros are done (here because
// they are slow to write) waits only for the rest to be allocated, and
// the records it then writes into the allocated part read back after a
// reopen like any others.
func TestRotationAllocatesTheRestOfASegmentStillBeingZeroed(t *testing.T) {
	dir := t.TempDir()
	const size = 4 << 20
	fs := &allocFS{FS: vfs.Default}
	opts := Options{FS: fs, SegmentBytes: size}
	// Each rotation must find its segment's zeros unfinished however long
	// the appends' fdatasyncs take on a loaded machine: 16 chunks of zeros,
	// 8 s at this delay, against the 64 appends (each waiting for its
	// fdatasync) that fill a segment. At 100 ms a chunk, set after Open,
	// fdatasyncs of 20 ms would outrun the zeros. Each rotation waits for
	// the chunk being written: about 3 × 500 ms in all. The delay is set
	// before Open: segment 2's zeros, which Open starts, are slow from the
	// first chunk on, even if the test stalls after Open.
	fs.zeroDelay.Store(int64(500 * time.Millisecond))
	l, err := Open(dir, opts)
	require.NoError(t, err)
	rec := make([]byte, 64<<10)
	var want [][]byte
	for i := 0; l.Stats().Rotations < 3; i++ {
		r := append([]byte(nil), rec...)
		r[0], r[1] = byte(i), byte(i>>8)
		_, err := l.Append(r)
		require.NoError(t, err)
		want = append(want, r)
	}
	st := l.Stats()
	require.Equal(t, int64(3), st.Rotations)
	require.Equal(t, st.Rotations, st.ZeroFillsRushed, "a rotation found its segment's zeros done at 500 ms a chunk")
	fs.mu.Lock()
	allocated := len(fs.calls)
	fs.mu.Unlock()
	require.GreaterOrEqual(t, allocated, 3, "the rest of a rushed segment was not allocated")
	require.NoError(t, l.Close())

	fs.zeroDelay.Store(0)
	l, err = Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	var got [][]byte
	require.NoError(t, l.Iterate(0, func(_ Position, r []byte) error {
		got = append(got, append([]byte(nil), r...))
		return nil
	}))
	require.Equal(t, want, got)
	require.Nil(t, l.Recovery().TornTail, "the reopen found a torn tail")
}

// TestARushOutlivesASpareThatCannotBeReused: a fill that took the writer's
// rush and then gave way to a spare, which turned out unusable, fills the
// file again as rushed: the rest allocated at once, not paced while the
// writer waits.
func TestARushOutlivesASpareThatCannotBeReused(t *testing.T) {
	dir := t.TempDir()
	const size = 8 << 20
	l, active, p := preparerBeside(t, dir, size)
	defer p.stop()
	fs := &allocFS{FS: vfs.Default}
	l.opts.FS, l.opts.Logger = fs, slog.New(slog.DiscardHandler) // the unusable spare is logged
	p.request(3, active)
	tmp := l.segPath(3) + tmpSuffix
	waitForZeros(t, tmp)

	// A retired file too short to be a segment, and the writer's rush,
	// seen together.
	broken := filepath.Join(dir, sparePrefix+"0000000000"+tmpSuffix)
	require.NoError(t, os.WriteFile(broken, []byte("short"), 0o600))
	l.listMu.Lock()
	l.spares = append(l.spares, broken)
	p.rush <- 3
	l.listMu.Unlock()

	var got prepared
	select {
	case got = <-p.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the rushed segment was not made: its fill went back to pacing")
	}
	require.NoError(t, got.err)
	defer got.file.Close()
	require.False(t, got.recycled)
	require.Equal(t, uint32(3), got.file.Seq())
	require.Equal(t, int64(1), l.stats.fillsRushed.Load())
	fs.mu.Lock()
	require.Len(t, fs.calls, 1, "the rest of the file was not allocated")
	fs.mu.Unlock()
	_, err := os.Stat(broken)
	require.ErrorIs(t, err, os.ErrNotExist, "the unusable spare is still there")
}
