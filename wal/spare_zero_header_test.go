package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
)

// A spare is never read as part of the log: its header is rewritten when
// it is reused, and the frames a retired segment left in it name another
// segment under another salt. So a spare whose header is zeros (all of it
// zeros, or a retired segment's frames behind a zeroed header) neither
// fails Open of a good log nor loses a record: Open keeps it (it has a
// segment's size), the rotations reuse it, and every record appended
// before and after reads back, across a reopen too.
func TestASpareWithAZeroedHeaderIsReusedAndLosesNothing(t *testing.T) {
	dir, acked, _ := buildLog(t)
	retired, err := os.ReadFile(segFile(dir, 1))
	require.NoError(t, err)
	require.Len(t, retired, smallSeg)
	copy(retired, make([]byte, segment.HeaderSize))
	spares := map[string][]byte{
		"spare-0000000097.tmp": make([]byte, smallSeg), // zeros throughout
		"spare-0000000098.tmp": retired,                // a retired segment, its header zeroed
	}
	for _, p := range spareFiles(t, dir) {
		require.NoError(t, os.Remove(filepath.Join(dir, p))) // the spares: only these
	}
	for name, data := range spares {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	requireEntries(t, acked, readAll(t, l))
	for name := range spares {
		require.FileExists(t, filepath.Join(dir, name), "Open kept the spare")
	}
	before := l.Stats().LastSegment
	for i := 0; l.Stats().LastSegment < before+3; i++ {
		acked = append(acked, appendRecords(t, l, 1000+i, 1)...)
	}
	require.EqualValues(t, 2, l.Stats().RecycledSegments, "the rotations reused both spares")
	for name := range spares {
		require.NoFileExists(t, filepath.Join(dir, name))
	}
	requireEntries(t, acked, readAll(t, l))
	require.NoError(t, l.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	defer l.Close()
	require.Nil(t, l.Recovery().TornTail, fmt.Sprintf("%v", l.Recovery().TornTail))
	requireEntries(t, acked, readAll(t, l))
}
