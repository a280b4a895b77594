package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

func TestAppendIterateRead(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	want := appendRecords(t, l, 0, 300)
	require.Greater(t, l.Stats().Segments, 3, "the test needs several segments")
	requireEntries(t, want, readAll(t, l))
	for _, e := range want {
		rec, err := l.Read(e.pos)
		require.NoError(t, err)
		require.Equal(t, e.rec, rec)
	}
	// Iterate from the middle, and from a position just past a record.
	var got []entry
	require.NoError(t, l.Iterate(want[150].pos, func(p Position, rec []byte) error {
		got = append(got, entry{p, append([]byte(nil), rec...)})
		return nil
	}))
	requireEntries(t, want[150:], got)
	require.NoError(t, l.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: 2048})
	defer l.Close()
	requireEntries(t, want, readAll(t, l))
	require.Nil(t, l.Recovery().TornTail)
	more := appendRecords(t, l, 300, 50)
	requireEntries(t, append(want, more...), readAll(t, l))
}

// SegmentPath names the file a position's record is in: the record at
// that offset of that file is the one Read returns.
func TestSegmentPathNamesTheFileOfAPosition(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	defer l.Close()
	want := appendRecords(t, l, 0, 100)
	require.Greater(t, l.Stats().Segments, 2, "the test needs several segments")
	for _, e := range []entry{want[0], want[len(want)-1]} {
		path := l.SegmentPath(e.pos.Segment())
		require.Equal(t, dir, filepath.Dir(path))
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := segment.Decode(data, e.pos.Offset(), e.pos.Segment())
		require.NoError(t, err)
		require.Equal(t, e.rec, f.Body)
	}
}

func TestPositionsOrderTheLog(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1024})
	defer l.Close()
	es := appendRecords(t, l, 0, 100)
	for i := 1; i < len(es); i++ {
		require.Less(t, es[i-1].pos, es[i].pos)
	}
	p := MakePosition(7, 4096)
	require.Equal(t, uint32(7), p.Segment())
	require.Equal(t, 4096, p.Offset())
	require.Equal(t, "7:4096", p.String())
}

func TestReadRefusesPositionsThatNameNoRecord(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	es := appendRecords(t, l, 0, 3)
	for _, p := range []Position{
		0,                                    // before everything
		MakePosition(99, segment.HeaderSize), // no such segment
		es[0].pos + 1,                        // not a frame start
		l.End(),                              // not yet written
		MakePosition(1, 3),                   // inside the header
	} {
		_, err := l.Read(p)
		require.ErrorIs(t, err, ErrNotFound, "position %v", p)
	}
}

func TestEmptyAndZeroLengthRecords(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	pos, err := l.Append()
	require.NoError(t, err)
	require.Empty(t, pos)
	pos, err = l.Append([]byte{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l = mustOpen(t, dir, Options{})
	defer l.Close()
	got := readAll(t, l)
	require.Len(t, got, 1)
	require.Equal(t, pos[0], got[0].pos)
	require.Empty(t, got[0].rec)
}

// TestAZeroPendingIsNoAppend: Enqueue of no records waits for nothing and
// succeeds, but a Pending of the caller's own making was never queued, and
// its Wait used to report that nothing as a success.
func TestAZeroPendingIsNoAppend(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	pos, err := l.Enqueue(true).Wait()
	require.NoError(t, err, "Enqueue of no records")
	require.Empty(t, pos)
	var zero Pending
	pos, err = zero.Wait()
	require.ErrorContains(t, err, "Enqueue did not return")
	require.Empty(t, pos)
	var none *Pending // a slot of a []*Pending never filled
	pos, err = none.Wait()
	require.ErrorContains(t, err, "Enqueue did not return", "a nil Pending is refused, not a panic")
	require.Empty(t, pos)
}

func TestAppendIsAtomicAndNeverSplitAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1024})
	var want []entry
	for i := 0; i < 40; i++ {
		recs := [][]byte{record(3 * i), record(3*i + 1), record(3*i + 2)}
		pos, err := l.Append(recs...)
		require.NoError(t, err)
		for j := range recs {
			require.Equal(t, pos[0].Segment(), pos[j].Segment(), "one call, one segment")
			want = append(want, entry{pos[j], recs[j]})
		}
	}
	require.NoError(t, l.Close())
	l = mustOpen(t, dir, Options{SegmentBytes: 1024})
	defer l.Close()
	requireEntries(t, want, readAll(t, l))
}

