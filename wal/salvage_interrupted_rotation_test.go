package wal

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// A rotation writes the old segment's last batch, renames the new segment
// into place and syncs the directory, and only then fdatasyncs the old
// segment. A power loss in between can keep a later page of that batch and
// lose an earlier one: the old segment then ends in a torn tail (its frames'
// synced values say no fdatasync covered them), followed by the new, empty
// segment, which Open removes. The old segment is then the last, and its
// tail is zeroed, with Salvage as without: the same directory opens to the
// same log. Taken for a segment a later one follows, where a torn tail is
// damage, it would have salvage pad over the lost group, report a loss of
// synced records no append was acknowledged for, and keep the later group,
// never acknowledged either, as if it had been durable.
func TestSalvageOfAnInterruptedRotationsTornTailLosesNothing(t *testing.T) {
	dir, acked, _ := buildLog(t)
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Sync: SyncNever})
	a, err := l.AppendWritten([]byte("group A, written, never synced"))
	require.NoError(t, err)
	b, err := l.AppendWritten([]byte("group B, written, never synced"))
	require.NoError(t, err)
	last := a[0].Segment()
	require.Equal(t, last, b[0].Segment(), "both in one segment")

	// The power loss: group A's bytes are lost (zeros), group B's kept.
	crashed := copyDir(t, dir)
	require.NoError(t, l.Close())
	path := segFile(crashed, last)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	clear(data[a[0].Offset():b[0].Offset()])
	require.NoError(t, os.WriteFile(path, data, 0o600))
	// The new segment, renamed into place and its name synced, empty.
	f, err := segment.Create(vfs.Default, segFile(crashed, last+1), last+1, segment.NewSalt(), smallSeg)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	plain := copyDir(t, crashed)
	l, err = Open(plain, Options{SegmentBytes: smallSeg})
	require.NoError(t, err)
	require.NotNil(t, l.Recovery().TornTail, "without Salvage: a torn tail")
	requireEntries(t, acked, readAll(t, l))
	require.NoError(t, l.Close())

	l, err = Open(crashed, Options{SegmentBytes: smallSeg, Salvage: true})
	require.NoError(t, err)
	defer l.Close()
	assert.Empty(t, l.Recovery().Salvaged, "no synced record was lost: nothing to report as salvaged")
	requireEntries(t, acked, readAll(t, l))
}
