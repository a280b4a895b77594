package fuzz

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
)

// frameErrors are the errors segment.Decode documents.
var frameErrors = []error{segment.ErrZeroFrame, segment.ErrShortFrame, segment.ErrForeignFrame, segment.ErrChecksum, segment.ErrBadType}

func isFrameError(err error) bool {
	for _, e := range frameErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// validType reports whether a frame of this kind and place may exist.
func validType(k segment.Kind, p segment.Place) bool {
	return k >= segment.KindRecord && k <= segment.KindPadding && p <= segment.Last &&
		(k == segment.KindRecord || p == segment.Full)
}

// FuzzFrameDecode checks both directions of the frame encoding: arbitrary
// bytes decoded at an arbitrary offset (one outside the data refused as an
// invalid argument, and only such a one), and a frame encoded from fuzzed
// fields (type is the raw type byte: kind in its low 4 bits, place in the
// next 2, and garbage above) placed after a prefix of data. flip chooses a
// bit to flip and a cut.
func FuzzFrameDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, off int, seq, synced uint32, typ byte, body []byte, flip uint16) {
		// Any bytes, any offset.
		orig := bytes.Clone(data)
		fr, err := segment.Decode(data, off, seq)
		require.Equal(t, orig, data, "Decode changed its input")
		outside := off < 0 || off > len(data)
		require.Equal(t, outside, errors.Is(err, fs.ErrInvalid), "Decode at offset %d of %d bytes: %v", off, len(data), err)
		if outside {
			require.Equal(t, segment.Frame{}, fr, "a refused Decode returns a frame")
		} else if err != nil {
			require.True(t, isFrameError(err), "Decode failed with an undocumented error: %v", err)
			require.Equal(t, segment.Frame{}, fr, "a failed Decode returns a frame")
		} else {
			require.GreaterOrEqual(t, off, 0)
			require.Equal(t, off, fr.Offset)
			require.Equal(t, seq, fr.Seq)
			require.LessOrEqual(t, fr.End(), len(data), "the frame runs past the data")
			require.True(t, validType(fr.Kind, fr.Place), "decoded kind %v place %d", fr.Kind, fr.Place)
			require.Equal(t, len(fr.Body), cap(fr.Body), "the body must not give access past the frame")
			// Under the salt of data's header, as Decode read it.
			again := segment.AppendFrame(nil, seq, segment.SaltOf(data), fr.Synced, fr.Kind, fr.Place, fr.Body)
			require.Equal(t, data[off:fr.End()], again, "the decoded fields do not encode back to the bytes read")
		}

		// Fuzzed fields, encoded after a prefix of data.
		prefix := data[:min(len(data), 40):min(len(data), 40)]
		kind, place := segment.Kind(typ&0x0f), segment.Place(typ>>4)
		salt := segment.SaltOf(prefix)
		buf := segment.AppendFrame(prefix, seq, salt, synced, kind, place, body)
		require.Equal(t, data[:len(prefix)], buf[:len(prefix)], "AppendFrame changed what it appended to")
		require.Len(t, buf, len(prefix)+segment.Size(len(body)))
		if segment.SaltOf(buf) != salt {
			// The prefix starts as a header does but is too short for
			// one, and the frame's own bytes read as the header's rest:
			// no segment file holds that.
			return
		}
		at := len(prefix)
		got, err := segment.Decode(buf, at, seq)
		valid := validType(kind, place)
		if !valid {
			require.ErrorIs(t, err, segment.ErrBadType, "type byte %#x", typ)
			return
		}
		require.NoError(t, err, "a frame AppendFrame built does not decode")
		require.Equal(t, at, got.Offset)
		require.Equal(t, seq, got.Seq)
		require.Equal(t, synced, got.Synced)
		require.Equal(t, kind, got.Kind)
		require.Equal(t, place, got.Place)
		require.True(t, bytes.Equal(body, got.Body), "body")
		require.Equal(t, len(buf), got.End())

		// Another segment's frame, a cut, a flipped bit: all refused.
		_, err = segment.Decode(buf, at, seq+1)
		require.True(t, errors.Is(err, segment.ErrForeignFrame) || errors.Is(err, segment.ErrZeroFrame), "decoded as segment %d: %v", seq+1, err)
		cut := len(buf) - 1 - int(flip)%segment.Size(len(body))
		_, err = segment.Decode(buf[:cut], at, seq)
		require.True(t, errors.Is(err, segment.ErrShortFrame) || errors.Is(err, segment.ErrZeroFrame), "a frame cut to %d of %d bytes: %v", cut-at, len(buf)-at, err)
		bit := int(flip) % (8 * segment.Size(len(body)))
		if byteAt := bit / 8; byteAt < 4 || byteAt >= 8 { // the length field may legitimately announce another frame
			flipped := bytes.Clone(buf)
			flipped[at+byteAt] ^= 1 << (bit % 8)
			_, err = segment.Decode(flipped, at, seq)
			require.Error(t, err, "a frame with bit %d of byte %d flipped still decodes", bit%8, byteAt)
			require.True(t, isFrameError(err), "%v", err)
		}
	})
}

