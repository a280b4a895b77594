package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// TestDamageToTheBatchARotationSealedIsRefused: a rotation makes durable
// the records no fdatasync had covered yet (appended under SyncNever here)
// before it writes its seal, and the seal vouches for them. A crash that
// then left the next segment empty (it came between the seal's fdatasync
// and the write to the new segment, or lost that write), with damage to
// the last record before the seal, must be refused as corrupt. Read as a
// torn tail, it dropped the seal, removed the empty segment after what
// then read as an unsealed one, and zeroed the damaged record as never
// durable.
func TestDamageToTheBatchARotationSealedIsRefused(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Sync: SyncNever})
	var sealed []entry // the records of segment 1
	for i := 0; ; i++ {
		rec := record(i)
		pos, err := l.Append(rec)
		require.NoError(t, err)
		if pos[0].Segment() != 1 {
			break
		}
		sealed = append(sealed, entry{pos[0], rec})
	}
	require.NoError(t, l.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, cleanName)))
	// Segment 2 as the crash left it: a header, no frame.
	next := segFile(dir, 2)
	b, err := os.ReadFile(next)
	require.NoError(t, err)
	clear(b[segment.HeaderSize:])
	require.NoError(t, os.WriteFile(next, b, 0o600))

	intact := copyDir(t, dir)
	l = mustOpen(t, intact, Options{SegmentBytes: smallSeg})
	requireEntries(t, sealed, readAll(t, l))
	require.Empty(t, l.Recovery().RemovedEmpty, "segment 2 follows a sealed segment: it is kept")
	require.NoError(t, l.Close())

	victim := sealed[len(sealed)-1]
	path := segFile(dir, 1)
	flipByte(t, path, victim.pos.Offset()+segment.FrameHeaderSize+1)
	// Twice: the refused open may remove the empty segment (it holds
	// nothing), and the damaged one, last then, is refused all the same.
	for _, what := range []string{"first open", "second open"} {
		l, err = Open(dir, Options{SegmentBytes: smallSeg})
		if err == nil {
			got := readAll(t, l)
			require.NoError(t, l.Close())
			t.Fatalf("%s: damage to a record the seal after it vouches for: opened with %d of %d records (torn tail %v, removed %v)",
				what, len(got), len(sealed), l.Recovery().TornTail, l.Recovery().RemovedEmpty)
		}
		require.ErrorIs(t, err, ErrCorrupt, what)
		var ce *CorruptionError
		require.True(t, errors.As(err, &ce), "%s: %v", what, err)
		require.Equal(t, path, ce.File, what)
		require.Equal(t, victim.pos.Offset(), ce.Offset, what)
	}
}
