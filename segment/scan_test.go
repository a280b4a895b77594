package segment_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

// testSeq is the sequence of the segments the scan tests build. Its 4-byte
// pattern 07 00 00 00 holds zeros, so it never shows up in their bodies.
const testSeq = 7

// fileSize is the size of the synthetic segment files: room for the frames
// and a zero-filled tail.
const fileSize = 4096

// baseSeg is a segment of four batches mixing single frames, an empty body
// and atomic groups of two to four frames.
func baseSeg(rng *rand.Rand) *segBuf {
	s := newSeg(testSeq, rng)
	s.batch([]int{10}, []int{0}, []int{3, 5, 7})
	s.batch([]int{20, 1}, []int{33})
	s.batch([]int{4}, []int{8, 9, 10, 11}, []int{1})
	s.batch([]int{12}, []int{5, 6, 7}, []int{40})
	return s
}

// sealedSeg is baseSeg followed by a seal in a batch of its own.
func sealedSeg(rng *rand.Rand) *segBuf {
	s := baseSeg(rng)
	s.seal()
	return s
}

// bigSeg has a small first batch and a last batch of about 11 KiB, so that a
// 4 KiB block can vanish from the middle of a batch.
func bigSeg(rng *rand.Rand) *segBuf {
	s := newSeg(testSeq, rng)
	s.batch([]int{100}, []int{50, 60})
	groups := make([][]int, 0, 14)
	for range 20 {
		groups = append(groups, []int{500})
	}
	groups = append(groups, []int{300, 300, 300})
	s.batch(groups...)
	return s
}

// bigSegSynced is bigSeg with one more batch after the big one, which
// proves the big batch was durable.
func bigSegSynced(rng *rand.Rand) *segBuf {
	s := bigSeg(rng)
	s.batch([]int{70}, []int{80, 90})
	return s
}

// handFrame is one frame a test writes as it is, in any group order.
type handFrame struct {
	kind  segment.Kind
	place segment.Place
	n     int // body size
}

func record(place segment.Place, n int) handFrame {
	return handFrame{kind: segment.KindRecord, place: place, n: n}
}

func padding(n int) handFrame { return handFrame{kind: segment.KindPadding, place: segment.Full, n: n} }

// handBatchSeg builds a segment of one batch holding a 10-byte record, then
// a batch of the frames given, written as they are, then, when later names
// any groups, a batch of them: it proves the hand-written batch durable, so
// that damage there is corruption rather than a torn tail.
func handBatchSeg(frames []handFrame, later ...[]int) func(*rand.Rand) *segBuf {
	return func(r *rand.Rand) *segBuf {
		s := newSeg(testSeq, r)
		s.batch([]int{10})
		s.beginBatch()
		for _, f := range frames {
			s.frame(f.kind, f.place, f.n)
		}
		if len(later) > 0 {
			s.batch(later...)
		}
		return s
	}
}

// sealedThenMore is sealedSeg with a batch written after the seal, which a
// scan must never reach.
func sealedThenMore(rng *rand.Rand) *segBuf {
	s := sealedSeg(rng)
	s.batch([]int{9}, []int{1, 2})
	return s
}

// recycle writes frames of an older segment over data from off on, as a
// recycled file still holds them after the end of the new log.
func recycle(data []byte, off int, rng *rand.Rand) {
	old := newSeg(3, rng)
	for len(old.data) < len(data) {
		old.batch([]int{rng.IntN(90)}, []int{5, 50})
	}
	copy(data[off:], old.data[off:])
}

// Corruption functions: each takes the segment and its file and returns the
// damaged file.

func identity(_ *segBuf, data []byte) []byte { return data }

func truncateAt(off func(s *segBuf) int) func(*segBuf, []byte) []byte {
	return func(s *segBuf, data []byte) []byte { return data[:off(s)] }
}

func zeroRange(from, to func(s *segBuf) int) func(*segBuf, []byte) []byte {
	return func(s *segBuf, data []byte) []byte {
		clear(data[from(s):to(s)])
		return data
	}
}

func flipBit(off func(s *segBuf) int, bit uint) func(*segBuf, []byte) []byte {
	return func(s *segBuf, data []byte) []byte {
		data[off(s)] ^= 1 << bit
		return data
	}
}

