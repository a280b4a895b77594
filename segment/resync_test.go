package segment_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// maxWork is the most a scan of a file of n bytes may checksum, where
// valid is what the checksums of the frames that verify cover: would-be
// frames that fail over four times its size, and the frames that verify
// once per walk that meets them (the walk of the frames, and, in the files
// of these tests, at most three after damage: to classify the end, to
// find where a salvage goes on, and to find where the last frame ends).
func maxWork(n, valid int) int { return 4*n + 4*valid }

// checksummed returns what the checksums of frames of bodies of the given
// lengths cover: each frame but its checksum field.
func checksummed(bodies ...int) int {
	sum := 0
	for _, b := range bodies {
		sum += segment.Size(b) - 4
	}
	return sum
}

// staleFile returns a segment file of n bytes for segment seq: one record,
// then, where the records end, stale bytes (a record body of the segment
// the file was before it was reused, say) that repeat pattern, each
// repetition patched by patch at its offset. benign is the same file with
// random stale bytes instead. end is where the records end.
func staleFile(n int, seq, salt uint32, pattern func(p int) []byte) (crafted, benign []byte, end int) {
	crafted = make([]byte, n)
	h := segment.EncodeHeader(seq, salt)
	copy(crafted, h[:])
	end = segment.HeaderSize + copy(crafted[segment.HeaderSize:], segment.AppendFrame(nil, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("real")))
	benign = append([]byte(nil), crafted...)
	rng := rand.New(rand.NewPCG(1, 2))
	for p := end; p < n; p++ {
		benign[p] = byte(rng.Uint32())
	}
	for p := end; p < n; {
		p += copy(crafted[p:], pattern(p))
	}
	return crafted, benign, end
}

// lengthSeq is stale bytes that repeat [length][seq] every 8 bytes: at
// every offset whose bytes name seq a frame header with a length that
// fits in the file.
func lengthSeq(length, seq uint32) func(int) []byte {
	return func(int) []byte {
		b := binary.LittleEndian.AppendUint32(nil, length)
		return binary.LittleEndian.AppendUint32(b, seq)
	}
}

// wouldBeFrames is stale bytes that repeat, every 16 bytes, the header of
// a record of seq of length bytes that claims synced(p) bytes synced, p
// its offset: each passes every check of a frame header but its checksum.
func wouldBeFrames(length, seq uint32, synced func(p int) uint32) func(int) []byte {
	return func(p int) []byte {
		b := []byte{byte(segment.KindRecord) | byte(segment.Full)<<4, 0, 0, 0} // checksum; its first byte is the type of the header 16 bytes before
		b = binary.LittleEndian.AppendUint32(b, length)
		b = binary.LittleEndian.AppendUint32(b, seq)
		return binary.LittleEndian.AppendUint32(b, synced(p))
	}
}

func nop(segment.Frame) error { return nil }

// DESIGN.md: the sequence "lets a scan resynchronise after damage in
// O(n)". A scan that meets the end of the records resynchronises over the
// rest of the file, and stale bytes that name the segment every 8 bytes
// with a long length (a payload anyone may append, in a file later reused)
// would cost a checksum over that length at every one of them: O(n^2),
// hours for a 64 MiB segment. Their headers have no type a frame has: the
// scan checksums none of them, and reads the end as random stale bytes.
func TestScanOfStaleBytesNamingTheSegmentIsLinear(t *testing.T) {
	const n, seq, salt = 512 << 10, 5, 0x5555
	crafted, benign, end := staleFile(n, seq, salt, lengthSeq((n-64)/2, seq))
	rb, _, err := segment.ScanWork(benign, seq, segment.HeaderSize, false, nop)
	require.NoError(t, err)
	rc, work, err := segment.ScanWork(crafted, seq, segment.HeaderSize, false, nop)
	require.NoError(t, err)
	require.Equal(t, rb, rc)
	require.Equal(t, segment.Report{End: end, Records: 1, Tail: segment.EndClean}, rc)
	require.LessOrEqual(t, work, maxWork(n, checksummed(len("real"))), "bytes checksummed scanning %d bytes", n)
}

