package segment_test

import (
	"errors"
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
