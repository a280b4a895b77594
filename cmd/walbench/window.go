package main

import (
	"context"
	"sync/atomic"
	"time"
)

// Phases of a measurement, as its workers see them.
const (
	phaseWarmup    int32 = iota // running, not counted
	phaseMeasuring              // running, counted
	phaseStopped                // workers return
)

// gate tells a measurement's workers which phase it is in. A worker reads
// the phase before each operation, returns once it is phaseStopped, and
// counts the operation only if it started in phaseMeasuring: an operation
// in flight when the window closes still counts (leaving it out would
// favour fast operations), one in flight when it opens does not.
type gate struct{ phase atomic.Int32 }

func (g *gate) load() int32 { return g.phase.Load() }

// window is how one measurement went, as its controller saw it.
type window struct {
	elapsed     time.Duration // from the window's opening to its closing
	opened      bool          // false: cut short during the warm-up
	interrupted bool          // ctx ended the window early
}

// runWindow is the controller side of a measurement: it lets the workers
// warm up for warmup, opens the window (calling open just before), keeps it
// open for d or until ctx is done, then stops the workers (calling closed
// just after). It shows its progress on p. It returns once the window is
// closed; the caller still has to wait for its workers.
func runWindow(ctx context.Context, p *progress, label string, warmup, d time.Duration, g *gate, open, closed func()) window {
	defer g.phase.Store(phaseStopped) // also when cut short in the warm-up
	if warmup > 0 {
		t := time.NewTimer(warmup)
		select {
		case <-ctx.Done():
			t.Stop()
			return window{interrupted: true}
		case <-t.C:
		}
	}
	if ctx.Err() != nil {
		return window{interrupted: true}
	}
	open()
	start := time.Now()
	g.phase.Store(phaseMeasuring)
	stop := p.trackWindow(label, d)
	defer stop()

	end := time.NewTimer(d)
	defer end.Stop()
	interrupted := false
	select {
	case <-ctx.Done():
		interrupted = true
	case <-end.C:
	}
	g.phase.Store(phaseStopped)
	elapsed := time.Since(start)
	closed()
	return window{elapsed: elapsed, opened: true, interrupted: interrupted}
}

// waitTimeout waits for done to be closed, for at most d. It reports
// whether it was.
func waitTimeout(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// A broker that is slow is not a broker that hung: 1024 producers of
// 1 MiB under SyncAll leave a gigabyte in flight when a window closes,
// which a slow disk takes more than any fixed wait to commit. So the
// verdict is made on progress: the calls in flight hung only when none of
// them returned, and the store made no commit and wrote no record, for the
// hang timeout.

// stallWatch tells a system that is slow from one that is stuck: it is
// given, now and then, a count that grows while the system works (calls
// returned, commits, records), and reports a stall once the count has not
// moved for hang, however long the work takes in all. Not safe for
// concurrent use.
type stallWatch struct {
	hang   time.Duration
	last   int64
	lastAt time.Time
}

func newStallWatch(hang time.Duration, progress int64, now time.Time) *stallWatch {
	return &stallWatch{hang: hang, last: progress, lastAt: now}
}

// stalled reports whether progress, the count at now, has not moved for
// hang.
func (w *stallWatch) stalled(now time.Time, progress int64) bool {
	if progress != w.last {
		w.last, w.lastAt = progress, now
		return false
	}
	return now.Sub(w.lastAt) >= w.hang
}

// pollEvery is how often the watchers of this file look at a count.
func pollEvery(hang time.Duration) time.Duration { return min(100*time.Millisecond, hang) }

// pollProgress calls progress every interval on a goroutine of its own, and
// returns a count of the times its value changed, and the function that
// stops the polling. progress may read a store that hung and block: the
// count then stops moving, which is the verdict wanted, where blocking
// the watcher would hang walbench too.
func pollProgress(progress func() int64, every time.Duration) (moves func() int64, stop func()) {
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		last := progress()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if v := progress(); v != last {
				last = v
				n.Add(1)
			}
		}
	}()
	return n.Load, func() { close(done) }
}

// inFlight is what await waits for: calls still running after their
// measurement ended.
type inFlight struct {
	done <-chan struct{} // closed once every call returned
	hang time.Duration
	// progress is a count that grows while the system under test works:
	// calls returned, commits, records.
	progress func() int64
	// label, total, returned and format make the progress line shown
	// while the calls drain, as progress.track does: returned out of
	// total (0: unknown), in words.
	label    string
	total    int64
	returned func() int64
	format   func(n int64) string
}

// await waits until f.done is closed, for as long as f.progress keeps
// moving, and shows on p how many calls returned. It reports false when
// the calls hung: f.progress did not move for f.hang.
func (f inFlight) await(p *progress) bool {
	select {
	case <-f.done:
		return true
	default:
	}
	stopShow := p.track(f.label, f.total, f.returned, f.format)
	defer stopShow()
	moves, stopPoll := pollProgress(f.progress, pollEvery(f.hang))
	defer stopPoll()
	t := time.NewTicker(pollEvery(f.hang))
	defer t.Stop()
	w := newStallWatch(f.hang, moves(), time.Now())
	for {
		select {
		case <-f.done:
			return true
		case now := <-t.C:
			if w.stalled(now, moves()) {
				select {
				case <-f.done:
					return true
				default:
					return false
				}
			}
		}
	}
}
