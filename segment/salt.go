package segment

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/klauspost/crc32"
)

// A segment's salt is a random number drawn when a file becomes that
// segment (created or recycled), kept in its header, and used as the
// initial value of every frame's CRC-32C. A frame therefore verifies only
// in the file incarnation it was written to: not the stale frames a
// recycled file still holds from the segment it was before, whatever
// sequence they name, and not a frame that a record's body carries (a log
// shipping another log's frames, or a payload crafted to look like a
// frame), which the scan of a torn tail or a salvage would otherwise come
// upon when the file is recycled and meet as a frame of the new segment.

// SaltOf returns the salt of the segment whose file (or prefix) data is, as
// [Decode] uses it:
// the salt field of its header, when data starts with the magic of a
// header of version 2 or later, and 0 otherwise (version 1, which had no
// salt, or data that holds no header). The header's checksum is not
// checked here: a salt damaged since Open checked it makes every frame
// fail its checksum, so reads fail rather than succeed wrongly.
func SaltOf(data []byte) uint32 {
	if len(data) < HeaderSize || [8]byte(data[:8]) != magic || binary.LittleEndian.Uint16(data[8:]) < 2 {
		return 0
	}
	return binary.LittleEndian.Uint32(data[16:])
}

// NewSalt draws the salt of a segment file: random, so that no frame
// written before the file became this segment (a stale frame of a recycled
// file, or a frame some record's body carries, which a caller may have
// crafted) verifies in it.
func NewSalt() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint32(b[:])
}

// RecoverSalt finds the salt of segment seq from its frames, for a salvage
// that must rewrite a damaged header. Any frame that names seq gives a
// candidate: the salt under which its own checksum verifies. A damaged
// frame gives a wrong one, which it alone would confirm, so a candidate is
// taken only when the frame decodes under it (type, place, synced value
// not past its offset) and either is a seal, which carries no record, or
// is followed by a frame that decodes under the same salt. The first such
// candidate is returned; ok is false when there is none (no frame, or a
// last segment holding one record only: its record cannot be told from a
// damaged one, and is lost with the header).
//
// A checksum is linear in its initial value: Update(salt, b) is
// Update(0, b) xor salt·x^(8·len(b)) modulo the polynomial (in the
// reflected representation the table uses), so the salt is that
// difference multiplied by x^(-8·len(b)), which undoing one bit of the
// register's shift 8·len(b) times computes.
func RecoverSalt(data []byte, seq uint32) (salt uint32, ok bool) {
	for off := HeaderSize; off <= len(data)-FrameHeaderSize; off++ {
		if binary.LittleEndian.Uint32(data[off+8:]) != seq {
			continue
		}
		n := binary.LittleEndian.Uint32(data[off+4:])
		end := off + FrameHeaderSize + int(n)
		if n > MaxBody || end > len(data) || end < off {
			continue
		}
		diff := binary.LittleEndian.Uint32(data[off:]) ^ crc32.Update(0, castagnoli, data[off+4:end])
		salt := unshift(diff, 8*(end-off-4))
		f, err := decode(data, off, seq, salt)
		if err != nil || int(f.Synced) > off {
			continue
		}
		if f.Kind == KindSeal {
			return salt, true
		}
		if _, err := decode(data, f.End(), seq, salt); err == nil {
			return salt, true
		}
	}
	return 0, false
}

// unshift undoes bits steps of the reflected CRC-32C register's shift with
// a zero input bit: a step is r>>1, xored with the polynomial when the bit
// shifted out was 1, and the polynomial's top bit (which r>>1 never has)
// says which it was.
func unshift(r uint32, bits int) uint32 {
	const poly = crc32.Castagnoli
	for range bits {
		if r&(1<<31) != 0 {
			r = (r^poly)<<1 | 1
		} else {
			r <<= 1
		}
	}
	return r
}
