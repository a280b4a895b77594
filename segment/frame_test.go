package segment_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// crc32c is computed with the standard library, independently of the
// package's own CRC implementation.
var crc32c = crc32.MakeTable(crc32.Castagnoli)

// TestFrameLayout checks one frame byte for byte against the table in
// doc.go: its checksum is seeded with the segment's salt (0 in a version 1
// file, which had none).
func TestFrameLayout(t *testing.T) {
	body := []byte("hi!")
	for _, salt := range []uint32{0, 0x5a17f00d} {
		got := segment.AppendFrame(nil, 0x04030201, salt, 0x08070605, segment.KindRecord, segment.Last, body)

		want := make([]byte, 17, 20)
		binary.LittleEndian.PutUint32(want[4:], 3)          // length
		binary.LittleEndian.PutUint32(want[8:], 0x04030201) // sequence
		binary.LittleEndian.PutUint32(want[12:], 0x08070605)
		want[16] = 1 | 3<<4 // kind record, place last
		want = append(want, body...)
		binary.LittleEndian.PutUint32(want[0:], crc32.Update(salt, crc32c, want[4:]))
		require.Equal(t, want, got, "salt %#x", salt)
	}
	require.Equal(t, segment.Size(len(body)), 20)
	require.Equal(t, 17, segment.FrameHeaderSize)
}

// TestHeaderLayout checks the file header byte for byte against doc.go.
func TestHeaderLayout(t *testing.T) {
	h := segment.EncodeHeader(0x0a0b0c0d, 0x5a17f00d)
	want := make([]byte, 32)
	copy(want, "WALBSEG\x00")
	binary.LittleEndian.PutUint16(want[8:], 2)  // version
	binary.LittleEndian.PutUint16(want[10:], 0) // flags
	binary.LittleEndian.PutUint32(want[12:], 0x0a0b0c0d)
	binary.LittleEndian.PutUint32(want[16:], 0x5a17f00d) // salt
	binary.LittleEndian.PutUint32(want[28:], crc32.Checksum(want[:28], crc32c))
	require.Equal(t, want, h[:])
	require.Equal(t, 32, segment.HeaderSize)
	require.Equal(t, 2, segment.Version)
	require.Equal(t, uint32(0x5a17f00d), segment.SaltOf(h[:]))
}

// goldenSegment is a small segment that uses every kind and place, its
// frames salted with salt.
func goldenSegment(salt uint32) []byte {
	h := segment.EncodeHeader(1, salt)
	b := h[:]
	b = segment.AppendFrame(b, 1, salt, 32, segment.KindRecord, segment.Full, []byte("hello"))
	b = segment.AppendFrame(b, 1, salt, 32, segment.KindRecord, segment.First, []byte("a"))
	b = segment.AppendFrame(b, 1, salt, 32, segment.KindRecord, segment.Middle, nil)
	b = segment.AppendFrame(b, 1, salt, 32, segment.KindRecord, segment.Last, []byte("xyz"))
	end := uint32(len(b))
	b = segment.AppendFrame(b, 1, salt, end, segment.KindPadding, segment.Full, make([]byte, 3))
	b = segment.AppendFrame(b, 1, salt, end, segment.KindSeal, segment.Full, nil)
	return b
}

// version1 turns a segment of salt 0 into the version 1 file the earlier
// build wrote: the same bytes but the version field and the header's
// checksum.
func version1(data []byte) []byte {
	data = bytes.Clone(data)
	binary.LittleEndian.PutUint16(data[8:], 1)
	binary.LittleEndian.PutUint32(data[28:], crc32.Checksum(data[:28], crc32c))
	return data
}

// TestGolden pins the encoding of a whole segment: the format is frozen, so
// any change to this file is a format change and needs a new Version. The
// version 1 file, which earlier builds wrote, still reads, and is pinned
// too.
func TestGolden(t *testing.T) {
	for _, c := range []struct {
		file string
		data []byte
	}{
		{"segment.golden", goldenSegment(0x5a17f00d)},
		{"segment-v1.golden", version1(goldenSegment(0))},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", c.file)
			dump := hex.Dump(c.data)
			if *updateFlag {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(path, []byte(dump), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run TestGolden -update to create it")
			require.Equal(t, string(want), dump)

			seq, err := segment.DecodeHeader(c.data)
			require.NoError(t, err)
			require.Equal(t, uint32(1), seq)
			r, got := scanAll(t, c.data, 1, false)
			require.Equal(t, segment.Report{End: len(c.data), Records: 4, Sealed: true, Tail: segment.EndClean}, r)
			require.Equal(t, []string{"hello", "a", "", "xyz"}, bodies(got))
		})
	}
}

