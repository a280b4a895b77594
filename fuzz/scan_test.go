package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
)

// Layout flags of FuzzSegmentScan.
const (
	scanHeader      = 1 << iota // a valid header first
	scanSplit                   // half the layout's groups after the junk
	scanSeal                    // a seal frame at the end
	scanSyncedAfter             // groups after the junk claim the junk was durable
	scanTearLast                // the last group written loses its last byte
	scanSalted                  // with a header: a salt other than 0, and stale frames under another
)

// segmentBuilder lays out frames as the log writes them, and notes where
// it put the frames of its own segment.
type segmentBuilder struct {
	data []byte
	seq  uint32
	salt uint32      // the salt of the segment's frames: its header's
	old  uint32      // the salt of the stale frames a recycled file holds
	n    int         // frames written, to vary the bodies
	own  []laidFrame // the frames of segment seq, in order
}

// laidFrame is a frame of the builder's segment, as it was written.
type laidFrame struct {
	off, end int
	synced   uint32
	kind     segment.Kind
	place    segment.Place
	raw      []byte // the frame's bytes as written
}

// frame appends one frame, and notes it if it is of the builder's segment.
func (b *segmentBuilder) frame(seq, salt, synced uint32, kind segment.Kind, place segment.Place, body []byte) {
	off := len(b.data)
	b.data = segment.AppendFrame(b.data, seq, salt, synced, kind, place, body)
	if seq == b.seq && salt == b.salt {
		b.own = append(b.own, laidFrame{off: off, end: len(b.data), synced: synced, kind: kind, place: place, raw: bytes.Clone(b.data[off:])})
	}
}

// group appends a group of frames (one frame: Full) of segment seq with
// bodies of bodyLen bytes, each claiming synced bytes durable (never more
// than its own offset), of which only the first written are.
func (b *segmentBuilder) group(seq, salt uint32, frames, written, bodyLen, synced int) {
	for i := range written {
		body := make([]byte, bodyLen)
		for j := range body {
			body[j] = byte(b.n*7 + j + 1)
		}
		b.n++
		b.frame(seq, salt, uint32(min(synced, len(b.data))), segment.KindRecord, segment.PlaceOf(i, frames), body)
	}
}

// layout appends what the layout bytes say: for each byte, a group of 1-4
// record frames of this segment (top bits 00), a group of 2-5 whose last
// frame was never written while the log went on after it (01), a padding
// frame (10), or a group of another segment's frames, as a recycled file
// holds (11): salted like the segment's own frames when the segment's salt
// is 0, else naming this segment but under the recycled file's old salt.
func (b *segmentBuilder) layout(program []byte, synced func() int) {
	for _, op := range program {
		switch op >> 6 {
		case 0:
			b.group(b.seq, b.salt, int(op&3)+1, int(op&3)+1, int(op>>2)&15, synced())
		case 1:
			b.group(b.seq, b.salt, int(op&3)+2, int(op&3)+1, int(op>>2)&15, synced())
		case 2:
			b.frame(b.seq, b.salt, uint32(min(synced(), len(b.data))), segment.KindPadding, segment.Full, make([]byte, op&63))
		case 3:
			if b.salt == 0 {
				b.group(b.seq+1, 0, int(op&3)+1, int(op&3)+1, int(op>>2)&15, 0)
			} else {
				// Claiming bytes durable far past them: taken, such
				// a frame would make the scan call the file corrupt.
				b.group(b.seq, b.old, int(op&3)+1, int(op&3)+1, int(op>>2)&15, 1<<30)
			}
		}
	}
}

// scanInput builds the data FuzzSegmentScan scans, and returns it with the
// frames of segment seq in it that are whole.
func scanInput(program, junk []byte, seq uint32, flags byte) ([]byte, []laidFrame) {
	b := &segmentBuilder{seq: seq}
	if flags&scanHeader != 0 {
		if flags&scanSalted != 0 {
			b.salt = 0x5a17f00d ^ seq*0x9e3779b1
			b.old = b.salt ^ 0x00c0ffee
		}
		h := segment.EncodeHeader(seq, b.salt)
		b.data = append(b.data, h[:]...)
	}
	before, after := program, []byte(nil)
	if flags&scanSplit != 0 {
		before, after = program[:len(program)/2], program[len(program)/2:]
	}
	b.layout(before, func() int { return len(b.data) })
	x := len(b.data)
	b.data = append(b.data, junk...)
	if flags&scanSyncedAfter != 0 {
		b.layout(after, func() int { return len(b.data) })
	} else {
		b.layout(after, func() int { return x })
	}
	if flags&scanTearLast != 0 && len(b.data) > x {
		b.data = b.data[:len(b.data)-1]
	}
	if flags&scanSeal != 0 {
		b.frame(seq, b.salt, uint32(len(b.data)), segment.KindSeal, segment.Full, nil)
	}
	// A frame is whole while its bytes are those written: the torn one is
	// not, unless the seal's first byte happens to be the byte it lost.
	var whole []laidFrame
	for _, f := range b.own {
		if f.end <= len(b.data) && bytes.Equal(b.data[f.off:f.end], f.raw) {
			whole = append(whole, f)
		}
	}
	return b.data, whole
}

