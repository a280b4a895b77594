package segment_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// A frame verifies only in a file whose header carries the salt it was
// written with: a frame of the right sequence made with another salt (a
// stale frame of the file's previous segment, or one a record's body
// forged) fails its checksum, and the scan does not take it for a frame
// of this segment, so no valid frame after the end means no corruption.
func TestAFrameVerifiesOnlyUnderItsOwnSalt(t *testing.T) {
	const seq, salt, other = 7, 0x5a17f00d, 0x0badf00d
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("kept"))
	end := len(data)
	// A forged frame of this sequence claiming bytes synced past the end.
	data = segment.AppendFrame(data, seq, other, 4000, segment.KindRecord, segment.Full, []byte("forged"))
	data = append(data, make([]byte, 64)...)

	_, err := segment.Decode(data, end, seq)
	require.ErrorIs(t, err, segment.ErrChecksum)
	r, frames := scanAll(t, data, seq, false)
	require.Equal(t, []string{"kept"}, bodies(frames))
	require.Equal(t, end, r.End)
	require.NotEqual(t, segment.EndCorrupt, r.Tail, "a frame of another salt is not a synced frame of this segment")

	// Under its own salt the same bytes verify.
	h = segment.EncodeHeader(seq, other)
	copy(data, h[:])
	f, err := segment.Decode(data, end, seq)
	require.NoError(t, err)
	require.Equal(t, "forged", string(f.Body))
}

// RecoverSalt gives back the salt a damaged header held, from the first
// frame that decodes under the salt its checksum implies, for bodies of
// every length and any salt; a damaged first frame leaves it to the next.
func TestRecoverSaltFindsTheSaltOfTheFrames(t *testing.T) {
	rng := newRand(t)
	for i := range 200 {
		seq, salt := rng.Uint32()|1, rng.Uint32()
		if i == 0 {
			salt = 0 // a version 1 file's frames
		}
		h := segment.EncodeHeader(seq, salt)
		body := make([]byte, rng.IntN(300))
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.First, body)
		data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Last, []byte("second"))
		data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindSeal, segment.Full, nil)
		clear(data[:segment.HeaderSize]) // the header is gone

		got, ok := segment.RecoverSalt(data, seq)
		require.True(t, ok)
		require.Equal(t, salt, got, "body of %d bytes", len(body))

		// The first frame damaged (its synced field, or its body, where
		// it verifies under a wrong salt alone): the second and the
		// seal after it give the salt.
		for _, at := range []int{segment.HeaderSize + 12, segment.HeaderSize + segment.FrameHeaderSize + len(body)/2} {
			if at >= segment.HeaderSize+segment.Size(len(body)) {
				continue // an empty body
			}
			damaged := bytes.Clone(data)
			damaged[at] ^= 0x40
			got, ok = segment.RecoverSalt(damaged, seq)
			require.True(t, ok)
			require.Equal(t, salt, got, "damage at %d", at)
		}

		_, ok = segment.RecoverSalt(data, seq+1)
		require.False(t, ok, "no frame names another segment")
	}
	// A large frame: the salt is x^(-8n) times a difference, n in the
	// millions.
	h := segment.EncodeHeader(9, 0xc0ffee)
	big := segment.AppendFrame(h[:], 9, 0xc0ffee, segment.HeaderSize, segment.KindRecord, segment.Full, make([]byte, 3<<20+5))
	big = segment.AppendFrame(big, 9, 0xc0ffee, segment.HeaderSize, segment.KindSeal, segment.Full, nil)
	got, ok := segment.RecoverSalt(big, 9)
	require.True(t, ok)
	require.Equal(t, uint32(0xc0ffee), got)

	// Bytes that name the segment at every turn, none a frame.
	names := make([]byte, 1<<20)
	for off := 8; off+4 <= len(names); off += 4 {
		binary.LittleEndian.PutUint32(names[off:], 9)
	}
	_, ok = segment.RecoverSalt(names, 9)
	require.False(t, ok)

	_, ok = segment.RecoverSalt(make([]byte, 4096), 1)
	require.False(t, ok, "zeros hold no frame")
	lone := segment.AppendFrame(make([]byte, segment.HeaderSize), 1, 99, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("alone"))
	_, ok = segment.RecoverSalt(append(lone, make([]byte, 100)...), 1)
	require.False(t, ok, "a lone record confirms no salt")
}

