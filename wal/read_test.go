package wal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryCallOnAClosedLogIsErrClosed: ErrClosed "is returned by every
// call on a closed Log", reads and empty appends included (a closed log's
// reads must not pass for an empty log or a missing record).
func TestEveryCallOnAClosedLogIsErrClosed(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	es := appendRecords(t, l, 0, 3)
	require.NoError(t, l.Close())

	_, err := l.Read(es[0].pos)
	require.ErrorIs(t, err, ErrClosed, "Read")
	require.ErrorIs(t, l.View(es[1].pos, func([]byte) error { return nil }), ErrClosed, "View")
	n := 0
	require.ErrorIs(t, l.Iterate(0, func(Position, []byte) error { n++; return nil }), ErrClosed, "Iterate")
	require.Zero(t, n)
	_, err = l.Append()
	require.ErrorIs(t, err, ErrClosed, "Append of nothing")
	_, err = l.Append(record(9))
	require.ErrorIs(t, err, ErrClosed, "Append")
	_, err = l.AppendWritten(record(9))
	require.ErrorIs(t, err, ErrClosed, "AppendWritten")
	require.ErrorIs(t, l.Sync(), ErrClosed, "Sync")
	require.ErrorIs(t, l.Barrier(false), ErrClosed, "Barrier")
	_, err = l.RemoveBelow(es[2].pos)
	require.ErrorIs(t, err, ErrClosed, "RemoveBelow")
	require.ErrorIs(t, l.Close(), ErrClosed, "Close")
}

// TestIterateFromNoRecordBoundary: a starting position inside a record is
// a bad argument, ErrNotFound naming the position, not a corrupt log; the
// positions Iterate accepts still work.
func TestIterateFromNoRecordBoundary(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	es := appendRecords(t, l, 0, 3)
	none := func(Position, []byte) error { return nil }

	err := l.Iterate(es[1].pos+5, none)
	require.ErrorIs(t, err, ErrNotFound)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, (es[1].pos + 5).String())

	var got []entry
	require.NoError(t, l.Iterate(es[1].pos, func(p Position, r []byte) error {
		got = append(got, entry{p, append([]byte(nil), r...)})
		return nil
	}))
	requireEntries(t, es[1:], got)
	require.NoError(t, l.Iterate(l.End(), func(Position, []byte) error {
		t.Fatal("a record past the end")
		return nil
	}))
}
