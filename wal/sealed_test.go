package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// Sealed segments named in Options.Sealed are not scanned at open: only
// their seal frame is checked, and their records are verified when read.
func TestSealedHintSkipsTheScanOfSealedSegments(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	want := appendRecords(t, l, 0, 120)
	sealed := l.Sealed()
	segs := l.Stats().Segments
	require.Len(t, sealed, segs-1, "every segment but the active one")
	require.NoError(t, l.Close())

	full := mustOpen(t, dir, Options{SegmentBytes: 2048})
	all := full.Recovery().Records
	require.Equal(t, sealed, full.Sealed(), "open finds the ends Sealed reported")
	require.NoError(t, full.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: 2048, Sealed: sealed})
	require.Less(t, l.Recovery().Records, all, "the hinted segments were not scanned")
	requireEntries(t, want, readAll(t, l))
	require.NoError(t, l.Close())

	// A hint the file cannot hold is ignored.
	bad := map[uint32]int{}
	for seq := range sealed {
		bad[seq] = 2048 + 1
	}
	l = mustOpen(t, dir, Options{SegmentBytes: 2048, Sealed: bad})
	require.Equal(t, all, l.Recovery().Records)
	require.NoError(t, l.Close())

	// Damage in a hinted segment is found when the record is read; a
	// scan (no hint) refuses the log at open.
	f, err := os.OpenFile(l.segPath(want[3].pos.Segment()), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xee}, int64(want[3].pos.Offset())+20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	l = mustOpen(t, dir, Options{SegmentBytes: 2048, Sealed: sealed})
	_, err = l.Read(want[3].pos)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "checksum")
	require.NoError(t, l.Close())
	_, err = Open(dir, Options{SegmentBytes: 2048})
	require.ErrorIs(t, err, ErrCorrupt)
}

// With a verified position in the last segment, Open scans only the tail
// after it; a tail that is torn after it is still repaired, and a bogus
// position (not a frame boundary) falls back to the whole scan.
func TestVerifiedPositionScansOnlyTheTail(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	want := appendRecords(t, l, 0, 50)
	verified := l.End()
	more := appendRecords(t, l, 50, 5)
	require.NoError(t, l.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20, Verified: verified})
	require.Zero(t, l.Recovery().Records, "records before the verified position are not counted")
	requireEntries(t, append(want, more...), readAll(t, l))
	require.NoError(t, l.Close())

	// Tear the last record, as a crash would (which leaves no clean
	// mark): the tail scan finds it and repairs it.
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
	last := more[len(more)-1].pos
	f, err := os.OpenFile(l.segPath(last.Segment()), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 8), int64(last.Offset())+20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20, Verified: verified})
	require.NotNil(t, l.Recovery().TornTail)
	requireEntries(t, append(want, more[:4]...), readAll(t, l))
	require.NoError(t, l.Close())

	// A position inside a record is no boundary: the whole segment is
	// scanned, and nothing is lost.
	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20, Verified: want[10].pos + 3})
	require.Equal(t, 54, l.Recovery().Records)
	requireEntries(t, append(want, more[:4]...), readAll(t, l))
	require.NoError(t, l.Close())
}

