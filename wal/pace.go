package wal

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/segment"
)

// errAbandoned is the pacer's answer once the log is closing.
var errAbandoned = errors.New("wal: the log closed before the segment was ready")

// errSpareArrived is the pacer's answer once a retired segment is ready for
// reuse: the preparer drops the zeros written so far and reuses it.
var errSpareArrived = errors.New("wal: a retired segment arrived for reuse")

// The pace of a new segment's zero-fill. The zeros written are held to
// paceAhead times the fraction of the active segment the writer has filled,
// plus paceLead bytes: the new file is complete when the active segment is
// two-thirds full, which leaves the writer room to speed up by half before
// it would wait for the file at rotation. Each chunk of zeros is sent to the
// device before the next (segment.CreatePaced), so a commit's fdatasync
// waits behind at most one chunk, and the commits made while the active
// segment fills share the zeros' cost instead of a few of them taking it
// all.
//
// The rest is written at once, unpaced, when the active segment has not
// grown for paceIdle (the log is idle: no commit waits behind the zeros).
// When the writer is waiting for the file (it filled the active segment
// before the zeros were done: a log writing faster than this machine
// writes zeros), the rest is allocated instead (fallocate, where the file
// system has it; segment.ErrAllocateRest): writing tens of megabytes of
// zeros then held every commit for as long, and the fdatasyncs that cover
// the unwritten extents cost a journal commit each, which commits that
// large barely notice.
//
// When the log closes, the file is abandoned (errAbandoned): Close does
// not wait for tens of megabytes of zeros that the next Open may not need.
// And when a retired segment arrives for reuse while the zeros are being
// written (the reader caught up just after the rotation), the file is
// dropped too (errSpareArrived): reusing costs a rename and a header, the
// rest of the zeros up to 64 MiB.
const (
	paceAhead   = 1.5
	paceLead    = 1 << 20
	paceIdle    = 100 * time.Millisecond
	paceMinWait = 500 * time.Microsecond
	paceMaxWait = 10 * time.Millisecond  // before the writer's rate is known
	paceLongest = 100 * time.Millisecond // after: a slow log's preparer wakes rarely
)

// pacer holds back the zero-fill of one new segment. It is used by the
// preparer goroutine alone; it reads the active segment's end, which the
// writer stores.
type pacer struct {
	seq        uint32        // the new segment
	end        *atomic.Int64 // the active segment's end (seg.end)
	activeSize int64         // the active segment's size
	size       int64         // the new segment's size
	quit       <-chan struct{}
	rush       <-chan uint32
	spare      func() bool   // a retired segment is ready for reuse; nil: never
	idle       time.Duration // paceIdle, but for tests
	free       bool          // no more waits
	rushed     bool          // the writer waits for this file: allocate the rest
	sleeps     int           // how many times it slept; for tests

	start    time.Time // when the fill began
	startEnd int64     // the active's end then
	lastEnd  int64     // the active's end when last seen to change
	lastMove time.Time // when that was
}

func newPacer(seq uint32, active *atomic.Int64, activeSize, size int64, quit <-chan struct{}, rush <-chan uint32) *pacer {
	now := time.Now()
	end := active.Load()
	return &pacer{
		seq:        seq,
		end:        active,
		activeSize: activeSize,
		size:       size,
		quit:       quit,
		rush:       rush,
		idle:       paceIdle,
		start:      now,
		startEnd:   end,
		lastEnd:    end,
		lastMove:   now,
	}
}

// allowed reports how many bytes of zeros may be written while the active
// segment's end is at end.
func (pc *pacer) allowed(end int64) int64 {
	return int64(paceAhead*float64(end)/float64(pc.activeSize)*float64(pc.size)) + paceLead
}

// wait returns when the chunk of zeros at offset written may be written,
// errAbandoned once quit is closed, errSpareArrived once the log has a
// retired segment to reuse instead, or segment.ErrAllocateRest once the
// writer waits for this file (each looked for before every chunk, paced or
// not, in that order).
func (pc *pacer) wait(written int64) error {
	for {
		select {
		case <-pc.quit:
			return errAbandoned
		case s := <-pc.rush:
			// A rush for an earlier segment, which was ready first, is
			// stale.
			pc.rushed = pc.rushed || s == pc.seq
		default:
		}
		if pc.spare != nil && pc.spare() {
			return errSpareArrived
		}
		if pc.rushed {
			return segment.ErrAllocateRest
		}
		if pc.free || pc.activeSize <= 0 {
			return nil
		}
		end := pc.end.Load()
		now := time.Now()
		if end != pc.lastEnd {
			pc.lastEnd, pc.lastMove = end, now
		}
		if written < pc.allowed(end) {
			return nil
		}
		if now.Sub(pc.lastMove) >= pc.idle {
			pc.free = true
			return nil
		}
		// Sleep until the active segment should have grown enough, at the
		// rate it has grown since the fill began; until that rate is
		// known, look again soon.
		d := paceMaxWait
		if moved := end - pc.startEnd; moved > 0 {
			need := float64(written-paceLead)/float64(pc.size)/paceAhead*float64(pc.activeSize) - float64(end)
			rate := float64(moved) / now.Sub(pc.start).Seconds()
			// Bounded before it is converted: past what a Duration
			// holds (a rate of a byte over a long fill), the conversion
			// of a float is the platform's choice, and amd64 gives the
			// most negative Duration, which slept the shortest wait.
			d = paceLongest
			if secs := need / rate; secs < paceLongest.Seconds() {
				d = time.Duration(secs * float64(time.Second))
			}
		}
		pc.sleeps++
		t := time.NewTimer(max(d, paceMinWait))
		select {
		case <-t.C:
		case <-pc.quit:
			t.Stop()
		case s := <-pc.rush:
			t.Stop()
			pc.rushed = pc.rushed || s == pc.seq // else stale, as above
		}
	}
}
