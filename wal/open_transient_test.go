package wal

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// An I/O error during Open fails it, naming the file and the cause, and
// changes nothing a later Open needs: only a file that is not there, or
// that is verified damaged, takes the branch that repairs or drops it.

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
