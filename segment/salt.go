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
// that must rewrite a damaged header (data is the whole file, header
// included). ok is false when it finds none.
//
// First the salt the damaged header still holds (the damage may be
// elsewhere in it), unless it reads 0: a frame of seq verifying under it
// anywhere in the file confirms it, its checksum being evidence from
// outside the frame (a frame written before the file became this segment,
// or forged in a body, could not know a salt drawn after). Not 0, which
// a zeroed header reads and anyone can write frames under; a version 1
// file's frames give 0 as below. The frames where the log wrote them are
// tried before any other offset, so that a body crafted to name seq at
// every turn spends none of the budget below before they are.
//
// Otherwise each frame gives a candidate: the salt under which its own
// checksum verifies. A damaged frame gives a wrong one, which it alone
// would confirm, so the candidate is taken only when the frame that
// follows it verifies under it too. The frames are walked as the log wrote
// them, each where the one before ends (by its length field), so that the
// walk never looks inside a body, which may hold frames under a salt of
// its writer's choosing that vouch for each other.
//
// Only where a run of zeros from the header took the first frame's
// checksum field and left no first frame (the zeros took the whole of the
// first frame's header, or stopped in its length: a chain that begins at
// a frame whose checksum field reads zero, and ends without giving the
// salt, is taken for zeros, and the search goes on past where it began)
// does it search byte by byte for the first bytes that can start a frame
// of seq; and it takes a chain found so only if its frames claim a sync
// the log could have made before them, of the first batch (at most the
// header) or ending at or after where the chain begins, never one that
// ended inside the bytes skipped as the first frame's body. It ends where
// the chain does. Bytes at the first frame's place that are neither zeros
// nor a frame of seq are the stale bytes of the file's previous segment
// (a file reused, whose own frames were never written or were lost): it
// does not search them, since their bodies may hold frames of seq
// (another log's, shipped as records) that vouch for each other.
//
// So the salt is lost where the salt field and a frame near the start
// were both damaged otherwise than by such a run of zeros (a bit flipped
// in each, say), where they were and the frame was a sealed segment's only
// record, where a last segment held one record only and the salt field was
// damaged too, and where the zeros took frames of several batches, so
// that the first intact frames claim a sync inside them. A forged chain
// could be taken only from bytes the walk or the search took for the
// segment's own: what damage left of the first frame's body, stale bytes
// forged to claim the first batch's sync where the zeros took every frame
// of a reused file, or stale bytes where a lone record ends, with the salt
// field damaged too.
//
// The work is bounded (checksums over at most [saltBudget] times the
// file's bytes), so that a file whose bytes name seq at every turn (a
// payload crafted so) costs little more than reading it.
//
// A checksum is linear in its initial value: Update(salt, b) is
// Update(0, b) xor salt·x^(8·len(b)) modulo the polynomial (in the
// reflected representation the table uses), so the salt is that
// difference multiplied by x^(-8·len(b)).
func RecoverSalt(data []byte, seq uint32) (salt uint32, ok bool) {
	if len(data) < HeaderSize+FrameHeaderSize {
		return 0, false
	}
	budget := perByte(saltBudget, len(data))
	// frameAt returns the end of the frame at off if its header names
	// seq and its length fits in data, charging the budget for the
	// checksum a decode of it costs.
	frameAt := func(off int) (int, bool) {
		if off > len(data)-FrameHeaderSize || binary.LittleEndian.Uint32(data[off+8:]) != seq {
			return 0, false
		}
		n := binary.LittleEndian.Uint32(data[off+4:])
		end := off + FrameHeaderSize + int(n)
		if n > MaxBody || end > len(data) || end < off {
			return 0, false
		}
		budget -= end - off
		return end, true
	}
	verifies := func(off int, salt uint32) bool {
		f, err := decode(data, off, seq, salt)
		return err == nil && int64(f.Synced) <= int64(off) // not int: 32 bits on some builds
	}
	if s := binary.LittleEndian.Uint32(data[16:]); s != 0 {
		// The frames where the log wrote them first, each where the one
		// before ends, through frames that fail (a damaged body keeps
		// its length): at most one checksum per byte, so that a body
		// crafted to name seq at every turn, in a damaged first frame,
		// cannot spend the budget before the frames after it are
		// reached. Then anywhere, byte by byte.
		for off := HeaderSize; ; {
			end, ok := frameAt(off)
			if !ok {
				break
			}
			if verifies(off, s) {
				return s, true
			}
			off = end
		}
		budget = perByte(saltBudget, len(data))
		for off := HeaderSize; off <= len(data)-FrameHeaderSize && budget > 0; off++ {
			if _, ok := frameAt(off); ok && verifies(off, s) {
				return s, true
			}
		}
		budget = perByte(saltBudget, len(data))
	}
	// The search byte by byte skips only what a run of zeros from the
	// header into the first frame leaves: such a run zeroes the first
	// frame's checksum field, as a search needs (the first frame's
	// header no longer naming seq, or a chain from it that began at a
	// checksum reading zero). Where the bytes at the first frame's place
	// are not zeros, they are a frame of seq (the chain from it gives the
	// salt or nothing) or not a frame of this segment at all: the stale
	// bytes of the file's previous segment, a file reused before any
	// frame of its own was written, which must give nothing.
	searchable := allZero(data[HeaderSize : HeaderSize+4])
	// A chain the search found at start follows a first frame that spans
	// [HeaderSize, start), or frames the zeros took: its frames claim
	// synced offsets the log wrote, those of the first batch (at most
	// the header) or ends of frames of the chain (at least start). A
	// frame that claims an offset between the two claims a sync that
	// ended inside bytes the search skipped as one frame's body: stale
	// bytes of the previous segment, whose bodies may hold frames of seq
	// claiming any offset, are given up.
	fits := func(off, start int) bool {
		synced := int64(binary.LittleEndian.Uint32(data[off+12:]))
		return synced <= HeaderSize || synced >= int64(start)
	}
	// start is where the chain being walked began (-1: none yet, the
	// search for its first frame goes on). A chain that began at a frame
	// whose checksum field reads zero, and ends without giving the salt,
	// is given up for the search, which goes on past where it began: four
	// zero bytes there are far likelier zeros written over a frame (a run
	// of them from the header that stopped before the sequence field,
	// leaving a length, zeroed in part, that still fits and leads into the
	// frame's body) than a checksum that is zero, once in 2^32 frames; a
	// true one starts a chain that gives the salt.
	start, zeroStart := -1, false
	for off := HeaderSize; budget > 0; {
		end, ok := frameAt(off)
		if !ok && start >= 0 {
			if !zeroStart {
				// The chain ends here: what follows is zeros, stale
				// bytes of the file's previous segment (whose bodies
				// may hold frames naming this one), or damage.
				return 0, false
			}
			off, start = start+1, -1
			continue
		}
		if !ok {
			if off > len(data)-FrameHeaderSize || !searchable {
				return 0, false
			}
			off++ // damage at the start: search for the first frame
			continue
		}
		if start < 0 {
			start, zeroStart = off, binary.LittleEndian.Uint32(data[off:]) == 0
		}
		diff := binary.LittleEndian.Uint32(data[off:]) ^ crc32.Update(0, castagnoli, data[off+4:end])
		salt := mulmod(diff, xPowMinus8(end-off-4))
		if verifies(off, salt) && fits(off, start) {
			if _, ok := frameAt(end); ok && verifies(end, salt) && fits(end, start) {
				return salt, true
			}
		}
		off = end
	}
	return 0, false
}

// saltBudget bounds RecoverSalt's work per search, in checksummed bytes per
// byte of the file.
const saltBudget = 4

// In the reflected representation of the CRC's register, bit 31 is x^0 and
// bit 0 is x^31; one shift of the register with a zero input bit, r>>1
// xored with the polynomial when the bit shifted out was 1, multiplies by
// x modulo the polynomial.
const (
	poly = crc32.Castagnoli
	one  = 1 << 31 // x^0
)

// mulmod returns a·b modulo the polynomial.
func mulmod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(one); m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		b = b>>1 ^ poly&-(b&1) // b·x
	}
	return p
}

// xInverse is x^-1 modulo the polynomial: the register that one shift
// takes to x^0. The polynomial's top bit, which r>>1 never has, says that
// the shift xored it in, so a 1 was shifted out.
const xInverse = (one^poly)<<1 | 1

// xPowMinus8 returns x^(-8n) modulo the polynomial, by squaring.
func xPowMinus8(n int) uint32 {
	base := uint32(one)
	for range 8 {
		base = mulmod(base, xInverse)
	}
	r := uint32(one)
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			r = mulmod(r, base)
		}
		base = mulmod(base, base)
	}
	return r
}
