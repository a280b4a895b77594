package wal

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// A RemoveBelow retires several segments, each removed or renamed aside
// as a spare, oldest first. On a file system that may make a later change
// of names durable without an earlier one (btrfs's per-file log), a power
// loss must still leave a gapless log that Open takes, with every record
// from the cut on: removals made durable one by one, in order, leave any
// subset the crash may keep a prefix. The power fails at each of the
// removal's directory syncs in turn, and every clone keeps a subset of
// the unsynced changes of names, drawn on its own for each.
func TestRemoveBelowLeavesAGaplessLogWhateverSubsetOfItsRemovalsSurvives(t *testing.T) {
	rng := seededRand(t)
	const victims = 5
	for at := 0; at <= victims; at++ {
		t.Run(fmt.Sprintf("crash at directory sync %d", at+1), func(t *testing.T) {
			dir := t.TempDir()
			fs := newCrashAtDirSyncFS(false)
			opts := Options{FS: fs, SegmentBytes: 1024}
			l := mustOpen(t, dir, opts)
			defer l.Close()
			var acked []entry
			for i := 0; l.Stats().LastSegment < victims+2; i++ {
				acked = append(acked, appendRecords(t, l, i, 1)...)
			}
			waitPrepared(t, l)

			fs.arm(at)
			cut := MakePosition(victims+1, 0)
			_, err := l.RemoveBelow(cut)
			fs.CrashFS.Crash() // if the removal got through its syncs
			_ = l.Close()
			if err != nil {
				require.ErrorIs(t, err, vfs.ErrCrashed)
			}

			var from []entry // every record from the cut on
			for i, e := range acked {
				if e.pos.Segment() >= cut.Segment() {
					from = acked[i:]
					break
				}
			}
			require.NotEmpty(t, from)
			for range 40 {
				clone, seed := subsetClone(t, fs.CrashFS, dir, rng)
				l2, err := Open(clone, Options{SegmentBytes: 1024})
				require.NoError(t, err, "clone seed %d: the power lost before directory sync %d of RemoveBelow, a subset of its changes of names kept", seed, at+1)
				got := readAll(t, l2)
				require.NoError(t, l2.Close())
				// What the log holds is a suffix of what was appended
				// (the oldest segments gone or not), and holds every
				// record from the cut on.
				require.GreaterOrEqual(t, len(got), len(from), "clone seed %d", seed)
				requireEntries(t, acked[len(acked)-len(got):], got)
			}
		})
	}
}
