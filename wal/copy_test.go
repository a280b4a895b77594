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

// CopyTo refuses what would harm a log or make a copy that is no log, and
// writes nothing then: the log's own directory (under another name too),
// a directory that already holds a segment of the copy (another log's),
// an end that no frame starts at, or a nil context.
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

	requireEntries(t, entries, readAll(t, l))
	require.NoError(t, l.Close())
	reopened := mustOpen(t, dir, opts)
	defer reopened.Close()
	requireEntries(t, entries, readAll(t, reopened))
}