func writeAt(off func(s *segBuf) int, b func(s *segBuf) []byte) func(*segBuf, []byte) []byte {
	return func(s *segBuf, data []byte) []byte {
		copy(data[off(s):], b(s))
		return data
	}
}

func both(fns ...func(*segBuf, []byte) []byte) func(*segBuf, []byte) []byte {
	return func(s *segBuf, data []byte) []byte {
		for _, fn := range fns {
			data = fn(s, data)
		}
		return data
	}
}

// Offsets in a segBuf.

func logEnd(s *segBuf) int { return s.end() }

func frameOff(i int) func(*segBuf) int {
	return func(s *segBuf) int { return s.frames[i].off }
}

func frameEnd(i int) func(*segBuf) int {
	return func(s *segBuf) int { return s.frames[i].end() }
}

func plus(off func(*segBuf) int, n int) func(*segBuf) int {
	return func(s *segBuf) int { return off(s) + n }
}

// frameStartAt returns the offset of the frame holding byte off.
func frameStartAt(off func(*segBuf) int) func(*segBuf) int {
	return func(s *segBuf) int {
		x := off(s)
		for _, f := range s.frames {
			if x >= f.off && x < f.end() {
				return f.off
			}
		}
		panic("frameStartAt: offset outside the frames")
	}
}

func batchStart(i int) func(*segBuf) int {
	return func(s *segBuf) int { return s.batches[i].start }
}

// pageIn returns the first 4 KiB boundary at least 600 bytes into batch i.
func pageIn(i int) func(*segBuf) int {
	return func(s *segBuf) int { return (s.batches[i].start + 600 + 4095) &^ 4095 }
}

// scanWant is what a scan of a damaged file must report.
type scanWant struct {
	tail     segment.EndKind
	end      int
	sealed   bool
	damageAt int   // checked when tail is not EndClean
	cause    error // checked with errors.Is when not nil
	records  []segment.Frame
	skipped  []segment.Span
}

func checkScan(t *testing.T, r segment.Report, got []segment.Frame, w scanWant) {
	t.Helper()
	require.Equal(t, w.tail, r.Tail, "Tail (cause %v at %d)", r.Cause, r.DamageAt)
	require.Equal(t, offsets(w.records), offsets(got), "record offsets")
	require.Equal(t, w.records, got)
	require.Equal(t, w.end, r.End, "End")
	require.Equal(t, w.sealed, r.Sealed, "Sealed")
	require.Equal(t, w.skipped, ranges(t, r.Skipped), "Skipped")
	if w.tail != segment.EndClean {
		require.Equal(t, w.damageAt, r.DamageAt, "DamageAt")
		require.Error(t, r.Cause)
	}
	if w.cause != nil {
		require.ErrorIs(t, r.Cause, w.cause)
	}
}

type scanCase struct {
	name    string
	seg     func(*rand.Rand) *segBuf
	corrupt func(s *segBuf, data []byte) []byte
	want    func(s *segBuf) scanWant
	// salvaged is what a scan with salvage reports; nil when it reports the
	// same as one without.
	salvaged func(s *segBuf) scanWant
}

func clean(s *segBuf) scanWant {
	return scanWant{tail: segment.EndClean, end: s.end(), records: s.all()}
}

// tornAt is a torn tail where the frame at offset at fails: the scan ends
// at the start of that frame's group.
func tornAt(at func(*segBuf) int, cause error) func(s *segBuf) scanWant {
	return func(s *segBuf) scanWant { return brokenAt(segment.EndTorn, s.groupAt(at(s)), at, cause)(s) }
}

// corruptAt is corruption where the frame at offset at fails: the valid
// prefix ends at the start of that frame's group.
func corruptAt(at func(*segBuf) int, cause error) func(s *segBuf) scanWant {
	return func(s *segBuf) scanWant { return brokenAt(segment.EndCorrupt, s.groupAt(at(s)), at, cause)(s) }
}

