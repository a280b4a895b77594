package wal

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestALeftoverFileAtThePreparedNameDoesNotCostTheSpare: a file an
// earlier attempt at a segment left under its temporary name (a rename
// into place that failed, then its removal) made segment.Recycle refuse
// the spare before changing anything, and the preparer then removed the
// spare as one that could not be reused, and wrote a new file's zeros.
// The leftover is removed, once, and the spare reused, as a new file is
// made when the leftover is in the way of one.
func TestALeftoverFileAtThePreparedNameDoesNotCostTheSpare(t *testing.T) {
	dir, acked, _ := buildLog(t)
	spares := spareFiles(t, dir)
	require.NotEmpty(t, spares, "Close keeps the prepared segment as a spare")

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	defer l.Close()
	next := l.Stats().LastSegment + 1
	leftover := segFile(dir, next) + tmpSuffix
	require.NoError(t, os.WriteFile(leftover, []byte("left by an earlier rotation"), 0o600))
	for i := 0; l.Stats().LastSegment < next; i++ {
		acked = append(acked, appendRecords(t, l, 1000+i, 1)...)
	}
	require.EqualValues(t, 1, l.Stats().RecycledSegments, "segment %d was not made from the spare", next)
	require.Len(t, spareFiles(t, dir), len(spares)-1)
	require.NoFileExists(t, leftover)
	requireEntries(t, acked, readAll(t, l))
}