func TestAppendTooLarge(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1024})
	defer l.Close()
	_, err := l.Append(make([]byte, 1024))
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), "SegmentBytes")
	_, err = l.Append(make([]byte, 400), make([]byte, 400), make([]byte, 400))
	require.ErrorIs(t, err, ErrTooLarge)
	// The largest call that fits does fit, even in a fresh segment.
	max := 1024 - segment.HeaderSize - segment.Size(0) - segment.Size(0)
	big := make([]byte, max)
	big[0], big[max-1] = 'a', 'z'
	pos, err := l.Append(big)
	require.NoError(t, err)
	got, err := l.Read(pos[0])
	require.NoError(t, err)
	require.Equal(t, big, got)
}

func TestBadOptionsAreRefused(t *testing.T) {
	for _, o := range []Options{
		{SegmentBytes: 100},
		{SegmentBytes: 2 << 30},
		{Sync: SyncMode(9)},
		{SyncInterval: -1},
	} {
		_, err := Open(t.TempDir(), o)
		require.ErrorIs(t, err, ErrBadOptions, "%+v", o)
	}
}

// TestOptionsAreTakenAtTheirBoundsAndRefusedJustPast: each bound of
// Options is inclusive, and one step past it is ErrBadOptions.
func TestOptionsAreTakenAtTheirBoundsAndRefusedJustPast(t *testing.T) {
	for _, o := range []Options{
		{SegmentBytes: MinSegmentBytes},
		{SegmentBytes: MaxSegmentBytes},
		{Sync: SyncNever},
		{SegmentBytes: 4096, PreambleBytes: 2048},
	} {
		_, err := o.withDefaults()
		require.NoError(t, err, "%+v", o)
	}
	for _, o := range []Options{
		{SegmentBytes: MinSegmentBytes - 1},
		{SegmentBytes: MaxSegmentBytes + 1},
		{Sync: SyncNever + 1},
		{SegmentBytes: 4096, PreambleBytes: 2049},
		{PreambleBytes: -1},
	} {
		_, err := o.withDefaults()
		require.ErrorIs(t, err, ErrBadOptions, "%+v", o)
	}
}

// TestAnAppendLeavesTheRoomKeptForThePreamble: one Append may encode at
// most a segment less its header, its seal and Options.PreambleBytes.
func TestAnAppendLeavesTheRoomKeptForThePreamble(t *testing.T) {
	const preamble = 100
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1024, PreambleBytes: preamble})
	defer l.Close()
	max := 1024 - segment.HeaderSize - segment.Size(0) - preamble - segment.Size(0)
	_, err := l.Append(make([]byte, max+1))
	require.ErrorIs(t, err, ErrTooLarge)
	pos, err := l.Append(make([]byte, max))
	require.NoError(t, err)
	require.Len(t, pos, 1)
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	_, err := Open(dir, Options{})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
	l = mustOpen(t, dir, Options{})
	require.NoError(t, l.Close())
}

func TestOpenCreatesDirectoryAndFilesPrivately(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	appendRecords(t, l, 0, 1)
	require.NoError(t, l.Close())
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	fi, err = os.Stat(segFile(dir, 1))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.Equal(t, int64(4096), fi.Size(), "segments are allocated in full")
}

// An empty path is refused, not taken for the current directory.
func TestOpenRefusesAnEmptyPath(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	l, err := Open("", Options{})
	require.Nil(t, l)
	require.ErrorContains(t, err, "directory path is empty")
	entries, err := os.ReadDir(cwd)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing was written to the current directory")
}

func TestClosedLogRefusesCalls(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	require.NoError(t, l.Close())
	_, err := l.Append([]byte("x"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, l.Sync(), ErrClosed)
	_, err = l.RemoveBelow(l.End())
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, l.Close(), ErrClosed)
}

// Close: "Appends queued before Close are completed". Appends queued
// behind an fdatasync in flight when Close is called are written and
// synced, each Wait returning its positions, not ErrClosed.
func TestCloseCompletesQueuedAppends(t *testing.T) {
	t.Run("behind an fdatasync", func(t *testing.T) {
		dir := t.TempDir()
		h := newHoldSyncFS(vfs.Default)
		l := mustOpen(t, dir, Options{FS: h, SegmentBytes: 1 << 20})
		h.held.Store(1)
		first := l.Enqueue(true, record(0))
		<-h.entered // the writer is in the fdatasync
		var queued []*Pending
		for i := 1; i <= 6; i++ {
			queued = append(queued, l.Enqueue(i%2 == 0, record(i)))
		}
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		require.Eventually(t, l.isClosed, 10*time.Second, time.Millisecond, "Close marks the log closed")
		h.release <- nil
		acked := []entry{}
		pos, err := first.Wait()
		require.NoError(t, err)
		acked = append(acked, entry{pos[0], record(0)})
		for i, p := range queued {
			pos, err := p.Wait()
			require.NoError(t, err, "append %d, queued before Close", i+1)
			acked = append(acked, entry{pos[0], record(i + 1)})
		}
		require.NoError(t, <-closed)
		l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
		defer l.Close()
		require.Equal(t, acked, readAll(t, l))
	})
	t.Run("appending goroutines", testCloseCompletesAppendsOfGoroutines)
}