// brokenAt is a scan that ends with tail where the frame at offset at fails
// and breaks group gi: the valid prefix ends at the start of group gi.
func brokenAt(tail segment.EndKind, gi int, at func(*segBuf) int, cause error) func(s *segBuf) scanWant {
	return func(s *segBuf) scanWant {
		return scanWant{tail: tail, end: s.groups[gi].start, damageAt: at(s), cause: cause, records: s.before(gi)}
	}
}

// endsAtSeal is a clean end at the seal (frame 19 of sealedSeg), with the
// records before it.
func endsAtSeal(s *segBuf) scanWant {
	seal := s.frames[19]
	return scanWant{tail: segment.EndClean, end: seal.end(), sealed: true, records: s.before(seal.group)}
}

// skipGroups is what salvage reports when the groups listed are broken and
// the log otherwise ends cleanly at the end of the frames.
func skipGroups(gis ...int) func(s *segBuf) scanWant {
	return func(s *segBuf) scanWant {
		w := scanWant{tail: segment.EndClean, end: s.end(), records: s.except(gis...)}
		for _, gi := range gis {
			w.skipped = append(w.skipped, segment.Span{From: s.groups[gi].start, To: s.groups[gi].end})
		}
		if last := s.frames[len(s.frames)-1]; last.kind == segment.KindSeal {
			w.sealed = true
		}
		return w
	}
}

