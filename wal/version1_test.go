package wal

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// toVersion1 rewrites the segment file at path as the earlier build wrote
// it: a version 1 header (no salt) and every frame's checksum unseeded.
func toVersion1(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	seq, err := segment.DecodeHeader(data)
	require.NoError(t, err)
	tab := crc32.MakeTable(crc32.Castagnoli)
	// Every frame, seal included, from the header to the first that does
	// not decode (under the file's salt).
	var frames []segment.Frame
	for off := segment.HeaderSize; ; {
		f, err := segment.Decode(data, off, seq)
		if err != nil {
			break
		}
		frames = append(frames, f)
		off = f.End()
	}
	for _, f := range frames {
		binary.LittleEndian.PutUint32(data[f.Offset:], crc32.Checksum(data[f.Offset+4:f.End()], tab))
	}
	binary.LittleEndian.PutUint16(data[8:], 1)
	clear(data[16:20])
	binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], tab))
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// A log written by the earlier build (segment format version 1, frames
// without a salt) opens, reads every record, and takes appends in its
// last segment and in new ones; after a crash, too.
func TestALogOfFormatVersion1OpensAndGrows(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 4096}
	l := mustOpen(t, dir, opts)
	want := appendRecords(t, l, 0, 200)
	require.Greater(t, l.End().Segment(), uint32(2), "several segments")
	require.NoError(t, l.Close())
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	for _, p := range segs {
		toVersion1(t, p)
		h := make([]byte, segment.HeaderSize)
		f, err := os.Open(p)
		require.NoError(t, err)
		_, err = f.Read(h)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.Zero(t, segment.SaltOf(h), "%s is version 1", p)
	}

	l = mustOpen(t, dir, opts)
	requireEntries(t, want, readAll(t, l))
	last := l.End().Segment()
	want = append(want, appendRecords(t, l, 200, 1)...)
	require.Equal(t, last, want[len(want)-1].pos.Segment(), "appended to the version 1 segment")
	want = append(want, appendRecords(t, l, 201, 200)...)
	require.Greater(t, l.End().Segment(), last, "and to new ones")
	requireEntries(t, want, readAll(t, l))
	crashed := copyDir(t, dir)
	require.NoError(t, l.Close())

	for _, d := range []string{dir, crashed} {
		l = mustOpen(t, d, opts)
		requireEntries(t, want, readAll(t, l))
		require.NoError(t, l.Close())
	}
}
