package wal

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// An EIO from the fdatasync that makes the zeroing of a torn tail durable
// fails Open, naming the cause; and an Open tried again in the same boot
// must not misread the log. On Linux the failed writeback leaves the
// zeros in the page cache, marked clean, while the device keeps the torn
// batch: the retry reads zeros there, finds no torn tail and zeroes
// nothing, and its appends go over the torn batch in the page cache
// only. Here the torn batch is a lost record and the intact one after it,
// which begins a page; the retry appends a record where the lost one
// was, ending where the intact leftover begins. After a power loss the
// leftover, which nothing wrote again, was read back as the record after
// the new one: a record nobody was told was written.
func TestAnEIOZeroingATornTailThenARetryInTheSameBootMisreadsNothing(t *testing.T) {
	const segBytes = 64 << 10
	const page = 4096
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	l := mustOpen(t, dir, Options{FS: cfs, SegmentBytes: segBytes})
	durable := appendRecords(t, l, 0, 1)
	at := durable[0].pos.Offset() + segment.Size(len(durable[0].rec))
	lost := bytes.Repeat([]byte("x"), page-at-segment.FrameHeaderSize) // ends where a page begins
	left := bytes.Repeat([]byte("y"), 700)
	lostPos, err := l.AppendWritten(lost)
	require.NoError(t, err)
	leftPos, err := l.AppendWritten(left)
	require.NoError(t, err)
	require.Equal(t, page, leftPos[0].Offset(), "the leftover begins a page")

	first, path := cloneLosingRecord(t, cfs, l, dir, lostPos[0], len(lost))

	// The fdatasync of the zeroed tail fails.
	ffs := vfs.NewFaultFS(vfs.Default)
	cfs = vfs.NewCrashFS(ffs) // the fdatasync fails below the page-cache model
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, Match: firstSegment, Nth: 1, Err: syscall.EIO})
	_, err = Open(first, Options{FS: cfs, SegmentBytes: segBytes})
	require.Equal(t, int64(1), ffs.Injected(vfs.OpSync), "the fault was met")
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, "torn tail")
	require.ErrorContains(t, err, path)
	ffs.Clear()

	// Tried again in the same boot: the page cache shows the zeros.
	l = mustOpen(t, first, Options{FS: cfs, SegmentBytes: segBytes})
	requireEntries(t, durable, readAll(t, l))
	requireLostPlaceRefilled(t, cfs, l, first, lostPos[0], len(lost), segBytes, durable)
}