func bodies(fs []segment.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f.Body)
	}
	return out
}

func TestFrameRoundTrip(t *testing.T) {
	rng := newRand(t)
	type kp struct {
		kind  segment.Kind
		place segment.Place
	}
	kps := []kp{
		{segment.KindRecord, segment.Full},
		{segment.KindRecord, segment.First},
		{segment.KindRecord, segment.Middle},
		{segment.KindRecord, segment.Last},
		{segment.KindPadding, segment.Full},
		{segment.KindSeal, segment.Full},
	}
	for _, n := range []int{0, 1, 64 << 10} {
		for _, c := range kps {
			for _, prefix := range []int{0, 5} {
				t.Run(fmt.Sprintf("%s/place%d/body%d/prefix%d", c.kind, c.place, n, prefix), func(t *testing.T) {
					body := make([]byte, n)
					for i := range body {
						body[i] = byte(rng.Uint32())
					}
					seq, synced := rng.Uint32()|1, rng.Uint32()
					dst := bytes.Repeat([]byte{0xee}, prefix)
					data := segment.AppendFrame(dst, seq, 0, synced, c.kind, c.place, body)
					require.Len(t, data, prefix+segment.Size(n))
					require.Equal(t, bytes.Repeat([]byte{0xee}, prefix), data[:prefix], "AppendFrame changed dst")

					f, err := segment.Decode(data, prefix, seq)
					require.NoError(t, err)
					require.Equal(t, segment.Frame{Offset: prefix, Seq: seq, Synced: synced, Kind: c.kind, Place: c.place, Body: body}, f)
					require.Equal(t, len(data), f.End())
					require.Equal(t, len(f.Body), cap(f.Body), "Body must not let an append overwrite what follows")

					// Trailing bytes after the frame do not matter.
					more := append(data[:len(data):len(data)], 1, 2, 3)
					f2, err := segment.Decode(more, prefix, seq)
					require.NoError(t, err)
					require.Equal(t, f, f2)

					// Another segment's sequence is refused.
					_, err = segment.Decode(data, prefix, seq+1)
					require.ErrorIs(t, err, segment.ErrForeignFrame)
				})
			}
		}
	}
}

func TestSize(t *testing.T) {
	for _, n := range []int{0, 1, 2, 127, 128, 1 << 10, 64 << 10} {
		require.Equal(t, segment.FrameHeaderSize+n, segment.Size(n))
		require.Len(t, segment.AppendFrame(nil, 1, 0, 0, segment.KindRecord, segment.Full, make([]byte, n)), segment.Size(n))
	}
}

func TestPlaces(t *testing.T) {
	tests := []struct {
		i, n  int
		place segment.Place
	}{
		{0, 1, segment.Full},
		{0, 2, segment.First}, {1, 2, segment.Last},
		{0, 4, segment.First}, {1, 4, segment.Middle}, {2, 4, segment.Middle}, {3, 4, segment.Last},
	}
	for _, tt := range tests {
		require.Equal(t, tt.place, segment.PlaceOf(tt.i, tt.n), "PlaceOf(%d, %d)", tt.i, tt.n)
	}
	opens := map[segment.Place]bool{segment.Full: true, segment.First: true}
	closes := map[segment.Place]bool{segment.Full: true, segment.Last: true}
	for _, p := range []segment.Place{segment.Full, segment.First, segment.Middle, segment.Last} {
		require.Equal(t, opens[p], p.Opens(), "place %d", p)
		require.Equal(t, closes[p], p.Closes(), "place %d", p)
	}
	require.Equal(t, "record", segment.KindRecord.String())
	require.Equal(t, "seal", segment.KindSeal.String())
	require.Equal(t, "padding", segment.KindPadding.String())
	require.Equal(t, "kind(9)", segment.Kind(9).String())
}

