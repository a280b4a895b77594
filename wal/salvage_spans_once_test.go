package wal

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// Each loss is listed once. A segment whose file is gone, or whose header
// salvage cannot read (its frames then unreadable too), is reported as a
// span of every byte it held; the early seal of the empty segment put in
// its place (a later one follows), or the bytes up to where the log was
// known durable (it is the last), add no byte to that span, and are not
// listed again: they were, as a span of 0 bytes for a missing segment's
// seal, so that a single lost file counted as two damaged spans.
func TestASalvageListsTheLossOfAWholeSegmentOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		last bool
		hurt func(t *testing.T, path string)
	}{
		{"missing, a later segment follows", false, func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }},
		{"missing, the last, known durable", true, func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }},
		{"header and frames unreadable", false, func(t *testing.T, path string) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			data[3] ^= 0xff // the magic: the header fails its checks
			for i := segment.HeaderSize; i < len(data); i++ {
				data[i] = 0xab // no frame is left to give its salt back
			}
			require.NoError(t, os.WriteFile(path, data, 0o600))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
			appendRecords(t, l, 0, 60)
			end := l.End()
			require.GreaterOrEqual(t, end.Segment(), uint32(3))
			require.NoError(t, l.Close()) // the clean mark: the log was durable to end
			seq := uint32(2)
			if c.last {
				seq = end.Segment()
			}
			c.hurt(t, segFile(dir, seq))

			l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
			rec := l.Recovery()
			require.NoError(t, l.Close())
			require.Len(t, rec.Salvaged, 1, "%v", rec.Salvaged)
			d := rec.Salvaged[0]
			require.Equal(t, seq, d.Segment)
			require.Zero(t, d.Offset, "every byte the file held")
		})
	}
}