// The header carries the salt; a version 1 header, and data without a
// header, mean salt 0, under which version 1 frames verify.
func TestSaltOf(t *testing.T) {
	h := segment.EncodeHeader(3, 0xfeedbeef)
	require.Equal(t, uint32(0xfeedbeef), segment.SaltOf(h[:]))
	v1 := version1(h[:])
	binary.LittleEndian.PutUint32(v1[16:], 0)
	require.Zero(t, segment.SaltOf(v1))
	require.Zero(t, segment.SaltOf(h[:segment.HeaderSize-1]))
	require.Zero(t, segment.SaltOf(segment.AppendFrame(nil, 3, 0, 0, segment.KindRecord, segment.Full, make([]byte, 40))))
	require.NotEqual(t, segment.NewSalt(), segment.NewSalt(), "drawn at random (equal once in 2^32)")
}

// RecoverSalt walks the frames as the log wrote them, never inside a
// record's body, which may hold frames under a salt of the writer's
// choosing that vouch for each other, or a seal: none gives the salt. A
// header and first frame damaged together leave the frames after them to
// give it; a header whose salt field survived gives it with one frame.
func TestRecoverSaltNeverTakesASaltFromInsideARecordBody(t *testing.T) {
	const seq, salt, forged = 3, 0x11111111, 0xdeadbeef
	noHeader := func(frames []byte) []byte {
		data := append(bytes.Clone(frames), make([]byte, 256)...)
		clear(data[:segment.HeaderSize])
		return data
	}
	h := segment.EncodeHeader(seq, salt)

	// A lone record whose body holds two forged frames, and one whose
	// body holds a forged seal.
	inner := segment.AppendFrame(nil, seq, forged, 40, segment.KindRecord, segment.Full, []byte("forged1"))
	inner = segment.AppendFrame(inner, seq, forged, 40, segment.KindRecord, segment.Full, []byte("forged2"))
	var seal [segment.FrameHeaderSize]byte
	binary.LittleEndian.PutUint32(seal[0:], 0x12345678)
	binary.LittleEndian.PutUint32(seal[8:], seq)
	seal[16] = byte(segment.KindSeal)
	for _, body := range [][]byte{inner, seal[:]} {
		data := noHeader(segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, body))
		got, ok := segment.RecoverSalt(data, seq)
		require.False(t, ok, "a salt from inside a body: %#x", got)
	}

	// The header and the first frame's checksum damaged, the first body
	// full of the segment's sequence: the intact frames after it give
	// the salt.
	words := make([]byte, 400)
	for i := 0; i < len(words); i += 4 {
		binary.LittleEndian.PutUint32(words[i:], seq)
	}
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, words)
	for i := range 50 {
		data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte{byte(i)})
	}
	data = noHeader(data)
	data[segment.HeaderSize] ^= 0xff
	got, ok := segment.RecoverSalt(data, seq)
	require.True(t, ok)
	require.Equal(t, uint32(salt), got)

	// Only the header's checksum damaged: its salt, confirmed by a lone
	// record.
	data = segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("alone"))
	data = append(data, make([]byte, 64)...)
	data[29] ^= 1
	_, err := segment.DecodeHeader(data)
	require.ErrorIs(t, err, segment.ErrBadHeader)
	got, ok = segment.RecoverSalt(data, seq)
	require.True(t, ok)
	require.Equal(t, uint32(salt), got)
}

// Damage that zeroes the header's end and the first frame (a sector at
// the file's start) leaves the frames after it to give the salt: through
// the salt field if it survived, else by searching past the zeros for the
// next frame, confirmed by the one after it. Frames a body forged under
// salt 0 (which a zeroed header reads) give nothing.
func TestRecoverSaltPastAZeroedFirstFrame(t *testing.T) {
	const seq, salt = 4, 0x0ddba11
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, bytes.Repeat([]byte("first"), 10))
	for i := range 5 {
		data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte{byte(i)})
	}
	data = append(data, make([]byte, 64)...)
	for _, from := range []int{28, 10, 0} { // the salt field kept, then lost
		damaged := bytes.Clone(data)
		clear(damaged[from:81])
		got, ok := segment.RecoverSalt(damaged, seq)
		require.True(t, ok, "zeros from %d", from)
		require.Equal(t, uint32(salt), got, "zeros from %d", from)
	}

	forged := segment.AppendFrame(nil, seq, 0, 40, segment.KindRecord, segment.Full, []byte("forged1"))
	forged = segment.AppendFrame(forged, seq, 0, 40, segment.KindRecord, segment.Full, []byte("forged2"))
	data = segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, forged)
	data = append(data, make([]byte, 64)...)
	clear(data[:segment.HeaderSize])
	got, ok := segment.RecoverSalt(data, seq)
	require.False(t, ok, "a salt from frames forged under 0: %#x", got)
}

