package wal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// Salvage keeps every intact record and skips only damaged spans. In a
// sealed segment whose frames were never synced before the seal
// (SyncNever), damage to a frame reads as a torn tail (no later frame
// claims it durable); salvage steps over each such damage in turn, not
// over the first alone, which would seal the segment early at the second
// and lose every record between it and the seal.
func TestSalvageStepsOverEveryTornLookingDamageOfASealedSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Sync: SyncNever})
	es := appendRecords(t, l, 0, 60)
	require.GreaterOrEqual(t, l.Stats().Segments, 3)
	require.NoError(t, l.Close())
	var seg1 []entry
	for _, e := range es {
		if e.pos.Segment() == 1 {
			seg1 = append(seg1, e)
		}
	}
	require.GreaterOrEqual(t, len(seg1), 8)
	a, b := seg1[2], seg1[5]
	path := segFile(dir, 1)
	flipByte(t, path, a.pos.Offset()+segment.FrameHeaderSize+1)
	flipByte(t, path, b.pos.Offset()+segment.FrameHeaderSize+1)

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	defer l.Close()
	var want []entry
	for _, e := range es {
		if e.pos != a.pos && e.pos != b.pos {
			want = append(want, e)
		}
	}
	for _, d := range l.Recovery().Salvaged {
		t.Logf("salvaged: %v", d)
	}
	requireEntries(t, want, readAll(t, l))
}

// Recovery.Salvaged names, for each span, what failed in it, not the last
// failure the scan met in the segment.
func TestEachSalvagedSpanHasItsOwnCause(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
	es := appendRecords(t, l, 0, 60)
	require.NoError(t, l.Close())
	a, b := es[2], es[5]
	require.Equal(t, uint32(1), b.pos.Segment())
	path := segFile(dir, 1)
	flipByte(t, path, a.pos.Offset()+segment.FrameHeaderSize+1)
	flipByte(t, path, b.pos.Offset()+segment.FrameHeaderSize+1)

	l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	defer l.Close()
	got := l.Recovery().Salvaged
	require.Len(t, got, 2)
	for i, e := range []entry{a, b} {
		require.Equal(t, e.pos.Offset(), got[i].Offset)
		require.ErrorIs(t, got[i].Cause, segment.ErrChecksum)
		require.Contains(t, got[i].Cause.Error(), fmt.Sprintf("offset %d:", e.pos.Offset()), "span %d", i)
	}
}

// A sealed segment cut short (its frames end cleanly, its seal gone) is
// sealed early by salvage, and the span it loses says what was wrong, as
// Open without Salvage does: the seal is missing while a later segment
// exists. The span used to carry the scan's cause, which a scan that ends
// cleanly never sets: Recovery().Salvaged said "(<nil>)", and the list an
// unfinished salvage leaves (salvage/unfinished.json) an empty cause.
func TestASegmentSalvageSealsEarlySaysItWasNotSealed(t *testing.T) {
	dir, acked, _ := buildLog(t)
	var lastIn2 entry
	for _, e := range acked {
		if e.pos.Segment() == 2 {
			lastIn2 = e
		}
	}
	path := segFile(dir, 2)
	require.NoError(t, os.Truncate(path, int64(lastIn2.pos.Offset()+3)))
	_, err := Open(dir, Options{SegmentBytes: smallSeg})
	require.ErrorContains(t, err, "segment is not sealed but a later segment exists")

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true, KeepSalvageList: true})
	rec := l.Recovery()
	require.NoError(t, l.Close())
	require.Len(t, rec.Salvaged, 1)
	d := rec.Salvaged[0]
	require.Equal(t, path, d.File)
	require.Equal(t, lastIn2.pos.Offset(), d.Offset)
	require.NotNil(t, d.Cause, "span %d bytes at offset %d of %s has no cause", d.Length, d.Offset, d.File)
	require.ErrorContains(t, d.Cause, "segment is not sealed but a later segment exists")

	// The list kept for the caller (KeepSalvageList) says so too.
	data, err := os.ReadFile(filepath.Join(dir, salvageDirName, unfinishedName))
	require.NoError(t, err)
	var list unfinishedList
	require.NoError(t, json.Unmarshal(data, &list))
	require.Len(t, list.Spans, 1)
	require.Contains(t, list.Spans[0].Cause, "segment is not sealed but a later segment exists")
}
