package main

import (
	"fmt"
	"math"
	"slices"
)

// Rounds.
//
// The disk of a shared machine is noisy: its fdatasync rate can change by
// half within minutes. A ratio of two figures measured minutes apart then
// says more about the neighbours than about the log. So walbench runs the
// raw probes and the WAL workloads back to back, in rounds, computes each
// ratio from figures of the same round, and reports the median of every
// figure and of every ratio over the rounds: a median of ratios, never a
// ratio of medians.

// summarize turns the rows of each round into one row per workload. Every
// round ran the same workloads in the same order, so row i of every round
// measured the same thing; a round cut short has fewer rows. Row i of the
// result has the medians of row i over the rounds that measured it (of
// the rounds that have the figure, for the figures that may be nil), the
// counts summed over those rounds, and those rounds' rows in PerRound.
func summarize(rounds [][]row) []row {
	var out []row
	for i := 0; ; i++ {
		var samples []row
		for _, rows := range rounds {
			if i < len(rows) {
				samples = append(samples, rows[i])
			}
		}
		if len(samples) == 0 {
			return out
		}
		out = append(out, summarizeRow(samples, len(rounds) > 1))
	}
}

// summarizeRow makes the row of one workload from its rows of each round.
// With prefixNotes, each note says which round it came from.
func summarizeRow(samples []row, prefixNotes bool) row {
	first := samples[0]
	s := row{
		Workload:     first.Workload,
		Kind:         first.Kind,
		Sync:         first.Sync,
		Appenders:    first.Appenders,
		Producers:    first.Producers,
		Method:       first.Method,
		Consumers:    first.Consumers,
		Batch:        first.Batch,
		Messages:     first.Messages,
		BytesPerOp:   first.BytesPerOp,
		SegmentBytes: first.SegmentBytes,
		Rounds:       len(samples),
		PerRound:     samples,
	}
	for _, r := range samples {
		s.Seconds += r.Seconds
		s.FillSeconds += r.FillSeconds
		s.Interrupted = s.Interrupted || r.Interrupted
		s.Ops += r.Ops
		s.Fdatasyncs += r.Fdatasyncs
		s.FileBytes += r.FileBytes
		s.Rotations += r.Rotations
		s.LatencySamples += r.LatencySamples
		for _, n := range r.Notes {
			if prefixNotes {
				n = fmt.Sprintf("round %d: %s", r.Round, n)
			}
			s.Notes = append(s.Notes, n)
		}
	}
	s.AppendsPerSec = medianOf(samples, func(r row) *float64 { return r.AppendsPerSec })
	s.MBPerSec = *medianOf(samples, func(r row) *float64 { return &r.MBPerSec })
	s.P50Ns = medianNs(samples, func(r row) *int64 { return r.P50Ns })
	s.P99Ns = medianNs(samples, func(r row) *int64 { return r.P99Ns })
	s.MeanNs = medianNs(samples, func(r row) *int64 { return r.MeanNs })
	s.MaxNs = medianNs(samples, func(r row) *int64 { return r.MaxNs })
	s.FdatasyncsPerSec = *medianOf(samples, func(r row) *float64 { return &r.FdatasyncsPerSec })
	s.RecordsPerFdatasync = medianOf(samples, func(r row) *float64 { return r.RecordsPerFdatasync })
	s.BytesPerFdatasync = medianOf(samples, func(r row) *float64 { return r.BytesPerFdatasync })
	s.BatchCeilingFdatasyncsPerSec = medianOf(samples, func(r row) *float64 { return r.BatchCeilingFdatasyncsPerSec })
	s.BatchCeilingPerSec = medianOf(samples, func(r row) *float64 { return r.BatchCeilingPerSec })

	vsOverwrite := func(r row) *float64 { return r.VsRawOverwrite }
	s.VsRawOverwrite = medianOf(samples, vsOverwrite)
	s.VsRawOverwriteMin, s.VsRawOverwriteMax = rangeOf(samples, vsOverwrite)
	vsCeiling := func(r row) *float64 { return r.VsBatchCeiling }
	s.VsBatchCeiling = medianOf(samples, vsCeiling)
	s.VsBatchCeilingMin, s.VsBatchCeilingMax = rangeOf(samples, vsCeiling)
	vsWAL := func(r row) *float64 { return r.VsWALSameN }
	s.VsWALSameN = medianOf(samples, vsWAL)
	s.VsWALSameNMin, s.VsWALSameNMax = rangeOf(samples, vsWAL)
	return s
}

// median returns the median of xs: the middle value, or the mean of the
// two middle values when len(xs) is even. It returns false for no values.
// It does not modify xs.
func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	mid := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[mid], true
	}
	return (sorted[mid-1] + sorted[mid]) / 2, true
}

// present returns the non-nil values of field over rows.
func present[T any](rows []row, field func(row) *T) []T {
	var vs []T
	for _, r := range rows {
		if v := field(r); v != nil {
			vs = append(vs, *v)
		}
	}
	return vs
}

// medianOf is the median of field over the rows that have it; nil if none.
func medianOf(rows []row, field func(row) *float64) *float64 {
	m, ok := median(present(rows, field))
	if !ok {
		return nil
	}
	return &m
}

// medianNs is medianOf for nanoseconds, rounded to the nanosecond.
func medianNs(rows []row, field func(row) *int64) *int64 {
	var xs []float64
	for _, v := range present(rows, field) {
		xs = append(xs, float64(v))
	}
	m, ok := median(xs)
	if !ok {
		return nil
	}
	return ptr(int64(math.Round(m)))
}

// rangeOf is the least and the greatest of field over the rows that have
// it; nils if none.
func rangeOf(rows []row, field func(row) *float64) (lo, hi *float64) {
	vs := present(rows, field)
	if len(vs) == 0 {
		return nil, nil
	}
	return ptr(slices.Min(vs)), ptr(slices.Max(vs))
}
