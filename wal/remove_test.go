package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

func TestRemoveBelowDropsWholeSegmentsAndReusesThem(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1024}
	l := mustOpen(t, dir, opts)
	es := appendRecords(t, l, 0, 200)
	segs := l.Stats().Segments
	require.Greater(t, segs, 5)

	cut := es[120].pos
	n, err := l.RemoveBelow(cut)
	require.NoError(t, err)
	require.Equal(t, int(cut.Segment()-1), n)
	require.Equal(t, segs-n, l.Stats().Segments)
	require.Equal(t, cut.Segment(), l.Stats().FirstSegment)

	// Records of removed segments are gone; the rest are all there.
	_, err = l.Read(es[0].pos)
	require.ErrorIs(t, err, ErrNotFound)
	var kept []entry
	for _, e := range es {
		if e.pos.Segment() >= cut.Segment() {
			kept = append(kept, e)
		}
	}
	requireEntries(t, kept, readAll(t, l))
	_, err = os.Stat(segFile(dir, 1))
	require.True(t, os.IsNotExist(err))

	// Removing below the active segment's position never removes it.
	before := l.Stats().Segments
	n, err = l.RemoveBelow(l.End() + 1<<32)
	require.NoError(t, err)
	require.Equal(t, before-1, n, "every segment but the active one")
	require.Equal(t, 1, l.Stats().Segments)

	// New segments reuse retired files: their stale frames (other
	// sequences) must never be read as records.
	more := appendRecords(t, l, 200, 200)
	require.Positive(t, l.Stats().RecycledSegments)
	want := append(readAll(t, l)[:0:0], readAll(t, l)...)
	require.Equal(t, more[len(more)-1].pos, want[len(want)-1].pos)
	// Retire what is behind the active segment again, so that spares are
	// on disk at Close whatever the preparer was doing (a file it was
	// still filling is abandoned, not kept).
	_, err = l.RemoveBelow(l.End())
	require.NoError(t, err)
	want = append(want[:0:0], readAll(t, l)...)
	require.NoError(t, l.Close())
	atClose := 0
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range names {
		if strings.HasPrefix(e.Name(), "spare-") {
			atClose++
		}
	}
	require.Positive(t, atClose, "no spare left at Close: %v", names)

	l = mustOpen(t, dir, opts)
	defer l.Close()
	requireEntries(t, want, readAll(t, l))
	require.Nil(t, l.Recovery().TornTail)
	// Full-size spares are kept across a reopen, for its rotations: the
	// reopened log makes its next segments out of them.
	appendRecords(t, l, 400, 100)
	require.Positive(t, l.Stats().RecycledSegments, "the reopened log reused the spares")
	names, err = os.ReadDir(dir)
	require.NoError(t, err)
	spares := 0
	for _, e := range names {
		if strings.HasPrefix(e.Name(), "spare-") {
			spares++
		}
	}
	require.LessOrEqual(t, spares, maxSpares)
}

// Readers, Stats and appends run while segments are removed: nothing may
// read a removed segment's memory, and nothing reports a removed record.
func TestRemoveBelowWhileReading(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1024})
	defer l.Close()
	es := appendRecords(t, l, 0, 100)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				_ = l.Stats()
				for _, e := range es {
					rec, err := l.Read(e.pos)
					if err != nil {
						require.ErrorIs(t, err, ErrNotFound)
						continue
					}
					require.Equal(t, e.rec, rec)
				}
				require.NoError(t, l.Iterate(0, func(Position, []byte) error { return nil }))
			}
		}()
	}
	for i := 0; i < 50; i++ {
		more := appendRecords(t, l, 100+i*4, 4)
		_, err := l.RemoveBelow(more[0].pos)
		require.NoError(t, err)
	}
	close(done)
	wg.Wait()
}

// gateFS blocks the rename that retires segment 1 until release is closed.
type gateFS struct {
	vfs.FS
	entered, release chan struct{}
}

func (g *gateFS) Rename(oldname, newname string) error {
	if filepath.Base(oldname) == segName(1) && strings.Contains(newname, sparePrefix) {
		close(g.entered)
		<-g.release
	}
	return g.FS.Rename(oldname, newname)
}

