package wal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// RemoveBelow "removes every segment before pos's segment": a position
// past the last record of a sealed segment, even past its seal (what
// Sealed reports as its end), removes no part of that segment.
func TestRemoveBelowKeepsPosSegmentEvenPastItsRecords(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096})
	defer l.Close()
	acked := appendRecords(t, l, 0, 200)
	require.GreaterOrEqual(t, l.Stats().LastSegment, uint32(3))
	end1 := l.Sealed()[1]
	var last1 Position
	for _, e := range acked {
		require.False(t, e.pos.Segment() == 1 && e.pos >= MakePosition(1, end1))
		if e.pos.Segment() == 1 {
			last1 = e.pos
		}
	}
	for _, pos := range []Position{last1 + 1, MakePosition(1, end1)} {
		n, err := l.RemoveBelow(pos)
		require.NoError(t, err)
		require.Zero(t, n, "RemoveBelow(%v)", pos)
		require.Equal(t, uint32(1), l.Stats().FirstSegment)
		_, err = l.Read(last1)
		require.NoError(t, err, "segment 1's last record after RemoveBelow(%v)", pos)
	}
}
