package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
)

// EndKind says how the valid prefix of a segment ends.
type EndKind uint8

// How a scan ends. See the package documentation for the rules.
const (
	// EndClean: the data ends, or zeros or foreign bytes follow.
	EndClean EndKind = iota
	// EndTorn: bytes that were never durable follow; they may be dropped.
	EndTorn
	// EndCorrupt: bytes that were durable no longer verify.
	EndCorrupt
)

func (k EndKind) String() string {
	switch k {
	case EndClean:
		return "clean end"
	case EndTorn:
		return "torn tail"
	case EndCorrupt:
		return "corruption"
	}
	return fmt.Sprintf("EndKind(%d)", uint8(k))
}

// ErrGroup is the cause reported when frames verify but their group places
// are out of order (a middle frame with no first, a seal inside a group).
var ErrGroup = errors.New("segment: frame out of group order")

// Span is a range of bytes [From, To) of a segment. For a span salvage
// skipped, At is the offset of the frame that failed in it and Cause what
// failed there.
type Span struct {
	From, To int
	At       int
	Cause    error
}

// Report is what a scan found.
type Report struct {
	// End is the offset just past the last complete group (or seal) of the
	// valid prefix: where the next frame goes.
	End int
	// Records counts the record frames the callback took (returned nil
	// for): when it fails, those of the group it failed in that it took
	// before count, the one it failed on does not.
	Records int
	// Sealed reports that the valid prefix ends with a seal frame.
	Sealed bool
	// Tail is how the valid prefix ends. With salvage it describes the end
	// after the last skipped span.
	Tail EndKind
	// DamageAt is the offset of the frame that failed, and Cause what
	// failed there. When that frame broke a group, End is the group's start. Meaningful when Tail is not
	// EndClean, or when a skipped span exists. (A salvage that stepped
	// over damage and then has too little of its allowance left to
	// verify a frame stops at it: DamageAt is that frame, and Cause
	// wraps only [ErrTooManyCandidates].)
	DamageAt int
	Cause    error
	// Skipped lists the spans salvage stepped over, in order, each with
	// the failure found in it (DamageAt and Cause keep the last). Each
	// starts at the first byte of a broken group and ends at the next
	// frame that opens a group (or a padding or the seal: see Resume),
	// or, when none follows, at the end of the segment's last valid
	// frame. Empty without salvage.
	Skipped []Span
}

// Scan walks the frames of segment seq in data (the whole file, header
// included), calls fn with each record frame of every complete group in
// order, and reports how the valid prefix ends. Frame bodies passed to fn
// alias data.
//
// Without salvage, Scan stops at the first failing frame and classifies the
// end (see the package documentation). With salvage, a corrupt span is
// skipped and the scan goes on with the next frame that opens a group; a
// torn tail still ends the scan. fn's error stops the scan and is returned.
//
// Each walk of a scan checksums each byte of the frames that verify once
// at most, and a scan checksums would-be frames that fail over four times
// the file's size at most in all (it computes no checksum that, should it
// fail, would go past that): past that it classifies what is left by the
// frame headers alone, or stops a salvage there, and says so in the Cause
// with [ErrTooManyCandidates] (see the package documentation).
func Scan(data []byte, seq uint32, salvage bool, fn func(Frame) error) (Report, error) {
	return ScanFrom(data, seq, HeaderSize, salvage, fn)
}

// ScanFrom is Scan starting at offset from, which must be where a group
// (or the seal) starts or where the valid prefix ends: what lies before it
// is taken as valid, unread.
//
// Scan and ScanFrom refuse, with an error wrapping [fs.ErrInvalid] and
// without calling fn, data shorter than the header, a from before the
// header's end or past the data, and a nil fn.
func ScanFrom(data []byte, seq uint32, from int, salvage bool, fn func(Frame) error) (Report, error) {
	sc := scanFrom(data, seq, from, salvage, fn)
	return sc.Report, sc.err
}

// scanned is what a scan found, with the work it did.
type scanned struct {
	Report
	err  error
	work work
}

// scanFrom is ScanFrom, also returning the work the scan did.
func scanFrom(data []byte, seq uint32, from int, salvage bool, fn func(Frame) error) scanned {
	if err := checkScan(data, from, fn); err != nil {
		return scanned{err: err}
	}
	sc := scanned{Report: Report{End: from}, work: newWork(data)}
	sc.err = sc.scan(data, seq, salvage, fn)
	return sc
}

