package wal

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Segment numbers are 32-bit, and a log's order is theirs: after segment
// math.MaxUint32 no segment can follow (the next number would wrap to 0,
// which no segment has, or to 1, before every other). A log that gets
// there fails the appends that need a new segment with ErrNoNextSegment,
// which says so, and keeps every record; so does Open of a log whose last
// segment, so numbered, is sealed. They used to fail with "prepare segment
// 0: sequence 0 is reserved", which names neither the cause nor the
// remedy; and a log Options.StopOnRotationFailure stopped there said to
// close and reopen it, which stops it again at the same rotation.
func TestALogAtTheLastSegmentNumberSaysSo(t *testing.T) {
	const top = math.MaxUint32
	dir := t.TempDir()
	f, err := segment.Create(vfs.Default, filepath.Join(dir, segName(top)), top, segment.NewSalt(), smallSeg)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	for _, stop := range []bool{false, true} {
		l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, StopOnRotationFailure: stop})
		var acked []entry
		for i := 0; ; i++ {
			rec := record(i)
			pos, err := l.Append(rec)
			if err != nil {
				require.ErrorIs(t, err, ErrNoNextSegment, "stop %v", stop)
				require.ErrorContains(t, err, segName(top), "stop %v", stop)
				if stop {
					// A reopened log stops at the same rotation: the
					// error says what helps instead.
					require.ErrorIs(t, err, ErrPoisoned)
					for _, err := range []error{err, l.Err()} {
						require.NotContains(t, err.Error(), "must be reopened")
						require.NotContains(t, err.Error(), "close and reopen")
						require.ErrorContains(t, err, "read its records into a new log")
					}
				}
				break
			}
			require.Equal(t, uint32(top), pos[0].Segment())
			acked = append(acked, entry{pos[0], rec})
		}
		require.NotEmpty(t, acked)
		requireEntries(t, acked, readAll(t, l))
		require.EqualValues(t, uint32(top), l.Stats().LastSegment)
		require.NoError(t, l.Close())
		l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
		requireEntries(t, acked, readAll(t, l))
		require.NoError(t, l.Close())
		names, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, n := range names {
			require.NotContains(t, n.Name(), segName(0), "stop %v", stop)
		}
		// Emptied again for the next round.
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, os.Mkdir(dir, 0o700))
		f, err := segment.Create(vfs.Default, filepath.Join(dir, segName(top)), top, segment.NewSalt(), smallSeg)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}

	// A sealed last segment so numbered: Open would start the next one.
	seal := segment.AppendFrame(nil, top, 0, segment.HeaderSize, segment.KindSeal, segment.Full, nil)
	path := filepath.Join(dir, segName(top))
	f, err = segment.Create(vfs.Default, path+".new", top, 0, smallSeg)
	require.NoError(t, err)
	require.NoError(t, f.WriteAt(seal, segment.HeaderSize))
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, os.Rename(path+".new", path))
	_, err = Open(dir, Options{SegmentBytes: smallSeg})
	require.ErrorIs(t, err, ErrNoNextSegment)
	require.ErrorContains(t, err, segName(top))
}
