package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAPositionInSegmentZeroIsABadOption: no segment is numbered 0, so
// an Options.Verified or Options.Durable in segment 0 that is not the
// zero Position (which means none) names no place of any log: Open
// refuses it as a bad option naming the field, before it changes
// anything, and the log opens as before without it. It was taken for a
// position the log had been durable to: Open refused an empty directory
// as a log whose segment 0 was lost, and Open with Salvage began to put
// a segment 0 in its place, failed, and left a list of the spans it
// repaired that no later Open could read, so that the log opened no more.
func TestAPositionInSegmentZeroIsABadOption(t *testing.T) {
	for name, o := range map[string]Options{
		"Verified": {Verified: MakePosition(0, 100)},
		"Durable":  {Durable: MakePosition(0, 1<<20)},
	} {
		for _, salvage := range []bool{false, true} {
			for _, empty := range []bool{true, false} {
				dir := t.TempDir()
				var es []entry
				if !empty {
					l := mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
					es = appendRecords(t, l, 0, 10)
					require.NoError(t, l.Close())
				}
				o.Salvage, o.SegmentBytes = salvage, MinSegmentBytes
				l, err := Open(dir, o)
				require.Nil(t, l, "%s, Salvage %v, empty %v", name, salvage, empty)
				require.ErrorIs(t, err, ErrBadOptions, "%s, Salvage %v, empty %v", name, salvage, empty)
				require.ErrorContains(t, err, name)
				_, serr := os.Stat(filepath.Join(dir, salvageDirName))
				require.ErrorIs(t, serr, os.ErrNotExist, "%s, Salvage %v, empty %v: the salvage began", name, salvage, empty)

				l = mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
				requireEntries(t, es, readAll(t, l))
				require.NoError(t, l.Close())
			}
		}
	}
}