// scan walks the frames from sc.End; see ScanFrom.
func (sc *scanned) scan(data []byte, seq uint32, salvage bool, fn func(Frame) error) error {
	r, w := &sc.Report, &sc.work
	var group []Frame
	off := r.End
	resumed := -1 // where a salvage went on, at a frame a walk verified
	for {
		if off != resumed && !w.affords(data, off, seq) {
			// Only after a salvage stepped over damage (before, nothing
			// failed and one frame fits in the allowance): what it spent
			// leaves too little to find out whether this frame fails, so
			// the scan stops here, as a walk that runs out does, and errs
			// towards corruption.
			r.Tail, r.DamageAt = EndCorrupt, off
			r.Cause = fmt.Errorf("offset %d: frame not verified: %w", off, ErrTooManyCandidates)
			return nil
		}
		f, err := Decode(data, off, seq)
		w.count(data, off, seq, f, err)
		if err == nil {
			err = checkOrder(f, len(group) > 0)
		}
		if err != nil {
			kind, unverified := classify(data, seq, off, len(group) > 0 || ownHeader(data, off, seq) && !errors.Is(err, ErrZeroFrame), w)
			if unverified {
				err = notAllVerified(err)
			}
			if kind == EndClean {
				r.Tail = EndClean
				return nil
			}
			r.Tail, r.DamageAt, r.Cause = kind, off, err
			if kind == EndTorn || !salvage {
				return nil
			}
			// A frame that verified but opens a group inside an unfinished
			// one is intact: only the unfinished group before it is broken,
			// so the search for the next group starts at that frame.
			from := off + 1
			if len(group) > 0 && errors.Is(err, ErrGroup) {
				from = off
			}
			next, ok, lost := resume(data, seq, from, w)
			if !ok && !lost {
				// Nothing opens a group after the damage: what follows
				// can only be pieces of the broken group.
				var to int
				to, lost = lastOwnEnd(data, seq, off+1, w)
				if !lost {
					r.Skipped = append(r.Skipped, Span{From: r.End, To: to, At: off, Cause: err})
					r.End, r.Tail = to, EndClean
					return nil
				}
			}
			if lost {
				// Where the scan would step over the damage is past
				// what it verifies: the damage is reported, not
				// stepped over.
				if !unverified {
					r.Cause = notAllVerified(err)
				}
				return nil
			}
			r.Skipped = append(r.Skipped, Span{From: r.End, To: next, At: off, Cause: err})
			group = group[:0]
			r.End, off, resumed = next, next, next
			r.Tail = EndClean
			continue
		}
		switch f.Kind {
		case KindSeal:
			r.End, r.Sealed = f.End(), true
			return nil
		case KindPadding:
			r.End = f.End()
		case KindRecord:
			group = append(group, f)
			if f.Place.Closes() {
				for _, g := range group {
					if err := fn(g); err != nil {
						return err
					}
					r.Records++ // per frame: fn may fail inside a group
				}
				group = group[:0]
				r.End = f.End()
			}
		}
		off = f.End()
	}
}

// notAllVerified returns the cause of a failure at an offset after which
// the scan did not verify every would-be frame.
func notAllVerified(err error) error {
	return fmt.Errorf("%w; after it, %w", err, ErrTooManyCandidates)
}

// Resume returns the offset of the first valid frame of segment seq at or
// after from that may start the log again (one that opens a group, a
// padding or a seal), for salvage to step over what lies before it. No
// frame starts in the header: a from before its end is taken as the
// header's end. Past the data there is none, and none is found where the
// bytes after from hold more would-be frames that fail their checksums
// than a scan verifies before one (see [ErrTooManyCandidates]).
func Resume(data []byte, seq uint32, from int) (int, bool) {
	if from > len(data) {
		return 0, false
	}
	w := newWork(data)
	at, ok, _ := resume(data, seq, max(from, HeaderSize), &w)
	return at, ok
}

