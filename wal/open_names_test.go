package wal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Open removes the empty segments that rotations a crash interrupted left
// after the last written one, newest first. A power loss before the
// directory sync that makes those removals durable, on a file system that
// may keep a later change of names without an earlier one, must not leave
// a gap (an older empty segment removed, a newer one kept), which the
// next Open would refuse as a missing segment.
func TestTheEmptySegmentsOpenRemovesLeaveNoGapWhateverSubsetSurvives(t *testing.T) {
	rng := seededRand(t)
	dir, acked, _ := buildLog(t)
	last, _ := lastWritten(acked)
	for seq := last + 1; seq <= last+3; seq++ {
		f, err := segment.Create(vfs.Default, segFile(dir, seq), seq, segment.NewSalt(), smallSeg)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	{
		plain := copyDir(t, dir)
		l := mustOpen(t, plain, Options{SegmentBytes: smallSeg})
		require.Len(t, l.Recovery().RemovedEmpty, 3, "the three empty segments are removed")
		require.NoError(t, l.Close())
	}

	// The power fails at the first directory sync after a removal.
	fs := newCrashAtDirSyncFS(true)
	_, err := Open(dir, Options{FS: fs, SegmentBytes: smallSeg})
	require.ErrorIs(t, err, vfs.ErrCrashed)
	for range 40 {
		clone, seed := subsetClone(t, fs.CrashFS, dir, rng)
		l, err := Open(clone, Options{SegmentBytes: smallSeg})
		require.NoError(t, err, "clone seed %d: a subset of Open's removals of empty segments kept", seed)
		requireEntries(t, acked, readAll(t, l))
		require.NoError(t, l.Close())
	}
}
