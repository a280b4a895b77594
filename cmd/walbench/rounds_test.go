package main

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/walbroker/walbroker/wal"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
		ok   bool
	}{
		{"none", nil, 0, false},
		{"one", []float64{7}, 7, true},
		{"odd", []float64{3, 1, 2}, 2, true},
		{"even: mean of the middle two", []float64{4, 1, 3, 2}, 2.5, true},
		{"two", []float64{10, 20}, 15, true},
		{"outlier", []float64{1, 1000, 2, 3, 2}, 2, true},
		{"ties", []float64{5, 5, 1, 5}, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.xs)
			got, ok := median(in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("median(%v) = %v, %v; want %v, %v", tc.xs, got, ok, tc.want, tc.ok)
			}
			if !slices.Equal(in, tc.xs) {
				t.Errorf("median reordered its argument: %v, was %v", in, tc.xs)
			}
		})
	}
}

func TestBatchCeiling(t *testing.T) {
	for _, tc := range []struct {
		batchBytes, recordBytes int
		syncsPerSec, want       float64
	}{
		{1041, 1024, 2000, 2000},           // one 1 KiB record per fdatasync
		{32 * 1041, 1024, 1500, 48000},     // 32 records per fdatasync
		{1024 + 512, 1007, 1000, 1500},     // one and a half 1 KiB frames
		{17, 0, 3000, 3000},                // empty records: the frame header alone
		{64 * 117, 100, 250.5, 64 * 250.5}, // 100-byte records
	} {
		got := batchCeiling(tc.batchBytes, tc.recordBytes, tc.syncsPerSec)
		if math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("batchCeiling(%d, %d, %v) = %v, want %v", tc.batchBytes, tc.recordBytes, tc.syncsPerSec, got, tc.want)
		}
	}
}

// oneRound is what a round measured, in whole operations over one second:
// the raw overwrite probe's fdatasyncs, one sync=always WAL workload's
// records and fdatasyncs, and its batch ceiling probe's fdatasyncs (0: the
// probe did not run).
type oneRound struct {
	overwriteSyncs, walRecords, walSyncs, ceilingSyncs int64
}

// rows makes the rows of the round as measureRound does, from made-up
// results of the probes and of the WAL workload.
func (o oneRound) rows() []row {
	const recordBytes = 1024
	second := window{elapsed: time.Second, opened: true}
	hist := func(n int64) *Histogram {
		h := new(Histogram)
		for i := range n {
			h.Record(time.Duration(i) * time.Microsecond)
		}
		return h
	}
	overwrite := probeRow(probeResult{spec: overwriteProbe, window: second, syncs: o.overwriteSyncs, hist: hist(o.overwriteSyncs)})
	w := walRow(walResult{
		load:      walLoad{appenders: 64, recordBytes: recordBytes, sync: wal.SyncAlways},
		window:    second,
		records:   o.walRecords,
		syncs:     o.walSyncs,
		fileBytes: o.walRecords * (recordBytes + 17),
		hist:      hist(o.walRecords),
	}, overwrite.FdatasyncsPerSec)
	if o.ceilingSyncs > 0 {
		batch := int(math.Round(*w.BytesPerFdatasync))
		w.setBatchCeiling(probeResult{spec: batchCeilingProbe(batch), window: second, syncs: o.ceilingSyncs, hist: hist(o.ceilingSyncs)})
	}
	return []row{overwrite, w}
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rounds []oneRound
		// The WAL row's figures; nil: want none.
		appends, vsOverwrite, vsOverwriteMin, vsOverwriteMax *float64
		ceiling, vsCeiling, vsCeilingMin, vsCeilingMax       *float64
	}{
		{
			name:        "one round",
			rounds:      []oneRound{{overwriteSyncs: 2000, walRecords: 1800, walSyncs: 1800, ceilingSyncs: 1900}},
			appends:     ptr(1800.0),
			vsOverwrite: ptr(0.9), vsOverwriteMin: ptr(0.9), vsOverwriteMax: ptr(0.9),
			ceiling: ptr(1900.0), vsCeiling: ptr(1800.0 / 1900), vsCeilingMin: ptr(1800.0 / 1900), vsCeilingMax: ptr(1800.0 / 1900),
		},
		{
			// The disk slows down and speeds up between rounds. The ratio
			// of the medians would be 1000/2000 = 0.5; each round's own
			// ratio says 0.9, 0.5, 0.9.
			name: "median of ratios, not ratio of medians",
			rounds: []oneRound{
				{overwriteSyncs: 1000, walRecords: 900, walSyncs: 900, ceilingSyncs: 1000},
				{overwriteSyncs: 2000, walRecords: 1000, walSyncs: 1000, ceilingSyncs: 4000},
				{overwriteSyncs: 3000, walRecords: 2700, walSyncs: 2700, ceilingSyncs: 3000},
			},
			appends:     ptr(1000.0),
			vsOverwrite: ptr(0.9), vsOverwriteMin: ptr(0.5), vsOverwriteMax: ptr(0.9),
			ceiling: ptr(3000.0), vsCeiling: ptr(0.9), vsCeilingMin: ptr(0.25), vsCeilingMax: ptr(0.9),
		},
		{
			name: "even count: mean of the middle two",
			rounds: []oneRound{
				{overwriteSyncs: 1000, walRecords: 32000, walSyncs: 1000, ceilingSyncs: 1000},
				{overwriteSyncs: 4000, walRecords: 64000, walSyncs: 2000, ceilingSyncs: 4000},
			},
			appends:     ptr(48000.0),
			vsOverwrite: ptr(24.0), vsOverwriteMin: ptr(16.0), vsOverwriteMax: ptr(32.0),
			// 32 records per fdatasync in both rounds.
			ceiling: ptr(80000.0), vsCeiling: ptr(0.75), vsCeilingMin: ptr(0.5), vsCeilingMax: ptr(1.0),
		},
		{
			name: "no batch ceiling in one round",
			rounds: []oneRound{
				{overwriteSyncs: 1000, walRecords: 500, walSyncs: 500, ceilingSyncs: 1000},
				{overwriteSyncs: 1000, walRecords: 600, walSyncs: 600},
				{overwriteSyncs: 1000, walRecords: 700, walSyncs: 700, ceilingSyncs: 1000},
			},
			appends:     ptr(600.0),
			vsOverwrite: ptr(0.6), vsOverwriteMin: ptr(0.5), vsOverwriteMax: ptr(0.7),
			ceiling: ptr(1000.0), vsCeiling: ptr(0.6), vsCeilingMin: ptr(0.5), vsCeilingMax: ptr(0.7),
		},
		{
			name:    "no raw probes",
			rounds:  []oneRound{{walRecords: 500, walSyncs: 500}, {walRecords: 700, walSyncs: 700}},
			appends: ptr(600.0),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rounds [][]row
			for i, o := range tc.rounds {
				rows := o.rows()
				for j := range rows {
					rows[j].Round = i + 1
				}
				rounds = append(rounds, rows)
			}
			sum := summarize(rounds)
			if len(sum) != 2 {
				t.Fatalf("summarize: %d rows, want 2", len(sum))
			}
			w := sum[1]
			if w.Rounds != len(tc.rounds) || len(w.PerRound) != len(tc.rounds) {
				t.Fatalf("Rounds %d, %d per round; want %d", w.Rounds, len(w.PerRound), len(tc.rounds))
			}
			for _, f := range []struct {
				name      string
				got, want *float64
			}{
				{"appends/s", w.AppendsPerSec, tc.appends},
				{"÷ raw overwrite", w.VsRawOverwrite, tc.vsOverwrite},
				{"÷ raw overwrite min", w.VsRawOverwriteMin, tc.vsOverwriteMin},
				{"÷ raw overwrite max", w.VsRawOverwriteMax, tc.vsOverwriteMax},
				{"batch ceiling", w.BatchCeilingPerSec, tc.ceiling},
				{"÷ batch ceiling", w.VsBatchCeiling, tc.vsCeiling},
				{"÷ batch ceiling min", w.VsBatchCeilingMin, tc.vsCeilingMin},
				{"÷ batch ceiling max", w.VsBatchCeilingMax, tc.vsCeilingMax},
			} {
				switch {
				case f.want == nil && f.got != nil:
					t.Errorf("%s = %v, want none", f.name, *f.got)
				case f.want != nil && f.got == nil:
					t.Errorf("%s: none, want %v", f.name, *f.want)
				case f.want != nil && math.Abs(*f.got-*f.want) > 1e-9*math.Abs(*f.want):
					t.Errorf("%s = %v, want %v", f.name, *f.got, *f.want)
				}
			}
		})
	}
}