func testCloseCompletesAppendsOfGoroutines(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []entry
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				rec := record(g*1000 + i)
				pos, err := l.Append(rec)
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
				mu.Lock()
				acked = append(acked, entry{pos[0], rec})
				mu.Unlock()
			}
		}()
	}
	require.NoError(t, l.Close())
	wg.Wait()
	l = mustOpen(t, dir, Options{SegmentBytes: 8192})
	defer l.Close()
	got := map[Position]string{}
	for _, e := range readAll(t, l) {
		got[e.pos] = string(e.rec)
	}
	for _, e := range acked {
		require.Equal(t, string(e.rec), got[e.pos], "acknowledged record at %v", e.pos)
	}
}

func TestLeftoverTemporaryFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	want := appendRecords(t, l, 0, 5)
	require.NoError(t, l.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "0000000009.seg.tmp"), []byte("junk"), 0o600))
	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	requireEntries(t, want, readAll(t, l))
	names, _ := os.ReadDir(dir)
	for _, n := range names {
		require.False(t, strings.HasSuffix(n.Name(), "9.seg.tmp"), n.Name())
	}
}

// TestFilesNotNamedLikeASegmentAreNotPartOfTheLog: a segment's name is
// ten digits naming a sequence above 0, then ".seg"; Open neither reads
// nor removes a file whose name only looks like one.
func TestFilesNotNamedLikeASegmentAreNotPartOfTheLog(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	want := appendRecords(t, l, 0, 5)
	require.NoError(t, l.Close())
	strays := []string{"1.seg", "00000000001.seg", "0000000000.seg"}
	for _, name := range strays {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("not a segment"), 0o600))
	}
	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	requireEntries(t, want, readAll(t, l))
	require.Equal(t, 1, l.Recovery().Segments)
	for _, name := range strays {
		require.FileExists(t, filepath.Join(dir, name))
	}
}

func TestMissingSegmentIsCorruption(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1024})
	appendRecords(t, l, 0, 100)
	require.GreaterOrEqual(t, l.Stats().Segments, 3)
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(segFile(dir, 2)))
	_, err := Open(dir, Options{SegmentBytes: 1024})
	require.ErrorIs(t, err, ErrCorrupt)
	var ce *CorruptionError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, segFile(dir, 2), ce.File)
}

// A position the caller knows durable (Options.Durable, or Options.Verified:
// the broker's checkpoint) vouches for the segments up to its own as a
// clean mark does: when the segment it names is gone, after a crash that
// left no clean mark, its synced records are lost, and Open refuses the
// log naming the file, rather than make a new, empty segment under its
// number. So it does when every segment is gone.
func TestAMissingLastSegmentADurablePositionNamesIsRefused(t *testing.T) {
	for _, c := range []struct {
		hint string
		all  bool // every segment removed, not just the last
	}{{"Durable", false}, {"Verified", false}, {"Durable", true}, {"Verified", true}} {
		t.Run(fmt.Sprintf("%s/every segment gone %v", c.hint, c.all), func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			es := appendRecords(t, l, 0, 40)
			end := l.End()
			require.NoError(t, l.Close())
			require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // as after a crash
			last := es[len(es)-1].pos.Segment()
			require.Greater(t, last, uint32(1))
			require.Greater(t, end.Offset(), segment.HeaderSize)
			from := last
			if c.all {
				from = 1
			}
			for seq := from; seq <= last; seq++ {
				require.NoError(t, os.Remove(segFile(dir, seq)))
			}

			opts := Options{SegmentBytes: smallSeg}
			if c.hint == "Durable" {
				opts.Durable = end
			} else {
				opts.Verified = end
			}
			l, err := Open(dir, opts)
			if err == nil {
				got := readAll(t, l)
				rec := l.Recovery()
				require.NoError(t, l.Close())
				t.Fatalf("segment %d, durable to %v, is gone, yet Open succeeded with %d of %d records and recovery %+v",
					last, end, len(got), len(es), rec)
			}
			require.ErrorIs(t, err, ErrCorrupt)
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, segFile(dir, last), ce.File)
			require.Equal(t, end.Offset(), ce.Offset)
			_, err = os.Stat(segFile(dir, last))
			require.ErrorIs(t, err, os.ErrNotExist, "Open made no segment in the place of the missing one")

			// Salvage puts an empty segment in its place, reports the
			// loss, and appends after where the log was known durable.
			opts.Salvage = true
			l = mustOpen(t, dir, opts)
			defer l.Close()
			var kept []entry
			for _, e := range es {
				if e.pos.Segment() < from {
					kept = append(kept, e)
				}
			}
			requireEntries(t, kept, readAll(t, l))
			rec := l.Recovery()
			require.True(t, slices.ContainsFunc(rec.Salvaged, func(d Damage) bool { return d.File == segFile(dir, last) }),
				"the missing segment is reported: %v", rec.Salvaged)
			require.GreaterOrEqual(t, l.End(), end, "appends go on after where the log was known durable")
		})
	}
}

