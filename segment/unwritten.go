package segment

import (
	"encoding/binary"

	"github.com/klauspost/crc32"
)

// Unwritten reports whether data, the whole file of segment seq (header
// included), holds past its header only what the file held before it
// became segment seq, so that no frame was ever written to it: zeros (a
// file made for the segment, written full of zeros or allocated), or, at
// HeaderSize, the frames of the segment a reused file was before. Those
// are recognised as a frame naming another segment and the frame after
// it, both verifying under one salt (the one the first frame's checksum
// gives) and claiming no sync past their own offsets: a segment the log
// retires holds a record at least, then its seal, and its first frames
// are where the log wrote them.
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
// written too: Unwritten errs towards keeping records.
func Unwritten(data []byte, seq uint32) bool {
	if len(data) < HeaderSize {
		return false
	}
	return allZero(data[HeaderSize:]) || formerFrames(data, seq)
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
