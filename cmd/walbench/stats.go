package main

import (
	"math"
	"math/bits"
	"time"
)

// Latency histogram: log-linear buckets in the manner of HdrHistogram.
//
// Values are nanoseconds. Values below 2^subBits each have a bucket of
// their own (exact). Above that, every octave [2^e, 2^(e+1)) is cut into
// 2^subBits buckets of width 2^(e-subBits), so a bucket is never wider
// than 1/2^subBits of the values in it. Reporting a bucket's midpoint is
// therefore off by at most half a width: a relative error of at most
// 1/2^(subBits+1) = 1/256 ≈ 0.4%.
//
// Index of v >= 2^subBits, with e = floor(log2 v) and top = v >> (e-subBits)
// (top lies in [2^subBits, 2^(subBits+1))): (e-subBits)*2^subBits + top.
// At e = subBits that is v itself, so the exact and the log-linear ranges
// join without a gap.
const (
	subBits    = 7
	subBuckets = 1 << subBits
	// numBuckets covers every non-negative int64: the largest e is 62.
	numBuckets = (62-subBits)*subBuckets + 2*subBuckets
)

// maxRelError is the bound on |Percentile - exact| / exact, for exact > 0.
const maxRelError = 1.0 / (2 * subBuckets)

// Histogram records durations in log-linear buckets. Its zero value is
// empty and ready to use. A Histogram is not safe for concurrent use: give
// each goroutine its own and Merge them afterwards. It retains nothing
// passed to it.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    float64 // nanoseconds, for Mean
	min    int64
	max    int64
}

func bucketOf(v int64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1
	shift := e - subBits
	return shift*subBuckets + int(v>>shift)
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (lo, width int64) {
	if i < 2*subBuckets {
		return int64(i), 1
	}
	shift := i/subBuckets - 1
	top := int64(i - shift*subBuckets)
	return top << shift, 1 << shift
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max return the exact extremes; zero when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the exact mean; zero when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Percentile returns the nearest-rank q-quantile (0 <= q <= 1): the value
// of rank ceil(q*n) (at least 1) in sorted order, within maxRelError. It
// returns zero when the histogram is empty.
func (h *Histogram) Percentile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		lo, width := bucketRange(i)
		v := lo + (width-1)/2
		// The extremes are known exactly; never report past them.
		return time.Duration(min(max(v, h.min), h.max))
	}
	return time.Duration(h.max) // not reached: the counts sum to n
}
