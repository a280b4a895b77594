package main

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedLoopLatenciesAreOfTheWindow: a closed-loop measurement records
// the latency of every call started in its window and of none started in
// the warm-up. The calls counted between its two snapshots differ from
// those by at most the calls in flight when the window opened and when it
// closed: one per worker.
func TestClosedLoopLatenciesAreOfTheWindow(t *testing.T) {
	const workers = 3
	var done atomic.Int64
	res := closedLoop[int64]{
		label: "test", workers: workers, warmup: 30 * time.Millisecond, duration: 30 * time.Millisecond, hang: time.Minute,
		worker: "worker", call: "op",
		newOp: func(int) func() error {
			return func() error {
				time.Sleep(100 * time.Microsecond)
				done.Add(1)
				return nil
			}
		},
		stats: done.Load,
	}.run(context.Background(), newProgress(io.Discard))
	if !res.window.opened || res.hung || res.err != nil || res.hist == nil {
		t.Fatalf("window opened %v, hung %v, error %v", res.window.opened, res.hung, res.err)
	}
	counted, samples := res.after-res.before, res.hist.TotalCount()
	if d := counted - samples; d > workers || d < -workers {
		t.Errorf("%d calls returned in the window, %d latencies recorded; want them within %d of each other", counted, samples, workers)
	}
	if res.succeeded != done.Load() {
		t.Errorf("%d calls succeeded, %d returned", res.succeeded, done.Load())
	}
}
