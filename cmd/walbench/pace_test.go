package main

import (
	"strings"
	"testing"
	"time"
)

// fakeClock is a pacerClock on a virtual clock: its sleeps return late by
// timerLate, and each yield moves it on by yieldStep.
type fakeClock struct {
	t         time.Time
	timerLate time.Duration
	yieldStep time.Duration
	sleeps    int
	yields    int
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) sleep(d time.Duration, stop, done <-chan struct{}) bool {
	if closedOf(stop, done) != paceArrived {
		return false
	}
	c.sleeps++
	c.t = c.t.Add(d + c.timerLate)
	return true
}

func (c *fakeClock) yield() {
	c.yields++
	c.t = c.t.Add(c.yieldStep)
}

// TestPacerStartsCallsAtTheirInstantThoughItsTimerFiresLate: a timer
// fires up to a millisecond late in an idle process; a producer of the
// mixed workload waits with a pacer, which sets its timer that much before
// the instant and yields until the instant, so that it begins its call at
// the instant (doc.go: "each call at its scheduled instant"), not when
// the timer fired: the lateness would be counted as the broker's.
func TestPacerStartsCallsAtTheirInstantThoughItsTimerFiresLate(t *testing.T) {
	const interval = 50 * time.Millisecond // one producer at 20 msgs/s
	for _, late := range []time.Duration{0, 300 * time.Microsecond, 900 * time.Microsecond} {
		c := &fakeClock{t: time.Unix(1000, 0), timerLate: late, yieldStep: time.Microsecond}
		p := newPacer(c, 20)
		next := c.t
		yields := 0
		for k := range 100 {
			if k == 50 {
				yields = c.yields // the pacer has seen how late its timer fires
			}
			next = next.Add(interval)
			if r := p.wait(next, nil, nil); r != paceArrived {
				t.Fatalf("timer %v late, wait %d: outcome %d, want the instant", late, k, r)
			}
			if off := c.t.Sub(next); off < 0 || off >= c.yieldStep {
				t.Fatalf("timer %v late, wait %d: returned %v after the instant; want within one yield (%v) of it", late, k, off, c.yieldStep)
			}
		}
		// Each wait sleeps once, and spins only the margin left after the
		// timer's lateness: little once it has seen how late it is.
		if c.sleeps != 100 {
			t.Errorf("timer %v late: %d sleeps for 100 waits", late, c.sleeps)
		}
		if spin := time.Duration(c.yields-yields) * c.yieldStep / 50; spin > 2*paceSlack {
			t.Errorf("timer %v late: spun %v a wait on average; want at most %v once the pacer has seen how late its timer fires", late, spin, 2*paceSlack)
		}
	}
}

// TestPacerSpinsWithinAShareOfOneCPU: all the producers together spin
// for at most paceSpinShare of one CPU on average, however high the rate:
// the margin a pacer spins through is at most paceSpinShare ÷ the rate.
// At such a rate a timer later than that makes the call late, and the
// broker keeps its CPU.
func TestPacerSpinsWithinAShareOfOneCPU(t *testing.T) {
	const producers, rate = 16, 20000.0
	interval := time.Duration(producers / rate * float64(time.Second))
	c := &fakeClock{t: time.Unix(1000, 0), timerLate: 900 * time.Microsecond, yieldStep: time.Microsecond}
	p := newPacer(c, rate)
	next := c.t
	const waits = 1000
	for range waits {
		next = next.Add(interval)
		if r := p.wait(next, nil, nil); r != paceArrived {
			t.Fatalf("outcome %d, want the instant", r)
		}
		if c.t.Before(next) {
			t.Fatalf("returned %v before the instant", next.Sub(c.t))
		}
	}
	budget := time.Duration(paceSpinShare / rate * float64(time.Second))
	if spin := time.Duration(c.yields) * c.yieldStep / waits; spin > budget {
		t.Errorf("spun %v a wait on average; want at most %v (%v of one CPU at %v msgs/s)", spin, budget, paceSpinShare, rate)
	}
}

// TestPacerStopsWhenTold: a pacer returns as soon as the window closes or
// the run ends, whether it sleeps or spins, and says which.
func TestPacerStopsWhenTold(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	c := &fakeClock{t: time.Unix(1000, 0), yieldStep: time.Microsecond}
	p := newPacer(c, 20)
	if r := p.wait(c.t.Add(time.Second), closed, nil); r != paceStopped {
		t.Errorf("window closed: outcome %d, want %d", r, paceStopped)
	}
	if r := p.wait(c.t.Add(time.Second), closed, closed); r != paceDone {
		t.Errorf("run ended: outcome %d, want %d", r, paceDone)
	}
	// Within the margin: no sleep, the spin sees it.
	if r := p.wait(c.t.Add(p.margin()/2), nil, closed); r != paceDone || c.sleeps != 0 {
		t.Errorf("run ended within the margin: outcome %d after %d sleeps, want %d at once", r, c.sleeps, paceDone)
	}
	// An instant past is no wait.
	if r := p.wait(c.t.Add(-time.Second), nil, nil); r != paceArrived || c.sleeps != 0 || c.yields != 0 {
		t.Errorf("an instant past: outcome %d after %d sleeps, %d yields", r, c.sleeps, c.yields)
	}
}

// TestStartLatenessIsSaid: a mixed row says how late, on average, its
// producers began the calls they were on schedule for, and when that is more than
// startLateNoteAbove the table says so: the publish and end-to-end
// latencies include it.
func TestStartLatenessIsSaid(t *testing.T) {
	var on, late lateness
	for range 10 {
		on.add(20 * time.Microsecond)
		late.add(600 * time.Microsecond)
	}
	if got := meanLateness(nil); got != nil {
		t.Errorf("no call: lateness %v, want none", *got)
	}
	got := meanLateness([]lateness{on, late})
	if got == nil || *got != int64(310*time.Microsecond) {
		t.Fatalf("lateness %v, want 310µs, the mean of the 20 calls", got)
	}
	r := Row{Kind: kindMixed, Workload: "mixed", StartLateNs: got}
	if line := startLateLine(r); !strings.Contains(line, "note: mixed: the producers began the calls they were on schedule for 310µs after their instant on average") {
		t.Errorf("producers late: line %q; want their mean lateness", line)
	}
	r.StartLateNs = meanLateness([]lateness{on})
	if line := startLateLine(r); line != "" {
		t.Errorf("producers on time: line %q, want none", line)
	}
}
