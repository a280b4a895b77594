package segment_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// FuzzScan scans arbitrary bytes after a valid header. Whatever the bytes,
// Scan must not panic, must hand over only frames that verify, in order and
// in well-formed groups, and must keep its report consistent; salvage may
// only differ from a plain scan after corruption, and only by adding
// records after the prefix the plain scan returned.
func FuzzScan(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2)) // the seed corpus is fixed
	add := func(data []byte, seq uint32) { f.Add(data[segment.HeaderSize:], seq) }

	s := baseSeg(rng)
	add(s.file(s.end()+64), testSeq)
	add(s.data, testSeq)
	full := s.file(s.end() + 64)
	full[s.frames[6].off+17] ^= 1 // corruption in batch 1
	add(full, testSeq)
	add(s.data[:s.frames[16].end()], testSeq) // torn group
	sealed := sealedSeg(rng)
	add(sealed.file(sealed.end()+40), testSeq)

	recycled := s.file(s.end() + 200)
	recycle(recycled, s.end(), rng)
	add(recycled, testSeq)

	// A group that a frame opening another breaks, in a durable batch.
	order := handBatchSeg([]handFrame{record(segment.First, 3), record(segment.Full, 4), padding(6)}, []int{6}, []int{1, 2, 3})(rng)
	add(order.data, testSeq)

	f.Add([]byte{}, uint32(1))
	f.Add(make([]byte, 100), uint32(1))
	f.Add(make([]byte, 100), uint32(0))

	f.Fuzz(func(t *testing.T, frames []byte, seq uint32) {
		h := segment.EncodeHeader(seq, 0)
		data := append(h[:len(h):len(h)], frames...)

		plain, plainRecs := fuzzScan(t, data, seq, false)
		salv, salvRecs := fuzzScan(t, data, seq, true)

		for _, fr := range plainRecs {
			require.LessOrEqual(t, fr.End(), plain.End, "record past End")
		}
		if plain.Sealed {
			require.Equal(t, segment.EndClean, plain.Tail)
		}
		if plain.Tail != segment.EndClean {
			require.GreaterOrEqual(t, plain.DamageAt, plain.End, "damage before the end of the valid prefix")
			require.Error(t, plain.Cause)
		}
		if plain.Tail != segment.EndCorrupt {
			require.Equal(t, plain, salv, "salvage changed a scan that found no corruption")
			require.Equal(t, plainRecs, salvRecs)
			return
		}
		if len(salv.Skipped) == 0 {
			// Past the budget of failing candidates a salvage does not
			// step over the damage: it ends there, corrupt, as the plain
			// scan did, and says why.
			require.ErrorIs(t, salv.Cause, segment.ErrTooManyCandidates, "a salvage of corruption skipped nothing")
			require.Equal(t, segment.EndCorrupt, salv.Tail)
			require.Equal(t, plain.End, salv.End)
			require.Equal(t, plainRecs, salvRecs)
			return
		}
		require.GreaterOrEqual(t, len(salvRecs), len(plainRecs))
		for i, fr := range plainRecs {
			require.Equal(t, fr, salvRecs[i], "salvage changed the prefix before the damage")
		}
		require.Equal(t, plain.End, salv.Skipped[0].From, "the first skipped span starts where the plain scan stopped")
		prev := segment.HeaderSize
		for _, sp := range salv.Skipped {
			require.GreaterOrEqual(t, sp.From, prev, "skipped spans out of order: %v", salv.Skipped)
			require.Less(t, sp.From, sp.To, "empty skipped span: %v", salv.Skipped)
			require.LessOrEqual(t, sp.To, len(data))
			prev = sp.To
			for _, fr := range salvRecs {
				require.False(t, fr.Offset < sp.To && fr.End() > sp.From, "record at %d inside skipped span %v", fr.Offset, sp)
			}
		}
	})
}

// fuzzScan scans data and checks what every scan must keep.
func fuzzScan(t *testing.T, data []byte, seq uint32, salvage bool) (segment.Report, []segment.Frame) {
	r, got := scanAll(t, data, seq, salvage)
	require.GreaterOrEqual(t, r.End, segment.HeaderSize)
	require.LessOrEqual(t, r.End, len(data))
	inGroup := false
	for i, fr := range got {
		again, err := segment.Decode(data, fr.Offset, seq)
		require.NoError(t, err, "frame %d at %d", i, fr.Offset)
		require.Equal(t, again, fr)
		require.GreaterOrEqual(t, fr.Offset, segment.HeaderSize)
		require.Equal(t, inGroup, !fr.Place.Opens(), "frame %d at %d: place %d out of group order", i, fr.Offset, fr.Place)
		if inGroup {
			require.Equal(t, got[i-1].End(), fr.Offset, "frames of a group are contiguous")
		}
		inGroup = !fr.Place.Closes()
	}
	require.False(t, inGroup, "incomplete group handed over")
	return r, got
}

