package segment

import (
	"encoding/binary"
	"fmt"
	iofs "io/fs"
	"slices"

	"github.com/klauspost/crc32"
)

// Format constants. They are FROZEN: see the package documentation.
const (
	// Version is the format version written in every header. Version 1
	// had no salt (bytes 16..20 of its header are zero, and its frames'
	// checksums are unseeded, as with salt 0); this build reads it and
	// appends to it as such, and writes version 2 in every file it makes.
	Version = 2
	// HeaderSize is the size of the file header.
	HeaderSize = 32
	// FrameHeaderSize is the size of a frame header; a frame is this plus
	// its body.
	FrameHeaderSize = 17
	// MaxBody bounds one frame's body.
	MaxBody = 1<<31 - 1
)

var magic = [8]byte{'W', 'A', 'L', 'B', 'S', 'E', 'G', 0}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Kind says what a frame holds.
type Kind uint8

// Frame kinds. Zero is never written.
const (
	KindRecord  Kind = 1 // a caller's record
	KindSeal    Kind = 2 // the segment is complete
	KindPadding Kind = 3 // bytes skipped by salvage
)

func (k Kind) String() string {
	switch k {
	case KindRecord:
		return "record"
	case KindSeal:
		return "seal"
	case KindPadding:
		return "padding"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Place is a frame's place in its atomic group.
type Place uint8

// Places in a group.
const (
	Full   Place = 0 // the whole group
	First  Place = 1
	Middle Place = 2
	Last   Place = 3
)

// PlaceOf returns the place of frame i in a group of n frames.
func PlaceOf(i, n int) Place {
	switch {
	case n == 1:
		return Full
	case i == 0:
		return First
	case i == n-1:
		return Last
	}
	return Middle
}

// Opens reports whether a frame at this place starts a group.
func (p Place) Opens() bool { return p == Full || p == First }

// Closes reports whether a frame at this place ends a group.
func (p Place) Closes() bool { return p == Full || p == Last }

// Frame is one decoded frame. Body aliases the decoded data: it is valid as
// long as that data is, and must not be modified.
type Frame struct {
	Offset int    // where the frame starts in the file
	Seq    uint32 // the segment it belongs to
	Synced uint32 // bytes of the segment durable when it was written
	Kind   Kind
	Place  Place
	Body   []byte
}

// End is the offset just past the frame.
func (f Frame) End() int { return f.Offset + FrameHeaderSize + len(f.Body) }

// Size returns the encoded size of a frame with a body of n bytes.
func Size(n int) int { return FrameHeaderSize + n }

// AppendFrame appends to dst the encoding of one frame and returns the
// extended slice. It never fails for a body of at most [MaxBody] bytes; the
// caller checks the size before.
//
// Kind and place are not checked: they are written as given, so that tests
// can build the frames a decoder must refuse. A kind or place this package
// does not define, or a seal or padding inside a group, makes a frame that
// [Decode] refuses with [ErrBadType]. A kind or place too large for its 4
// bits of the type byte, which would spill into the other field and could
// name another valid frame (kind 17 reads as a record that opens a group),
// is written as kind 0, which no frame ever has.
//
// salt is the salt of the segment's header (see [NewSalt]): the frame's
// checksum is seeded with it, so the frame verifies only in a file whose
// header carries that salt.
func AppendFrame(dst []byte, seq, salt, synced uint32, kind Kind, place Place, body []byte) []byte {
	start := len(dst)
	var h [FrameHeaderSize]byte
	binary.LittleEndian.PutUint32(h[4:], uint32(len(body)))
	binary.LittleEndian.PutUint32(h[8:], seq)
	binary.LittleEndian.PutUint32(h[12:], synced)
	h[16] = uint8(kind) | uint8(place)<<4
	if kind > 0x0f || place > 0x0f {
		h[16] = 0xf0 // kind 0, place 15: refused by Decode
	}
	dst = append(dst, h[:]...)
	dst = append(dst, body...)
	sum := crc32.Update(salt, castagnoli, dst[start+4:])
	binary.LittleEndian.PutUint32(dst[start:], sum)
	return dst
}

// Decode decodes the frame that starts at off in data, which holds a whole
// segment file (or its prefix), and checks that it belongs to segment seq:
// that it names seq and that its checksum, seeded with the salt of data's
// header, verifies. (Data that does not start with a header of version 2
// or later has salt 0: a version 1 file, or frames a test built alone.)
// It returns ErrZeroFrame, ErrShortFrame, ErrForeignFrame, ErrChecksum or
// ErrBadType (wrapped with the offset) when there is no valid frame there.
//
// An offset outside the data (before its start or past its end), where no
// byte could be read as a frame, is refused with an error wrapping
// [io/fs.ErrInvalid]. The offset just past the data is inside: it is where
// the next frame would go, and none is there yet (ErrShortFrame).
func Decode(data []byte, off int, seq uint32) (Frame, error) {
	return decode(data, off, seq, SaltOf(data))
}

// decode is Decode with the salt given.
func decode(data []byte, off int, seq, salt uint32) (Frame, error) {
	if off < 0 || off > len(data) {
		return Frame{}, fmt.Errorf("segment: decode at offset %d: outside the data [0, %d]: %w", off, len(data), iofs.ErrInvalid)
	}
	// off > len-FrameHeaderSize, not off+FrameHeaderSize > len, which
	// overflows for offsets near MaxInt.
	if off > len(data)-FrameHeaderSize {
		if off < len(data) && allZero(data[off:]) {
			return Frame{}, fmt.Errorf("offset %d: %w", off, ErrZeroFrame)
		}
		return Frame{}, fmt.Errorf("offset %d: %w", off, ErrShortFrame)
	}
	h := data[off : off+FrameHeaderSize]
	frameSeq := binary.LittleEndian.Uint32(h[8:])
	if frameSeq != seq {
		if allZero(h) {
			return Frame{}, fmt.Errorf("offset %d: %w", off, ErrZeroFrame)
		}
		return Frame{}, fmt.Errorf("offset %d: sequence %d, want %d: %w", off, frameSeq, seq, ErrForeignFrame)
	}
	n := binary.LittleEndian.Uint32(h[4:])
	end := off + FrameHeaderSize + int(n)
	if n > MaxBody || end > len(data) || end < off {
		return Frame{}, fmt.Errorf("offset %d: length %d: %w", off, n, ErrShortFrame)
	}
	want := binary.LittleEndian.Uint32(h[0:])
	if got := crc32.Update(salt, castagnoli, data[off+4:end]); got != want {
		return Frame{}, fmt.Errorf("offset %d: %w", off, ErrChecksum)
	}
	if !validType(h[16]) {
		return Frame{}, fmt.Errorf("offset %d: type %#x: %w", off, h[16], ErrBadType)
	}
	kind, place := Kind(h[16]&0x0f), Place(h[16]>>4)
	return Frame{
		Offset: off,
		Seq:    seq,
		Synced: binary.LittleEndian.Uint32(h[12:]),
		Kind:   kind,
		Place:  place,
		Body:   data[off+FrameHeaderSize : end : end],
	}, nil
}

// validType reports whether t is the type byte of a frame: a kind this
// package defines, a place in a group, and no place but full for a seal or
// a padding.
func validType(t byte) bool {
	kind, place := Kind(t&0x0f), Place(t>>4)
	return kind >= KindRecord && kind <= KindPadding && place <= Last && (kind == KindRecord || place == Full)
}

// ownHeader reports whether the bytes at off start a frame header naming
// segment seq, whatever the rest of the frame holds.
func ownHeader(data []byte, off int, seq uint32) bool {
	return off+12 <= len(data) && binary.LittleEndian.Uint32(data[off+8:]) == seq
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// EncodeHeader returns the file header of segment seq whose frames are
// salted with salt.
func EncodeHeader(seq, salt uint32) [HeaderSize]byte {
	var h [HeaderSize]byte
	copy(h[:8], magic[:])
	binary.LittleEndian.PutUint16(h[8:], Version)
	binary.LittleEndian.PutUint32(h[12:], seq)
	binary.LittleEndian.PutUint32(h[16:], salt)
	binary.LittleEndian.PutUint32(h[28:], crc32.Update(0, castagnoli, h[:28]))
	return h
}

// DecodeHeader verifies a file header and returns its sequence, which is
// never 0. [SaltOf] returns the salt. A header that verifies but names a
// later version, or sets a flag or a reserved byte (0 in every header of
// the versions this build reads), is refused with [ErrVersion].
func DecodeHeader(data []byte) (uint32, error) {
	if len(data) < HeaderSize {
		return 0, fmt.Errorf("%d bytes, want %d: %w", len(data), HeaderSize, ErrBadHeader)
	}
	h := data[:HeaderSize]
	if [8]byte(h[:8]) != magic {
		return 0, fmt.Errorf("magic %q: %w", h[:8], ErrBadHeader)
	}
	if got := binary.LittleEndian.Uint32(h[28:]); got != crc32.Update(0, castagnoli, h[:28]) {
		return 0, fmt.Errorf("header checksum: %w", ErrBadHeader)
	}
	v := binary.LittleEndian.Uint16(h[8:])
	if v > Version {
		return 0, fmt.Errorf("format version %d, written by a later build; this build reads version %d: %w", v, Version, ErrVersion)
	} else if v == 0 {
		return 0, fmt.Errorf("format version %d, which no build writes: %w", v, ErrBadHeader)
	}
	// The header verifies, so these were written on purpose: by a later
	// build that gave them a meaning, which reading them as 0 would
	// ignore.
	if flags := binary.LittleEndian.Uint16(h[10:]); flags != 0 {
		return 0, fmt.Errorf("flags %#04x, which this build does not know: written by a later build; this build reads flags 0: %w", flags, ErrVersion)
	}
	reserved := h[20:28]
	if v == 1 {
		reserved = h[16:28] // the salt came with version 2
	}
	if i := slices.IndexFunc(reserved, func(b byte) bool { return b != 0 }); i >= 0 {
		return 0, fmt.Errorf("reserved byte %d is %#02x, which this build does not know: written by a later build; this build reads it as 0: %w",
			HeaderSize-4-len(reserved)+i, reserved[i], ErrVersion)
	}
	seq := binary.LittleEndian.Uint32(h[12:])
	if seq == 0 {
		// Never written (Create refuses it): zero-filled space would name
		// that segment.
		return 0, fmt.Errorf("sequence 0, which no segment has: %w", ErrBadHeader)
	}
	return seq, nil
}
