package wal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// CopyTo copies the log up to a position: the copy opens to exactly the
// records before it, across segments, with every segment at full size; and
// the log it was taken from goes on appending meanwhile.
func TestCopyToCopiesTheLogUpToAPosition(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2048}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	entries := appendRecords(t, l, 0, 200)
	require.Greater(t, l.Stats().Segments, 3)
	cut := 150
	end := entries[cut].pos // the copy holds the records before it
	dst := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, os.Mkdir(dst, 0o700))
	require.NoError(t, l.CopyTo(context.Background(), dst, end))
	appendRecords(t, l, 200, 10)

	names, err := os.ReadDir(dst)
	require.NoError(t, err)
	require.Len(t, names, int(end.Segment()-l.Stats().FirstSegment+1), "segments up to the position's")
	for _, n := range names {
		fi, err := n.Info()
		require.NoError(t, err)
		require.Equal(t, int64(2048), fi.Size(), n.Name())
	}
	c := mustOpen(t, dst, opts)
	defer c.Close()
	requireEntries(t, entries[:cut], readAll(t, c))
	require.Nil(t, c.Recovery().TornTail, "the copy ends cleanly")

	err = l.CopyTo(context.Background(), t.TempDir(), l.End()+1)
	require.ErrorContains(t, err, "past the log's end")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, l.CopyTo(canceled, t.TempDir(), end), context.Canceled)
}

// CopyTo refuses what would harm a log or make a copy that is no log, and
// writes nothing then: the log's own directory (under another name too),
// a directory that already holds a segment of the copy (another log's),
// an end that no frame starts at, a nil context, or an empty directory
// name (which would copy into the working directory).
func TestCopyToRefusesAndHarmsNothing(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	entries := appendRecords(t, l, 0, 5) // one segment: the copy would be a prefix write
	ctx := context.Background()

	err := l.CopyTo(ctx, dir, l.End())
	require.ErrorContains(t, err, "the log's own directory")
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	require.ErrorContains(t, l.CopyTo(ctx, link, l.End()), "the log's own directory")

	other := t.TempDir()
	o := mustOpen(t, other, opts)
	theirs := appendRecords(t, o, 100, 3)
	require.Error(t, l.CopyTo(ctx, other, l.End()), "the other log's segment is there")
	requireEntries(t, theirs, readAll(t, o))
	require.NoError(t, o.Close())

	seg := entries[0].pos.Segment()
	for _, end := range []Position{MakePosition(seg, 0), MakePosition(seg, 10), entries[3].pos + 3} {
		dst := t.TempDir()
		err := l.CopyTo(ctx, dst, end)
		require.ErrorIs(t, err, ErrNotFound, "end %v", end)
		require.ErrorContains(t, err, end.String())
		names, _ := os.ReadDir(dst)
		require.Empty(t, names, "end %v: nothing written", end)
	}
	var nilCtx context.Context
	require.ErrorContains(t, l.CopyTo(nilCtx, t.TempDir(), l.End()), "nil context")
	t.Chdir(t.TempDir())
	require.ErrorContains(t, l.CopyTo(ctx, "", l.End()), "the directory path is empty")
	names, _ := os.ReadDir(".")
	require.Empty(t, names, "nothing written in the working directory")

	requireEntries(t, entries, readAll(t, l))
	require.NoError(t, l.Close())
	reopened := mustOpen(t, dir, opts)
	defer reopened.Close()
	requireEntries(t, entries, readAll(t, reopened))
}

