package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// A Verified or Durable 1 to segment.Size(0)-1 bytes past where the last
// segment's frames end is no frame's end (no frame is shorter): a wrong
// position. Without Salvage it is refused as damage before a durable end,
// as any such end is. With Salvage, the span from the frames' end to it
// was too short for a padding frame, and the salvage failed ("too short to
// pad") having listed nothing, every Open with Salvage failing the same
// way. It is now padded over to where the smallest frame would end,
// reported as one salvaged span (the file copied aside first), and the
// salvage finishes: its list is removed, appends go on after the span,
// and an Open without Salvage reads the log whole; a file cut at the
// position is rewritten at full size first.
func TestSalvageOfADurablePositionInsideTheSmallestFramePadsOverIt(t *testing.T) {
	for _, field := range []string{"Verified", "Durable"} {
		for _, c := range []struct {
			past int
			cut  bool // the file cut at the position
		}{{1, false}, {8, false}, {segment.Size(0) - 1, false}, {8, true}} {
			past := c.past
			t.Run(fmt.Sprintf("%s/%d bytes past, cut %v", field, past, c.cut), func(t *testing.T) {
				dir := t.TempDir()
				l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
				es := appendRecords(t, l, 0, 5)
				end := l.End()
				require.NoError(t, l.Close())
				require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
				if c.cut {
					require.NoError(t, os.Truncate(segFile(dir, end.Segment()), int64(end.Offset()+past)))
				}
				opts := Options{SegmentBytes: smallSeg}
				wrong := MakePosition(end.Segment(), end.Offset()+past)
				if field == "Verified" {
					opts.Verified = wrong
				} else {
					opts.Durable = wrong
				}

				_, err := Open(dir, opts)
				var ce *CorruptionError
				require.ErrorAs(t, err, &ce, "refused without Salvage, as any end before a durable one")

				salvage := opts
				salvage.Salvage = true
				l, err = Open(dir, salvage)
				require.NoError(t, err)
				rec := l.Recovery()
				require.Nil(t, rec.TornTail)
				require.Len(t, rec.Salvaged, 1)
				sp := rec.Salvaged[0]
				require.Equal(t, end.Offset(), sp.Offset)
				require.Equal(t, segment.Size(0), sp.Length, "padded over to where the smallest frame would end")
				require.ErrorContains(t, sp.Cause, "durable to offset")
				require.FileExists(t, sp.CopiedTo)
				require.NoFileExists(t, filepath.Join(dir, salvageDirName, unfinishedName), "the salvage finished")
				requireEntries(t, es, readAll(t, l))
				more := appendRecords(t, l, 100, 3)
				require.Greater(t, more[0].pos, wrong, "appends go on after the span")
				require.NoError(t, l.Close())

				l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
				defer l.Close()
				requireEntries(t, append(es[:len(es):len(es)], more...), readAll(t, l))
				require.Empty(t, l.Recovery().Salvaged)
			})
		}
	}
}
