package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAGapBetweenSegmentsNamesTheFilesAroundIt: a segment file missing
// between two that are there is refused naming the missing file and the
// files on either side of the gap. A gap made by a stray file far past
// the last segment (one of another log, say) named only the missing
// file, which the operator then looked for in vain, never the file that
// made the gap.
func TestAGapBetweenSegmentsNamesTheFilesAroundIt(t *testing.T) {
	for name, tc := range map[string]struct {
		change      func(t *testing.T, dir string, last uint32)
		gap, before uint32
		after       func(last uint32) uint32
	}{
		"a segment removed": {
			change: func(t *testing.T, dir string, last uint32) { require.NoError(t, os.Remove(segFile(dir, 2))) },
			gap:    2, before: 1,
			after: func(uint32) uint32 { return 3 },
		},
		"a stray file far past the last": {
			change: func(t *testing.T, dir string, last uint32) {
				data, err := os.ReadFile(segFile(dir, 1))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(segFile(dir, 1000), data, 0o600))
			},
			after: func(uint32) uint32 { return 1000 },
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
			appendRecords(t, l, 0, 100)
			last := l.Stats().LastSegment
			require.Greater(t, last, uint32(3))
			require.NoError(t, l.Close())
			tc.change(t, dir, last)
			gap, before := tc.gap, tc.before
			if gap == 0 {
				gap, before = last+1, last
			}

			l, err := Open(dir, Options{SegmentBytes: MinSegmentBytes})
			require.Nil(t, l)
			var ce *CorruptionError
			require.True(t, errors.As(err, &ce), "want a *CorruptionError, got %v", err)
			require.Equal(t, segFile(dir, gap), ce.File)
			require.ErrorContains(t, err, "segment file missing")
			require.ErrorContains(t, err, segName(before), "the file before the gap")
			require.ErrorContains(t, err, filepath.Base(segFile(dir, tc.after(last))), "the file after the gap")
		})
	}
}
