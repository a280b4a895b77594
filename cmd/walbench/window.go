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