func TestScanClassification(t *testing.T) {
	// Group indexes in baseSeg: batch 0 = groups 0 (frame 0), 1 (frame 1),
	// 2 (frames 2-4); batch 1 = 3 (5-6), 4 (7); batch 2 = 5 (8), 6 (9-12),
	// 7 (13); batch 3 = 8 (14), 9 (15-17), 10 (18); the seal of sealedSeg
	// is group 11 (frame 19).
	tests := []scanCase{
		// Clean ends.
		{name: "exact end of file", seg: baseSeg, corrupt: truncateAt(logEnd), want: clean},
		{name: "zero-filled tail", seg: baseSeg, corrupt: identity, want: clean},
		{
			name: "header only", seg: func(r *rand.Rand) *segBuf { return newSeg(testSeq, r) }, corrupt: identity,
			want: func(*segBuf) scanWant { return scanWant{tail: segment.EndClean, end: segment.HeaderSize} },
		},
		{
			name: "header only, no tail", seg: func(r *rand.Rand) *segBuf { return newSeg(testSeq, r) },
			corrupt: truncateAt(func(*segBuf) int { return segment.HeaderSize }),
			want:    func(*segBuf) scanWant { return scanWant{tail: segment.EndClean, end: segment.HeaderSize} },
		},
		{
			name: "recycled file: stale frames of an older segment after the end", seg: baseSeg,
			corrupt: func(s *segBuf, data []byte) []byte {
				recycle(data, s.end(), s.rng)
				return data
			},
			want: clean,
		},
		{
			name: "stale frame of an older segment exactly at the end", seg: baseSeg,
			corrupt: writeAt(logEnd, func(s *segBuf) []byte {
				// It claims more was synced than the end: that must not matter.
				return segment.AppendFrame(nil, testSeq-1, 0, 4000, segment.KindRecord, segment.Full, []byte("old"))
			}),
			want: clean,
		},
		{
			name: "garbage not naming this segment after the end", seg: baseSeg,
			corrupt: func(s *segBuf, data []byte) []byte {
				for i := s.end(); i < len(data); i++ {
					data[i] = byte(1 + s.rng.UintN(255)) // no zero byte: the sequence pattern cannot appear
				}
				return data
			},
			want: clean,
		},
		{
			name: "a few garbage bytes at the end of the file", seg: baseSeg,
			corrupt: writeAt(func(*segBuf) int { return fileSize - 5 }, func(*segBuf) []byte { return []byte{1, 2, 3, 4, 5} }),
			want:    clean,
		},

		// Torn tails.
		{
			name: "group without its last frame: last frame zeroed", seg: baseSeg,
			corrupt: zeroRange(frameOff(17), frameEnd(17)), want: tornAt(frameOff(17), segment.ErrZeroFrame),
		},
		{
			name: "group without its last frame: file ends after the middle", seg: baseSeg,
			corrupt: truncateAt(frameEnd(16)), want: tornAt(frameOff(17), segment.ErrShortFrame),
		},
		{
			name: "group without its last two frames: zeros after the first", seg: baseSeg,
			corrupt: zeroRange(frameEnd(15), logEnd), want: tornAt(frameOff(16), segment.ErrZeroFrame),
		},
		{
			name: "frame header of this segment, body cut", seg: baseSeg,
			corrupt: truncateAt(plus(frameOff(18), 20)), want: tornAt(frameOff(18), segment.ErrShortFrame),
		},
		{
			name: "frame header of this segment, body zeroed", seg: baseSeg,
			corrupt: zeroRange(plus(frameOff(18), 17), logEnd), want: tornAt(frameOff(18), segment.ErrChecksum),
		},
		{
			name: "damage in the last batch, nothing after it (the blind spot)", seg: baseSeg,
			corrupt: flipBit(plus(frameOff(14), 20), 3), want: tornAt(frameOff(14), segment.ErrChecksum),
		},
		{
			name: "first 4 KiB of the unsynced batch zeroed, later frames survive", seg: bigSeg,
			corrupt: zeroRange(batchStart(1), plus(batchStart(1), 4096)),
			want: func(s *segBuf) scanWant {
				b := s.batches[1]
				return scanWant{tail: segment.EndTorn, end: b.start, damageAt: b.start, cause: segment.ErrZeroFrame, records: s.before(s.groupAt(b.start))}
			},
		},
		{
			name: "4 KiB block inside the unsynced batch zeroed, later frames survive", seg: bigSeg,
			corrupt: zeroRange(pageIn(1), plus(pageIn(1), 4096)),
			want: func(s *segBuf) scanWant {
				return tornAt(frameStartAt(pageIn(1)), segment.ErrChecksum)(s)
			},
		},

		// Corruption: bytes a completed fdatasync covered no longer verify.
		{
			name: "bit flip in an earlier batch", seg: baseSeg,
			corrupt: flipBit(plus(frameOff(7), 25), 0), want: corruptAt(frameOff(7), segment.ErrChecksum), salvaged: skipGroups(4),
		},
		{
			name: "bit flip in the middle of a group of an earlier batch", seg: baseSeg,
			corrupt: flipBit(plus(frameOff(10), 18), 7), want: corruptAt(frameOff(10), segment.ErrChecksum), salvaged: skipGroups(6),
		},
		{
			name: "sequence field damaged in an earlier batch", seg: baseSeg,
			corrupt: flipBit(plus(frameOff(0), 9), 1), want: corruptAt(frameOff(0), segment.ErrForeignFrame), salvaged: skipGroups(0),
		},
		{
			name: "length field damaged in an earlier batch", seg: baseSeg,
			corrupt: flipBit(plus(frameOff(5), 7), 2), want: corruptAt(frameOff(5), segment.ErrShortFrame), salvaged: skipGroups(3),
		},
		{
			name: "last frame of a group of an earlier batch zeroed", seg: baseSeg,
			corrupt: zeroRange(frameOff(4), frameEnd(4)), want: corruptAt(frameOff(4), segment.ErrZeroFrame), salvaged: skipGroups(2),
		},
		{
			name: "damage in the last batch of a sealed segment", seg: sealedSeg,
			corrupt: flipBit(plus(frameOff(18), 40), 5), want: corruptAt(frameOff(18), segment.ErrChecksum), salvaged: skipGroups(10),
		},
		{
			// The seal fills the file to its last byte, as it does when the
			// writer filled the segment: it still vouches for what is before it.
			name: "damage in the last batch of a sealed segment whose seal ends the file", seg: sealedSeg,
			corrupt: both(truncateAt(logEnd), flipBit(plus(frameOff(18), 40), 5)),
			want:    corruptAt(frameOff(18), segment.ErrChecksum), salvaged: skipGroups(10),
		},
		{
			name: "two damaged groups: salvage skips both", seg: baseSeg,
			corrupt: both(flipBit(plus(frameOff(1), 2), 0), flipBit(plus(frameOff(12), 20), 4)),
			want:    corruptAt(frameOff(1), segment.ErrChecksum), salvaged: skipGroups(1, 6),
		},
		{
			name: "damage, then a torn tail", seg: baseSeg,
			corrupt: both(flipBit(plus(frameOff(6), 17), 0), truncateAt(frameEnd(16))),
			want:    corruptAt(frameOff(6), segment.ErrChecksum),
			salvaged: func(s *segBuf) scanWant {
				return scanWant{
					tail: segment.EndTorn, end: s.groups[9].start, damageAt: s.frames[17].off, cause: segment.ErrShortFrame,
					records: s.records(func(gi int, _ groupSpec) bool { return gi != 3 && gi < 9 }),
					skipped: []segment.Span{{From: s.groups[3].start, To: s.groups[3].end}},
				}
			},
		},
		{
			name: "4 KiB block of a synced batch zeroed", seg: bigSegSynced,
			corrupt: zeroRange(pageIn(1), plus(pageIn(1), 4096)),
			want: func(s *segBuf) scanWant {
				return corruptAt(frameStartAt(pageIn(1)), segment.ErrChecksum)(s)
			},
			salvaged: func(s *segBuf) scanWant {
				from, to := pageIn(1)(s), pageIn(1)(s)+4096
				first, last := s.groupAt(from), s.groupAt(to-1)
				var broken []int
				for gi := first; gi <= last; gi++ {
					broken = append(broken, gi)
				}
				return scanWant{
					tail: segment.EndClean, end: s.end(), records: s.except(broken...),
					skipped: []segment.Span{{From: s.groups[first].start, To: s.groups[last].end}},
				}
			},
		},
		{
			name:    "frame of an unknown type in an earlier batch",
			seg:     handBatchSeg([]handFrame{{kind: segment.Kind(5), place: segment.Full, n: 3}, record(segment.Full, 4)}, []int{11}),
			corrupt: identity, want: corruptAt(frameOff(1), segment.ErrBadType), salvaged: skipGroups(1),
		},
		{
			name: "damaged groups followed only by the rest of a broken group", seg: func(r *rand.Rand) *segBuf {
				s := newSeg(testSeq, r)
				s.batch([]int{10}, []int{3, 4, 5})
				s.batch([]int{6, 7, 8})
				return s
			},
			// Both groups lose their first frame: after the first damage
			// nothing opens a group, and the later batch's frames prove the
			// damage was durable. The next frame goes after the span
			// skipped, as it does when a group follows one.
			corrupt: both(flipBit(plus(frameOff(1), 18), 0), flipBit(plus(frameOff(4), 20), 0)),
			want:    corruptAt(frameOff(1), segment.ErrChecksum),
			salvaged: func(s *segBuf) scanWant {
				return scanWant{
					tail: segment.EndClean, end: s.end(), records: s.before(1),
					skipped: []segment.Span{{From: s.groups[1].start, To: s.end()}},
				}
			},
		},

		// Seals.
		{
			name: "sealed", seg: sealedSeg, corrupt: identity,
			want: func(s *segBuf) scanWant { w := clean(s); w.sealed = true; return w },
		},
		{
			name: "frames after the seal are not read", seg: sealedThenMore,
			corrupt: identity, want: endsAtSeal,
		},
		{
			name: "damage after the seal is not read", seg: sealedThenMore,
			corrupt: flipBit(plus(frameOff(20), 20), 0), want: endsAtSeal,
		},
		{
			name: "torn seal", seg: sealedSeg, corrupt: truncateAt(plus(frameOff(19), 14)),
			want: tornAt(frameOff(19), segment.ErrShortFrame),
		},
		{
			name: "padding is stepped over", seg: handBatchSeg([]handFrame{padding(30)}, []int{3, 4}),
			corrupt: identity, want: clean,
		},
		{
			// Salvage pads a damaged span that nothing after it opens: the
			// padding is then the last frame, and the next frame goes after it.
			name: "padding ends the log", seg: func(r *rand.Rand) *segBuf {
				s := newSeg(testSeq, r)
				s.batch([]int{10}, []int{3, 4})
				s.beginBatch()
				s.frame(segment.KindPadding, segment.Full, 30)
				return s
			},
			corrupt: identity, want: clean,
		},

		// Frames that verify but break group order.
		{
			name:    "middle without first at the end",
			seg:     handBatchSeg([]handFrame{record(segment.Middle, 3), record(segment.Last, 3)}),
			corrupt: identity, want: tornAt(frameOff(1), segment.ErrGroup),
		},
		{
			name:    "middle without first, later batch",
			seg:     handBatchSeg([]handFrame{record(segment.Middle, 3), record(segment.Last, 3), record(segment.Full, 4)}, []int{5}),
			corrupt: identity, want: corruptAt(frameOff(1), segment.ErrGroup), salvaged: skipGroups(1),
		},
		{
			name:    "last without first, later batch",
			seg:     handBatchSeg([]handFrame{record(segment.Last, 3), record(segment.Full, 4)}, []int{5}),
			corrupt: identity, want: corruptAt(frameOff(1), segment.ErrGroup), salvaged: skipGroups(1),
		},
		{
			name:    "first, then a frame that opens a group, later batch",
			seg:     handBatchSeg([]handFrame{record(segment.First, 3), record(segment.Full, 4), record(segment.Full, 5)}, []int{6}),
			corrupt: identity, want: brokenAt(segment.EndCorrupt, 1, frameOff(2), segment.ErrGroup), salvaged: skipGroups(1),
		},
		{
			name:    "first, then first, later batch",
			seg:     handBatchSeg([]handFrame{record(segment.First, 3), record(segment.Middle, 3), record(segment.First, 4), record(segment.Last, 4)}, []int{6}),
			corrupt: identity, want: brokenAt(segment.EndCorrupt, 1, frameOff(3), segment.ErrGroup), salvaged: skipGroups(1),
		},
		{
			name:    "seal inside a group",
			seg:     handBatchSeg([]handFrame{record(segment.First, 3), {kind: segment.KindSeal, place: segment.Full}}),
			corrupt: identity, want: brokenAt(segment.EndTorn, 1, frameOff(2), segment.ErrGroup),
		},
		{
			name:    "padding inside a group",
			seg:     handBatchSeg([]handFrame{record(segment.First, 3), padding(8), record(segment.Last, 3)}),
			corrupt: identity, want: brokenAt(segment.EndTorn, 1, frameOff(2), segment.ErrGroup),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := newRand(t)
			s := tt.seg(rng)
			data := tt.corrupt(s, s.file(max(fileSize, (s.end()+4095)&^4095)))
			w := tt.want(s)
			r, got := scanAll(t, data, testSeq, false)
			checkScan(t, r, got, w)

			if tt.salvaged != nil {
				w = tt.salvaged(s)
			}
			r, got = scanAll(t, data, testSeq, true)
			checkScan(t, r, got, w)
		})
	}
}

