package main

import (
	"runtime"
	"time"
)

// A producer of the mixed workload makes each call at its scheduled
// instant, and its publish latency runs from that instant: a producer that
// wakes late counts its own lateness, the load generator's, as the
// broker's. A timer alone wakes late: with no goroutine to run, the Go
// runtime waits for its next timer in the netpoller, in whole milliseconds,
// so that a timer fires up to a millisecond after its instant. A pacer
// sets its timer a margin before the instant instead, then yields the
// processor (runtime.Gosched) until the instant has come: a goroutine the
// broker readies meanwhile runs first.
//
// The margin follows the lateness of the pacer's own timers: it jumps to
// the lateness of a wake later than it, and decays by an eighth towards
// that of each wake earlier, so that in a process busy enough for its
// timers to fire on time a producer spins little. It is bounded by
// maxPaceMargin, and by paceSpinShare ÷ the workload's rate, so that all
// the producers together spin for at most that share of one CPU on
// average, however often they publish: at a high rate the producers may
// wake late again, and the broker keeps its CPU.

const (
	// maxPaceMargin bounds the margin: a timer fires at most about a
	// millisecond late.
	maxPaceMargin = 2 * time.Millisecond
	// paceSlack is added to the lateness seen: a wake a little later than
	// the last ones is still on time.
	paceSlack = 50 * time.Microsecond
	// paceSpinShare is the share of one CPU the producers together spin
	// for at most, on average.
	paceSpinShare = 0.25
)

// pacer waits for the instants of one producer's schedule. It is not
// safe for concurrent use: each producer has its own.
type pacer struct {
	clock pacerClock
	// late is the timer lateness the pacer expects; margin is late plus
	// paceSlack, at most ceiling.
	late, ceiling time.Duration
}

// pacerClock is what a pacer waits with; tests replace it.
type pacerClock interface {
	now() time.Time
	// sleep returns once d has passed, or at once when stop or done is
	// closed: then false.
	sleep(d time.Duration, stop, done <-chan struct{}) bool
	// yield lets other goroutines run.
	yield()
}

// newPacer returns the pacer of one producer of a workload that publishes
// rate messages a second, all its producers together.
func newPacer(clock pacerClock, rate float64) *pacer {
	ceiling := maxPaceMargin
	if byRate := time.Duration(paceSpinShare / rate * float64(time.Second)); byRate < ceiling {
		ceiling = byRate
	}
	// Until it has seen a timer fire, the pacer expects the worst.
	return &pacer{clock: clock, late: ceiling, ceiling: ceiling}
}

// margin is how long before an instant the pacer sets its timer.
func (p *pacer) margin() time.Duration { return min(p.late+paceSlack, p.ceiling) }

// The outcomes of pacer.wait.
const (
	paceArrived = iota // the instant has come
	paceStopped        // stop was closed first
	paceDone           // done was closed first
)

// wait returns once the clock reads at or later, or once stop or done is
// closed (checked first when both are).
func (p *pacer) wait(at time.Time, stop, done <-chan struct{}) int {
	if target := at.Add(-p.margin()); p.clock.now().Before(target) {
		if !p.clock.sleep(target.Sub(p.clock.now()), stop, done) {
			return closedOf(stop, done)
		}
		p.learn(p.clock.now().Sub(target))
	}
	for p.clock.now().Before(at) {
		if r := closedOf(stop, done); r != paceArrived {
			return r
		}
		p.clock.yield()
	}
	return paceArrived
}

// learn takes in the lateness of one timer.
func (p *pacer) learn(late time.Duration) {
	late = max(late, 0)
	if late >= p.late {
		p.late = late
	} else {
		p.late -= (p.late - late) / 8
	}
}

// closedOf is paceStopped or paceDone when stop or done is closed,
// paceArrived when neither is.
func closedOf(stop, done <-chan struct{}) int {
	select {
	case <-done:
		return paceDone
	default:
	}
	select {
	case <-stop:
		return paceStopped
	default:
	}
	return paceArrived
}

// realClock is the pacerClock of a run.
type realClock struct{}

func (realClock) now() time.Time { return time.Now() }

func (realClock) sleep(d time.Duration, stop, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
	case <-done:
	}
	return false
}

func (realClock) yield() { runtime.Gosched() }
