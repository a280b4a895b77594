package wal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
