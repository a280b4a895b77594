package wal

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
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
	require.ErrorIs(t, l.CopyTo(context.Background(), t.TempDir(), es[2].pos), ErrClosed, "CopyTo")
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
	require.NoError(t, l.Iterate(MakePosition(es[0].pos.Segment(), 0), none), "a segment's start")

	for _, from := range []Position{
		MakePosition(es[0].pos.Segment(), 1),                    // in the header
		MakePosition(es[0].pos.Segment(), segment.HeaderSize-1), // in the header
		l.End() + 1,   // a byte past the records
		l.End() + 100, // past the records
		MakePosition(l.End().Segment()+1, segment.HeaderSize), // past the last segment
		MakePosition(l.End().Segment()+900, 0),                // far past it
	} {
		err := l.Iterate(from, func(Position, []byte) error {
			t.Fatalf("from %v: a record", from)
			return nil
		})
		require.ErrorIs(t, err, ErrNotFound, "from %v", from)
		require.ErrorContains(t, err, from.String())
	}
}

// A nil function is an error that says so, not a panic.
func TestViewAndIterateRefuseANilFunction(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	es := appendRecords(t, l, 0, 1)
	require.ErrorContains(t, l.View(es[0].pos, nil), "nil function")
	require.ErrorContains(t, l.Iterate(0, nil), "nil function")
}

// Read and View return records only: the position of a seal frame, or of
// a segment just past the last one, names no record and is ErrNotFound.
func TestReadRefusesSealsAndTheSegmentAfterTheLast(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1024})
	defer l.Close()
	appendRecords(t, l, 0, 40)
	sealed := l.Sealed()
	require.NotEmpty(t, sealed)
	for seq, end := range sealed {
		seal := MakePosition(seq, end-segment.Size(0))
		_, err := l.Read(seal)
		require.ErrorIs(t, err, ErrNotFound, "the seal of segment %d", seq)
		require.ErrorIs(t, l.View(seal, func([]byte) error { return nil }), ErrNotFound)
	}
	next := MakePosition(l.End().Segment()+1, segment.HeaderSize)
	_, err := l.Read(next)
	require.ErrorIs(t, err, ErrNotFound, "the segment after the last")
}

// Iterate verifies what it reads: a record that fails its checksum in a
// segment Open did not scan (Options.Sealed vouched for it) stops the walk
// with a *CorruptionError naming the file and offset, also when the walk
// started at a record before it in the same segment.
func TestIterateReportsADamagedRecordAsCorruption(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	es := appendRecords(t, l, 0, 60)
	sealed := l.Sealed()
	require.NoError(t, l.Close())
	victim := es[3]
	require.Contains(t, sealed, victim.pos.Segment())
	require.Equal(t, victim.pos.Segment(), es[1].pos.Segment())
	path := segFile(dir, victim.pos.Segment())
	flipByte(t, path, victim.pos.Offset()+segment.FrameHeaderSize)

	l = mustOpen(t, dir, Options{SegmentBytes: 2048, Sealed: sealed})
	defer l.Close()
	for _, from := range []Position{0, es[1].pos} {
		var got []entry
		err := l.Iterate(from, func(p Position, rec []byte) error {
			got = append(got, entry{p, append([]byte(nil), rec...)})
			return nil
		})
		var ce *CorruptionError
		require.ErrorAs(t, err, &ce, "from %v", from)
		require.NotErrorIs(t, err, ErrNotFound)
		require.Equal(t, path, ce.File)
		require.Equal(t, victim.pos.Offset(), ce.Offset)
		require.Equal(t, victim.pos, got[len(got)-1].pos+Position(segment.Size(len(got[len(got)-1].rec))), "the walk stops at the damaged record")
	}
}
