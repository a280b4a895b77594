package segment_test

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "seed of the random tests (0: pick one from the clock)")
	updateFlag = flag.Bool("update", false, "rewrite the golden files in testdata/")
)

// newRand returns a seeded generator and logs the seed if the test fails,
// so that a failure can be replayed with -seed.
func newRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d: rerun with -seed=%d", seed, seed)
		}
	})
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// frameSpec is one frame the synthetic writer put in a segment buffer.
type frameSpec struct {
	off    int
	synced uint32
	kind   segment.Kind
	place  segment.Place
	body   []byte
	group  int // index in segBuf.groups
	batch  int // index in segBuf.batches
}

func (f frameSpec) end() int { return f.off + segment.Size(len(f.body)) }

func (f frameSpec) frame(seq uint32) segment.Frame {
	return segment.Frame{Offset: f.off, Seq: seq, Synced: f.synced, Kind: f.kind, Place: f.place, Body: f.body}
}

// groupSpec is a run of frames that starts with a frame that opens a group
// (or a seal or padding) and holds the frames that follow it up to the next
// one that opens.
type groupSpec struct {
	start, end int
	frames     []int // indexes in segBuf.frames
	batch      int
}

type batchSpec struct {
	start, end int
}

// segBuf builds a segment the way the log's writer does: the header, then
// batches of frames, where every frame of a batch carries synced = the
// batch's own start (the end of the previous batch, durable once that batch's
// fdatasync completed). Bodies are random bytes that are never zero, so
// zeroing any byte of a frame changes it and the 4-byte sequence pattern
// (which holds zero bytes) never shows up inside a body.
type segBuf struct {
	seq     uint32
	rng     *rand.Rand
	data    []byte
	frames  []frameSpec
	groups  []groupSpec
	batches []batchSpec
}

func newSeg(seq uint32, rng *rand.Rand) *segBuf {
	h := segment.EncodeHeader(seq, 0)
	return &segBuf{seq: seq, rng: rng, data: append([]byte(nil), h[:]...)}
}

// beginBatch starts a batch: the frames appended next carry synced = here.
func (s *segBuf) beginBatch() *segBuf {
	s.batches = append(s.batches, batchSpec{start: len(s.data), end: len(s.data)})
	return s
}

// frame appends one frame with a body of n bytes to the current batch.
func (s *segBuf) frame(kind segment.Kind, place segment.Place, n int) frameSpec {
	if len(s.batches) == 0 {
		s.beginBatch()
	}
	bi := len(s.batches) - 1
	body := make([]byte, n)
	if kind != segment.KindPadding {
		for i := range body {
			body[i] = byte(1 + s.rng.UintN(255))
		}
	}
	f := frameSpec{off: len(s.data), synced: uint32(s.batches[bi].start), kind: kind, place: place, body: body, batch: bi}
	s.data = segment.AppendFrame(s.data, s.seq, 0, f.synced, kind, place, body)
	if kind != segment.KindRecord || place.Opens() || len(s.groups) == 0 || isComplete(s, s.groups[len(s.groups)-1]) {
		s.groups = append(s.groups, groupSpec{start: f.off, batch: bi})
	}
	g := &s.groups[len(s.groups)-1]
	f.group = len(s.groups) - 1
	g.frames = append(g.frames, len(s.frames))
	g.end = f.end()
	s.frames = append(s.frames, f)
	s.batches[bi].end = len(s.data)
	return f
}

// batch appends one batch; each argument is the body sizes of one atomic
// group.
func (s *segBuf) batch(groups ...[]int) *segBuf {
	s.beginBatch()
	for _, sizes := range groups {
		for i, n := range sizes {
			s.frame(segment.KindRecord, segment.PlaceOf(i, len(sizes)), n)
		}
	}
	return s
}

// seal appends a seal frame in a batch of its own.
func (s *segBuf) seal() frameSpec {
	s.beginBatch()
	return s.frame(segment.KindSeal, segment.Full, 0)
}

// end is the offset just past the last frame written.
func (s *segBuf) end() int { return len(s.data) }