// checkScan refuses the arguments of a scan that has nothing to scan:
// offsets outside the frames, which would index outside data (or, near
// MaxInt, overflow), and a nil callback.
func checkScan(data []byte, from int, fn func(Frame) error) error {
	switch {
	case len(data) < HeaderSize:
		return fmt.Errorf("segment: scan: %d bytes of data, less than the %d-byte header: %w", len(data), HeaderSize, fs.ErrInvalid)
	case from < HeaderSize || from > len(data):
		return fmt.Errorf("segment: scan from offset %d: outside the frames [%d, %d]: %w", from, HeaderSize, len(data), fs.ErrInvalid)
	case fn == nil:
		return fmt.Errorf("segment: scan: nil function: %w", fs.ErrInvalid)
	}
	return nil
}

// checkOrder verifies that f may follow the frames before it.
func checkOrder(f Frame, inGroup bool) error {
	opens := f.Kind != KindRecord || f.Place.Opens()
	if opens == inGroup {
		return fmt.Errorf("offset %d: %s frame, place %d: %w", f.Offset, f.Kind, f.Place, ErrGroup)
	}
	return nil
}

// classify decides how the valid prefix ending at x ends. ownAtX reports
// evidence that a frame of this segment started at x (its header names the
// segment, or an unfinished group precedes it). unverified reports that
// the work ran out before the frames after x were all verified: the kind
// is then decided by the headers of the would-be frames left, EndCorrupt
// if any of them claims bytes synced past x (and no more than its own
// offset, as every frame the log writes), else EndTorn.
func classify(data []byte, seq uint32, x int, ownAtX bool, w *work) (kind EndKind, unverified bool) {
	later := false
	corrupt := false
	at, unverified := walkValid(data, seq, x+1, w, func(f Frame) bool {
		later = true
		if int64(f.Synced) > int64(x) {
			corrupt = true
			return false
		}
		return true
	})
	switch {
	case corrupt:
		return EndCorrupt, false
	case unverified && claimsSyncedPast(data, seq, at, x):
		return EndCorrupt, true
	case unverified || later || ownAtX:
		return EndTorn, unverified
	}
	return EndClean, false
}

// claimsSyncedPast reports whether bytes at or after from could be the
// header of a frame of segment seq, unverified, that claims more than x
// bytes synced: a header that names seq, a length that fits, a type a
// frame has, and a synced field past x and at most its own offset.
func claimsSyncedPast(data []byte, seq uint32, from, x int) bool {
	for off, ok := nextCandidate(data, seq, from); ok; off, ok = nextCandidate(data, seq, off+1) {
		if !wouldBeFrame(data, seq, off) {
			continue
		}
		if synced := int64(binary.LittleEndian.Uint32(data[off+12:])); synced > int64(x) && synced <= int64(off) {
			return true
		}
	}
	return false
}

// resume returns the offset of the first valid frame at or after from that
// may start the log again: one that opens a group, a padding or a seal.
// unverified reports that the work ran out before one was found.
func resume(data []byte, seq uint32, from int, w *work) (at int, ok, unverified bool) {
	_, unverified = walkValid(data, seq, from, w, func(f Frame) bool {
		if f.Kind != KindRecord || f.Place.Opens() {
			at, ok = f.Offset, true
			return false
		}
		return true
	})
	return at, ok, unverified && !ok
}

// lastOwnEnd returns the end of the last valid frame of seq at or after
// from, or from itself when there is none. unverified reports that the
// work ran out before the data did.
func lastOwnEnd(data []byte, seq uint32, from int, w *work) (end int, unverified bool) {
	end = from
	_, unverified = walkValid(data, seq, from, w, func(f Frame) bool {
		end = f.End()
		return true
	})
	return end, unverified
}

// walkValid calls visit with every valid frame of segment seq that starts at
// or after from, resynchronising byte by byte over anything that does not
// verify, until visit returns false or the data ends. Only bytes whose
// header could start a frame (see wouldBeFrame) are checksummed; when the
// checksums of those that fail have used up w's allowance, it stops and
// reports unverified, with the offset of the first would-be frame it did
// not verify: the first whose checksum, should it fail, would take w past
// its allowance.
func walkValid(data []byte, seq uint32, from int, w *work, visit func(Frame) bool) (at int, unverified bool) {
	for off := from; off+FrameHeaderSize <= len(data); {
		if wouldBeFrame(data, seq, off) {
			if !w.affords(data, off, seq) {
				return off, true
			}
			f, err := Decode(data, off, seq)
			w.count(data, off, seq, f, err)
			if err == nil {
				if !visit(f) {
					return 0, false
				}
				off = f.End()
				continue
			}
		}
		next, ok := nextCandidate(data, seq, off+1)
		if !ok {
			break
		}
		off = next
	}
	return 0, false
}