// A CopyTo that fails part way removes the files it wrote: the directory
// holds what it held before (here nothing but a file of the caller's), the
// same copy into it then succeeds, and the log is untouched. Each
// operation a copy makes into the directory (create, write, fdatasync,
// close, the directory's sync) is failed in turn, on the first and on a
// later segment, and a copy canceled between segments is undone too.
func TestAFailedCopyToRemovesWhatItWrote(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	opts := Options{FS: fs, SegmentBytes: 2048}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	entries := appendRecords(t, l, 0, 200)
	require.Greater(t, l.Stats().Segments, 3)
	end := entries[150].pos
	ctx := context.Background()

	var dst string
	inCopy := func(name string) bool { return strings.HasPrefix(name, dst) }
	requireOnlyTheCallersFile := func(what string) {
		t.Helper()
		names, err := os.ReadDir(dst)
		require.NoError(t, err)
		require.Len(t, names, 1, "%s: the copy's files are removed", what)
		require.Equal(t, "callers", names[0].Name(), what)
	}
	newDst := func() {
		dst = t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dst, "callers"), []byte("x"), 0o600))
	}
	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpClose, vfs.OpSyncDir} {
		for _, nth := range []int64{1, 3} {
			if op == vfs.OpSyncDir && nth > 1 {
				continue // the directory is synced once, at the end
			}
			what := fmt.Sprintf("%v #%d", op, nth)
			newDst()
			injected := fs.Injected(op)
			fs.Inject(vfs.Rule{Op: op, Match: inCopy, Nth: nth})
			err := l.CopyTo(ctx, dst, end)
			fs.Clear()
			require.ErrorIs(t, err, syscall.EIO, what)
			require.Equal(t, injected+1, fs.Injected(op), what)
			requireOnlyTheCallersFile(what)

			require.NoError(t, l.CopyTo(ctx, dst, end), "%s: the same copy again", what)
			c := mustOpen(t, dst, Options{SegmentBytes: 2048})
			requireEntries(t, entries[:150], readAll(t, c))
			require.NoError(t, c.Close())
		}
	}

	// Canceled after the first segment: the segment written is removed.
	newDst()
	cctx, cancel := context.WithCancel(ctx)
	fs.Observe(func(e vfs.Event) {
		if e.Op == vfs.OpClose && inCopy(e.Name) {
			cancel()
		}
	})
	require.ErrorIs(t, l.CopyTo(cctx, dst, end), context.Canceled)
	requireOnlyTheCallersFile("canceled")

	requireEntries(t, entries, readAll(t, l))
}

// TestCopyToRefusesAnEndPastASealedSegmentsFrames: in a segment that is
// not the last, an end one byte past its seal is no frame's start nor
// its frames' end, though it lies before the log's end: ErrNotFound, and
// nothing written.
func TestCopyToRefusesAnEndPastASealedSegmentsFrames(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1024})
	defer l.Close()
	appendRecords(t, l, 0, 40)
	sealed := l.Sealed()
	require.Contains(t, sealed, uint32(1))
	ctx := context.Background()

	past := MakePosition(1, sealed[1]+1)
	require.Less(t, past, l.End())
	dst := t.TempDir()
	err := l.CopyTo(ctx, dst, past)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, past.String())
	names, err := os.ReadDir(dst)
	require.NoError(t, err)
	require.Empty(t, names, "nothing written")

	require.NoError(t, l.CopyTo(ctx, dst, MakePosition(1, sealed[1])), "the segment's own end")
}

// TestCopyToRefusesAnEndInsideAnAppend: the position of a record of one
// Append after its first (a position Append returned) is where a frame
// starts, but a copy ending there would hold part of the Append, which a
// log holds whole or not at all. CopyTo took it, found the copy's last
// group cut short and reported the healthy log as corrupt. It is an end
// CopyTo cannot take: ErrNotFound naming it, and nothing written. The
// positions around the Append are taken.
func TestCopyToRefusesAnEndInsideAnAppend(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	l := mustOpen(t, dir, opts)
	defer l.Close()
	before := appendRecords(t, l, 0, 2)
	pos, err := l.Append(record(2), record(3), record(4))
	require.NoError(t, err)
	after := appendRecords(t, l, 5, 1)
	ctx := context.Background()

	for _, end := range pos[1:] {
		dst := t.TempDir()
		err := l.CopyTo(ctx, dst, end)
		require.ErrorIs(t, err, ErrNotFound, "end %v", end)
		require.NotErrorIs(t, err, ErrCorrupt, "end %v: the log is healthy", end)
		require.ErrorContains(t, err, end.String())
		names, err := os.ReadDir(dst)
		require.NoError(t, err)
		require.Empty(t, names, "end %v: nothing written", end)
	}

	for _, c := range []struct {
		end  Position
		want []entry
	}{
		{pos[0], before},
		{after[0].pos, append(before, entry{pos[0], record(2)}, entry{pos[1], record(3)}, entry{pos[2], record(4)})},
	} {
		dst := t.TempDir()
		require.NoError(t, l.CopyTo(ctx, dst, c.end), "end %v", c.end)
		copied := mustOpen(t, dst, opts)
		requireEntries(t, c.want, readAll(t, copied))
		require.NoError(t, copied.Close())
	}
}

