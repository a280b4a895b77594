package main

import (
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in HdrHistograms of nanoseconds with three
// significant digits (a value is within 0.1% of what was recorded),
// from 1 ns to latencyMax; a longer one is recorded as latencyMax. Each
// goroutine records into its own, merged at the end: recording must cost
// nothing next to the calls it times.
const (
	latencySignificantDigits = 3
	latencyMax               = 10 * time.Minute
)

func newLatencies() *hdr.Histogram {
	return hdr.New(1, int64(latencyMax), latencySignificantDigits)
}

// recordLatency records d, clamped to the histogram's range.
func recordLatency(h *hdr.Histogram, d time.Duration) {
	_ = h.RecordValue(int64(min(max(d, 0), latencyMax)))
}

// recordCorrected records the latency of a call a rate-limited sender
// meant to start at intended, which returned at done: measured from the
// intended start, not from when the call began, so that a stall of the
// system under test counts against every call it delayed, not only the
// one it held (coordinated omission). For a sender whose calls take no
// time but for a stall, the calls the stall held up record exactly the
// values HdrHistogram's RecordCorrectedValue(stall, interval) invents for
// them; here they are measured, so they stay right when the calls do take
// time. See TestCoordinatedOmission.
func recordCorrected(h *hdr.Histogram, intended, done time.Time) {
	recordLatency(h, done.Sub(intended))
}

// percentiles are the latency figures of a histogram: nil when it is empty.
type percentiles struct{ p50, p99, p999, max *int64 }

func percentilesOf(h *hdr.Histogram) percentiles {
	if h == nil || h.TotalCount() == 0 {
		return percentiles{}
	}
	return percentiles{
		p50:  ptr(h.ValueAtQuantile(50)),
		p99:  ptr(h.ValueAtQuantile(99)),
		p999: ptr(h.ValueAtQuantile(99.9)),
		max:  ptr(h.Max()),
	}
}

// mergeLatencies merges hs into one histogram.
func mergeLatencies(hs []*hdr.Histogram) *hdr.Histogram {
	out := newLatencies()
	for _, h := range hs {
		if h != nil {
			out.Merge(h)
		}
	}
	return out
}