// TestScanTornEveryOffset cuts the log at every byte offset, by truncating
// the file, by zeroing everything from the cut, and by leaving the stale
// bytes of a recycled file after it. The scan must return exactly the
// groups wholly before the cut and report a torn tail or a clean end.
func TestScanTornEveryOffset(t *testing.T) {
	rng := newRand(t)
	for _, sealed := range []bool{false, true} {
		s := baseSeg(rng)
		if sealed {
			s.seal()
		}
		full := s.file(fileSize)
		old := newSeg(testSeq-4, rng)
		for len(old.data) < fileSize {
			old.batch([]int{rng.IntN(60)}, []int{rng.IntN(9), rng.IntN(9)})
		}
		variants := []struct {
			name string
			cut  func(c int) []byte
		}{
			{"truncated", func(c int) []byte { return append([]byte(nil), full[:c]...) }},
			{"zeroed", func(c int) []byte {
				d := append([]byte(nil), full...)
				clear(d[c:])
				return d
			}},
			{"stale", func(c int) []byte {
				d := append([]byte(nil), old.data[:fileSize]...)
				copy(d, full[:c])
				return d
			}},
		}
		for _, v := range variants {
			for c := segment.HeaderSize; c <= s.end(); c++ {
				data := v.cut(c)
				// The cut is where the bytes stop matching what was written.
				eff := firstDiff(data, full, c)
				if eff < 0 || eff > s.end() {
					eff = s.end()
				}
				wantRecs, wantEnd := s.prefix(eff)
				msg := fmt.Sprintf("sealed=%v %s at %d", sealed, v.name, c)
				r, got := scanAll(t, data, testSeq, false)
				require.Equal(t, offsets(wantRecs), offsets(got), msg)
				require.Equal(t, wantRecs, got, msg)
				require.Equal(t, wantEnd, r.End, msg)
				require.NotEqual(t, segment.EndCorrupt, r.Tail, "%s: cause %v", msg, r.Cause)
				switch {
				case eff == s.end() && !sealed && namesSegment(data, eff, testSeq):
					// The stale bytes after the last frame happen to hold
					// this segment's sequence where a frame header would:
					// by the rule of doc.go, the header of a torn frame.
					// Open zeroes it; nothing acknowledged is lost.
					require.Equal(t, segment.EndTorn, r.Tail, msg)
				case eff == s.end():
					require.Equal(t, segment.EndClean, r.Tail, msg)
					require.Equal(t, sealed, r.Sealed, msg)
				default:
					require.False(t, r.Sealed, msg)
				}
				if r.Tail == segment.EndTorn {
					at := eff // after the last frame
					if eff < s.end() {
						at = frameStartAt(func(*segBuf) int { return eff })(s)
					}
					require.Equal(t, at, r.DamageAt, msg)
					require.Error(t, r.Cause, msg)
				}
				// A torn tail ends the scan with salvage too.
				r2, got2 := scanAll(t, data, testSeq, true)
				require.Equal(t, r, r2, msg)
				require.Equal(t, got, got2, msg)
			}
		}
	}
}