// The walk ends where the chain of frames does: after a lone record, the
// stale bytes of the file's previous segment may hold frames naming this
// one (a body's forgery), which give nothing.
func TestRecoverSaltStopsWhereTheFramesEnd(t *testing.T) {
	const seq, salt = 6, 0x7e57ab1e
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("alone"))
	data = append(data, 0xee, 0xee, 0xee) // stale bytes of the old segment
	data = segment.AppendFrame(data, seq, 0xdeadbeef, 40, segment.KindRecord, segment.Full, []byte("forged1"))
	data = segment.AppendFrame(data, seq, 0xdeadbeef, 40, segment.KindRecord, segment.Full, []byte("forged2"))
	clear(data[:segment.HeaderSize])
	got, ok := segment.RecoverSalt(data, seq)
	require.False(t, ok, "a salt from stale bytes: %#x", got)
}

// Zeros that run from the header into the first frame's header (a sector
// zeroed at the file's start) leave that frame's sequence field while
// they zero its checksum and its length, or part of it: a length that
// still fits, which leads the walk into the frame's own body. The frames
// after it give the salt, whatever the run's end; and a salt the header
// still holds gives it through any intact frame. Only where no two intact
// frames follow each other, and the salt field is gone, is it lost.
func TestRecoverSaltPastZerosFromTheHeaderIntoTheFirstFrame(t *testing.T) {
	const seq, salt = 5, 0x5eed5a17
	h := segment.EncodeHeader(seq, salt)
	first := bytes.Repeat([]byte{0x5a, 0x01, 0x02, 0x7f}, 10) // 40 bytes, not a frame
	build := func(records int, sealed bool) []byte {
		data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, first)
		for i := 1; i < records; i++ {
			data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte{byte(i), 'r', 'e', 'c'})
		}
		if sealed {
			data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindSeal, segment.Full, nil)
		}
		return append(data, make([]byte, 128)...)
	}
	firstEnd := segment.HeaderSize + segment.Size(len(first))
	saltField := func(from, to int) bool { return to <= 16 || from >= 20 } // bytes 16..20 kept
	cases := []struct {
		name string
		data []byte
		// ok reports whether the salt may be recovered with bytes
		// [from, to) zeroed, or with one bit of byte at flipped (to = at+1).
		ok func(from, to int) bool
	}{
		{"sealed segment of records", build(6, true), func(int, int) bool { return true }},
		{"last segment of records", build(6, false), func(int, int) bool { return true }},
		{"sealed segment of one record", build(1, true), func(from, to int) bool {
			// The record and the seal, or the salt field and the seal.
			return to <= segment.HeaderSize || from >= firstEnd || saltField(from, to)
		}},
		{"last segment of one record", build(1, false), func(from, to int) bool {
			// The salt field and the record.
			return saltField(from, to) && (to <= segment.HeaderSize || from >= firstEnd)
		}},
	}
	for _, c := range cases {
		check := func(damaged []byte, from, to int, what string) {
			got, ok := segment.RecoverSalt(damaged, seq)
			if ok {
				require.Equal(t, uint32(salt), got, "%s: %s: a wrong salt", c.name, what)
			}
			if want := c.ok(from, to); ok != want {
				t.Errorf("%s: %s: recovered %v, want %v", c.name, what, ok, want)
			}
		}
		for _, from := range []int{0, 1, 16} {
			for to := from + 1; to <= segment.HeaderSize+segment.FrameHeaderSize+8; to++ {
				damaged := bytes.Clone(c.data)
				clear(damaged[from:to])
				check(damaged, from, to, fmt.Sprintf("bytes %d to %d zeroed", from, to))
			}
		}
		for at := range segment.HeaderSize + segment.FrameHeaderSize + 8 {
			for bit := range 8 {
				damaged := bytes.Clone(c.data)
				damaged[at] ^= 1 << bit
				check(damaged, at, at+1, fmt.Sprintf("bit %d of byte %d flipped", bit, at))
			}
		}
	}
}

// shippedFrames is what a record body holds when a log ships another log's
// frames: two consecutive records of segment seq of that other log, salted
// with that log's salt, claiming synced bytes.
func shippedFrames(seq, salt, synced uint32) []byte {
	b := segment.AppendFrame(nil, seq, salt, synced, segment.KindRecord, segment.Full, []byte("shipped-1"))
	return segment.AppendFrame(b, seq, salt, synced, segment.KindRecord, segment.Full, []byte("shipped-2"))
}