// dirSyncFS records the directories SyncDir was called for.
type dirSyncFS struct {
	vfs.FS
	mu   sync.Mutex
	dirs []string
}

func (s *dirSyncFS) SyncDir(dir string) error {
	s.mu.Lock()
	s.dirs = append(s.dirs, dir)
	s.mu.Unlock()
	return s.FS.SyncDir(dir)
}

// TestOpenMakesANewDirectoryDurable: the directory Open creates, and each
// missing parent, is synced into its own parent before anything is
// acknowledged in it; a power loss would otherwise take the whole log.
func TestOpenMakesANewDirectoryDurable(t *testing.T) {
	root := t.TempDir()
	fs := &dirSyncFS{FS: vfs.Default}
	dir := filepath.Join(root, "new", "log")
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 4096})
	defer l.Close()
	_, err := l.Append(record(1))
	require.NoError(t, err)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	require.Subset(t, fs.dirs, []string{root, filepath.Join(root, "new"), dir})
}

// TestAPowerLossKeepsANewLogsDirectory: the same, proved by a power loss
// (vfs.CrashFS follows the creation of directories): the clone of the
// synced state alone holds the new directories and the acknowledged record.
func TestAPowerLossKeepsANewLogsDirectory(t *testing.T) {
	root := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	dir := filepath.Join(root, "new", "log")
	l := mustOpen(t, dir, Options{FS: cfs, SegmentBytes: 4096})
	defer l.Close()
	pos, err := l.Append(record(1))
	require.NoError(t, err)
	requireAfterPowerLoss(t, cfs, root, pos[0])
}

// requireAfterPowerLoss checks that a power loss keeps record(1) at pos in
// the log at root/new/log.
func requireAfterPowerLoss(t *testing.T, cfs *vfs.CrashFS, root string, pos Position) {
	t.Helper()
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: root}))
	c := mustOpen(t, filepath.Join(clone, "new", "log"), Options{SegmentBytes: 4096})
	defer c.Close()
	got, err := c.Read(pos)
	require.NoError(t, err)
	require.Equal(t, record(1), got)
}

// TestAPowerLossKeepsALogsDirectoryAnInterruptedOpenMade: an Open that
// made the log's directories and died before the syncs that make their
// names durable leaves directories that exist but that a power loss takes
// away. The next Open finds them; it must make them durable before it
// acknowledges anything in them.
func TestAPowerLossKeepsALogsDirectoryAnInterruptedOpenMade(t *testing.T) {
	root := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	dir := filepath.Join(root, "new", "log")
	cfs.CrashAfter(1) // the MkdirAll happens, no sync after it
	_, err := Open(dir, Options{FS: cfs, SegmentBytes: 4096})
	require.ErrorIs(t, err, vfs.ErrCrashed)
	cfs.Restart() // the process starts again; the machine kept running
	l := mustOpen(t, dir, Options{FS: cfs, SegmentBytes: 4096})
	defer l.Close()
	pos, err := l.Append(record(1))
	require.NoError(t, err)
	requireAfterPowerLoss(t, cfs, root, pos[0])
}

// Stats.LargestSegment is the size of the largest segment file, which a
// log reopened with smaller segments keeps until its old ones are removed.
func TestStatsNameTheLargestSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 8192})
	appendRecords(t, l, 0, 10)
	require.EqualValues(t, 8192, l.Stats().LargestSegment)
	require.NoError(t, l.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: 2048})
	appendRecords(t, l, 10, 1000)
	st := l.Stats()
	require.Greater(t, st.Segments, 3, "the test needs segments of the new size")
	require.EqualValues(t, 8192, st.LargestSegment)
	require.NoError(t, l.Close())
}

// After Close, Stats describes the log as Close left it: its segment
// files as they are on disk, and every record appended, those Close
// completed included.
func TestStatsAfterCloseDescribeTheLogOnDisk(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	appendRecords(t, l, 0, 200)
	require.NoError(t, l.Close())
	st := l.Stats()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	var size int64
	for _, n := range names {
		fi, err := os.Stat(n)
		require.NoError(t, err)
		size += fi.Size()
	}
	require.Greater(t, len(names), 3)
	require.Equal(t, len(names), st.Segments)
	require.Equal(t, size, st.DiskBytes)
	require.EqualValues(t, 200, st.Records)
}
