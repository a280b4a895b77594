package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Verified position that is no frame boundary costs a full scan, never a
// record: nothing follows it, and the byte before it (inside the last
// record's body, not zero) proves nothing. Were the scan from it taken as
// the log's end, the writer would append there, over the acknowledged
// record.
func TestVerifiedInsideTheLastRecordLosesNothing(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 16}
	l := mustOpen(t, dir, opts)
	want := appendRecords(t, l, 0, 5)
	want = append(want, appendRecords(t, l, 36, 1)...) // a 48-byte body, 'a'..'j' after the prefix
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // as after a crash

	last := want[len(want)-1].pos
	v := last + 17 + 20 // inside the last record's body, after a nonzero byte
	l, err := Open(dir, Options{SegmentBytes: 1 << 16, Verified: v})
	require.NoError(t, err)
	more := appendRecords(t, l, 100, 1)
	got := readAll(t, l)
	require.NoError(t, l.Close())
	requireEntries(t, append(append([]entry(nil), want...), more...), got)
}

// A Verified position past the last frame is damage to synced records,
// refused, in a recycled segment too: the bytes past its frames are a
// retired segment's, not zeros. Were it taken, the writer would go on at
// it after a gap of stale bytes, and the next Open refuse the log.
func TestVerifiedPastTheFramesOfARecycledSegmentIsRefused(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1024}
	l := mustOpen(t, dir, opts)
	appendRecords(t, l, 0, 60)
	_, err := l.RemoveBelow(l.End())
	require.NoError(t, err)
	// Append until the active segment is a retired file reused.
	i := 60
	for l.Stats().RecycledSegments == 0 {
		require.Less(t, i, 400, "no segment was recycled")
		appendRecords(t, l, i, 1)
		i++
	}
	end := l.End()
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // as after a crash

	data, err := os.ReadFile(segFile(dir, end.Segment()))
	require.NoError(t, err)
	// A position in the retired segment's stale bytes whose byte before
	// it is not zero (frame headers hold zero bytes: which retired file
	// the rotation reused, and so what lies where, depends on timing).
	v := end.Offset() + 300
	for v < len(data) && data[v-1] == 0 {
		v++
	}
	require.Less(t, v, len(data), "stale bytes of the retired segment past %d", end.Offset()+300)

	l, err = Open(dir, Options{SegmentBytes: 1024, Verified: MakePosition(end.Segment(), v)})
	if err == nil {
		appendRecords(t, l, 1000, 1)
		require.NoError(t, l.Close())
		_, rerr := Open(dir, opts)
		t.Logf("the next Open without the hint: %v", rerr)
	}
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce, "Verified %d past the frames' end %d", v, end.Offset())
	require.Equal(t, end.Offset(), ce.Offset)
}

// A Verified position past where a clean Close says the log ended is
// refused too: one of the two is wrong, and frames ending before a
// position the caller verified are damage to synced records.
func TestVerifiedPastACleanEndIsRefused(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	appendRecords(t, l, 0, 3)
	end := l.End()
	require.NoError(t, l.Close())

	l, err := Open(dir, Options{SegmentBytes: 4096, Verified: MakePosition(end.Segment(), 2000)})
	if err == nil {
		require.NoError(t, l.Close())
	}
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce, "Verified 2000 past the clean end %d", end.Offset())
}