// TestCloseWaitsForARemovalUnderWay: a Close during RemoveBelow holds the
// directory until the removal ends, so that no file is renamed or removed
// after another Log may have opened the directory.
func TestCloseWaitsForARemovalUnderWay(t *testing.T) {
	dir := t.TempDir()
	g := &gateFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	l := mustOpen(t, dir, Options{FS: g, SegmentBytes: 1024})
	es := appendRecords(t, l, 0, 60)
	removed := make(chan error, 1)
	go func() { _, err := l.RemoveBelow(MakePosition(2, 0)); removed <- err }()
	<-g.entered
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()

	// While the removal is under way the directory stays locked.
	_, err := Open(dir, Options{SegmentBytes: 1024})
	require.ErrorIs(t, err, ErrLocked)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a removal was under way", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(g.release)
	require.NoError(t, <-removed)
	require.NoError(t, <-closed)

	l2 := mustOpen(t, dir, Options{SegmentBytes: 1024})
	defer l2.Close()
	require.Equal(t, uint32(2), l2.Stats().FirstSegment, "the removal was done before Close let go")
	requireEntries(t, entriesFrom(es, 2), readAll(t, l2))
}

// entriesFrom returns the entries of es in segment seq and after.
func entriesFrom(es []entry, seq uint32) []entry {
	for i, e := range es {
		if e.pos.Segment() >= seq {
			return es[i:]
		}
	}
	return nil
}

// TestARemovalThatFailsLeavesAGaplessLog: when one old segment cannot be
// removed, the later ones stay too, a later removal takes nothing newer
// while it stays, and the log reopens whole from there; removing the later
// ones alone left a gap that Open refused as a missing segment.
func TestARemovalThatFailsLeavesAGaplessLog(t *testing.T) {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{SegmentBytes: 1024, FS: ffs})
	es := appendRecords(t, l, 0, 200)
	_, err := l.RemoveBelow(es[30].pos) // fills the spares: the rest are deleted
	require.NoError(t, err)
	first := l.Stats().FirstSegment
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: segName(first), Err: syscall.EIO})
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: segName(first), Err: syscall.EIO})
	_, err = l.RemoveBelow(es[120].pos)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, segName(first))
	// Nothing newer goes while it stays.
	es = append(es, appendRecords(t, l, 200, 100)...)
	_, err = l.RemoveBelow(es[len(es)-1].pos)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, segName(first))
	require.NoError(t, l.Close())
	ffs.Clear()

	l = mustOpen(t, dir, Options{SegmentBytes: 1024})
	defer l.Close()
	require.Equal(t, first, l.Stats().FirstSegment, "the segment that could not be removed is part of the log again")
	requireEntries(t, entriesFrom(es, first), readAll(t, l))
}

// A failed directory sync after removing segments stops the log, as a
// failed fdatasync does: its success on a later try (the next rotation's
// SyncDir) would say nothing of what this one lost.
func TestAFailedDirectorySyncInRemoveBelowStopsTheLog(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1024})
	es := appendRecords(t, l, 0, 100)
	require.Greater(t, l.Stats().Segments, 3)

	fs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Times: 1})
	_, err := l.RemoveBelow(es[80].pos)
	require.ErrorIs(t, err, ErrPoisoned)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, "sync dir")
	require.ErrorIs(t, l.Err(), ErrPoisoned, "the log reports its poison")
	_, err = l.Append(record(1000))
	require.ErrorIs(t, err, ErrPoisoned, "and every later append fails")
	require.Error(t, l.Close())

	// Nothing acknowledged is lost: a reopen holds every record from the
	// first segment still there on.
	l = mustOpen(t, dir, Options{SegmentBytes: 1024})
	defer l.Close()
	got := readAll(t, l)
	require.NotEmpty(t, got)
	require.Equal(t, es[len(es)-1].pos, got[len(got)-1].pos)
}

