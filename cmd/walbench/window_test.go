package main

import (
	"io"
	"testing"
	"time"
)

// TestStallWatch: calls in flight hang only when the count of progress
// stands still for the whole hang timeout, however long they take in all.
func TestStallWatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := newStallWatch(20*time.Second, 0, t0)
	// A slow store: a commit every 15 s, for 45 s, more than the timeout.
	for _, c := range []struct {
		s        float64
		progress int64
	}{{5, 0}, {10, 0}, {15, 1}, {25, 1}, {30, 2}, {40, 2}, {45, 3}, {64.9, 3}} {
		if w.stalled(at(c.s), c.progress) {
			t.Fatalf("stalled at %vs with progress %d, moving every 15 s", c.s, c.progress)
		}
	}
	if !w.stalled(at(65), 3) {
		t.Errorf("not stalled at 65 s, progress unmoved since 45 s")
	}
	// Progress at the very last moment counts.
	w = newStallWatch(20*time.Second, 7, t0)
	if w.stalled(at(19.9), 7) || w.stalled(at(20), 8) || w.stalled(at(39.9), 8) {
		t.Errorf("stalled though progress moved within every 20 s")
	}
	if !w.stalled(at(40), 8) {
		t.Errorf("not stalled after 20 s without progress")
	}
}

// TestInFlightAwait: await returns true once the calls returned, and
// false when they never do and nothing moves.
func TestInFlightAwait(t *testing.T) {
	p := newProgress(io.Discard)
	done := make(chan struct{})
	close(done)
	still := func() int64 { return 0 }
	f := inFlight{done: done, hang: time.Millisecond, progress: still, returned: still, format: func(int64) string { return "" }}
	if !f.await(p) {
		t.Errorf("await: false, though every call had returned")
	}
	f.done = make(chan struct{})
	if f.await(p) {
		t.Errorf("await: true, though no call returned and nothing moved")
	}
}
