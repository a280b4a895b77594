package wal

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// lastIn returns the last of acked in segment seq.
func lastIn(acked []entry, seq uint32) entry {
	var last entry
	for _, e := range acked {
		if e.pos.Segment() == seq {
			last = e
		}
	}
	return last
}

// A segment salvage seals early (a later one follows) loses every record
// past its last intact one: the span reported runs from there to where
// its records could reach. In a whole file that is its size less the room
// every segment keeps for its seal (no record reaches into it); in a file
// cut short, whose size says nothing of where its records ended, every
// byte a segment can hold. It used to end where the cut file ended, and a
// caller that looks for the records lost in the span (the broker names
// the messages a checkpoint placed there) missed those past the cut.
func TestASegmentSalvageSealsEarlyReportsWhereItsRecordsCouldReach(t *testing.T) {
	for _, c := range []struct {
		name string
		hurt func(t *testing.T, path string, at int)
		want func(size, at int) int
	}{
		{"zeroed to its end", func(t *testing.T, path string, at int) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			clear(data[at:])
			require.NoError(t, os.WriteFile(path, data, 0o600))
		}, func(size, at int) int { return size - segment.Size(0) - at }},
		{"cut inside its last record", func(t *testing.T, path string, at int) {
			require.NoError(t, os.Truncate(path, int64(at+segment.FrameHeaderSize+3)))
		}, func(_, at int) int { return MaxSegmentBytes - at }},
		{"cut too short for a seal", func(t *testing.T, path string, at int) {
			require.NoError(t, os.Truncate(path, int64(at+3)))
		}, func(_, at int) int { return MaxSegmentBytes - at }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, acked, _ := buildLog(t)
			victim := lastIn(acked, 2)
			path := segFile(dir, 2)
			fi, err := os.Stat(path)
			require.NoError(t, err)
			c.hurt(t, path, victim.pos.Offset())

			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
			rec := l.Recovery()
			require.NoError(t, l.Close())
			require.Len(t, rec.Salvaged, 1, "%v", rec.Salvaged)
			d := rec.Salvaged[0]
			require.Equal(t, uint32(2), d.Segment)
			require.Equal(t, victim.pos.Offset(), d.Offset, "the span starts at the first record lost")
			require.Equal(t, c.want(int(fi.Size()), victim.pos.Offset()), d.Length)
		})
	}
}