// namesSegment reports whether the bytes at off hold seq where a frame
// header holds its segment's sequence.
func namesSegment(data []byte, off int, seq uint32) bool {
	return off+12 <= len(data) && binary.LittleEndian.Uint32(data[off+8:]) == seq
}

// TestScanEveryBitFlip flips every bit of every frame. In a batch that a
// later frame proves durable the flip is corruption, reported at the start
// of the group it breaks, and salvage returns every other group; in the
// last batch of an unsealed segment it reads as a torn tail or a clean end
// there.
func TestScanEveryBitFlip(t *testing.T) {
	rng := newRand(t)
	for _, sealed := range []bool{false, true} {
		s := baseSeg(rng)
		if sealed {
			s.seal()
		}
		full := s.file(fileSize)
		lastBatch := len(s.batches) - 1
		for fi, f := range s.frames {
			g := s.groups[f.group]
			for bit := 0; bit < 8*(f.end()-f.off); bit++ {
				data := append([]byte(nil), full...)
				data[f.off+bit/8] ^= 1 << (bit % 8)
				msg := fmt.Sprintf("sealed=%v frame %d at %d, bit %d", sealed, fi, f.off, bit)

				r, got := scanAll(t, data, testSeq, false)
				require.Equal(t, s.before(f.group), got, msg)
				require.Equal(t, g.start, r.End, msg)
				require.False(t, r.Sealed, msg)
				if f.batch == lastBatch {
					// Nothing after it vouches for the bytes.
					require.NotEqual(t, segment.EndCorrupt, r.Tail, "%s: cause %v", msg, r.Cause)
				} else {
					require.Equal(t, segment.EndCorrupt, r.Tail, "%s: cause %v", msg, r.Cause)
				}
				switch at := bit / 8; {
				case r.Tail == segment.EndClean:
					// The frame no longer names this segment and nothing
					// follows it: the log simply ends there.
					require.Equal(t, lastBatch, f.batch, msg)
					require.True(t, at >= 8 && at < 12, msg)
				case at >= 8 && at < 12:
					require.ErrorIs(t, r.Cause, segment.ErrForeignFrame, msg)
				case at >= 4 && at < 8:
					require.True(t, isOneOf(r.Cause, segment.ErrShortFrame, segment.ErrChecksum), "%s: %v", msg, r.Cause)
				default:
					require.ErrorIs(t, r.Cause, segment.ErrChecksum, msg)
				}
				if r.Tail != segment.EndClean {
					require.Equal(t, f.off, r.DamageAt, msg)
				}

				r2, got2 := scanAll(t, data, testSeq, true)
				if r.Tail != segment.EndCorrupt {
					require.Equal(t, r, r2, msg)
					require.Equal(t, got, got2, msg)
					continue
				}
				w := skipGroups(f.group)(s)
				require.Equal(t, offsets(w.records), offsets(got2), msg)
				require.Equal(t, w.records, got2, msg)
				require.Equal(t, w.skipped, ranges(t, r2.Skipped), msg)
				require.Equal(t, w.end, r2.End, msg)
				require.Equal(t, segment.EndClean, r2.Tail, msg)
				require.Equal(t, sealed, r2.Sealed, msg)
				require.Equal(t, f.off, r2.DamageAt, msg)
			}
		}
	}
}

