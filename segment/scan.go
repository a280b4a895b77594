package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
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
	// Records counts the record frames handed to the callback.
	Records int
	// Sealed reports that the valid prefix ends with a seal frame.
	Sealed bool
	// Tail is how the valid prefix ends. With salvage it describes the end
	// after the last skipped span.
	Tail EndKind
	// DamageAt is the offset of the frame that failed, and Cause what
	// failed there. When that frame broke a group, End is the group's start. Meaningful when Tail is not
	// EndClean, or when a skipped span exists.
	DamageAt int
	Cause    error
	// Skipped lists the spans salvage stepped over, in order, each with
	// the failure found in it (DamageAt and Cause keep the last). Each
	// starts at the first byte of a broken group and ends at the next
	// frame that opens a group (or the seal), or, when none follows, at
	// the end of the segment's last valid frame. Empty without salvage.
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
	if err := checkScan(data, from, fn); err != nil {
		return Report{}, err
	}
	r := Report{End: from}
	var group []Frame
	off := from
	for {
		f, err := Decode(data, off, seq)
		if err == nil {
			err = checkOrder(f, len(group) > 0)
		}
		if err != nil {
			kind := classify(data, seq, off, len(group) > 0 || ownHeader(data, off, seq) && !errors.Is(err, ErrZeroFrame))
			if kind == EndClean {
				r.Tail = EndClean
				return r, nil
			}
			r.Tail, r.DamageAt, r.Cause = kind, off, err
			if kind == EndTorn || !salvage {
				return r, nil
			}
			// A frame that verified but opens a group inside an unfinished
			// one is intact: only the unfinished group before it is broken,
			// so the search for the next group starts at that frame.
			from := off + 1
			if len(group) > 0 && errors.Is(err, ErrGroup) {
				from = off
			}
			next, ok := resume(data, seq, from)
			if !ok {
				// Nothing opens a group after the damage: what follows
				// can only be pieces of the broken group.
				to := lastOwnEnd(data, seq, off+1)
				r.Skipped = append(r.Skipped, Span{From: r.End, To: to, At: off, Cause: err})
				r.End, r.Tail = to, EndClean
				return r, nil
			}
			r.Skipped = append(r.Skipped, Span{From: r.End, To: next, At: off, Cause: err})
			group = group[:0]
			r.End, off = next, next
			r.Tail = EndClean
			continue
		}
		switch f.Kind {
		case KindSeal:
			r.End, r.Sealed = f.End(), true
			return r, nil
		case KindPadding:
			r.End = f.End()
		case KindRecord:
			group = append(group, f)
			if f.Place.Closes() {
				for _, g := range group {
					if err := fn(g); err != nil {
						return r, err
					}
				}
				r.Records += len(group)
				group = group[:0]
				r.End = f.End()
			}
		}
		off = f.End()
	}
}

// Resume returns the offset of the first valid frame of segment seq at or
// after from that may start the log again (one that opens a group, a
// padding or a seal), for salvage to step over what lies before it. No
// frame starts in the header: a from before its end is taken as the
// header's end. Past the data there is none.
func Resume(data []byte, seq uint32, from int) (int, bool) {
	if from > len(data) {
		return 0, false
	}
	return resume(data, seq, max(from, HeaderSize))
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
// segment, or an unfinished group precedes it).
func classify(data []byte, seq uint32, x int, ownAtX bool) EndKind {
	later := false
	corrupt := false
	walkValid(data, seq, x+1, func(f Frame) bool {
		later = true
		if int64(f.Synced) > int64(x) {
			corrupt = true
			return false
		}
		return true
	})
	switch {
	case corrupt:
		return EndCorrupt
	case later || ownAtX:
		return EndTorn
	}
	return EndClean
}

// resume returns the offset of the first valid frame at or after from that
// may start the log again: one that opens a group, a padding or a seal.
func resume(data []byte, seq uint32, from int) (int, bool) {
	at, ok := 0, false
	walkValid(data, seq, from, func(f Frame) bool {
		if f.Kind != KindRecord || f.Place.Opens() {
			at, ok = f.Offset, true
			return false
		}
		return true
	})
	return at, ok
}

// lastOwnEnd returns the end of the last valid frame of seq at or after
// from, or from itself when there is none.
func lastOwnEnd(data []byte, seq uint32, from int) int {
	end := from
	walkValid(data, seq, from, func(f Frame) bool {
		end = f.End()
		return true
	})
	return end
}

// walkValid calls visit with every valid frame of segment seq that starts at
// or after from, resynchronising byte by byte over anything that does not
// verify, until visit returns false or the data ends.
func walkValid(data []byte, seq uint32, from int, visit func(Frame) bool) {
	for off := from; off+FrameHeaderSize <= len(data); {
		f, err := Decode(data, off, seq)
		if err != nil {
			next, ok := nextCandidate(data, seq, off+1)
			if !ok {
				return
			}
			off = next
			continue
		}
		if !visit(f) {
			return
		}
		off = f.End()
	}
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