// frameSeeds are the generated inputs of FuzzFrameDecode.
func frameSeeds(testing.TB) []seed {
	rec := segment.AppendFrame(nil, 5, 0, 40, segment.KindRecord, segment.First, []byte("body"))
	seal := segment.AppendFrame(nil, 5, 0, 64, segment.KindSeal, segment.Full, nil)
	pad := segment.AppendFrame(nil, 5, 0, 0, segment.KindPadding, segment.Full, make([]byte, 9))
	// In a file, the frames are salted with its header's salt.
	const salt = 0x5a17f00d
	hdr := segment.EncodeHeader(5, salt)
	file := segment.AppendFrame(hdr[:], 5, salt, 40, segment.KindRecord, segment.First, []byte("body"))
	file = segment.AppendFrame(file, 5, salt, 64, segment.KindSeal, segment.Full, nil)
	file = append(file, make([]byte, 30)...)
	bad := bytes.Clone(rec)
	bad[20] ^= 0x40
	s := func(name string, data []byte, off corpusInt, seq, synced uint32, typ byte, body []byte, flip uint16) seed {
		return seed{name, []any{data, off, seq, synced, typ, body, flip}}
	}
	return []seed{
		s("record", rec, 0, 5, 40, 0x01, []byte("payload"), 3),
		s("record-middle", rec, 0, 5, 0, 0x21, nil, 100),
		s("seal", seal, 0, 5, 64, 0x02, nil, 1),
		s("padding", pad, 0, 5, 0, 0x03, make([]byte, 12), 200),
		s("in-file", file, corpusInt(segment.HeaderSize), 5, 32, 0x31, []byte("last of a group"), 17),
		s("seal-in-file", file, corpusInt(segment.HeaderSize+len(rec)), 5, 99, 0x02, nil, 9),
		s("foreign", rec, 0, 6, 7, 0x11, []byte("x"), 4),
		s("bad-checksum", bad, 0, 5, 1, 0x01, []byte{0}, 70),
		s("short", rec[:20], 0, 5, 2, 0x01, nil, 0),
		s("zeros", make([]byte, 40), 3, 0, 0, 0x00, nil, 0),
		s("kind-zero", segment.AppendFrame(nil, 5, 0, 0, segment.Kind(0), segment.Full, nil), 0, 5, 0, 0x00, nil, 5),
		s("seal-in-group", seal, 0, 5, 0, 0x12, nil, 6),
		s("bad-place", rec, 0, 5, 0, 0x41, []byte("p"), 7),
		// Bit 4 of the type byte: a Full record flipped to a First one,
		// still a valid type, which only the checksum tells apart.
		s("type-bit", rec, 0, 5, 0, 0x01, []byte("x"), 8*16+4),
		s("high-bits", rec, 0, 5, 0, 0xc1, []byte("h"), 8),
		s("negative-offset", rec, -1, 5, 0, 0x01, nil, 0),
		s("huge-offset", rec, math.MaxInt64, 5, 0, 0x01, nil, 0),
		s("near-max-offset", rec, math.MaxInt64-5, 5, 0, 0x01, nil, 0),
		s("min-offset", rec, math.MinInt64, 5, 0, 0x01, nil, 0),
		s("empty", nil, 0, 0, 0, 0x01, nil, 0),
		s("huge-length", []byte("\x00\x00\x00\x00\xff\xff\xff\xff\x05\x00\x00\x00\x00\x00\x00\x00\x01"), 0, 5, 0, 0x01, nil, 0),
	}
}
