package main

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// testSeed is WALBENCH_TEST_SEED when set (to replay a failure), else a
// fixed seed; the test logs it.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(1)
	if s := os.Getenv("WALBENCH_TEST_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WALBENCH_TEST_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (WALBENCH_TEST_SEED replays it)", seed)
	return seed
}

// sendSchedule simulates a rate-limited sender: call k is scheduled at
// start + k×interval, starts then or when call k-1 returns if that is
// later, and takes service(k). It returns each call's scheduled, start and
// return instants. No clock is read: the instants are arithmetic.
func sendSchedule(n int, interval time.Duration, service func(k int) time.Duration) (intended, began, done []time.Time) {
	start := time.Unix(1_000_000, 0)
	var last time.Time
	for k := range n {
		in := start.Add(time.Duration(k) * interval)
		b := in
		if last.After(b) {
			b = last
		}
		last = b.Add(service(k))
		intended, began, done = append(intended, in), append(began, b), append(done, last)
	}
	return intended, began, done
}

// TestCoordinatedOmission: a sender whose calls take no time but for a
// few stalls. Measured from the scheduled instants (recordCorrected), a
// stall counts against every call it held up, and the latencies of at
// least one interval are exactly those HdrHistogram's RecordCorrectedValue
// reconstructs from the stalls' own durations and the interval (it
// invents none shorter). Measured from when each call began, the stalls
// hide.
func TestCoordinatedOmission(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 6))
	const (
		n        = 20_000
		interval = time.Millisecond
		stalls   = 5
	)
	// Stalls far enough apart that each one's backlog is gone before the
	// next: one in each fifth of the calls, at most 100 intervals long.
	stall := map[int]time.Duration{}
	for i := range stalls {
		stall[i*n/stalls+rng.IntN(n/stalls-200)] = time.Duration(10+rng.IntN(90))*interval + time.Duration(rng.IntN(1000))*time.Microsecond
	}
	intended, began, done := sendSchedule(n, interval, func(k int) time.Duration { return stall[k] })

	corrected, naive := newLatencies(), newLatencies()
	held, reference := newLatencies(), newLatencies() // the values of an interval or more
	for k := range n {
		recordCorrected(corrected, intended[k], done[k])
		recordLatency(naive, done[k].Sub(began[k]))
		if d := done[k].Sub(intended[k]); d >= interval {
			recordLatency(held, d)
		}
		if s := done[k].Sub(began[k]); s > 0 {
			if err := reference.RecordCorrectedValue(int64(s), int64(interval)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if corrected.TotalCount() != n {
		t.Errorf("%d latencies recorded for %d calls", corrected.TotalCount(), n)
	}
	if !held.Equals(reference) {
		t.Errorf("latencies of an interval or more: %d from the scheduled instants, %d from RecordCorrectedValue; p50 %v and %v, max %v and %v",
			held.TotalCount(), reference.TotalCount(), time.Duration(held.ValueAtQuantile(50)), time.Duration(reference.ValueAtQuantile(50)),
			time.Duration(held.Max()), time.Duration(reference.Max()))
	}
	// Five stalls in 20,000 calls are not in the naive p99.9; the ten or
	// more calls each held up are in the corrected one.
	if naive.ValueAtQuantile(99.9) != 0 || corrected.ValueAtQuantile(99.9) < int64(interval) {
		t.Errorf("p99.9: naive %v, corrected %v; want 0 and the stalls' tails",
			time.Duration(naive.ValueAtQuantile(99.9)), time.Duration(corrected.ValueAtQuantile(99.9)))
	}
}

// TestCorrectedOnTime: a sender that keeps up records the calls' own
// durations, whatever the schedule.
func TestCorrectedOnTime(t *testing.T) {
	intended, began, done := sendSchedule(1000, time.Millisecond, func(k int) time.Duration { return time.Duration(100+k%300) * time.Microsecond })
	fromIntended, own := newLatencies(), newLatencies()
	for k := range intended {
		if !began[k].Equal(intended[k]) {
			t.Fatalf("call %d began late", k)
		}
		recordCorrected(fromIntended, intended[k], done[k])
		recordLatency(own, done[k].Sub(began[k]))
	}
	if !fromIntended.Equals(own) {
		t.Errorf("on time, the corrected latencies differ from the calls' own")
	}
}

func TestRecordLatencyClamps(t *testing.T) {
	h := newLatencies()
	recordLatency(h, -time.Second)
	recordLatency(h, 2*latencyMax)
	if h.TotalCount() != 2 || h.Min() != 0 || !h.ValuesAreEquivalent(h.Max(), int64(latencyMax)) {
		t.Errorf("count %d, min %d, max %d; want 2, 0, %d", h.TotalCount(), h.Min(), h.Max(), int64(latencyMax))
	}
}

func TestPercentiles(t *testing.T) {
	if p := percentilesOf(newLatencies()); p.p50 != nil || p.max != nil {
		t.Errorf("empty histogram: %+v, want nils", p)
	}
	if p := percentilesOf(nil); p.p99 != nil {
		t.Errorf("nil histogram: %+v, want nils", p)
	}
	h := newLatencies()
	for v := int64(1); v <= 10_000; v++ {
		recordLatency(h, time.Duration(v)*time.Microsecond)
	}
	p := percentilesOf(h)
	for _, c := range []struct {
		name string
		got  *int64
		want int64
	}{{"p50", p.p50, 5000_000}, {"p99", p.p99, 9900_000}, {"p99.9", p.p999, 9990_000}, {"max", p.max, 10_000_000}} {
		// Three significant digits.
		if c.got == nil || *c.got < c.want-c.want/1000 || *c.got > c.want+c.want/1000 {
			t.Errorf("%s = %v, want %d within 0.1%%", c.name, c.got, c.want)
		}
	}
	merged := mergeLatencies([]*hdr.Histogram{h, nil, h})
	if merged.TotalCount() != 2*h.TotalCount() {
		t.Errorf("merged %d values, want %d", merged.TotalCount(), 2*h.TotalCount())
	}
}

// TestPercentilesMaxIsTheLargest: max is the largest latency recorded,
// however rare, not a high percentile.
func TestPercentilesMaxIsTheLargest(t *testing.T) {
	h := newLatencies()
	for range 10_000 {
		recordLatency(h, time.Microsecond)
	}
	recordLatency(h, time.Second)
	p := percentilesOf(h)
	if p.max == nil || !h.ValuesAreEquivalent(*p.max, int64(time.Second)) {
		t.Fatalf("max %v, want 1s", p.max)
	}
}