// Stale bytes whose every 16 bytes pass all the checks of a frame header
// but the checksum, with long lengths, exhaust what a scan checksums: it
// stops verifying them and classifies the end by their headers, erring
// towards corruption. None claiming a sync past the end: torn, at the
// same offset (nothing lost). One claiming a sync past the end (within
// its own offset): corrupt, as a frame that verifies would be. Either
// way the Cause says the frames after the end were not all verified.
func TestScanPastWhatItVerifiesErrsTowardsCorruption(t *testing.T) {
	const n, seq, salt = 512 << 10, 5, 0x5555
	for _, c := range []struct {
		name   string
		synced func(p int) uint32
		want   segment.EndKind
	}{
		{"the first batch's sync", func(int) uint32 { return segment.HeaderSize }, segment.EndTorn},
		{"a sync past the end", func(p int) uint32 { return uint32(p) }, segment.EndCorrupt},
	} {
		crafted, _, end := staleFile(n, seq, salt, wouldBeFrames((n-64)/2, seq, c.synced))
		r, work, err := segment.ScanWork(crafted, seq, segment.HeaderSize, false, nop)
		require.NoError(t, err, c.name)
		require.LessOrEqual(t, work, maxWork(n, checksummed(len("real"))), "%s: bytes checksummed scanning %d bytes", c.name, n)
		require.Equal(t, c.want, r.Tail, c.name)
		require.Equal(t, end, r.End, c.name)
		require.Equal(t, end, r.DamageAt, c.name)
		require.ErrorIs(t, r.Cause, segment.ErrTooManyCandidates, c.name)
	}

	// A claim past the end that no frame could make (synced beyond its
	// own offset) is no evidence: torn.
	crafted, _, _ := staleFile(n, seq, salt, wouldBeFrames((n-64)/2, seq, func(p int) uint32 { return uint32(p) + 1 }))
	r, _, err := segment.ScanWork(crafted, seq, segment.HeaderSize, false, nop)
	require.NoError(t, err)
	require.Equal(t, segment.EndTorn, r.Tail)
}

// A salvage that would have to verify more would-be frames than a scan
// does to find where to go on after damage to synced records reports the
// damage and steps over nothing: the records after it are neither
// delivered from an unverified place nor dropped silently.
func TestSalvagePastWhatItVerifiesStopsAtTheDamage(t *testing.T) {
	const n, seq, salt = 256 << 10, 9, 0x9999
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("first"))
	damagedAt := len(data)
	// A record whose body is would-be frames with long lengths, then
	// records written after a sync that covered it.
	var body []byte
	for len(body) < 64<<10 {
		body = append(body, wouldBeFrames(n/2, seq, func(int) uint32 { return segment.HeaderSize })(0)...)
	}
	data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, body)
	synced := uint32(len(data))
	for i := range 4 {
		data = segment.AppendFrame(data, seq, salt, synced, segment.KindRecord, segment.Full, []byte{'r', byte(i)})
	}
	data = append(data, make([]byte, n-len(data))...)
	data[damagedAt] ^= 1 // the checksum of the record of would-be frames

	// Within what it verifies (a file of few would-be frames), salvage
	// steps over the damaged record to the records after it.
	few := append([]byte(nil), data...)
	clear(few[damagedAt+segment.FrameHeaderSize+64 : synced])
	r, frames := scanAll(t, few, seq, true)
	require.Len(t, frames, 5)
	require.Len(t, r.Skipped, 1)

	r, work, err := segment.ScanWork(data, seq, segment.HeaderSize, true, nop)
	require.NoError(t, err)
	require.LessOrEqual(t, work, maxWork(n, checksummed(len("first"), 2, 2, 2, 2)))
	require.Equal(t, segment.EndCorrupt, r.Tail)
	require.Equal(t, damagedAt, r.DamageAt)
	require.Equal(t, damagedAt, r.End)
	require.Equal(t, 1, r.Records)
	require.Empty(t, r.Skipped)
	require.ErrorIs(t, r.Cause, segment.ErrChecksum)
	require.ErrorIs(t, r.Cause, segment.ErrTooManyCandidates)
}

