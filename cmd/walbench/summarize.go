package main

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Rounds.
//
// The disk of a shared machine is noisy: its fdatasync rate can change by
// half within minutes. A ratio of two figures measured minutes apart then
// says more about the neighbours than about the broker. So walbench runs
// the probe and the workloads back to back, in rounds, computes each ratio
// from figures of the same round, and reports the median of every figure
// and of every ratio over the rounds: a median of ratios, never a ratio of
// medians.

// summarizeRows turns the rows of each round into one row per workload,
// in the order the workloads ran. The rows of different rounds are
// matched by their workload (rowKey), not by their place: every round
// runs the same workloads in the same order, but a round cut short has
// fewer rows, and a sweep point skipped for its memory in one round (the
// memory available changes from one round to the next) leaves no row in
// it, so row i of one round may be another workload's than row i of the
// next. A workload is summarized over the rounds that measured it, its
// Rounds saying how many.
func summarizeRows(rounds [][]Row) []Row {
	var order []rowKey
	samples := map[rowKey][]Row{}
	for _, rows := range rounds {
		before := -1 // where in order the round's row before this one is
		for _, r := range rows {
			k := keyOf(r)
			at := slices.Index(order, k)
			if at < 0 {
				// Not measured in an earlier round: it ran after the
				// round's row before it.
				at = before + 1
				order = slices.Insert(order, at, k)
			}
			before = at
			samples[k] = append(samples[k], r)
		}
	}
	var out []Row
	for _, k := range order {
		out = append(out, summarize(samples[k], len(rounds) > 1))
	}
	return out
}

// rowKey is which workload a row measured, the same in every round: its
// kind and name, and its target rate, which the name rounds.
type rowKey struct {
	kind, workload string
	targetPerSec   float64
}

func keyOf(r Row) rowKey {
	return rowKey{kind: r.Kind, workload: r.Workload, targetPerSec: r.TargetPerSec}
}

// summarize makes the summary of one workload's rounds, samples, as the
// agg tags of its type say (see Row): T is Row, Probe or Reopen. With
// prefixNotes each note says which round it came from.
func summarize[T any](samples []T, prefixNotes bool) T {
	var out T
	if len(samples) == 0 {
		return out
	}
	ov := reflect.ValueOf(&out).Elem()
	t := ov.Type()
	field := func(j, i int) reflect.Value { return reflect.ValueOf(samples[j]).Field(i) }
	ranges := map[string][2]float64{}
	for i := range t.NumField() {
		f := t.Field(i)
		dst := ov.Field(i)
		switch agg := f.Tag.Get("agg"); {
		case f.Name == "Round" || f.Name == "Ranges":
		case f.Name == "Rounds":
			dst.SetInt(int64(len(samples)))
		case f.Name == "PerRound":
			dst.Set(reflect.ValueOf(slices.Clone(samples)))
		case f.Name == "Notes":
			var notes []string
			for j := range samples {
				round := reflect.ValueOf(samples[j]).FieldByName("Round").Int()
				for _, n := range field(j, i).Interface().([]string) {
					if prefixNotes {
						n = fmt.Sprintf("round %d: %s", round, n)
					}
					notes = append(notes, n)
				}
			}
			dst.Set(reflect.ValueOf(notes))
		case agg == "sum":
			for j := range samples {
				switch v := field(j, i); v.Kind() {
				case reflect.Float64:
					dst.SetFloat(dst.Float() + v.Float())
				default:
					dst.SetInt(dst.Int() + v.Int())
				}
			}
		case agg == "set":
			for j := range samples {
				if v := field(j, i); !v.IsZero() {
					dst.Set(v)
				}
			}
		case agg == "or":
			for j := range samples {
				dst.SetBool(dst.Bool() || field(j, i).Bool())
			}
		case agg == "series":
			var series [][]int
			for j := range samples {
				series = append(series, field(j, i).Interface().([]int))
			}
			dst.Set(reflect.ValueOf(medianSeries(series)))
		case agg == "ceilings":
			var sets [][]Ceiling
			for j := range samples {
				sets = append(sets, field(j, i).Interface().([]Ceiling))
			}
			dst.Set(reflect.ValueOf(medianCeilings(sets)))
		case f.Type.Kind() == reflect.Pointer:
			var xs []float64
			for j := range samples {
				v := field(j, i)
				if v.IsNil() {
					continue
				}
				if e := v.Elem(); e.Kind() == reflect.Float64 {
					xs = append(xs, e.Float())
				} else {
					xs = append(xs, float64(e.Int()))
				}
			}
			m, ok := median(xs)
			if !ok {
				continue
			}
			if f.Type.Elem().Kind() == reflect.Float64 {
				dst.Set(reflect.ValueOf(&m))
			} else {
				n := int64(math.Round(m))
				dst.Set(reflect.ValueOf(&n))
			}
			if agg == "ratio" && len(xs) > 1 {
				ranges[jsonName(f)] = [2]float64{slices.Min(xs), slices.Max(xs)}
			}
		default:
			dst.Set(field(0, i))
		}
	}
	if r := ov.FieldByName("Ranges"); r.IsValid() && len(ranges) > 0 {
		r.Set(reflect.ValueOf(ranges))
	}
	return out
}

// jsonName is the name of f in the JSON.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
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

// medianSeries is the element-wise median of series sampled at the same
// instants, as long as the shortest.
func medianSeries(series [][]int) []int {
	if len(series) == 0 {
		return nil
	}
	n := len(series[0])
	for _, s := range series {
		n = min(n, len(s))
	}
	if n == 0 {
		return nil
	}
	out := make([]int, n)
	xs := make([]float64, len(series))
	for k := range n {
		for j, s := range series {
			xs[j] = float64(s[k])
		}
		m, _ := median(xs)
		out[k] = int(math.Round(m))
	}
	return out
}

// medianCeilings is the median of each ceiling over the rounds that have
// it: every round computes the same list.
func medianCeilings(sets [][]Ceiling) []Ceiling {
	var out []Ceiling
	for _, set := range sets {
		for _, c := range set {
			if !slices.ContainsFunc(out, func(o Ceiling) bool { return o.Producers == c.Producers && o.Size == c.Size }) {
				out = append(out, Ceiling{Producers: c.Producers, Size: c.Size})
			}
		}
	}
	for i := range out {
		var xs []float64
		for _, set := range sets {
			for _, c := range set {
				if c.Producers == out[i].Producers && c.Size == out[i].Size && c.MsgsPerSec != nil {
					xs = append(xs, *c.MsgsPerSec)
				}
			}
		}
		if m, ok := median(xs); ok {
			out[i].MsgsPerSec = &m
		}
	}
	return out
}
