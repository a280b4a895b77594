package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// A segment salvage replaced by an empty one (its file too short for a
// header) is sealed at its header: a full-size file whose first frame is a
// seal, with zeros after it. RemoveBelow keeps it as a spare, and a later
// rotation reuses it (segment.Recycle rewrites its header only). A crash
// after that rotation renamed it into place and before it sealed the old
// segment leaves the state TestInterruptedRotationIsUndone covers: nothing
// was ever written to the new segment, and Open removes it: Unwritten
// recognises the spare's former content (a salvage's seal, then zeros) as
// it does a retired segment's record and seal.
func TestAnInterruptedRotationIntoASalvageSealedSpareIsUndone(t *testing.T) {
	dir, acked, _ := buildLog(t)
	last, _ := lastWritten(acked)
	// Segment 1 cut too short for a header; Salvage replaces it by an
	// empty segment and seals it (a later one follows).
	require.NoError(t, os.Truncate(segFile(dir, 1), 10))
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	b, err := os.ReadFile(segFile(dir, 1))
	require.NoError(t, err)
	require.EqualValues(t, smallSeg, len(b), "full size: RemoveBelow keeps it as a spare")
	r, err := segment.Scan(b, 1, false, func(segment.Frame) error { return nil })
	require.NoError(t, err)
	require.True(t, r.Sealed && r.Records == 0 && r.End == segment.HeaderSize+segment.Size(0),
		"segment 1 holds the seal salvage wrote at its header, and no record: %+v", r)
	_, err = l.RemoveBelow(MakePosition(2, 0)) // segment 1's file kept as a spare
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName))) // a crash leaves none

	// The rotation that reuses it, cut by a crash after the rename and the
	// directory sync, before the seal of segment last: its header alone is
	// rewritten (segment.Recycle), and the spare's name is gone.
	next := segFile(dir, last+1)
	h := segment.EncodeHeader(last+1, segment.NewSalt())
	copy(b, h[:])
	require.NoError(t, os.WriteFile(next, b, 0o600))

	l, err = Open(dir, Options{SegmentBytes: smallSeg})
	require.NoError(t, err, "nothing was written to segment %d: a sound log", last+1)
	defer l.Close()
	require.Equal(t, []string{next}, l.Recovery().RemovedEmpty)
	requireEntries(t, acked[indexOf(acked, firstIn(acked, 2).pos):], readAll(t, l))
}

// A retired file is reused only when, as the next segment, it reads as
// one nothing was written to (segment.Unwritten), so that a crash after
// the rotation renamed it into place, before the seal of the segment
// before it, leaves a log Open accepts. A salvage that sealed a segment at
// its header over frames it could not read (a header rewritten with no
// salt the frames gave back, or a damaged first frame) leaves their bytes
// after the seal: such a spare is not reused, and a new file is written
// instead. One whose seal is followed by zeros (the empty segment salvage
// puts in the place of a file too short for a header), like a file
// prepared and never used, is reused.
func TestASpareIsReusedOnlyIfItWouldReadAsUnwritten(t *testing.T) {
	for _, c := range []struct {
		name   string
		after  byte // every byte after the spare's first frame
		reused bool
	}{
		{"a salvage's seal, then zeros", 0, true},
		{"a salvage's seal over frames it could not read", 0xa5, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			require.NoError(t, l.Close())
			for _, name := range spareFiles(t, dir) {
				require.NoError(t, os.Remove(filepath.Join(dir, name)))
			}
			data := make([]byte, smallSeg)
			h := segment.EncodeHeader(7, segment.NewSalt())
			copy(data, h[:])
			seal := segment.AppendFrame(nil, 7, 0x1234, 0, segment.KindSeal, segment.Full, nil)
			copy(data[segment.HeaderSize:], seal)
			for i := segment.HeaderSize + len(seal); i < len(data); i++ {
				data[i] = c.after
			}
			spare := filepath.Join(dir, sparePrefix+"0000000007"+tmpSuffix)
			require.NoError(t, os.WriteFile(spare, data, 0o600))

			l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			for i := 0; l.Stats().Rotations == 0; i++ {
				appendRecords(t, l, i, 1)
			}
			st := l.Stats()
			require.NoError(t, l.Close())
			if c.reused {
				require.EqualValues(t, 1, st.RecycledSegments, "the spare became segment 2")
				return
			}
			require.Zero(t, st.RecycledSegments, "segment 2 is a new file, not the spare")
			_, err := os.Stat(spare)
			require.ErrorIs(t, err, os.ErrNotExist, "the spare not reused is removed")
		})
	}
}
