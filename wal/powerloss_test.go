package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// plWorkload is a short deterministic workload over fs: single and grouped
// appends across several rotations, and one removal of old segments, whose
// file a later rotation reuses. It
// stops at the first error (the file system "lost power") and returns the
// appends that were acknowledged, and the position below which segments
// may have been removed. opened, when not nil, is called with the log
// once it is open.
func plWorkload(dir string, fs vfs.FS, opened func(*Log)) (acked []entry, removedBelow Position, err error) {
	l, err := Open(dir, Options{FS: fs, SegmentBytes: 1024})
	if err != nil {
		return nil, 0, err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	if opened != nil {
		opened(l)
	}
	for i := 0; i < 75; {
		n := 1 + i%3
		var recs [][]byte
		for j := 0; j < n; j++ {
			recs = append(recs, record(i+j))
		}
		pos, err := l.Append(recs...)
		if err != nil {
			return acked, removedBelow, err
		}
		for j := range recs {
			acked = append(acked, entry{pos[j], recs[j]})
		}
		i += n
		if i == 30 {
			removedBelow = acked[len(acked)-1].pos
			if _, err := l.RemoveBelow(removedBelow); err != nil {
				return acked, removedBelow, err
			}
		}
	}
	return acked, removedBelow, nil
}

// checkAfterPowerLoss opens a crash clone and checks the power-loss
// invariants: it opens (no corruption), every acknowledged record at or
// after the removal point is there at its position, and every record found
// is one the workload appended, in the order it appended them.
func checkAfterPowerLoss(t *testing.T, dir string, acked []entry, removedBelow Position, what string) []entry {
	t.Helper()
	l, err := Open(dir, Options{SegmentBytes: 1024})
	require.NoError(t, err, what)
	got := readAll(t, l)
	require.NoError(t, l.Close())
	found := map[Position]string{}
	last := -1
	for _, e := range got {
		var i int
		_, err := fmt.Sscanf(string(e.rec), "record-%05d:", &i)
		require.NoError(t, err, "%s: unknown record %q", what, e.rec)
		require.Equal(t, string(record(i)), string(e.rec), what)
		require.Greater(t, i, last, "%s: records out of order", what)
		last = i
		found[e.pos] = string(e.rec)
	}
	for _, e := range acked {
		if removedBelow != 0 && e.pos.Segment() < removedBelow.Segment() {
			continue
		}
		require.Equal(t, string(e.rec), found[e.pos], "%s: acknowledged record at %v lost", what, e.pos)
	}
	return got
}

// metadataStates are the ways a power loss may treat the unsynced changes
// of names and of sizes apart from the data, checked at every operation of
// the power-loss sweeps beside the clones that keep a share of the data
// only.
var metadataStates = vfs.MetadataCrashStates()

// TestPowerLossAtEveryOperation runs the workload through a CrashFS that
// loses power after its k-th mutating operation, for every k, clones the
// directory to what the device could hold (synced bytes, plus a seeded share
// of unsynced 4 KiB blocks, the last write possibly torn), and checks that
// the clone opens to every acknowledged record. It then crashes recovery
// itself once at a random operation and checks again.
func TestPowerLossAtEveryOperation(t *testing.T) {
	powerLossSweep(t, func(cfs *vfs.CrashFS) (vfs.FS, func(*Log)) { return cfs, nil })
}

// powerLossSweep is TestPowerLossAtEveryOperation over the file system
// wrap makes of each run's CrashFS, with the function to call on the run's
// log once it is open.
func powerLossSweep(t *testing.T, wrap func(*vfs.CrashFS) (vfs.FS, func(*Log))) {
	root := shmDir(t)
	dry := vfs.NewCrashFS(vfs.Default)
	fs, opened := wrap(dry)
	_, _, err := plWorkload(freshDir(t, root), fs, opened)
	require.NoError(t, err)
	total := dry.Ops()
	t.Logf("workload: %d mutating operations", total)
	rng := seededRand(t)
	step := int64(1)
	if testing.Short() {
		step = 7
	}
	for k := int64(0); k <= total; k += step {
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		dir := freshDir(t, root)
		fs, opened := wrap(cfs)
		acked, removedBelow, _ := plWorkload(dir, fs, opened)
		clone := filepath.Join(freshDir(t, root), "clone")
		opts := vfs.CrashOptions{Root: dir, Rand: rand.New(rand.NewPCG(rng.Uint64(), 1))}
		switch k % 4 {
		case 1:
			opts.KeepUnsyncedFraction = 0.5
			opts.TearLastWrite = true
		case 2:
			opts.KeepUnsyncedFraction = 1
		case 3: // some sectors of a page, and whole writes behind holes
			opts.KeepUnsyncedFraction = 0.5
			opts.BlockSize = 512
		}
		require.NoError(t, cfs.CrashClone(clone, opts))
		what := fmt.Sprintf("crash after op %d of %d (keep %.1f, block %d)", k, total, opts.KeepUnsyncedFraction, opts.BlockSize)
		checkAfterPowerLoss(t, clone, acked, removedBelow, what)

		// The same power loss as the file systems that commit names and
		// sizes apart from the data may leave it; its Rand is drawn from
		// the first clone's seed, so that the seeds of the others keep
		// their meaning.
		ms := metadataStates[k%int64(len(metadataStates))]
		mopts := ms.Options(dir, rand.New(rand.NewPCG(opts.Rand.Uint64(), 3)))
		mclone := filepath.Join(freshDir(t, root), "clone")
		require.NoError(t, cfs.CrashClone(mclone, mopts))
		checkAfterPowerLoss(t, mclone, acked, removedBelow, fmt.Sprintf("crash after op %d of %d (%s)", k, total, ms.Name))

		// Crash the recovery of the clone, then recover that.
		rfs := vfs.NewCrashFS(vfs.Default)
		rfs.CrashAfter(rng.Int64N(8))
		if l, err := Open(clone, Options{FS: rfs, SegmentBytes: 1024}); err == nil {
			_ = l.Close()
		}
		clone2 := filepath.Join(freshDir(t, root), "clone2")
		require.NoError(t, rfs.CrashClone(clone2, vfs.CrashOptions{Root: clone, Rand: rand.New(rand.NewPCG(rng.Uint64(), 2))}))
		checkAfterPowerLoss(t, clone2, acked, removedBelow, what+", then during recovery")
	}
}

// rushFS holds back the creation of every new segment file until the
// writer waits for it (the log set with watch), so that the preparer sees
// the writer's rush before its first chunk of zeros and allocates the
// whole file instead (segment.ErrAllocateRest): the path a log that
// outruns its zero-fill takes, which the workload's small segments, filled
// in microseconds, never take on their own.
type rushFS struct {
	*vfs.CrashFS
	log atomic.Pointer[Log]
}

func (fs *rushFS) watch(l *Log) { fs.log.Store(l) }

func (fs *rushFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if l := fs.log.Load(); l != nil && flag&os.O_CREATE != 0 && strings.HasSuffix(name, tmpSuffix) && !strings.HasPrefix(filepath.Base(name), sparePrefix) {
		// Until the writer waits for it, or never will (power lost, the
		// log closing): the writer gets there when the machine runs it,
		// which on a loaded one may be long after the file was asked
		// for. The deadline is a hang guard, not a timing assumption.
		for deadline := time.Now().Add(30 * time.Second); !fs.waitedFor(l) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return fs.CrashFS.OpenFile(name, flag, perm)
}

// waitedFor reports whether the writer of l waits for the segment being
// made, or never will.
func (fs *rushFS) waitedFor(l *Log) bool {
	select {
	case <-l.prep.quit:
		return true
	default:
	}
	return len(l.prep.rush) > 0 || fs.Crashed()
}

// TestPowerLossWhileRotationsAreRushed is TestPowerLossAtEveryOperation
// over segments the writer waits for: each is allocated (a CrashFS models
// fallocate as zeros written past the file's end, lost unless an
// fdatasync covers them) rather than written full of zeros. Every clone
// must still open to every acknowledged record.
func TestPowerLossWhileRotationsAreRushed(t *testing.T) {
	// First, that the workload does take that path.
	fs := &rushFS{CrashFS: vfs.NewCrashFS(vfs.Default)}
	var l *Log
	_, _, err := plWorkload(t.TempDir(), fs, func(opened *Log) { l = opened; fs.watch(l) })
	require.NoError(t, err)
	st := l.Stats()
	t.Logf("%d rotations, %d segments recycled, %d zero-fills rushed", st.Rotations, st.RecycledSegments, st.ZeroFillsRushed)
	require.Positive(t, st.ZeroFillsRushed)
	// The segments made after Open and not reused: all but the first spare,
	// made before watch, and perhaps the one being made at Close.
	require.GreaterOrEqual(t, st.ZeroFillsRushed, st.Rotations-st.RecycledSegments-1, "a new segment was written full of zeros")

	powerLossSweep(t, func(cfs *vfs.CrashFS) (vfs.FS, func(*Log)) {
		fs := &rushFS{CrashFS: cfs}
		return fs, fs.watch
	})
}

// TestOpenMakesAnUnsyncedSealDurable: a crash between a rotation's seal
// and its fdatasync leaves the sealed segment only in the page cache, and
// an empty next segment whose name is durable. The Open after it must make
// the sealed segment durable before it appends after it: otherwise a power
// loss later leaves acknowledged records behind a segment that reads as
// unsealed, and every Open refuses the log. Under SyncNever the rotation
// first makes the records before the seal durable, with an fdatasync of
// its own; the crash falls in the next one, the seal's.
func TestOpenMakesAnUnsyncedSealDurable(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			cfs := vfs.NewCrashFS(vfs.Default)
			ffs := vfs.NewFaultFS(cfs)
			opts := Options{FS: ffs, SegmentBytes: 1024, Sync: mode}
			l, err := Open(dir, opts)
			require.NoError(t, err)
			var written []entry
			for i := 0; ; i++ {
				rec := record(i)
				if l.End().Segment() == 1 && l.End().Offset()+2*segment.Size(0)+len(rec) > 1024 {
					// This append rotates; the process dies in the seal's
					// fdatasync (it fails, and the log is abandoned).
					sealSync := int64(1)
					if mode == SyncNever {
						sealSync = 2 // after the one of the records before it
					}
					ffs.Inject(vfs.Rule{Op: vfs.OpSync, Match: firstSegment, Nth: sealSync, Times: 1})
					_, err := l.Append(rec)
					require.ErrorIs(t, err, ErrPoisoned)
					break
				}
				pos, err := l.Append(rec)
				require.NoError(t, err)
				written = append(written, entry{pos[0], rec})
			}
			_ = l.Close()
			ffs.Clear()
			b, err := os.ReadFile(segFile(dir, 1))
			require.NoError(t, err)
			r, err := segment.Scan(b, 1, false, func(segment.Frame) error { return nil })
			require.NoError(t, err)
			require.True(t, r.Sealed, "the crash came after the seal was written (%v at %d)", r.Tail, r.DamageAt)

			// The restart finds the page cache as the crash left it.
			opts.Sync = SyncAlways
			l, err = Open(dir, opts)
			require.NoError(t, err)
			require.Equal(t, len(written), readAllCount(t, l), "the reopen does not see what the crash left in the page cache")
			acked := append(written, appendRecords(t, l, 1000, 3)...)
			require.Greater(t, acked[len(acked)-1].pos.Segment(), uint32(1), "the records after the reopen went to segment 1")

			clone := filepath.Join(t.TempDir(), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir})) // power lost now
			require.NoError(t, l.Close())
			l2, err := Open(clone, Options{SegmentBytes: 1024})
			require.NoError(t, err, "a power loss after the reopen")
			defer l2.Close()
			requireEntries(t, acked, readAll(t, l2))
		})
	}
}