// FuzzDecode decodes arbitrary bytes at an arbitrary offset: Decode must not
// panic, must fail only with its documented errors (an offset outside the
// data, and only such an offset, with one wrapping fs.ErrInvalid), and a
// frame it accepts must encode back to exactly the bytes it was read from.
func FuzzDecode(f *testing.F) {
	valid := segment.AppendFrame(nil, 5, 0, 40, segment.KindRecord, segment.First, []byte("body"))
	f.Add(valid, 0, uint32(5))
	f.Add(append([]byte{1, 2, 3}, valid...), 3, uint32(5))
	f.Add(valid, 0, uint32(6))
	f.Add(valid[:20], 0, uint32(5))
	f.Add(segment.AppendFrame(nil, 5, 0, 0, segment.KindSeal, segment.Full, nil), 0, uint32(5))
	f.Add(segment.AppendFrame(nil, 5, 0, 0, segment.Kind(0), segment.Full, nil), 0, uint32(5))
	f.Add(make([]byte, 40), 3, uint32(0))
	f.Add(valid, -1, uint32(5))
	f.Add(valid, math.MaxInt, uint32(5))
	f.Add(valid, math.MaxInt-5, uint32(5))
	f.Add(valid, math.MinInt, uint32(5))

	sentinels := []error{segment.ErrZeroFrame, segment.ErrShortFrame, segment.ErrForeignFrame, segment.ErrChecksum, segment.ErrBadType}
	f.Fuzz(func(t *testing.T, data []byte, off int, seq uint32) {
		fr, err := segment.Decode(data, off, seq)
		outside := off < 0 || off > len(data)
		require.Equal(t, outside, errors.Is(err, fs.ErrInvalid), "Decode at offset %d of %d bytes: %v", off, len(data), err)
		if outside {
			require.Equal(t, segment.Frame{}, fr)
			return
		}
		if err != nil {
			require.Equal(t, segment.Frame{}, fr)
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("Decode failed with an undocumented error: %v", err)
		}
		require.Equal(t, off, fr.Offset)
		require.Equal(t, seq, fr.Seq)
		require.LessOrEqual(t, fr.End(), len(data))
		require.True(t, fr.Kind >= segment.KindRecord && fr.Kind <= segment.KindPadding, "kind %d", fr.Kind)
		require.LessOrEqual(t, fr.Place, segment.Last)
		if fr.Kind != segment.KindRecord {
			require.Equal(t, segment.Full, fr.Place)
		}
		// Under the salt of data's header, as Decode read it.
		again := segment.AppendFrame(nil, seq, segment.SaltOf(data), fr.Synced, fr.Kind, fr.Place, fr.Body)
		require.Equal(t, data[off:fr.End()], again)
	})
}

