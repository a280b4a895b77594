package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactPercentile is the nearest-rank definition Histogram.Percentile
// approximates.
func exactPercentile(sorted []int64, q float64) int64 {
	rank := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[rank-1]
}

var quantiles = []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1}

// checkPercentiles compares h with the exact percentiles of values.
func checkPercentiles(t *testing.T, seed uint64, h *Histogram, values []int64) {
	t.Helper()
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	if got := h.Count(); got != uint64(len(sorted)) {
		t.Fatalf("seed %d: Count = %d, want %d", seed, got, len(sorted))
	}
	if got, want := int64(h.Min()), sorted[0]; got != want {
		t.Errorf("seed %d: Min = %d, want %d", seed, got, want)
	}
	if got, want := int64(h.Max()), sorted[len(sorted)-1]; got != want {
		t.Errorf("seed %d: Max = %d, want %d", seed, got, want)
	}
	for _, q := range quantiles {
		want := exactPercentile(sorted, q)
		got := int64(h.Percentile(q))
		// The bound is relative; a value that rounds can be off by one
		// more nanosecond at most.
		if diff := math.Abs(float64(got - want)); diff > float64(want)*maxRelError+1 {
			t.Errorf("seed %d: Percentile(%v) = %d, exact %d: off by %.3f%%, bound %.3f%%",
				seed, q, got, want, 100*diff/float64(want), 100*maxRelError)
		}
	}
}

func TestHistogramPercentiles(t *testing.T) {
	distributions := []struct {
		name string
		draw func(r *rand.Rand) int64
	}{
		// Latencies of fdatasync-bound appends: log-normal around 1 ms.
		{"lognormal", func(r *rand.Rand) int64 { return int64(math.Exp(r.NormFloat64()*1.2 + math.Log(1e6))) }},
		{"exponential", func(r *rand.Rand) int64 { return int64(r.ExpFloat64() * 50e3) }},
		{"uniform wide", func(r *rand.Rand) int64 { return r.Int64N(1 << 40) }},
		// Small values land in the exact buckets.
		{"small", func(r *rand.Rand) int64 { return r.Int64N(300) }},
		// A bimodal mix: fast writes and slow syncs.
		{"bimodal", func(r *rand.Rand) int64 {
			if r.IntN(100) < 3 {
				return 20e6 + r.Int64N(80e6)
			}
			return 2e3 + r.Int64N(8e3)
		}},
	}
	for _, d := range distributions {
		t.Run(d.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 5; seed++ {
				r := rand.New(rand.NewPCG(seed, 0x5eed))
				n := 1 + r.IntN(50_000)
				values := make([]int64, n)
				h := new(Histogram)
				for i := range values {
					values[i] = d.draw(r)
					h.Record(time.Duration(values[i]))
				}
				checkPercentiles(t, seed, h, values)
			}
		})
	}
}

// TestHistogramMerge records values into several histograms, as the
// appenders do, and checks the merged one against all of them.
func TestHistogramMerge(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 0xfeed))
		parts := make([]*Histogram, 1+r.IntN(64))
		for i := range parts {
			parts[i] = new(Histogram)
		}
		var values []int64
		for range 20_000 {
			v := int64(math.Exp(r.NormFloat64()*2 + math.Log(5e5)))
			values = append(values, v)
			parts[r.IntN(len(parts))].Record(time.Duration(v))
		}
		merged := new(Histogram)
		merged.Merge(new(Histogram)) // merging an empty one changes nothing
		for _, p := range parts {
			merged.Merge(p)
		}
		checkPercentiles(t, seed, merged, values)

		var sum float64
		for _, v := range values {
			sum += float64(v)
		}
		if got, want := float64(merged.Mean()), sum/float64(len(values)); math.Abs(got-want) > 1 {
			t.Errorf("seed %d: Mean = %v, want %v", seed, got, want)
		}
	}
}

// TestBucketRange checks that every value lies in the bucket bucketOf
// assigns it, and that the widths keep the promised relative error.
func TestBucketRange(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	values := []int64{0, 1, subBuckets - 1, subBuckets, 2*subBuckets - 1, 2 * subBuckets, 1e9, math.MaxInt64}
	for range 100_000 {
		values = append(values, r.Int64N(math.MaxInt64)>>r.IntN(63))
	}
	for _, v := range values {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", v, i, numBuckets)
		}
		lo, width := bucketRange(i)
		if v < lo || v-lo >= width {
			t.Fatalf("value %d not in bucket %d = [%d, %d+%d)", v, i, lo, lo, width)
		}
		if width > 1 && float64(width)/float64(lo) > 1.0/subBuckets {
			t.Fatalf("bucket %d = [%d, +%d) is wider than 1/%d of its values", i, lo, width, subBuckets)
		}
	}
}

func TestHistogramEmptyAndNegative(t *testing.T) {
	h := new(Histogram)
	if h.Percentile(0.5) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatalf("empty histogram: p50 %v, mean %v, count %d; want zeros", h.Percentile(0.5), h.Mean(), h.Count())
	}
	h.Record(-time.Second)
	if h.Percentile(1) != 0 || h.Min() != 0 {
		t.Fatalf("negative duration: p100 %v, min %v; want 0", h.Percentile(1), h.Min())
	}
}