func readAllCount(t *testing.T, l *Log) int {
	t.Helper()
	return len(readAll(t, l))
}

// TestProcessCrashThenPowerLossAtEveryOperation: the process dies after
// the workload's k-th file operation, for every k, the machine keeps
// running (the page cache keeps every written byte), the log is opened
// again, a few more records are appended, and only then the power fails.
// Whatever the reopened log showed its readers, and every record either
// process was told is durable, must be there after the power loss: the
// reopen makes durable what it builds on.
func TestProcessCrashThenPowerLossAtEveryOperation(t *testing.T) {
	root := shmDir(t)
	dry := vfs.NewCrashFS(vfs.Default)
	_, _, err := plWorkload(freshDir(t, root), dry, nil)
	require.NoError(t, err)
	total := dry.Ops()
	step := int64(1)
	if testing.Short() {
		step = 7
	}
	for k := int64(0); k <= total; k += step {
		what := fmt.Sprintf("process crash after op %d of %d, reopen, append, power loss", k, total)
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		dir := freshDir(t, root)
		acked, removedBelow, _ := plWorkload(dir, cfs, nil)
		cfs.Restart()
		l, err := Open(dir, Options{FS: cfs, SegmentBytes: 1024})
		require.NoError(t, err, what)
		seen := readAll(t, l)
		acked = append(acked, appendRecords(t, l, 1000, 4)...)
		clone := filepath.Join(freshDir(t, root), "clone")
		require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
		require.NoError(t, l.Close(), what)
		got := checkAfterPowerLoss(t, clone, acked, removedBelow, what)
		found := map[Position]string{}
		for _, e := range got {
			found[e.pos] = string(e.rec)
		}
		for _, e := range seen {
			require.Equal(t, string(e.rec), found[e.pos], "%s: the reopened log showed the record at %v, the power loss took it", what, e.pos)
		}
	}
}
