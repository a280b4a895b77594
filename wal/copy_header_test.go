package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
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

// A sealed segment Options.Sealed vouched for whose header verifies but
// names a later version, or sets a flag or a reserved byte, was written
// by a later build: CopyTo refuses it as Open does (segment.ErrVersion,
// which wraps errors.ErrUnsupported), not as damage, which would send an
// operator to a backup or a Salvage that does not apply. It was refused
// as a CorruptionError.
func TestCopyToRefusesALaterBuildsSegmentHeaderAsUnsupported(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(h []byte)
	}{
		{"version", func(h []byte) { binary.LittleEndian.PutUint16(h[8:], segment.Version+1) }},
		{"flags", func(h []byte) { h[10] = 1 }},
		{"reserved", func(h []byte) { h[24] = 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{SegmentBytes: 1024})
			appendRecords(t, l, 0, 60)
			sealed := l.Sealed()
			require.NoError(t, l.Close())
			require.Contains(t, sealed, uint32(1))

			path := segFile(dir, 1)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			c.set(data)
			binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], crc32.MakeTable(crc32.Castagnoli)))
			require.NoError(t, os.WriteFile(path, data, 0o600))

			l, err = Open(dir, Options{SegmentBytes: 1024, Sealed: sealed})
			require.NoError(t, err)
			dst := t.TempDir()
			cerr := l.CopyTo(t.Context(), dst, l.End())
			require.NoError(t, l.Close())
			require.ErrorIs(t, cerr, segment.ErrVersion)
			require.ErrorIs(t, cerr, errors.ErrUnsupported)
			require.NotErrorIs(t, cerr, ErrCorrupt)
			require.ErrorContains(t, cerr, path)
			require.ErrorContains(t, cerr, c.name)
			left, err := os.ReadDir(dst)
			require.NoError(t, err)
			require.Empty(t, left, "the refused copy left files behind")
		})
	}
}