func TestScanCallbackError(t *testing.T) {
	s := baseSeg(newRand(t))
	data := s.file(fileSize)
	errStop := errors.New("stop here")
	for _, stopAt := range []int{1, 3, 4, 10} {
		var calls int
		r, err := segment.Scan(data, testSeq, false, func(segment.Frame) error {
			calls++
			if calls == stopAt {
				return fmt.Errorf("record %d: %w", calls, errStop)
			}
			return nil
		})
		require.ErrorIs(t, err, errStop)
		require.Equal(t, stopAt, calls, "Scan went on after fn failed")
		require.Equal(t, stopAt-1, r.Records, "the frames fn took before it failed")
	}
}

// TestScanShortData scans buffers too short for the header and the frames.
func TestScanShortData(t *testing.T) {
	s := baseSeg(newRand(t))
	for _, n := range []int{segment.HeaderSize, segment.HeaderSize + 1, segment.HeaderSize + 16} {
		r, got := scanAll(t, s.data[:n], testSeq, true)
		require.Empty(t, got)
		require.Equal(t, segment.HeaderSize, r.End)
	}
}

// TestScanFromTakesWhatLiesBeforeItAsValid: ScanFrom reads nothing before
// its offset, and reports the valid prefix as ending there at least: from
// the start of a group it returns that group and the ones after; from the
// end of the log it returns nothing and that end.
func TestScanFromTakesWhatLiesBeforeItAsValid(t *testing.T) {
	s := baseSeg(newRand(t))
	data := s.file(fileSize)
	clear(data[:segment.HeaderSize]) // never read

	for _, gi := range []int{0, 3, 6, 10} {
		from := s.groups[gi].start
		var got []segment.Frame
		r, err := segment.ScanFrom(data, testSeq, from, false, func(f segment.Frame) error {
			got = append(got, f)
			return nil
		})
		require.NoError(t, err)
		want := s.records(func(i int, _ groupSpec) bool { return i >= gi })
		require.Equal(t, want, got, "from group %d", gi)
		require.Equal(t, segment.Report{End: s.end(), Records: len(want), Tail: segment.EndClean}, r, "from group %d", gi)
	}

	r, err := segment.ScanFrom(data, testSeq, s.end(), false, func(segment.Frame) error {
		t.Fatal("a record past the end of the log")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, segment.Report{End: s.end(), Tail: segment.EndClean}, r)
}

// TestAFrameHeaderCutAfterItsSequenceIsATornTail: data that ends inside a
// frame header is a torn tail once the header's sequence field, whole,
// names this segment, and a clean end while it does not.
func TestAFrameHeaderCutAfterItsSequenceIsATornTail(t *testing.T) {
	s := baseSeg(newRand(t))
	next := segment.AppendFrame(nil, testSeq, 0, uint32(s.end()), segment.KindRecord, segment.Full, []byte("cut"))
	for _, tt := range []struct {
		keep int // bytes of the next frame's header left
		tail segment.EndKind
	}{
		{11, segment.EndClean},
		{12, segment.EndTorn},
		{16, segment.EndTorn},
	} {
		data := append(append([]byte(nil), s.data...), next[:tt.keep]...)
		r, got := scanAll(t, data, testSeq, false)
		msg := fmt.Sprintf("%d bytes of the header", tt.keep)
		require.Equal(t, offsets(s.all()), offsets(got), msg)
		require.Equal(t, s.end(), r.End, msg)
		require.Equal(t, tt.tail, r.Tail, "%s: cause %v", msg, r.Cause)
		if tt.tail == segment.EndTorn {
			require.Equal(t, s.end(), r.DamageAt, msg)
			require.ErrorIs(t, r.Cause, segment.ErrShortFrame, msg)
		}
	}
}