// resyncAllowance bounds the checksums a scan computes over would-be frames
// that fail (headers that name the segment, with a length that fits and a
// type a frame has, over bytes that are not its frames), in bytes per byte
// of the file. A resynchronisation checksums each would-be frame over the
// length its header gives, so stale bytes that name the segment at every
// turn with long lengths (a payload anyone may append, in a file later
// reused) would otherwise cost the square of the file's size. Frames that
// verify are not counted: the walks skip their bodies, so each walk
// checksums each byte of them once at most.
const resyncAllowance = 4

// work is what a scan checksums: the bytes over which its checksums
// failed, and its allowance for them.
type work struct {
	allowance int // bytes over which the checksums may fail
	failed    int // bytes over which they failed
	summed    int // bytes checksummed in all, as tests count them
}

func newWork(data []byte) work { return work{allowance: perByte(resyncAllowance, len(data))} }

// perByte is factor bytes for each of n, or the largest int when that
// overflows it: a 32-bit int holds no more than 2 GiB, and a segment may
// be 1 GiB.
func perByte(factor, n int) int {
	if n > math.MaxInt/factor {
		return math.MaxInt
	}
	return factor * n
}

// affords reports whether the checksum Decode computes for the frame at
// off keeps the bytes over which checksums failed within the allowance
// should it fail. Whether it fails is known only once it is computed, so
// every checksum a scan computes is asked for first: a scan that spent
// nearly all its allowance could otherwise compute one more over nearly
// the whole file.
func (w *work) affords(data []byte, off int, seq uint32) bool {
	return w.spares(checksummed(data, off, seq))
}

// spares reports whether a checksum over n bytes that fails keeps the
// bytes over which checksums failed within the allowance.
// (Subtracted, not added: the allowance may be the largest int.)
func (w *work) spares(n int) bool { return w.failed <= w.allowance && n <= w.allowance-w.failed }

// count counts the bytes Decode checksummed for the frame at off, which
// gave f and err, charging those of a frame that failed to the allowance.
func (w *work) count(data []byte, off int, seq uint32, f Frame, err error) {
	if err == nil {
		w.summed += f.End() - off - 4
		return
	}
	n := checksummed(data, off, seq)
	w.summed += n
	w.failed += n
}

// checksummed returns how many bytes Decode checksums for the frame at
// off: those of the frame after its checksum field, when its header names
// seq and its length fits in data, else none.
func checksummed(data []byte, off int, seq uint32) int {
	if off < 0 || off > len(data)-FrameHeaderSize || !ownHeader(data, off, seq) {
		return 0
	}
	n := binary.LittleEndian.Uint32(data[off+4:])
	end := off + FrameHeaderSize + int(n)
	if n > MaxBody || end > len(data) || end < off {
		return 0
	}
	return end - off - 4
}

// wouldBeFrame reports whether the header at off could start a frame of
// segment seq, as far as it tells without the checksum: it names seq, its
// length fits in data, and its type is one a frame has.
func wouldBeFrame(data []byte, seq uint32, off int) bool {
	return checksummed(data, off, seq) > 0 && validType(data[off+16])
}

// nextCandidate returns the first offset at or after from whose frame
// header names segment seq. The 4-byte sequence is found with bytes.Index,
// so resynchronising over megabytes of zeros or stale data is fast.
func nextCandidate(data []byte, seq uint32, from int) (int, bool) {
	var pat [4]byte
	binary.LittleEndian.PutUint32(pat[:], seq)
	start := from + 8 // the sequence field sits 8 bytes into a frame
	if start+4 > len(data) {
		return 0, false
	}
	i := bytes.Index(data[start:], pat[:])
	if i < 0 || start+i-8+FrameHeaderSize > len(data) {
		return 0, false
	}
	return start + i - 8, true
}