// file returns the segment as a file of size bytes: the frames, then zeros.
func (s *segBuf) file(size int) []byte {
	if size < len(s.data) {
		panic("segBuf.file: size below the data")
	}
	out := make([]byte, size)
	copy(out, s.data)
	return out
}

// groupAt returns the index of the group holding byte off.
func (s *segBuf) groupAt(off int) int {
	for i, g := range s.groups {
		if off >= g.start && off < g.end {
			return i
		}
	}
	panic("segBuf.groupAt: offset outside the frames")
}

// records returns, in order, the record frames of the groups keep accepts.
func (s *segBuf) records(keep func(gi int, g groupSpec) bool) []segment.Frame {
	var out []segment.Frame
	for gi, g := range s.groups {
		if !keep(gi, g) {
			continue
		}
		for _, fi := range g.frames {
			if f := s.frames[fi]; f.kind == segment.KindRecord {
				out = append(out, f.frame(s.seq))
			}
		}
	}
	return out
}

// prefix returns the records of the groups that end at or before off, and
// the end of the last of them: what a scan of a log cut at off returns.
func (s *segBuf) prefix(off int) ([]segment.Frame, int) {
	end := segment.HeaderSize
	recs := s.records(func(_ int, g groupSpec) bool {
		if g.end <= off && isComplete(s, g) {
			end = max(end, g.end)
			return true
		}
		return false
	})
	return recs, end
}

// all returns every record of the buffer.
func (s *segBuf) all() []segment.Frame {
	return s.records(func(int, groupSpec) bool { return true })
}

// except returns every record but those of the groups listed.
func (s *segBuf) except(gis ...int) []segment.Frame {
	return s.records(func(gi int, _ groupSpec) bool {
		for _, x := range gis {
			if gi == x {
				return false
			}
		}
		return true
	})
}

// before returns the records of the groups before group gi.
func (s *segBuf) before(gi int) []segment.Frame {
	return s.records(func(i int, _ groupSpec) bool { return i < gi })
}

func isComplete(s *segBuf, g groupSpec) bool {
	last := s.frames[g.frames[len(g.frames)-1]]
	return last.kind != segment.KindRecord || last.place.Closes()
}

// firstDiff returns the first offset at or after from where a and b differ
// (a shorter slice differs where it ends), or -1 when they do not.
func firstDiff(a, b []byte, from int) int {
	n := min(len(a), len(b))
	for i := from; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// scanAll runs Scan, collects the record frames it hands over and checks
// the invariants every scan keeps.
func scanAll(t testing.TB, data []byte, seq uint32, salvage bool) (segment.Report, []segment.Frame) {
	t.Helper()
	var got []segment.Frame
	r, err := segment.Scan(data, seq, salvage, func(f segment.Frame) error {
		got = append(got, f)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, len(got), r.Records, "Report.Records")
	require.LessOrEqual(t, r.End, max(len(data), segment.HeaderSize), "Report.End")
	for i, f := range got {
		require.Equal(t, segment.KindRecord, f.Kind, "frame %d", i)
		if i > 0 {
			require.GreaterOrEqual(t, f.Offset, got[i-1].End(), "frame %d overlaps the one before", i)
		}
		require.True(t, bytes.Equal(data[f.Offset+segment.FrameHeaderSize:f.End()], f.Body), "frame %d body does not alias data", i)
	}
	if !salvage {
		require.Empty(t, r.Skipped, "Skipped without salvage")
	}
	return r, got
}

// offsets lists the offsets of frames, for readable failure messages.
func offsets(fs []segment.Frame) []int {
	out := make([]int, len(fs))
	for i, f := range fs {
		out[i] = f.Offset
	}
	return out
}

// ranges returns the byte ranges of spans a salvage skipped, after checking
// that each names the failure found in it.
func ranges(t *testing.T, spans []segment.Span) []segment.Span {
	t.Helper()
	var out []segment.Span
	for _, sp := range spans {
		require.Error(t, sp.Cause, "skipped span %v names no failure", sp)
		// (A whole frame that broke the group before it by opening
		// another fails where the span ends.)
		require.True(t, sp.From <= sp.At && sp.At <= sp.To, "skipped span %v fails outside itself", sp)
		out = append(out, segment.Span{From: sp.From, To: sp.To})
	}
	return out
}
