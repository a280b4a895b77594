package segment_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// fileOf returns a segment file of size bytes: the header of segment seq
// with salt, then frames, then zeros.
func fileOf(seq, salt uint32, size int, frames []byte) []byte {
	data := make([]byte, size)
	h := segment.EncodeHeader(seq, salt)
	copy(data, h[:])
	copy(data[segment.HeaderSize:], frames)
	return data
}

// reused returns the file of segment seq (salt 0x5555) made from a
// retired file of segment 2 (salt former) that held a record in two
// frames, one of one frame, and its seal: only the header is rewritten.
func reused(seq, former uint32) []byte {
	frames := segment.AppendFrame(nil, 2, former, segment.HeaderSize, segment.KindRecord, segment.First, []byte("old record, "))
	frames = segment.AppendFrame(frames, 2, former, segment.HeaderSize, segment.KindRecord, segment.Last, []byte("in two frames"))
	end := len(frames) + segment.HeaderSize
	frames = segment.AppendFrame(frames, 2, former, uint32(end), segment.KindRecord, segment.Full, []byte("another"))
	frames = segment.AppendFrame(frames, 2, former, uint32(end+len(frames)), segment.KindSeal, segment.Full, nil)
	return fileOf(seq, 0x5555, 4096, frames)
}

// What a file holds before any frame of its segment is written to it is
// told from a segment whose frames were written and then damaged so that
// its scan finds none: zeros, or a reused file's former frames, are
// unwritten; the segment's own first frame, with its sequence field
// damaged (it names another segment) or its header zeroed, is not.
func TestUnwrittenTellsAFileNothingWasWrittenToFromADamagedFirstFrame(t *testing.T) {
	const seq, salt = 5, 0x5a17f00d
	require.True(t, segment.Unwritten(fileOf(seq, salt, 4096, nil), seq), "a file made for the segment: zeros")
	require.True(t, segment.Unwritten(fileOf(seq, salt, segment.HeaderSize, nil), seq), "a header and nothing after it")
	require.True(t, segment.Unwritten(reused(seq, 0x1111), seq), "a reused file: its former segment's frames")
	require.True(t, segment.Unwritten(reused(seq, 0), seq), "a reused file of format version 1 (salt 0)")
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, nil)[:segment.HeaderSize-1], seq), "too short for a header")

	rng := newRand(t)
	for i := range 200 {
		// Not empty, and never zero: a frame whose bytes all are zeroed
		// leaves nothing to tell it by.
		body := make([]byte, 1+rng.IntN(300))
		for j := range body {
			body[j] = byte(1 + rng.IntN(255))
		}
		own := segment.AppendFrame(nil, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, body)
		var data []byte
		if i%2 == 0 {
			data = fileOf(seq, salt, 4096, own)
		} else {
			data = reused(seq, 0x1111)
			copy(data[segment.HeaderSize:], own) // written over the former frames
		}
		require.False(t, segment.Unwritten(data, seq), "case %d: the segment's own frame", i)

		bit := rng.IntN(32)
		data[segment.HeaderSize+8+bit/8] ^= 1 << (bit % 8) // the sequence field
		r, frames := scanAll(t, data, seq, false)
		require.Empty(t, frames)
		require.Equal(t, segment.EndClean, r.Tail, "case %d: the scan finds no frame of the segment, as in an unwritten one", i)
		require.False(t, segment.Unwritten(data, seq), "case %d: the first frame's sequence field damaged (bit %d)", i, bit)

		clear(data[segment.HeaderSize : segment.HeaderSize+segment.FrameHeaderSize])
		require.False(t, segment.Unwritten(data, seq), "case %d: the first frame's header zeroed", i)
	}

	// A lone frame of another segment does not vouch for itself.
	lone := segment.AppendFrame(nil, 2, 0x1111, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("alone"))
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, lone), seq))
	// Nor do former frames that claim a sync past their own offset, as
	// no frame the log wrote does.
	frames := segment.AppendFrame(nil, 2, 0x1111, 4000, segment.KindRecord, segment.Full, []byte("first"))
	frames = segment.AppendFrame(frames, 2, 0x1111, 4000, segment.KindSeal, segment.Full, nil)
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, frames), seq))
}

// A reused file that was a segment salvage emptied holds, at HeaderSize,
// the seal salvage wrote there (another segment's, with a synced value of
// 0) and zeros after it: unwritten. The same seal with any byte after it
// that is not zero, one naming the segment itself, or a seal as the log
// writes one (its synced value its own offset) is not.
func TestUnwrittenKnowsTheSealOfASegmentSalvageEmptied(t *testing.T) {
	const seq, salt = 5, 0x5a17f00d
	seal := func(of, synced uint32) []byte {
		return segment.AppendFrame(nil, of, 0x1111, synced, segment.KindSeal, segment.Full, nil)
	}
	require.True(t, segment.Unwritten(fileOf(seq, salt, 4096, seal(2, 0)), seq), "a salvage's seal, then zeros")
	require.True(t, segment.Unwritten(fileOf(seq, salt, segment.HeaderSize+segment.Size(0), seal(2, 0)), seq), "nothing after the seal")

	data := fileOf(seq, salt, 4096, seal(2, 0))
	data[4095] = 1
	require.False(t, segment.Unwritten(data, seq), "a byte after the seal that is not zero")
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, seal(seq, 0)), seq), "a seal of the segment itself")
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, seal(2, segment.HeaderSize)), seq), "a seal the log wrote, vouching for its offset")
	padding := segment.AppendFrame(nil, 2, 0x1111, 0, segment.KindPadding, segment.Full, nil)
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, padding), seq), "a lone padding frame")
	record := segment.AppendFrame(nil, 2, 0x1111, 0, segment.KindRecord, segment.Full, nil)
	require.False(t, segment.Unwritten(fileOf(seq, salt, 4096, record), seq), "a lone empty record")
}
