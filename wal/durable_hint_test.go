package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// Options.Durable vouches for no record: Open scans the last segment from
// its start, so damage before the position is found wherever it is (given
// as Verified, the same position has Open scan from it, and damage before
// it is left to the reads). And the position is durable: damage to the
// last record before it is refused, never zeroed as a torn tail.
func TestADurablePositionRefusesDamageBeforeItAndVouchesForNoRecord(t *testing.T) {
	for _, c := range []struct {
		name    string
		record  int // which of the five records is damaged
		durable int // the record Durable is at (5: the log's end)
	}{{"first record", 0, 3}, {"last record", 4, 5}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 1 << 16}
			l := mustOpen(t, dir, opts)
			recs := appendRecords(t, l, 0, 5)
			end := l.End()
			if c.durable < len(recs) {
				end = recs[c.durable].pos
			}
			require.NoError(t, l.Close())
			require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // as after a crash

			damaged := recs[c.record]
			path := segFile(dir, damaged.pos.Segment())
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			off := int64(damaged.pos.Offset() + segment.Size(len(damaged.rec)) - 2) // in its body
			b := make([]byte, 1)
			_, err = f.ReadAt(b, off)
			require.NoError(t, err)
			b[0] ^= 0x5a
			_, err = f.WriteAt(b, off)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			l, err = Open(dir, Options{SegmentBytes: 1 << 16, Durable: end})
			if err == nil {
				rec := l.Recovery()
				require.NoError(t, l.Close())
				t.Fatalf("damage to record %d at %v, before the durable position %v, was not refused: recovery %+v", c.record, damaged.pos, end, rec)
			}
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce, "damage before the durable position %v", end)
			require.Equal(t, damaged.pos.Offset(), ce.Offset, "the refusal names the damaged record's offset")
		})
	}
}
