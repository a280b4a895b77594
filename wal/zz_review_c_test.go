package wal

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// The seal of the segment before the last is damaged, and the sequence
// field of the last segment's only frame (a synced, acknowledged record)
// is damaged. The last segment's scan ends "clean" with no record (the
// bytes at its first frame name another segment), so
// dropInterruptedRotation (wal/open.go:494) takes it for the empty
// segment of an interrupted rotation and deletes the file, with or
// without Salvage, without a copy and without a report. docs/DESIGN.md,
// "Preparing segments": "a segment whose first frame is damaged reads as
// holding no record too, and when the seal before it was damaged as well
// it used to be removed as such, with every record in it. Since nothing is
// written to the new segment before the old one's seal is durable, a crash
// never leaves a frame there, torn or whole"; and "Recovery": Salvage
// "copies the damaged file to salvage/ first". The frame is there, whole
// but for one byte: this is the case that sentence says is no longer
// removed (TestDamageToASealAndToTheNextSegmentIsRefused damages the
// body, which reads torn; a damaged sequence field reads clean).
func TestReviewCALastSegmentWhoseOnlyFrameNamesAnotherSegmentIsNotRemoved(t *testing.T) {
	for _, salvage := range []bool{false, true} {
		dir, acked, _ := buildLog(t)
		last, _ := lastWritten(acked)
		victim := firstIn(acked, last)
		var sealAt int
		for i, e := range acked {
			if e.pos == victim.pos {
				prev := acked[i-1]
				sealAt = prev.pos.Offset() + segment.Size(len(prev.rec))
				break
			}
		}
		flipByte(t, segFile(dir, last-1), sealAt+segment.FrameHeaderSize-1) // the seal's type byte
		path := segFile(dir, last)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		clear(b[victim.pos.Offset()+segment.Size(len(victim.rec)):]) // the victim is the segment's only frame
		require.NoError(t, os.WriteFile(path, b, 0o600))
		flipByte(t, path, victim.pos.Offset()+8) // its sequence field

		l, err := Open(dir, Options{SegmentBytes: smallSeg, Salvage: salvage})
		if err != nil {
			_, serr := os.Stat(path)
			require.NoError(t, serr, "salvage %v: the damaged segment is still there", salvage)
			continue
		}
		got := readAll(t, l)
		rec := l.Recovery()
		require.NoError(t, l.Close())
		_, serr := os.Stat(path)
		t.Errorf("salvage %v: opened with %d of %d records, the record at %v is gone; removed as empty %v, salvaged %v; the file: %v",
			salvage, len(got), len(acked), victim.pos, rec.RemovedEmpty, rec.Salvaged, serr)
	}
}