// FuzzRecoverSalt builds a segment from the fuzz input (up to 8 frames of
// up to 63 bytes of body, in batches, sealed or not), damages its header
// (a mask xored into 4 of its bytes, the salt field's among them or not)
// or zeroes a run of bytes from the header on (into the first frame, or
// past it), and checks RecoverSalt against what its documentation says it
// finds:
//
//   - with the salt field intact (and not 0), the salt, as long as one
//     frame is intact;
//   - otherwise the salt where two intact frames follow each other along
//     the chain it walks: the frames after the first one a run of zeros
//     left intact, walked from that one, or from the damaged frame before
//     it while that one still names the segment and its length, whose
//     claimed syncs are the first batch's or not before where that walk
//     began;
//   - nothing else.
//
// That holds where the segment's sequence appears in the file only in the
// frames' sequence fields. Elsewhere (a body that names it, as one that
// ships another log's frames does) only this is checked: no panic, and a
// salt recovered is the true one unless the zeros stopped inside a frame,
// whose rest may hold frames that vouch for each other under any salt.
//
// The salt is drawn from a hash of the input, so that no body the fuzzer
// writes can hold frames under it, or under its damaged value.
func FuzzRecoverSalt(f *testing.F) {
	const xorHeader, zeroRun = 0, 1
	one, batchEnd := byte(4), byte(4|1<<6) // a 4-byte body; 1<<6: it ends its batch
	f.Add(uint32(5), []byte{one, one, one}, []byte("abcdefghijkl"), false, uint8(xorHeader), uint16(16), uint16(0), uint32(0xff))
	f.Add(uint32(5), []byte{one}, []byte("abcd"), false, uint8(xorHeader), uint16(16), uint16(0), uint32(0x1000))
	f.Add(uint32(5), []byte{one}, []byte("abcd"), true, uint8(xorHeader), uint16(14), uint16(0), uint32(0x01010101))
	f.Add(uint32(5), []byte{one}, []byte("abcd"), false, uint8(xorHeader), uint16(0), uint16(0), uint32(0xffffffff))
	f.Add(uint32(5), []byte{}, []byte{}, true, uint8(xorHeader), uint16(16), uint16(0), uint32(1))
	f.Add(uint32(7), []byte{one, one, one}, []byte("abcdefghijkl"), false, uint8(zeroRun), uint16(0), uint16(40), uint32(0))
	f.Add(uint32(7), []byte{one, one}, []byte("abcdefgh"), false, uint8(zeroRun), uint16(16), uint16(30), uint32(0))
	f.Add(uint32(7), []byte{one, one}, []byte("abcdefgh"), true, uint8(zeroRun), uint16(20), uint16(40), uint32(0))
	f.Add(uint32(7), []byte{one, one, one, one}, []byte("abcdefghijklmnop"), false, uint8(zeroRun), uint16(0), uint16(36), uint32(0))
	// Zeros over frames of two batches: the first intact frames claim a
	// sync inside them.
	f.Add(uint32(7), []byte{batchEnd, one, one, one}, []byte("abcdefghijklmnop"), false, uint8(zeroRun), uint16(0), uint16(66), uint32(0))
	// A first record whose body ships another log's frames of the
	// segment, and zeros that take its header.
	shipped := shippedFrames(7, 0x0badc0de, segment.HeaderSize)
	f.Add(uint32(7), []byte{byte(len(shipped)), one}, append(shipped, "abcd"...), false, uint8(zeroRun), uint16(0), uint16(44), uint32(0))

	f.Fuzz(func(t *testing.T, seq uint32, layout, bodies []byte, sealed bool, mode uint8, from, to uint16, mask uint32) {
		seq = max(seq, 1) // zeros name segment 0, which no segment is
		sum := sha256.Sum256(fmt.Appendf(nil, "%d %x %x %t %d %d %d %d", seq, layout, bodies, sealed, mode, from, to, mask))
		salt := binary.LittleEndian.Uint32(sum[:])
		if salt == 0 {
			salt = 1 // 0 is a version 1 file's, which the header never confirms
		}

		// The segment: frames in batches, each claiming the sync that
		// ended the batch before it, the seal its own offset.
		type frame struct{ off, end, synced int }
		h := segment.EncodeHeader(seq, salt)
		data := h[:]
		var frames []frame
		synced := segment.HeaderSize
		for _, l := range layout[:min(len(layout), 8)] {
			n := min(int(l&0x3f), len(bodies))
			body := bodies[:n]
			bodies = bodies[n:]
			off := len(data)
			data = segment.AppendFrame(data, seq, salt, uint32(synced), segment.KindRecord, segment.Full, body)
			frames = append(frames, frame{off, len(data), synced})
			if l&(1<<6) != 0 {
				synced = len(data)
			}
		}
		if sealed {
			off := len(data)
			data = segment.AppendFrame(data, seq, salt, uint32(off), segment.KindSeal, segment.Full, nil)
			frames = append(frames, frame{off, len(data), off})
		}
		data = append(data, make([]byte, 64)...)
		orig := bytes.Clone(data)

		zerosEnd := -1 // where the run of zeros ends, if any
		if mode%2 == xorHeader {
			at := int(from) % (segment.HeaderSize - 3)
			var m [4]byte
			binary.LittleEndian.PutUint32(m[:], mask)
			for i := range m {
				data[at+i] ^= m[i]
			}
		} else {
			start := int(from) % (segment.HeaderSize + 1)
			zerosEnd = start + 1 + int(to)%(len(data)-start)
			clear(data[start:zerosEnd])
		}

		got, ok := segment.RecoverSalt(data, seq)

		var seqBytes [4]byte
		binary.LittleEndian.PutUint32(seqBytes[:], seq)
		named := 0 // offsets past the header whose bytes name seq where a frame's sequence field would be
		for i := segment.HeaderSize + 8; i+4 <= len(data); i++ {
			if [4]byte(data[i:i+4]) == seqBytes {
				named++
			}
		}
		for _, fr := range frames {
			if [4]byte(data[fr.off+8:fr.off+12]) == seqBytes {
				named--
			}
		}
		if named > 0 {
			if ok && got != salt {
				inside := false
				for _, fr := range frames {
					inside = inside || fr.off < zerosEnd && zerosEnd < fr.end
				}
				require.True(t, inside, "a wrong salt %#x (the salt is %#x) where the zeros stopped inside no frame", got, salt)
			}
			return
		}
		if ok {
			require.Equal(t, salt, got, "a wrong salt")
		}

		intact := func(i int) bool {
			return bytes.Equal(data[frames[i].off:frames[i].end], orig[frames[i].off:frames[i].end])
		}
		// k is the first intact frame; every frame after it is intact.
		k := 0
		for k < len(frames) && !intact(k) {
			k++
		}
		for i := k; i < len(frames); i++ {
			require.True(t, intact(i), "frame %d damaged after intact frame %d", i, k)
		}
		var want bool
		if saltKept := bytes.Equal(data[16:20], orig[16:20]); saltKept {
			want = k < len(frames)
		} else if k < len(frames) {
			// Where the chain that reaches frame k begins.
			begin := segment.HeaderSize
			if k > 0 {
				begin = frames[k].off
				before := frames[k-1].off
				if bytes.Equal(data[before+4:before+12], orig[before+4:before+12]) {
					begin = before // it names seq, and its length leads to frame k
				}
			}
			fits := func(fr frame) bool { return fr.synced <= segment.HeaderSize || fr.synced >= begin }
			for i := k; i+1 < len(frames); i++ {
				want = want || fits(frames[i]) && fits(frames[i+1])
			}
		}
		require.Equal(t, want, ok, "salt recovered; frames %+v, first intact %d, zeros to %d", frames, k, zerosEnd)
	})
}
