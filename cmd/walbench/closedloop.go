package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// closedLoop is a closed-loop measurement: workers goroutines, each calling
// its operation in a loop, through a warm-up and then a window. S is the
// type of the snapshot of the system's counters taken around the window.
type closedLoop[S any] struct {
	label    string // for the progress lines
	workers  int
	warmup   time.Duration
	duration time.Duration
	// hang is how long the workers may go, after the window, without one
	// of them returning and without progress (see inFlight) before they
	// are said to hang.
	hang time.Duration

	// worker names one worker in errors ("appender"), call its operation
	// ("Append").
	worker, call string
	// newOp returns the operation of worker i. It is called for each
	// worker in turn, before that worker starts.
	newOp func(i int) func() error
	// stats is called just before the window opens and just after it
	// closes.
	stats func() S
	// opened, when not nil, is called once the window is open.
	opened func()
	// progress, when not nil, is a count that grows while the system
	// under test works (commits, records): with the workers returning, it
	// tells slow calls in flight from stuck ones.
	progress func() int64
}

// loopResult is what a closedLoop measured.
type loopResult[S any] struct {
	window window
	// hist has one sample per operation started in the window; nil when
	// the loop hung or failed.
	hist          *hdr.Histogram
	succeeded     int64 // operations that returned nil, warm-up included
	before, after S     // the snapshots around the window
	// hung: workers were still inside their operation after the window
	// closed, none returning and no progress made for hang; inside of
	// them. They are left running.
	hung   bool
	inside int
	// err is the first failure of a worker (not ctx's ending).
	err error
}

// run runs the workers until the window closes or ctx ends. The first
// failed or panicking operation cancels the window with its error as the
// cause, and every worker stops.
func (c closedLoop[S]) run(ctx context.Context, p *progress) (res loopResult[S]) {
	loadCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		g         gate
		wg        sync.WaitGroup
		succeeded atomic.Int64
		returned  atomic.Int64 // workers
		hists     = make([]*hdr.Histogram, c.workers)
	)
	for i := range c.workers {
		hists[i] = newLatencies()
		op := c.newOp(i)
		wg.Go(func() {
			defer returned.Add(1)
			defer func() {
				if r := recover(); r != nil {
					cancel(fmt.Errorf("%s %d: panic in %s: %v\n%s", c.worker, i, c.call, r, debug.Stack()))
				}
			}()
			h := hists[i]
			for {
				phase := g.load()
				if phase == phaseStopped {
					return
				}
				t0 := time.Now()
				err := op()
				lat := time.Since(t0)
				if err != nil {
					cancel(fmt.Errorf("%s %d: %s: %w", c.worker, i, c.call, err))
					return
				}
				succeeded.Add(1)
				if phase == phaseMeasuring {
					recordLatency(h, lat)
				}
			}
		})
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	res.window = runWindow(loadCtx, p, c.label, c.warmup, c.duration, &g,
		func() {
			res.before = c.stats()
			if c.opened != nil {
				c.opened()
			}
		},
		func() { res.after = c.stats() })
	returnedOrProgress := returned.Load
	if c.progress != nil {
		returnedOrProgress = func() int64 { return returned.Load() + c.progress() }
	}
	if !(inFlight{
		done: workersDone, hang: c.hang, progress: returnedOrProgress,
		label: c.label + ": the calls in flight", total: int64(c.workers), returned: returned.Load,
		format: func(n int64) string { return fmt.Sprintf("%d/%d %ss returned", n, c.workers, c.worker) },
	}).await(p) {
		res.hung, res.inside = true, c.workers-int(returned.Load())
		return res
	}
	// loadCtx's cause is ctx's when Ctrl-C ended it, a worker's error when
	// that came first.
	if cause := context.Cause(loadCtx); cause != nil && cause != context.Cause(ctx) {
		res.err = cause
		return res
	}
	res.hist = mergeLatencies(hists)
	res.succeeded = succeeded.Load()
	return res
}

// closeWithin closes c, giving up after d; what names the workload.
func closeWithin(c io.Closer, d time.Duration, what fmt.Stringer) error {
	var err error
	done := make(chan struct{})
	go func() { err = c.Close(); close(done) }()
	if !waitTimeout(done, d) {
		return fmt.Errorf("%v: Close hung: not returned after %v", what, d)
	}
	if err != nil {
		return fmt.Errorf("%v: Close: %w", what, err)
	}
	return nil
}
