package segment

import (
	"encoding/binary"

	"github.com/klauspost/crc32"
)

// Unwritten reports whether data, the whole file of segment seq (header
// included), holds past its header only what the file held before it
// became segment seq, so that no frame was ever written to it: zeros (a
// file made for the segment, written full of zeros or allocated), or, at
// HeaderSize, what a reused file held there as the segment it was before.
// That is one of two things. The frames the log wrote there: a frame
// naming another segment and the frame after it, both verifying under
// one salt (the one the first frame's checksum gives) and claiming no
// sync past their own offsets, since a segment the log retires holds a
// record at least, then its seal, and its first frames are where the log
// wrote them. Or the seal a salvage wrote at the header of a segment it
// emptied (its file too short for a header, say): a seal naming another
// segment, with an empty body and a synced value of 0, then zeros to the
// end of the file (see formerSalvageSeal).
//
// Anything else is taken for frames written to this segment and damaged
// since, even when a scan finds none of them: a first frame whose
// sequence field is damaged (it names another segment) or whose header
// is zeroed reads as no frame of this segment, so its scan ends cleanly
// with no record, as that of a segment nothing was written to does. A
// lone frame verifies under the salt its own checksum gives, whatever
// its bytes, and never vouches for itself; a damaged frame gives a salt
// under which the bytes after it do not verify as a frame (but by a
// chance of one in 2^32), whether they are zeros or a reused file's
// stale bytes, which lie across its former frames there. A reused file
// whose former first frames were damaged before it was reused reads as
// written too, and so does one whose former first frame is a seal
// salvage wrote over a damaged frame, with that frame's bytes after it:
// Unwritten errs towards keeping records (the log does not reuse such a
// file).
func Unwritten(data []byte, seq uint32) bool {
	if len(data) < HeaderSize {
		return false
	}
	return allZero(data[HeaderSize:]) || formerFrames(data, seq) || formerSalvageSeal(data, seq)
}

// formerFrames reports whether the bytes of data at HeaderSize are frames
// of a segment other than seq, as Unwritten recognises them.
func formerFrames(data []byte, seq uint32) bool {
	off := HeaderSize
	if off > len(data)-FrameHeaderSize {
		return false
	}
	former := binary.LittleEndian.Uint32(data[off+8:])
	n := binary.LittleEndian.Uint32(data[off+4:])
	end := off + FrameHeaderSize + int(n)
	if former == seq || former == 0 || n > MaxBody || end > len(data) || end < off {
		return false
	}
	// The salt under which the first frame verifies (see RecoverSalt).
	diff := binary.LittleEndian.Uint32(data[off:]) ^ crc32.Update(0, castagnoli, data[off+4:end])
	salt := mulmod(diff, xPowMinus8(end-off-4))
	for _, at := range []int{off, end} {
		f, err := decode(data, at, former, salt)
		if err != nil || int64(f.Synced) > int64(at) {
			return false
		}
	}
	return true
}

// formerSalvageSeal reports whether data holds at HeaderSize the seal a
// salvage wrote at the header of a segment other than seq, with nothing
// after it: a seal frame (kind seal, a group of one, an empty body)
// naming that segment and claiming a synced value of 0, then zeros to
// the end of the file. Salvage seals a segment it emptied so (a file too
// short for a header, replaced by an empty segment of full size), which
// the log may then retire and reuse as a later segment.
//
// Its checksum proves nothing (an empty body verifies under the salt its
// checksum gives, whatever it is); its fields do. No frame the log writes
// to a segment looks so: its records and its own seals claim a synced
// value of HeaderSize at least (the header is durable before the
// segment is used), and name the segment itself. Damage to the first
// frame written to segment seq would have to set its sequence field to
// another segment that is not 0, its length and synced fields to 0 and
// its type to exactly a seal's, and leave every byte after it zero: that
// is no damage a device does (a zeroed or torn range gives sequence 0
// and type 0, or leaves the frame's own bytes after it), but a forged
// frame. A write torn so that the page holding the first frame kept the
// former seal leaves the write's later bytes after it, not zeros, unless
// none of them reached the file, when nothing written is there.
func formerSalvageSeal(data []byte, seq uint32) bool {
	off := HeaderSize
	if off > len(data)-FrameHeaderSize {
		return false
	}
	h := data[off : off+FrameHeaderSize]
	former := binary.LittleEndian.Uint32(h[8:])
	return former != seq && former != 0 &&
		binary.LittleEndian.Uint32(h[4:]) == 0 && // length
		binary.LittleEndian.Uint32(h[12:]) == 0 && // synced
		h[16] == byte(KindSeal)|byte(Full)<<4 &&
		allZero(data[off+FrameHeaderSize:])
}