// TestRemoveBelowOnAPoisonedLogFailsAndRemovesNothing: once the log is
// poisoned, by a failed directory sync of a removal or a failed fdatasync,
// every later RemoveBelow fails with ErrPoisoned and touches no file. It
// went on removing segments and synced the directory again, and a
// success of that sync, which says nothing of what the failed one lost,
// made it return nil.
func TestRemoveBelowOnAPoisonedLogFailsAndRemovesNothing(t *testing.T) {
	for _, c := range []struct {
		name   string
		poison func(t *testing.T, fs *vfs.FaultFS, l *Log, es []entry)
	}{
		{"a removal's directory sync", func(t *testing.T, fs *vfs.FaultFS, l *Log, es []entry) {
			require.Greater(t, es[60].pos.Segment(), l.Stats().FirstSegment)
			fs.Inject(vfs.Rule{Op: vfs.OpSyncDir, Times: 1})
			_, err := l.RemoveBelow(es[60].pos)
			require.ErrorIs(t, err, ErrPoisoned)
		}},
		{"an append's fdatasync", func(t *testing.T, fs *vfs.FaultFS, l *Log, es []entry) {
			// The active segment's (its commit, or its seal if the
			// append rotates), whatever name it was opened under.
			active := segName(es[len(es)-1].pos.Segment())
			fs.Inject(vfs.Rule{Op: vfs.OpSync, Match: func(n string) bool { return strings.Contains(n, active) }, Times: 1})
			_, err := l.Append(record(1000))
			require.ErrorIs(t, err, ErrPoisoned)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := vfs.NewFaultFS(vfs.Default)
			l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1024})
			es := appendRecords(t, l, 0, 100)
			require.Greater(t, l.Stats().Segments, 4)
			c.poison(t, fs, l, es)
			require.ErrorIs(t, l.Err(), ErrPoisoned)

			first := l.Stats().FirstSegment
			names, err := os.ReadDir(dir)
			require.NoError(t, err)
			for range 2 {
				n, err := l.RemoveBelow(es[len(es)-1].pos)
				require.ErrorIs(t, err, ErrPoisoned, "a later RemoveBelow")
				require.Zero(t, n)
			}
			require.Equal(t, first, l.Stats().FirstSegment, "no segment left the log")
			after, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Equal(t, names, after, "no file was removed or renamed")
			require.Error(t, l.Close())
		})
	}
}

// spareFiles returns the names of the retired segment files in dir.
func spareFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range names {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// RemoveBelow keeps at most two removed files for reuse, and only files of
// the size of a new segment: a file of another size (a log reopened with
// other SegmentBytes) is deleted.
func TestRemoveBelowKeepsAtMostTwoFullSizeSpares(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	appendRecords(t, l, 0, 200)
	require.NoError(t, l.Close())

	// Reopened with smaller segments: the old ones are of another size.
	l = mustOpen(t, dir, Options{SegmentBytes: 1024})
	defer l.Close()
	old := l.Stats().LastSegment
	require.Greater(t, old, uint32(3))
	more := appendRecords(t, l, 200, 100)
	require.Greater(t, more[len(more)-1].pos.Segment(), old+3, "the test needs several new segments")
	n, err := l.RemoveBelow(MakePosition(old+1, 0))
	require.NoError(t, err)
	require.Equal(t, int(old), n)
	require.Empty(t, spareFiles(t, dir), "a file of another size is not kept for reuse")

	n, err = l.RemoveBelow(l.End())
	require.NoError(t, err)
	require.Greater(t, n, maxSpares)
	spares := spareFiles(t, dir)
	require.NotEmpty(t, spares)
	require.LessOrEqual(t, len(spares), maxSpares, "at most two removed files are kept")
}

// Open keeps a retired segment file for reuse only when it has the size of
// a segment, and no more than two of them; it removes the others, so that
// every segment the log makes later has its full size.
func TestOpenKeepsOnlyTwoFullSizeSpares(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1024})
	es := appendRecords(t, l, 0, 20)
	require.NoError(t, l.Close())
	spare := func(seq int) string {
		return filepath.Join(dir, fmt.Sprintf("%s%010d%s", sparePrefix, seq, tmpSuffix))
	}
	require.NoError(t, os.WriteFile(spare(90), make([]byte, 512), 0o600))
	for _, seq := range []int{91, 92, 93} {
		require.NoError(t, os.WriteFile(spare(seq), make([]byte, 1024), 0o600))
	}

	l = mustOpen(t, dir, Options{SegmentBytes: 1024})
	defer l.Close()
	_, err := os.Stat(spare(90))
	require.ErrorIs(t, err, os.ErrNotExist, "a retired file shorter than a segment is removed")
	require.LessOrEqual(t, len(spareFiles(t, dir)), maxSpares)
	first := l.Stats().LastSegment
	es = append(es, appendRecords(t, l, 20, 100)...)
	require.Greater(t, l.Stats().LastSegment, first+3)
	require.EqualValues(t, maxSpares, l.Stats().RecycledSegments, "the new segments reused the two spares kept, no more")
	for seq := first; seq <= l.Stats().LastSegment; seq++ {
		fi, err := os.Stat(segFile(dir, seq))
		require.NoError(t, err)
		require.EqualValues(t, 1024, fi.Size(), "segment %d", seq)
	}
	requireEntries(t, es, readAll(t, l))
}