// reusedWithDamagedHeader is a 4 KiB file that was segment 2 (salt
// 0x1111), whose second record carried another log's frames of segment 5,
// and has just been reused as segment 5 (salt 0x5555): it holds no frame
// of segment 5 yet, only the stale bytes of segment 2. Its header's magic
// is then damaged (the salt field is intact). The shipped frames claim
// synced bytes.
func reusedWithDamagedHeader(synced uint32) []byte {
	const oldSeq, oldSalt, newSeq, newSalt = 2, 0x1111, 5, 0x5555
	data := make([]byte, 4096)
	old := segment.EncodeHeader(oldSeq, oldSalt)
	copy(data, old[:])
	frames := segment.AppendFrame(nil, oldSeq, oldSalt, 32, segment.KindRecord, segment.Full, []byte("old record"))
	frames = segment.AppendFrame(frames, oldSeq, oldSalt, 32, segment.KindRecord, segment.Full, shippedFrames(newSeq, 0x0badc0de, synced))
	frames = segment.AppendFrame(frames, oldSeq, oldSalt, 32, segment.KindSeal, segment.Full, nil)
	copy(data[segment.HeaderSize:], frames)
	// Reuse: the header alone is rewritten.
	h := segment.EncodeHeader(newSeq, newSalt)
	copy(data, h[:])
	data[0] ^= 0xff // damage
	return data
}

// A reused segment that holds no frame of its own yet, or whose frames
// the damage took, has no salt to give: the frames its stale bytes carry
// in a record body, which name the segment and vouch for each other
// under the salt of the log that wrote them, give nothing, whether the
// bytes at the first frame's place are the previous segment's frames or
// zeros that took the header and the segment's one record.
func TestRecoverSaltTakesNothingFromTheStaleBytesOfAReusedFile(t *testing.T) {
	// Whatever sync the stale frames claim (the first batch's, 32, or
	// one past it).
	for _, synced := range []uint32{segment.HeaderSize, 48} {
		data := reusedWithDamagedHeader(synced)
		_, err := segment.DecodeHeader(data)
		require.ErrorIs(t, err, segment.ErrBadHeader)
		salt, ok := segment.RecoverSalt(data, 5)
		require.False(t, ok, "stale frames claiming %d synced: a salt from the stale bytes of the file's previous segment: %#x (the segment's own, 0x5555, cannot be recovered)", synced, salt)
	}

	// One record of segment 5 written, then a run of zeros from the
	// header over it and into the stale bytes after it: the stale frames
	// of segment 5 found after the zeros claim a sync (48) that would
	// have ended inside what the search skipped.
	data := reusedWithDamagedHeader(48)
	copy(data[segment.HeaderSize:], segment.AppendFrame(nil, 5, 0x5555, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("new")))
	clear(data[:64])
	salt, ok := segment.RecoverSalt(data, 5)
	require.False(t, ok, "a salt from the stale bytes after the zeros: %#x", salt)
}

// What a salvage does with a salt RecoverSalt gives (a header carrying
// it): the frames a stale record body carries must never read as records
// of the reused segment.
func TestStaleFramesOfAReusedFileNeverReadAsRecordsAfterSaltRecovery(t *testing.T) {
	data := reusedWithDamagedHeader(48)
	salt, ok := segment.RecoverSalt(data, 5)
	if !ok {
		return // nothing recovered: the salvage reads nothing
	}
	h := segment.EncodeHeader(5, salt) // what wal's salvage writes
	copy(data, h[:])
	r, frames := scanAll(t, data, 5, true)
	require.Empty(t, bodies(frames), "stale frames read as records of the reused segment (report %+v)", r)
}

// A salt the damaged header still holds is confirmed by the frames where
// the log wrote them before any search byte by byte: a first frame whose
// checksum was damaged, and whose body names the segment at every turn
// with lengths that fit (a payload crafted so), does not spend the work
// RecoverSalt allows before the intact record after it is reached.
func TestRecoverSaltReachesTheFrameAfterACraftedDamagedBody(t *testing.T) {
	const seq, salt = 8, 0x5a175a17
	const size = 128 << 10
	body := make([]byte, 64<<10)
	for i := 0; i+8 <= len(body); i += 8 {
		binary.LittleEndian.PutUint32(body[i:], size/2)
		binary.LittleEndian.PutUint32(body[i+4:], seq)
	}
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, body)
	data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("second"))
	data = append(data, make([]byte, size-len(data))...)
	data[0] ^= 0xff                  // the magic
	data[segment.HeaderSize] ^= 0x01 // the first frame's checksum
	got, ok := segment.RecoverSalt(data, seq)
	require.True(t, ok)
	require.Equal(t, uint32(salt), got)
}