// Scan's doc: "a scan checksums would-be frames that fail over four times
// the file's size at most in all (it computes no checksum that, should it
// fail, would go past that)". Whether a checksum fails is known only once
// it is computed: a scan that checked what it had spent before each
// checksum, rather than counting that checksum too, computed one more over
// nearly the whole file once all but a byte was spent; and the frame at
// which the walk of the frames stops was not counted at all.
func TestAScanChecksumsFailingFramesOverAtMostFourTimesTheFile(t *testing.T) {
	const n, seq, salt = 1 << 19, 5, 0x5555
	// 7 would-be frames of (4n-1)/7 checksummed bytes each use all but
	// one byte of the allowance, so an 8th would go past it.
	per := (4*n - 1) / 7 // bytes checksummed per would-be frame: its length + 13
	length := uint32(per - 13)
	crafted, _, end := staleFile(n, seq, salt, wouldBeFrames(length, seq, func(int) uint32 { return segment.HeaderSize }))
	valid := checksummed(len("real")) // the one record, checksummed once
	r, work, err := segment.ScanWork(crafted, seq, segment.HeaderSize, false, nop)
	require.NoError(t, err)
	require.Equal(t, end, r.End)
	require.Equal(t, segment.EndTorn, r.Tail)
	require.ErrorIs(t, r.Cause, segment.ErrTooManyCandidates)
	failing := work - valid
	require.LessOrEqual(t, failing, 4*n,
		"bytes checksummed over would-be frames that failed, in a file of %d bytes (%.2f times its size)", n, float64(failing)/n)
}

// The same bound holds for a salvage: past damage it stepped over, with
// nearly all its allowance spent finding where to go on, it does not
// checksum a long frame that may fail. It stops there, erring towards
// corruption, rather than go past the allowance to find out.
func TestASalvageChecksumsFailingFramesOverAtMostFourTimesTheFile(t *testing.T) {
	const n, seq, salt = 1 << 18, 9, 0x9999
	h := segment.EncodeHeader(seq, salt)
	data := segment.AppendFrame(h[:], seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("first"))
	damagedAt := len(data)
	// A record whose body is 8 would-be frames of length bytes (the 9th
	// header of the pattern has the zero after it as its type, which no
	// frame has), which the classification of the damage and the search
	// for where the salvage goes on each checksum; then a record written
	// after a sync that covered it; then a long record, damaged too.
	const lastLength = n / 4
	bodyLen := 9*16 + 1
	// The allowance less the damaged record, less half the long record.
	per := (4*n - checksummed(bodyLen) - checksummed(lastLength)/2) / 16 // per would-be frame
	length := uint32(per - 13)
	var body []byte
	for range 9 {
		body = append(body, wouldBeFrames(length, seq, func(int) uint32 { return segment.HeaderSize })(0)...)
	}
	body = append(body, 0)
	require.Len(t, body, bodyLen)
	data = segment.AppendFrame(data, seq, salt, segment.HeaderSize, segment.KindRecord, segment.Full, body)
	resumeAt := len(data)
	data = segment.AppendFrame(data, seq, salt, uint32(resumeAt), segment.KindRecord, segment.Full, []byte{'r'})
	lastAt := len(data)
	data = segment.AppendFrame(data, seq, salt, uint32(lastAt), segment.KindRecord, segment.Full, make([]byte, lastLength))
	data = append(data, make([]byte, n-len(data))...)
	data[damagedAt] ^= 1                      // the checksum of the record of would-be frames
	data[lastAt+segment.FrameHeaderSize] ^= 1 // the body of the long record

	r, work, err := segment.ScanWork(data, seq, segment.HeaderSize, true, nop)
	require.NoError(t, err)
	require.Len(t, r.Skipped, 1, "the salvage steps over the damaged record")
	require.Equal(t, [2]int{damagedAt, resumeAt}, [2]int{r.Skipped[0].From, r.Skipped[0].To})
	require.Equal(t, 2, r.Records)
	// The two records that verify: by the walk of the frames, and the
	// second by the classification and the search too.
	failing := work - checksummed(len("first")) - 3*checksummed(1)
	require.LessOrEqual(t, failing, 4*n,
		"bytes checksummed over would-be frames that failed, in a file of %d bytes (%.2f times its size)", n, float64(failing)/n)
	require.Equal(t, lastAt, r.End)
	require.Equal(t, segment.EndCorrupt, r.Tail)
	require.Equal(t, lastAt, r.DamageAt)
	require.ErrorIs(t, r.Cause, segment.ErrTooManyCandidates)
	require.LessOrEqual(t, work, maxWork(n, checksummed(len("first"), 1)))
}