// TestDecodeBitFlips flips every bit of a small frame, header and body, and
// checks that Decode reports it with the error the flipped field calls for.
func TestDecodeBitFlips(t *testing.T) {
	const seq, synced = 0x01020304, 0x2000
	for _, place := range []segment.Place{segment.Full, segment.First, segment.Middle, segment.Last} {
		frame := segment.AppendFrame(nil, seq, 0, synced, segment.KindRecord, place, []byte("hello"))
		next := segment.AppendFrame(nil, seq, 0, synced, segment.KindRecord, segment.Full, bytes.Repeat([]byte("x"), 64))
		contexts := map[string][]byte{
			"alone":          frame,
			"followed":       append(append([]byte(nil), frame...), next...),
			"followed-zeros": append(append([]byte(nil), frame...), make([]byte, 64)...),
		}
		for name, orig := range contexts {
			for bit := 0; bit < 8*len(frame); bit++ {
				data := append([]byte(nil), orig...)
				data[bit/8] ^= 1 << (bit % 8)
				f, err := segment.Decode(data, 0, seq)
				require.Error(t, err, "place %d, %s, bit %d: Decode accepted %+v", place, name, bit, f)
				var want []error
				switch at := bit / 8; {
				case at < 4: // crc
					want = []error{segment.ErrChecksum}
				case at < 8: // length
					want = []error{segment.ErrShortFrame, segment.ErrChecksum}
				case at < 12: // sequence
					want = []error{segment.ErrForeignFrame}
				default: // synced, type, body
					want = []error{segment.ErrChecksum}
				}
				require.True(t, isOneOf(err, want...), "place %d, %s, bit %d: %v, want one of %v", place, name, bit, err, want)
			}
		}
	}
}

// TestDecodeRandomDamage damages frames at random in several places at once:
// Decode may only ever return the frame that was written.
func TestDecodeRandomDamage(t *testing.T) {
	rng := newRand(t)
	for i := 0; i < 20000; i++ {
		n := rng.IntN(40)
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		seq := rng.Uint32()
		orig := segment.AppendFrame(nil, seq, 0, rng.Uint32(), segment.KindRecord, segment.PlaceOf(rng.IntN(3), 3), body)
		want, err := segment.Decode(orig, 0, seq)
		require.NoError(t, err)
		data := append([]byte(nil), orig...)
		for k := 1 + rng.IntN(4); k > 0; k-- {
			data[rng.IntN(len(data))] ^= byte(1 + rng.UintN(255))
		}
		if f, err := segment.Decode(data, 0, seq); err == nil {
			require.Equal(t, orig, data, "Decode accepted damaged bytes")
			require.Equal(t, want, f)
		}
	}
}

func isOneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

func TestDecodeErrors(t *testing.T) {
	const seq = 9
	valid := segment.AppendFrame(nil, seq, 0, 0, segment.KindRecord, segment.Full, []byte("body"))
	// withType re-encodes a frame with a raw type byte and a valid checksum.
	withType := func(typ byte, body []byte) []byte {
		b := segment.AppendFrame(nil, seq, 0, 0, segment.KindRecord, segment.Full, body)
		b[16] = typ
		binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], crc32c))
		return b
	}
	hugeLength := append([]byte(nil), valid...)
	binary.LittleEndian.PutUint32(hugeLength[4:], 1<<31)
	// Only the sequence field is not zero: the bytes are not zero-filled
	// space but a frame header of another segment.
	foreignAfterZeros := make([]byte, 64)
	binary.LittleEndian.PutUint32(foreignAfterZeros[8:], seq+1)

	tests := []struct {
		name string
		data []byte
		off  int
		want error
	}{
		{"zeros", make([]byte, 64), 0, segment.ErrZeroFrame},
		{"zeros shorter than a frame header", make([]byte, 40), 30, segment.ErrZeroFrame},
		{"zero header then bytes", append(make([]byte, 17), 1, 2, 3), 0, segment.ErrZeroFrame},
		{"empty data", nil, 0, segment.ErrShortFrame},
		{"offset at the end", valid, len(valid), segment.ErrShortFrame},
		{"offset past the end", valid, len(valid) + 10, fs.ErrInvalid},
		{"negative offset", valid, -1, fs.ErrInvalid},
		{"header cut", valid[:16], 0, segment.ErrShortFrame},
		{"body cut", valid[:len(valid)-1], 0, segment.ErrShortFrame},
		{"length above MaxBody", hugeLength, 0, segment.ErrShortFrame},
		{"foreign sequence", segment.AppendFrame(nil, seq+1, 0, 0, segment.KindRecord, segment.Full, nil), 0, segment.ErrForeignFrame},
		{"foreign sequence zero", segment.AppendFrame(nil, 0, 0, 0, segment.KindRecord, segment.Full, nil), 0, segment.ErrForeignFrame},
		{"foreign sequence after a zero checksum and length", foreignAfterZeros, 0, segment.ErrForeignFrame},
		{"bad checksum", append(append([]byte(nil), valid[:len(valid)-1]...), valid[len(valid)-1]^1), 0, segment.ErrChecksum},
		{"kind 0", withType(0x00, nil), 0, segment.ErrBadType},
		{"kind 4", withType(0x04, nil), 0, segment.ErrBadType},
		{"kind 15", withType(0x0f, nil), 0, segment.ErrBadType},
		{"place 4", withType(0x41, nil), 0, segment.ErrBadType},
		{"high type bits", withType(0x81, nil), 0, segment.ErrBadType},
		{"seal in a group", withType(byte(segment.KindSeal)|byte(segment.First)<<4, nil), 0, segment.ErrBadType},
		{"padding in a group", withType(byte(segment.KindPadding)|byte(segment.Last)<<4, nil), 0, segment.ErrBadType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := segment.Decode(tt.data, tt.off, seq)
			require.ErrorIs(t, err, tt.want)
			require.Equal(t, segment.Frame{}, f)
			require.Contains(t, err.Error(), fmt.Sprintf("offset %d", tt.off))
		})
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, seq := range []uint32{1, 2, 0x12345678, ^uint32(0)} {
		h := segment.EncodeHeader(seq, 0)
		got, err := segment.DecodeHeader(h[:])
		require.NoError(t, err)
		require.Equal(t, seq, got)
		// The header is read from the start of a whole file.
		got, err = segment.DecodeHeader(append(h[:], make([]byte, 100)...))
		require.NoError(t, err)
		require.Equal(t, seq, got)
	}
}