// Close leaves a clean mark with the log's end, and the next Open scans the
// last segment only up to it; Open removes the mark before anything is
// appended. Without the mark, Open must read the rest of the segment, where
// a valid frame claiming synced data beyond the end means corruption.
func TestCleanMarkBoundsTheScanOfTheLastSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	want := appendRecords(t, l, 0, 20)
	end := l.End()
	require.NoError(t, l.Close())
	_, err := os.Stat(filepath.Join(dir, cleanName))
	require.NoError(t, err, "Close wrote the mark")

	// A frame of this segment past the end that claims a synced offset
	// beyond it: a full scan must call that corruption.
	stray := segment.AppendFrame(nil, end.Segment(), saltOfFile(t, l.segPath(end.Segment())), uint32(end.Offset()+8192), segment.KindRecord, segment.Full, []byte("stray"))
	f, err := os.OpenFile(l.segPath(end.Segment()), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(stray, int64(end.Offset()+4096))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	l = mustOpen(t, dir, Options{SegmentBytes: 1 << 20})
	_, err = os.Stat(filepath.Join(dir, cleanName))
	require.ErrorIs(t, err, os.ErrNotExist, "Open removed the mark")
	requireEntries(t, want, readAll(t, l))
	require.Equal(t, end, l.End())
	more := appendRecords(t, l, 20, 1)
	require.Equal(t, end, more[0].pos, "the log goes on from the mark")
	require.NoError(t, l.Close())

	// Without a mark the whole segment is read.
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
	f, err = os.OpenFile(l.segPath(end.Segment()), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(segment.AppendFrame(nil, end.Segment(), saltOfFile(t, l.segPath(end.Segment())), uint32(end.Offset()+8192), segment.KindRecord, segment.Full, []byte("stray")), int64(end.Offset()+8192))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Open(dir, Options{SegmentBytes: 1 << 20})
	require.ErrorIs(t, err, ErrCorrupt)
}

// A segment cut to fewer bytes than a header is refused, and salvaged as
// an empty segment: the records of every other segment are kept.
func TestSalvageReplacesASegmentCutBelowItsHeader(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	want := appendRecords(t, l, 0, 200)
	require.GreaterOrEqual(t, l.Stats().Segments, 4)
	require.NoError(t, l.Close())
	require.NoError(t, os.Truncate(l.segPath(2), 0))

	_, err := Open(dir, Options{SegmentBytes: 2048})
	require.ErrorIs(t, err, ErrCorrupt)
	l = mustOpen(t, dir, Options{SegmentBytes: 2048, Salvage: true})
	var kept []entry
	for _, e := range want {
		if e.pos.Segment() != 2 {
			kept = append(kept, e)
		}
	}
	requireEntries(t, kept, readAll(t, l))
	require.NotEmpty(t, l.Recovery().Salvaged)
	require.Equal(t, uint32(2), l.Recovery().Salvaged[0].Segment)
	more := appendRecords(t, l, 100, 3)
	require.NoError(t, l.Close())
	l = mustOpen(t, dir, Options{SegmentBytes: 2048})
	requireEntries(t, append(kept, more...), readAll(t, l))
	require.NoError(t, l.Close())
}

// TestVerifiedPositionPastTheEndIsRefused: a verified position in the
// zero-filled space past the last frame would have the writer go on
// there, after a gap that the next Open reads as corruption. With nothing
// after it, Open scans the whole segment instead,
// finds the frames ending before the position it was told was durable,
// and refuses the log now, naming both; without the wrong hint the log
// opens whole.
func TestVerifiedPositionPastTheEndIsRefused(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	es := appendRecords(t, l, 0, 3)
	end := l.End()
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // as after a crash

	_, err := Open(dir, Options{SegmentBytes: 4096, Verified: MakePosition(end.Segment(), 2000)})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, end.Offset(), ce.Offset)
	require.ErrorContains(t, err, "durable to offset 2000")

	l = mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	requireEntries(t, es, readAll(t, l))
	require.Equal(t, end, l.End())
}

// Options.Sealed spares every segment but the last: a hint that names the
// last segment does not keep Open from checking its header.
func TestSealedHintDoesNotSpareTheLastSegmentsHeader(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 2048})
	appendRecords(t, l, 0, 60)
	sealed := l.Sealed()
	last := l.Stats().LastSegment
	require.NoError(t, l.Close())
	sealed[last] = 2048 // a hint for the last segment too

	f, err := os.OpenFile(segFile(dir, last), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xee}, 3)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, err = Open(dir, Options{SegmentBytes: 2048, Sealed: sealed})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, segFile(dir, last), ce.File)
	require.ErrorIs(t, err, segment.ErrBadHeader)
}

// TestAWrongSealedHintMakesIterateFailNotSkipRecords: Options.Sealed "naming
// a wrong end makes reads near it fail, never succeed wrongly". A hint that
// ends a sealed segment where one of its records ends, before the seal,
// made Iterate stop there and go on with the next segment: it succeeded
// without the records in between. Walking such a segment must fail with a
// *CorruptionError naming it, wherever the walk starts in it.
func TestAWrongSealedHintMakesIterateFailNotSkipRecords(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1024}
	l := mustOpen(t, dir, opts)
	es := appendRecords(t, l, 0, 60)
	sealed := l.Sealed()
	require.NoError(t, l.Close())
	var first []entry // segment 1's records
	for _, e := range es {
		if e.pos.Segment() == 1 {
			first = append(first, e)
		}
	}
	require.Greater(t, len(first), 4)
	require.Greater(t, es[len(es)-1].pos.Segment(), uint32(1), "the test needs two segments")
	lastEnd := sealed[1] - segment.Size(0) // where segment 1's last record ends

	for _, c := range []struct {
		name string
		end  int      // the hint for segment 1
		from Position // where Iterate starts
	}{
		{"a record boundary, from the start", first[3].pos.Offset(), 0},
		{"a record boundary, from before it", first[3].pos.Offset(), first[1].pos},
		{"a record boundary, from it", first[3].pos.Offset(), first[3].pos},
		{"the end of the last record, from the start", lastEnd, 0},
		{"the end of the last record, from it", lastEnd, MakePosition(1, lastEnd)},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts.Sealed = map[uint32]int{1: c.end}
			l := mustOpen(t, dir, opts)
			defer l.Close()
			n := 0
			err := l.Iterate(c.from, func(Position, []byte) error { n++; return nil })
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce, "Iterate saw %d records and succeeded", n)
			require.Equal(t, segFile(dir, 1), ce.File)
			require.ErrorContains(t, err, "seal")
		})
	}

	opts.Sealed = sealed // the right hint reads every record
	l = mustOpen(t, dir, opts)
	defer l.Close()
	requireEntries(t, es, readAll(t, l))
}
