package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Recovery returns a report of the caller's own: changing its Salvaged
// or its TornTail changes nothing of what the next call returns. It used
// to hand out the log's own slice and pointer, and a caller that sorted
// or trimmed Salvaged, say, changed the report every later caller (the
// broker looks at it again after Open) read.
func TestRecoveryReturnsACopy(t *testing.T) {
	t.Run("torn tail", func(t *testing.T) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
		es := appendRecords(t, l, 0, 3)
		require.NoError(t, l.Close())
		// The last record torn, as a crash leaves it (with no clean mark).
		require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
		last := es[len(es)-1].pos
		f, err := os.OpenFile(segFile(dir, last.Segment()), os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 8), int64(last.Offset())+20)
		require.NoError(t, err)
		require.NoError(t, f.Close())

		l = mustOpen(t, dir, Options{SegmentBytes: smallSeg})
		defer l.Close()
		got := l.Recovery()
		require.NotNil(t, got.TornTail)
		want := *got.TornTail
		got.TornTail.Offset, got.TornTail.Length, got.TornTail.File = -1, -1, "changed"
		require.Equal(t, want, *l.Recovery().TornTail)
	})
	t.Run("salvaged", func(t *testing.T) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentBytes: smallSeg})
		appendRecords(t, l, 0, 3)
		end := l.End()
		require.NoError(t, l.Close())
		require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
		require.NoError(t, os.Truncate(segFile(dir, end.Segment()), int64(end.Offset())))

		l = mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true, Durable: MakePosition(end.Segment(), end.Offset()+100)})
		defer l.Close()
		got := l.Recovery()
		require.Len(t, got.Salvaged, 1)
		want := got.Salvaged[0]
		got.Salvaged[0].Offset, got.Salvaged[0].File = -1, "changed"
		require.Equal(t, []Damage{want}, l.Recovery().Salvaged)
	})
}