// CopyTo verifies what it copies: a byte flipped in a sealed segment (which
// Open would not read again when a checkpoint covers it), or in the part
// of the last segment before end, is a *CorruptionError naming that file
// and the damaged frame, and the copy writes nothing.
func TestCopyToRefusesADamagedSegment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		which func(l *Log) uint32 // the segment damaged
	}{
		{"sealed", func(l *Log) uint32 { return l.Stats().FirstSegment + 1 }},
		{"the last copied", func(l *Log) uint32 { return l.End().Segment() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: 2048})
			defer l.Close()
			entries := appendRecords(t, l, 0, 200)
			require.Greater(t, l.Stats().Segments, 3)
			seg := tc.which(l)
			var at Position
			for _, e := range entries {
				if e.pos.Segment() == seg {
					at = e.pos // a record of that segment: flip a byte of its frame
					break
				}
			}
			require.NotZero(t, at)
			path := filepath.Join(dir, segName(seg))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			b := make([]byte, 1)
			_, err = f.ReadAt(b, int64(at.Offset())+20)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte{b[0] ^ 0x40}, int64(at.Offset())+20)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			requireCopyRefused(t, l, path, at.Offset(), "the damaged frame")
		})
	}
}

// A segment whose frames stop short, zeros where its last ones were (a
// write the device lost, read back as never written), scans to a clean
// end: CopyTo still refuses it, since a sealed segment must end in its
// seal and the last one must reach the copy's end. The *CorruptionError
// names the file and where its frames stop, and the copy writes nothing.
func TestCopyToRefusesASegmentCutShort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		which func(l *Log) uint32 // the segment cut short
		cause string
	}{
		{"sealed", func(l *Log) uint32 { return l.Stats().FirstSegment + 1 }, "without its seal"},
		{"the last copied", func(l *Log) uint32 { return l.End().Segment() }, "before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: 2048})
			defer l.Close()
			entries := appendRecords(t, l, 0, 200)
			require.Greater(t, l.Stats().Segments, 3)
			seg := tc.which(l)
			var at Position
			for _, e := range entries {
				if e.pos.Segment() == seg && e.pos.Offset() > at.Offset() {
					at = e.pos // the segment's last record: zero it and what follows
				}
			}
			require.NotZero(t, at)
			path := filepath.Join(dir, segName(seg))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			info, err := f.Stat()
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, info.Size()-int64(at.Offset())), int64(at.Offset()))
			require.NoError(t, err)
			require.NoError(t, f.Close())

			err = requireCopyRefused(t, l, path, at.Offset(), "where the frames stop")
			require.ErrorContains(t, err, tc.cause)
		})
	}
}

// requireCopyRefused requires CopyTo of all of l to fail with a
// *CorruptionError naming path and offset (what the offset is: what), and
// to leave nothing of the copy. It returns the error.
func requireCopyRefused(t *testing.T, l *Log, path string, offset int, what string) error {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, os.Mkdir(dst, 0o700))
	err := l.CopyTo(context.Background(), dst, l.End())
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, path, ce.File)
	require.Equal(t, offset, ce.Offset, what)
	names, rerr := os.ReadDir(dst)
	require.NoError(t, rerr)
	require.Empty(t, names, "nothing is left of the copy")
	return err
}