// spareRaceFS is a CrashFS that can hold back the creation of the next
// segment file (the preparer's zero-fill) until released, and run a
// function in place of the next directory sync.
type spareRaceFS struct {
	*vfs.CrashFS
	mu      sync.Mutex
	gate    chan struct{} // while not nil, a new segment file waits for it to close
	entered chan struct{} // closed when a creation reaches the gate
	syncDir func(dir string) error
}

func (fs *spareRaceFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fs.mu.Lock()
	gate, entered := fs.gate, fs.entered
	if flag&os.O_CREATE != 0 && strings.HasSuffix(name, tmpSuffix) && !strings.HasPrefix(filepath.Base(name), sparePrefix) && gate != nil {
		fs.gate, fs.entered = nil, nil
		close(entered)
	} else {
		gate = nil
	}
	fs.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return fs.CrashFS.OpenFile(name, flag, perm)
}

func (fs *spareRaceFS) SyncDir(dir string) error {
	fs.mu.Lock()
	f := fs.syncDir
	fs.syncDir = nil
	fs.mu.Unlock()
	if f != nil {
		return f(dir)
	}
	return fs.CrashFS.SyncDir(dir)
}

// waitPrepared waits until the preparer has the next segment ready.
func waitPrepared(t *testing.T, l *Log) {
	t.Helper()
	// A hang guard, not a timing assumption: the preparer gets there when
	// the machine runs it.
	for deadline := time.Now().Add(30 * time.Second); len(l.prep.ready) == 0; {
		require.True(t, time.Now().Before(deadline), "the preparer never made the next segment ready")
		time.Sleep(50 * time.Microsecond)
	}
}

// A retired segment file is reused only once the directory sync that made
// its retirement durable has completed. Reused earlier, its header is
// rewritten for a new segment (and fdatasynced) while its old name may
// still be the durable one: a power loss then brings the removed segment
// back under its old name with another segment's header, and the log no
// longer opens. Here the preparer is making the next segment when
// RemoveBelow retires the oldest one, and the power fails in RemoveBelow's
// directory sync, once the preparer has its file ready; the synced state
// must open to every record appended.
func TestARetiredSegmentIsNotReusedBeforeItsRemovalIsDurable(t *testing.T) {
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	fs := &spareRaceFS{CrashFS: cfs}
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 1024})
	defer l.Close()
	acked := appendRecords(t, l, 1000, 1) // the first write asks for segment 2
	waitPrepared(t, l)

	// The creation of segment 3, asked for at the rotation into segment
	// 2, waits at the gate.
	gate, entered := make(chan struct{}), make(chan struct{})
	fs.mu.Lock()
	fs.gate, fs.entered = gate, entered
	fs.mu.Unlock()
	for i := 0; l.Stats().LastSegment < 2; i++ {
		acked = append(acked, appendRecords(t, l, i, 1)...)
	}
	<-entered

	fs.mu.Lock()
	fs.syncDir = func(string) error {
		// Segment 1 is renamed aside, not yet durably. Let the preparer
		// go on, wait for the file it makes, and lose power.
		close(gate)
		waitPrepared(t, l)
		cfs.Crash()
		return fmt.Errorf("sync dir: %w", vfs.ErrCrashed)
	}
	fs.mu.Unlock()
	_, err := l.RemoveBelow(MakePosition(2, 0))
	require.ErrorIs(t, err, vfs.ErrCrashed)
	_ = l.Close()

	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	l2, err := Open(clone, Options{SegmentBytes: 1024})
	require.NoError(t, err, "the synced state after a power loss in RemoveBelow's directory sync")
	defer l2.Close()
	requireEntries(t, acked, readAll(t, l2))
}
