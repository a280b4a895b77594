package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAPositionPastAnySegmentIsABadOption: no segment holds an offset
// past MaxSegmentBytes, so an Options.Verified or Options.Durable there
// names no place of any log: Open refuses it as a bad option naming the
// field, before it changes anything, and the log opens as before
// without it. It was taken for a position the log had been durable to:
// Open refused the log as corrupt, and Open with Salvage took every byte
// up to it for synced records that were cut off, rewrote the last
// segment at that size (up to 4 GiB) and padded over them.
func TestAPositionPastAnySegmentIsABadOption(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
	es := appendRecords(t, l, 0, 10)
	last := l.Stats().LastSegment
	require.NoError(t, l.Close())
	for name, o := range map[string]Options{
		"Verified": {Verified: MakePosition(last, MaxSegmentBytes+1)},
		"Durable":  {Durable: MakePosition(last, MaxSegmentBytes+1)},
	} {
		for _, salvage := range []bool{false, true} {
			o.Salvage, o.SegmentBytes = salvage, MinSegmentBytes
			l, err := Open(dir, o)
			require.Nil(t, l, "%s, Salvage %v", name, salvage)
			require.ErrorIs(t, err, ErrBadOptions, "%s, Salvage %v", name, salvage)
			require.ErrorContains(t, err, name)
			_, serr := os.Stat(filepath.Join(dir, salvageDirName))
			require.ErrorIs(t, serr, os.ErrNotExist, "%s, Salvage %v: the salvage began", name, salvage)
		}
	}
	// The largest offset a segment can hold is no bad option.
	l, err := Open(dir, Options{SegmentBytes: MinSegmentBytes, Durable: MakePosition(1, MaxSegmentBytes)})
	if l != nil {
		require.NoError(t, l.Close())
	}
	require.NotErrorIs(t, err, ErrBadOptions)
	l = mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
	defer l.Close()
	requireEntries(t, es, readAll(t, l))
}
