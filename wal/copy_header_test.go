package wal

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// CopyTo verifies what it copies, the header too: a sealed segment that
// Options.Sealed vouched for was opened without reading it, and its frames
// verify under the salt a damaged header still holds, so a check of the
// frames alone would copy the damage unseen and the copy would not open.
func TestCopyToRefusesASegmentWhoseHeaderIsDamaged(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1024}
	l := mustOpen(t, dir, opts)
	appendRecords(t, l, 0, 60)
	sealed := l.Sealed()
	require.NoError(t, l.Close())
	require.Contains(t, sealed, uint32(1))

	// One bit of a reserved header byte of segment 1: its header no
	// longer verifies, its frames (salt intact) do.
	f, err := os.OpenFile(segFile(dir, 1), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0x01}, 22)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	l, err = Open(dir, Options{SegmentBytes: 1024, Sealed: sealed})
	require.NoError(t, err)
	dst := t.TempDir()
	cerr := l.CopyTo(t.Context(), dst, l.End())
	require.NoError(t, l.Close())
	if cerr == nil {
		_, oerr := Open(dst, opts)
		t.Logf("CopyTo succeeded; opening the copy: %v", oerr)
	}
	var ce *CorruptionError
	require.ErrorAs(t, cerr, &ce)
	require.Equal(t, segFile(dir, 1), ce.File)
	require.Zero(t, ce.Offset)
}
