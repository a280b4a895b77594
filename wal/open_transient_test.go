package wal

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// An I/O error during Open fails it, naming the file and the cause, and
// changes nothing a later Open needs: only a file that is not there, or
// that is verified damaged, takes the branch that repairs or drops it.

// snapshotFiles returns the contents of the regular files of dir, by name.
func snapshotFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == lockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

// TestAnErrorReadingTheCleanMarkFailsOpenAndZeroesNothing: the clean mark
// says where the log ended at its last Close, so damage before that end is
// damage to synced records, which Open refuses. One transient EIO opening
// or reading the mark made Open take it for no mark: the damaged last
// record read as a torn tail, was zeroed (no copy kept), and the mark
// removed, so the records were gone without a word. Open now fails naming
// the mark and the EIO, and leaves every file as it was: a fault-free Open
// then refuses the damage, and Salvage reports it.
func TestAnErrorReadingTheCleanMarkFailsOpenAndZeroesNothing(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpRead} {
		t.Run(op.String(), func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
			es := appendRecords(t, l, 0, 5)
			require.NoError(t, l.Close())
			last := es[len(es)-1].pos
			flipByte(t, segFile(dir, last.Segment()), last.Offset()+segment.FrameHeaderSize)
			before := snapshotFiles(t, dir)
			require.Contains(t, before, cleanName)

			ffs := vfs.NewFaultFS(vfs.Default)
			ffs.Inject(vfs.Rule{Op: op, NameContains: cleanName, Nth: 1, Err: syscall.EIO})
			l, err := Open(dir, Options{SegmentBytes: 1 << 20, FS: ffs})
			require.Equal(t, int64(1), ffs.Injected(op), "the fault was met")
			if err == nil {
				got := readAll(t, l)
				_ = l.Close()
				t.Fatalf("Open succeeded after an EIO on the clean mark, and the log holds %d of %d records", len(got), len(es))
			}
			require.ErrorIs(t, err, syscall.EIO)
			require.ErrorContains(t, err, filepath.Join(dir, cleanName))
			require.Equal(t, before, snapshotFiles(t, dir), "the failed Open changed the log's files")

			_, err = Open(dir, Options{SegmentBytes: 1 << 20})
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce, "the damage to a synced record is still refused")
			l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20, Salvage: true})
			defer l.Close()
			require.Len(t, l.Recovery().Salvaged, 1, "Salvage reports the damaged record")
			requireEntries(t, es[:len(es)-1], readAll(t, l))
		})
	}
}

// A clean mark that is damaged (cut short) is still no mark: Open reads
// the whole tail, as before.
func TestACleanMarkCutShortIsNoMark(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	es := appendRecords(t, l, 0, 10)
	require.NoError(t, l.Close())
	require.NoError(t, os.Truncate(filepath.Join(dir, cleanName), 5))
	_, ok, err := readCleanMark(vfs.Default, dir)
	require.NoError(t, err)
	require.False(t, ok)
	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	defer l.Close()
	requireEntries(t, es, readAll(t, l))
}

// TestSalvageOfADamagedHeaderFailsOnAnErrorReopeningTheSegment: Salvage
// rewrites a segment header that fails its checks and keeps every record
// after it (the frames name their segment). Its reopen of the file took
// any error for a file too short for a header: one transient EIO there
// replaced the segment by an empty one (salvageStub), and every intact
// record in it was reported lost. Only a file too short for a header
// (segment.ErrBadHeader from a file opened unread) goes that way now; the
// EIO fails Open naming the file, with the segment as it was, and the
// fault-free Salvage that follows loses nothing.
func TestSalvageOfADamagedHeaderFailsOnAnErrorReopeningTheSegment(t *testing.T) {
	dir, acked, _ := buildLog(t)
	path := segFile(dir, 2)
	flipByte(t, path, 3)
	damaged, err := os.ReadFile(path)
	require.NoError(t, err)

	ffs := vfs.NewFaultFS(vfs.Default)
	// The scan opens the segment (bad header), then salvageHeader again.
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, Match: func(n string) bool { return n == path }, Nth: 2, Err: syscall.EIO})
	l, err := Open(dir, Options{SegmentBytes: smallSeg, Salvage: true, FS: ffs})
	require.Equal(t, int64(1), ffs.Injected(vfs.OpOpen), "the fault was met")
	if err == nil {
		got := readAll(t, l)
		rec := l.Recovery()
		_ = l.Close()
		t.Fatalf("Salvage succeeded after an EIO reopening the segment whose header it repairs: %d of %d records, salvaged %v", len(got), len(acked), rec.Salvaged)
	}
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, path)
	now, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, damaged, now, "the segment was replaced")

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	defer l.Close()
	requireEntries(t, acked, readAll(t, l))
}