func TestDecodeHeaderErrors(t *testing.T) {
	good := segment.EncodeHeader(5, 0)
	// modified returns the good header changed by fn, with its checksum
	// recomputed when fix is set.
	modified := func(fix bool, fn func(h []byte)) []byte {
		h := append([]byte(nil), good[:]...)
		fn(h)
		if fix {
			binary.LittleEndian.PutUint32(h[28:], crc32.Checksum(h[:28], crc32c))
		}
		return h
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short", good[:31]},
		{"zeros", make([]byte, 32)},
		{"bad magic", modified(true, func(h []byte) { h[0] = 'X' })},
		{"magic without its zero byte", modified(true, func(h []byte) { h[7] = ' ' })},
		{"version 0", modified(true, func(h []byte) { binary.LittleEndian.PutUint16(h[8:], 0) })},
		{"bad checksum", modified(false, func(h []byte) { h[28] ^= 1 })},
		{"sequence changed", modified(false, func(h []byte) { h[12] ^= 1 })},
		{"sequence 0", modified(true, func(h []byte) { binary.LittleEndian.PutUint32(h[12:], 0) })},
		{"flags changed", modified(false, func(h []byte) { h[10] = 1 })},
		{"reserved changed", modified(false, func(h []byte) { h[20] = 1 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := segment.DecodeHeader(tt.data)
			require.ErrorIs(t, err, segment.ErrBadHeader)
		})
	}
	// A header that verifies but names a later version is no damage: it is
	// refused as unsupported, never as a bad header (which salvage would
	// rewrite).
	for _, v := range []uint16{segment.Version + 1, 0xffff} {
		_, err := segment.DecodeHeader(modified(true, func(h []byte) { binary.LittleEndian.PutUint16(h[8:], v) }))
		require.ErrorIs(t, err, segment.ErrVersion, "version %d", v)
		require.ErrorIs(t, err, errors.ErrUnsupported, "version %d", v)
		require.NotErrorIs(t, err, segment.ErrBadHeader, "version %d", v)
		require.ErrorContains(t, err, fmt.Sprintf("format version %d", v))
	}
	// Every single bit flip of the header is refused.
	for bit := 0; bit < 8*segment.HeaderSize; bit++ {
		h := append([]byte(nil), good[:]...)
		h[bit/8] ^= 1 << (bit % 8)
		_, err := segment.DecodeHeader(h)
		require.ErrorIs(t, err, segment.ErrBadHeader, "bit %d", bit)
	}
}