// scanned is one scan's result.
type scanned struct {
	r      segment.Report
	frames []segment.Frame
}

func scanFrom(data []byte, seq uint32, from int, salvage bool) (scanned, error) {
	var s scanned
	var err error
	s.r, err = segment.ScanFrom(data, seq, from, salvage, func(f segment.Frame) error {
		s.frames = append(s.frames, f)
		return nil
	})
	return s, err
}

// FuzzSegmentScan scans the segment the input lays out (see scanInput)
// without and with salvage, and checks what every scan must keep.
func FuzzSegmentScan(f *testing.F) {
	f.Fuzz(func(t *testing.T, program, junk []byte, seq uint32, flags byte, pick uint16) {
		if len(program) > 64 {
			program = program[:64]
		}
		data, own := scanInput(program, junk, seq, flags)
		orig := bytes.Clone(data)
		if len(data) < segment.HeaderSize {
			// Not a segment file: refused, for want of a header.
			for _, salvage := range []bool{false, true} {
				_, err := scanFrom(data, seq, segment.HeaderSize, salvage)
				require.ErrorIs(t, err, fs.ErrInvalid)
			}
			return
		}

		plain, err := scanFrom(data, seq, segment.HeaderSize, false)
		require.NoError(t, err)
		checkScan(t, data, seq, segment.HeaderSize, plain)
		again, err := scanFrom(data, seq, segment.HeaderSize, false)
		require.NoError(t, err)
		require.Equal(t, plain, again, "a second scan reports otherwise")
		if plain.r.Tail != segment.EndClean {
			require.GreaterOrEqual(t, plain.r.DamageAt, plain.r.End, "damage inside the valid prefix")
			require.Error(t, plain.r.Cause)
		}
		if plain.r.Sealed {
			require.Equal(t, segment.EndClean, plain.r.Tail, "sealed but not clean")
		}
		require.Empty(t, plain.r.Skipped, "a scan without salvage skipped something")

		salv, err := scanFrom(data, seq, segment.HeaderSize, true)
		require.NoError(t, err)
		checkScan(t, data, seq, segment.HeaderSize, salv)
		checkSalvage(t, data, plain, salv)
		require.Equal(t, orig, data, "a scan changed its input")

		// The input says where every whole frame of the segment is, and
		// what each claims was durable: how each scan ends follows from
		// that by the documented rules. (Segment 0 is left out: its
		// zero-filled space names it.)
		if seq != 0 {
			requireExpectedScan(t, data, seq, own, false, plain)
			requireExpectedScan(t, data, seq, own, true, salv)
		}

		end := plain.r.End

		// The valid prefix alone, with zeros after it, scans to the same
		// records and a clean end. (Segment 0 does not exist: its zero-filled
		// space names it, so there it reads as a torn tail.)
		if seq != 0 {
			cut := append(bytes.Clone(data[:end]), make([]byte, int(pick)%300)...)
			c, err := scanFrom(cut, seq, segment.HeaderSize, false)
			require.NoError(t, err)
			require.Equal(t, segment.Report{End: end, Records: plain.r.Records, Sealed: plain.r.Sealed, Tail: segment.EndClean}, c.r,
				"data[:End] plus %d zeros", len(cut)-end)
			requireSameFrames(t, plain.frames, c.frames)
		}

		// ScanFrom at a group boundary the scan passed gives the rest of it.
		// (Past a seal it cannot know of the seal, which it does not read.)
		bounds := []int{segment.HeaderSize}
		if !plain.r.Sealed {
			bounds = append(bounds, end)
		}
		for _, fr := range plain.frames {
			if fr.Place.Closes() {
				bounds = append(bounds, fr.End())
			}
		}
		from := bounds[int(pick)%len(bounds)]
		rest, err := scanFrom(data, seq, from, false)
		require.NoError(t, err)
		var want []segment.Frame
		for _, fr := range plain.frames {
			if fr.Offset >= from {
				want = append(want, fr)
			}
		}
		requireSameFrames(t, want, rest.frames)
		require.Equal(t, len(want), rest.r.Records)
		require.Equal(t, []any{plain.r.End, plain.r.Tail, plain.r.Sealed, plain.r.DamageAt, errText(plain.r.Cause)},
			[]any{rest.r.End, rest.r.Tail, rest.r.Sealed, rest.r.DamageAt, errText(rest.r.Cause)}, "ScanFrom(%d) ends otherwise than Scan", from)

		// A callback error stops the scan and is returned.
		if n := len(plain.frames); n > 0 {
			stopAt := int(pick) % n
			errStop := errors.New("stop")
			calls := 0
			r, err := segment.Scan(data, seq, false, func(segment.Frame) error {
				calls++
				if calls > stopAt {
					return errStop
				}
				return nil
			})
			require.ErrorIs(t, err, errStop)
			require.Equal(t, stopAt+1, calls, "the scan went on after its callback failed")
			require.LessOrEqual(t, r.Records, stopAt)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkScan checks what any scan of data from from must keep.
func checkScan(t *testing.T, data []byte, seq uint32, from int, s scanned) {
	t.Helper()
	r := s.r
	require.GreaterOrEqual(t, r.End, segment.HeaderSize, "End before the header's end")
	require.LessOrEqual(t, r.End, len(data), "End past the data")
	require.Equal(t, len(s.frames), r.Records, "Records counts otherwise than the callback")
	inGroup := false
	for i, fr := range s.frames {
		require.Equal(t, segment.KindRecord, fr.Kind, "frame %d handed over is a %v", i, fr.Kind)
		require.GreaterOrEqual(t, fr.Offset, from)
		require.LessOrEqual(t, fr.End(), r.End, "frame %d at %d ends past End %d", i, fr.Offset, r.End)
		if i > 0 {
			require.LessOrEqual(t, s.frames[i-1].End(), fr.Offset, "frames %d and %d overlap or are out of order", i-1, i)
		}
		alone, err := segment.Decode(data, fr.Offset, seq)
		require.NoError(t, err, "frame %d at %d does not decode on its own", i, fr.Offset)
		require.Equal(t, alone, fr)
		require.Equal(t, inGroup, !fr.Place.Opens(), "frame %d at %d: place %d out of group order", i, fr.Offset, fr.Place)
		if inGroup {
			require.Equal(t, s.frames[i-1].End(), fr.Offset, "frames of a group are contiguous")
		}
		inGroup = !fr.Place.Closes()
	}
	require.False(t, inGroup, "an incomplete group was handed over")
}

// checkSalvage checks a salvage scan against the plain one.
func checkSalvage(t *testing.T, data []byte, plain, salv scanned) {
	t.Helper()
	if plain.r.Tail != segment.EndCorrupt {
		require.Equal(t, plain, salv, "salvage changed a scan that found no corruption")
		return
	}
	require.GreaterOrEqual(t, len(salv.frames), len(plain.frames))
	requireSameFrames(t, plain.frames, salv.frames[:len(plain.frames)])
	if len(salv.r.Skipped) == 0 {
		// Past the budget of failing candidates a salvage does not step
		// over the damage: it ends there, corrupt, as the plain scan did,
		// and says why (segment.ErrTooManyCandidates).
		require.ErrorIs(t, salv.r.Cause, segment.ErrTooManyCandidates, "corruption, and salvage skipped nothing")
		require.Equal(t, segment.EndCorrupt, salv.r.Tail)
		require.Equal(t, plain.r.End, salv.r.End)
		require.Len(t, salv.frames, len(plain.frames))
		return
	}
	require.Equal(t, plain.r.End, salv.r.Skipped[0].From, "the first skipped span starts where the plain scan stopped")
	prev := segment.HeaderSize
	for _, sp := range salv.r.Skipped {
		require.GreaterOrEqual(t, sp.From, prev, "skipped spans out of order: %v", salv.r.Skipped)
		require.Less(t, sp.From, sp.To, "empty skipped span: %v", salv.r.Skipped)
		require.LessOrEqual(t, sp.To, len(data))
		prev = sp.To
		for _, fr := range salv.frames {
			require.False(t, fr.Offset < sp.To && fr.End() > sp.From, "record at %d inside skipped span %v", fr.Offset, sp)
		}
	}
	if salv.r.Tail == segment.EndCorrupt {
		// Having stepped over damage, a salvage ends corrupt only where
		// what it spent leaves too little to verify what follows, and
		// says so (segment/doc.go).
		require.ErrorIs(t, salv.r.Cause, segment.ErrTooManyCandidates, "salvage ended in corruption")
		require.GreaterOrEqual(t, salv.r.DamageAt, salv.r.End, "damage inside the valid prefix")
	}
}

// requireExpectedScan checks a scan against what expectScan works out from
// the frames laid out.
func requireExpectedScan(t *testing.T, data []byte, seq uint32, own []laidFrame, salvage bool, s scanned) {
	t.Helper()
	want, wantAt := expectScan(data, seq, own, salvage)
	got := s.r
	got.Cause = nil
	got.Skipped = nil
	for _, sp := range s.r.Skipped {
		require.Error(t, sp.Cause, "skipped span %v names no failure", sp)
		got.Skipped = append(got.Skipped, segment.Span{From: sp.From, To: sp.To, At: sp.At})
	}
	var gotAt []int
	for _, fr := range s.frames {
		gotAt = append(gotAt, fr.Offset)
	}
	require.Equal(t, want, got, "salvage %v: the scan reports otherwise than the frames laid out and the documented rules say", salvage)
	require.Equal(t, wantAt, gotAt, "salvage %v: the records handed over are not those the frames laid out say", salvage)
}

// expectScan works out, without decoding, what a scan of data with or
// without salvage reports and the offsets of the records it hands over,
// from own (the whole frames of segment seq in data, in order) and the
// rules of the segment package's documentation: the valid prefix runs
// through complete groups, paddings and a seal; where it stops, a later
// frame that claims bytes past that point durable means corruption, a
// later frame or a frame header naming the segment there a torn tail, and
// anything else a clean end. Salvage steps over corruption to the next
// frame that opens a group, a padding or a seal (the frame that broke an
// unfinished group by opening another, if that is where the prefix
// stopped), or, when there is none, past the last frame of the segment.
// Whatever else data holds (junk, another segment's frames, a torn frame)
// holds no whole frame of the segment.
func expectScan(data []byte, seq uint32, own []laidFrame, salvage bool) (segment.Report, []int) {
	at := map[int]laidFrame{}
	for _, f := range own {
		at[f.off] = f
	}
	// walk returns the frames a search from off meets: the first that
	// starts at or after off, then the first at or after its end, and so
	// on (a frame that starts inside another is not met).
	walk := func(off int) []laidFrame {
		var met []laidFrame
		for _, f := range own {
			if f.off >= off {
				met = append(met, f)
				off = f.end
			}
		}
		return met
	}
	r := segment.Report{End: segment.HeaderSize}
	var records, group []int
	for off := segment.HeaderSize; ; {
		f, whole := at[off]
		if whole && (f.kind != segment.KindRecord || f.place.Opens()) == (len(group) == 0) {
			switch f.kind {
			case segment.KindSeal:
				r.End, r.Sealed = f.end, true
				return r, records
			case segment.KindPadding:
				r.End = f.end
			default:
				group = append(group, off)
				if f.place.Closes() {
					records, group = append(records, group...), nil
					r.Records, r.End = len(records), f.end
				}
			}
			off = f.end
			continue
		}
		// The valid prefix stops at off.
		later, corrupt := false, false
		for _, g := range walk(off + 1) {
			later = true
			corrupt = corrupt || int64(g.synced) > int64(off)
		}
		// An unfinished group before off, or a frame header naming the
		// segment at off, says a frame of the segment started there.
		named := len(group) > 0 || off+12 <= len(data) && binary.LittleEndian.Uint32(data[off+8:]) == seq
		switch {
		case corrupt:
			r.Tail = segment.EndCorrupt
		case later || named:
			r.Tail = segment.EndTorn
		default:
			r.Tail = segment.EndClean
			return r, records
		}
		r.DamageAt = off
		if r.Tail == segment.EndTorn || !salvage {
			return r, records
		}
		// Salvage looks for the next frame that may start the log again
		// after off, or from off itself when the frame there is whole and
		// only broke the unfinished group by opening another.
		from := off + 1
		if whole && len(group) > 0 {
			from = off
		}
		next := -1
		for _, g := range walk(from) {
			if g.kind != segment.KindRecord || g.place.Opens() {
				next = g.off
				break
			}
		}
		if next < 0 {
			to := off + 1
			for _, g := range walk(off + 1) {
				to = g.end
			}
			r.Skipped = append(r.Skipped, segment.Span{From: r.End, To: to, At: off})
			r.Tail, r.End = segment.EndClean, to
			return r, records
		}
		r.Skipped = append(r.Skipped, segment.Span{From: r.End, To: next, At: off})
		r.Tail, r.End, off, group = segment.EndClean, next, next, nil
	}
}

func requireSameFrames(t *testing.T, want, got []segment.Frame) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, []any{w.Offset, w.Seq, w.Synced, w.Kind, w.Place}, []any{g.Offset, g.Seq, g.Synced, g.Kind, g.Place}, "frame %d", i)
		require.True(t, bytes.Equal(w.Body, g.Body), "frame %d body", i)
	}
}

// scanSeeds are the generated inputs of FuzzSegmentScan.
func scanSeeds(testing.TB) []seed {
	s := func(name string, program, junk []byte, seq uint32, flags byte, pick uint16) seed {
		return seed{name, []any{program, junk, seq, flags, pick}}
	}
	groups := []byte{0x04, 0x09, 0x13, 0x2e, 0x01, 0x83, 0x07}
	stale := []byte{0x05, 0x06, 0xc7, 0xc2, 0xc9}
	var noise []byte
	for i := range 90 {
		noise = append(noise, byte(i*37+11))
	}
	return []seed{
		s("clean", groups, nil, 1, scanHeader, 3),
		s("clean-zeros", groups, make([]byte, 200), 7, scanHeader, 50),
		s("sealed", groups, nil, 3, scanHeader|scanSeal, 2),
		s("torn", groups, nil, 2, scanHeader|scanSplit|scanTearLast, 1),
		s("torn-mid-group", []byte{0x05, 0x33}, nil, 2, scanHeader|scanSplit|scanTearLast, 9),
		s("torn-then-sealed", []byte{0x05, 0x33}, nil, 2, scanHeader|scanSplit|scanTearLast|scanSeal, 9),
		// The seal's first byte is the one the torn frame lost: that frame is whole again.
		s("torn-healed-by-seal", []byte("0*d0"), []byte("0*"), 9, scanSplit|scanTearLast|scanSeal, 0),
		s("torn-junk-then-old", groups, noise, 4, scanHeader|scanSplit, 5),
		s("corrupt", groups, noise, 4, scanHeader|scanSplit|scanSyncedAfter, 5),
		s("corrupt-sealed", groups, []byte{1, 2, 3, 4, 5}, 9, scanHeader|scanSplit|scanSyncedAfter|scanSeal, 7),
		s("corrupt-zeros", groups, make([]byte, 40), 9, scanHeader|scanSplit|scanSyncedAfter, 0),
		s("recycled", stale, nil, 6, scanHeader, 4),
		s("salted", groups, nil, 8, scanHeader|scanSalted, 3),
		s("salted-recycled", stale, nil, 6, scanHeader|scanSalted, 4),
		s("salted-recycled-after", []byte{0x04, 0x08, 0xc4, 0xc8, 0x09}, nil, 6, scanHeader|scanSalted|scanSplit, 4),
		s("salted-corrupt-sealed", groups, []byte{1, 2, 3, 4, 5}, 9, scanHeader|scanSalted|scanSplit|scanSyncedAfter|scanSeal, 7),
		s("recycled-after", []byte{0x04, 0x08, 0xc4, 0xc8}, nil, 6, scanHeader|scanSplit, 4),
		s("padding", []byte{0x80, 0x04, 0xbf, 0x0c}, nil, 5, scanHeader, 1),
		s("padding-last", []byte{0x04, 0x85}, nil, 5, scanHeader, 1),
		s("cut-group", []byte{0x04, 0x45, 0x09, 0x13}, nil, 8, scanHeader, 3),
		s("cut-group-last", []byte{0x04, 0x46}, nil, 8, scanHeader, 1),
		s("no-header", groups, noise, 4, scanSplit, 2),
		s("short", nil, []byte("WALBSEG"), 1, 0, 0),
		s("empty", nil, nil, 1, 0, 0),
		s("seq-zero", groups, make([]byte, 64), 0, scanHeader, 8),
		s("max-seq", groups, nil, ^uint32(0), scanHeader|scanSeal, 8),
		s("junk-only", nil, []byte(fmt.Sprint(noise)), 1, scanHeader, 3),
	}
}
