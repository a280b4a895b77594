package wal

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// A frame whose checksum verifies but whose type names no kind this build
// knows, in a segment of a format version it reads, is damage, not a later
// build's record: the segment format is frozen, and a build that adds a
// frame kind writes it only in segments of a new version, which Open
// refuses before anything is repaired (segment/doc.go). So it is handled
// as any frame that fails its checks: Open refuses it as corruption naming
// the file and offset, and Salvage copies the file aside, pads over it and
// reports it, with the cause. (docs/DESIGN.md, Recovery.)
func TestAFrameOfAnUnknownKindIsDamageThatSalvagePadsOver(t *testing.T) {
	dir, acked, groupEnd := buildLog(t)
	var victim entry
	for i, e := range acked {
		if e.pos.Segment() == 1 && groupEnd[i] == i && (i == 0 || groupEnd[i-1] == i-1) {
			victim = e // a group of one, in segment 1: a later one follows
		}
	}
	require.NotZero(t, victim.pos)
	path := segFile(dir, 1)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	at := victim.pos.Offset()
	f, err := segment.Decode(data, at, 1)
	require.NoError(t, err)
	synced := binary.LittleEndian.Uint32(data[at+12:])
	const laterKind = segment.KindPadding + 1
	frame := segment.AppendFrame(nil, 1, saltOfFile(t, path), synced, laterKind, segment.Full, f.Body)
	copy(data[at:], frame)
	require.NoError(t, os.WriteFile(path, data, 0o600))

	_, err = Open(dir, Options{SegmentBytes: smallSeg})
	var ce *CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, path, ce.File)
	require.Equal(t, at, ce.Offset)
	require.ErrorIs(t, err, segment.ErrBadType)
	require.False(t, errors.Is(err, errors.ErrUnsupported), "not taken for a later build's")

	l := mustOpen(t, dir, Options{SegmentBytes: smallSeg, Salvage: true})
	rec := l.Recovery()
	got := readAll(t, l)
	require.NoError(t, l.Close())
	require.Len(t, rec.Salvaged, 1)
	require.Equal(t, at, rec.Salvaged[0].Offset)
	require.ErrorIs(t, rec.Salvaged[0].Cause, segment.ErrBadType)
	require.NotEmpty(t, rec.Salvaged[0].CopiedTo)
	var want []entry
	for _, e := range acked {
		if e.pos != victim.pos {
			want = append(want, e)
		}
	}
	requireEntries(t, want, got)
}