// TestSummarizeCounts checks what is summed rather than taken the median
// of, a round cut short, and the notes.
func TestSummarizeCounts(t *testing.T) {
	a := oneRound{overwriteSyncs: 1000, walRecords: 900, walSyncs: 900, ceilingSyncs: 1000}.rows()
	b := oneRound{overwriteSyncs: 3000, walRecords: 2000, walSyncs: 1000, ceilingSyncs: 1000}.rows()
	c := oneRound{overwriteSyncs: 2000}.rows()[:1] // cut short after the probe
	for i, rows := range [][]row{a, b, c} {
		for j := range rows {
			rows[j].Round = i + 1
		}
	}
	a[1].Notes = []string{"odd counter"}
	c[0].Interrupted = true

	sum := summarize([][]row{a, b, c})
	if len(sum) != 2 {
		t.Fatalf("summarize: %d rows, want 2", len(sum))
	}
	raw, w := sum[0], sum[1]
	if raw.Rounds != 3 || w.Rounds != 2 {
		t.Errorf("Rounds: raw %d, wal %d; want 3, 2", raw.Rounds, w.Rounds)
	}
	if !raw.Interrupted || w.Interrupted {
		t.Errorf("Interrupted: raw %v, wal %v; want true, false", raw.Interrupted, w.Interrupted)
	}
	if raw.Ops != 6000 || raw.Fdatasyncs != 6000 || raw.Seconds != 3 || raw.LatencySamples != 6000 {
		t.Errorf("raw counts: %d ops, %d fdatasyncs, %vs, %d latencies; want the sums 6000, 6000, 3s, 6000",
			raw.Ops, raw.Fdatasyncs, raw.Seconds, raw.LatencySamples)
	}
	if raw.FdatasyncsPerSec != 2000 {
		t.Errorf("raw fdatasyncs/s = %v, want the median 2000", raw.FdatasyncsPerSec)
	}
	if w.Ops != 2900 || w.Fdatasyncs != 1900 {
		t.Errorf("wal counts: %d ops, %d fdatasyncs; want 2900, 1900", w.Ops, w.Fdatasyncs)
	}
	if got, want := *w.RecordsPerFdatasync, 1.5; got != want {
		t.Errorf("records/fdatasync = %v, want the median of 1 and 2, %v", got, want)
	}
	if want := []string{"round 1: odd counter"}; !slices.Equal(w.Notes, want) {
		t.Errorf("notes %q, want %q", w.Notes, want)
	}
	for i, r := range raw.PerRound {
		if r.Round != i+1 || r.PerRound != nil {
			t.Errorf("raw per round %d: Round %d, %d nested; want %d, none", i, r.Round, len(r.PerRound), i+1)
		}
	}
	if got := summarize(nil); got != nil {
		t.Errorf("summarize(nil) = %v, want nil", got)
	}
}
