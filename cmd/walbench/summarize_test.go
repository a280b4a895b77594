package main

import (
	"reflect"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
		ok   bool
	}{
		{nil, 0, false},
		{[]float64{3}, 3, true},
		{[]float64{5, 1, 3}, 3, true},
		{[]float64{4, 1, 3, 2}, 2.5, true},
	} {
		in := append([]float64(nil), tc.xs...)
		got, ok := median(tc.xs)
		if got != tc.want || ok != tc.ok {
			t.Errorf("median(%v) = %v, %v; want %v, %v", in, got, ok, tc.want, tc.ok)
		}
		if !reflect.DeepEqual(in, tc.xs) {
			t.Errorf("median modified its argument: %v, was %v", tc.xs, in)
		}
	}
}

// TestSummarizeRows summarizes three fabricated rounds of two workloads,
// the third round cut short after the first: each figure is the median
// over the rounds that have it, each ratio the median of the rounds'
// ratios (not a ratio of medians) with its range, counts are summed.
func TestSummarizeRows(t *testing.T) {
	pub := func(round int, msgs, ceiling float64, p99 int64, ops int64, notes ...string) Row {
		return Row{
			Kind: kindPublish, Workload: "publish", Sync: "all", Producers: 64, Size: 1024, Round: round,
			Seconds: 3, Ops: ops, Commits: ops / 10, MsgsPerSec: &msgs, P99Ns: &p99,
			CeilingPerSec: &ceiling, VsCeiling: ptr(msgs / ceiling), Notes: notes,
		}
	}
	drain := func(round int, msgs *float64, interrupted bool) Row {
		return Row{Kind: kindDrain, Workload: "drain", Round: round, MsgsPerSec: msgs, Interrupted: interrupted, Ops: 100}
	}
	rounds := [][]Row{
		{pub(1, 900, 1000, 5, 2700), drain(1, ptr(10.0), false)},
		{pub(2, 500, 1000, 9, 1500, "odd"), drain(2, nil, false)},
		{pub(3, 900, 2000, 7, 2700)},
	}
	sum := summarizeRows(rounds)
	if len(sum) != 2 {
		t.Fatalf("%d rows, want 2", len(sum))
	}
	p := sum[0]
	if p.Rounds != 3 || len(p.PerRound) != 3 || p.Round != 0 || p.Workload != "publish" || p.Producers != 64 {
		t.Errorf("publish: %d rounds, %d per round, round %d, %q, %d producers", p.Rounds, len(p.PerRound), p.Round, p.Workload, p.Producers)
	}
	if p.Seconds != 9 || p.Ops != 6900 || p.Commits != 690 {
		t.Errorf("publish sums: %v s, %d ops, %d commits; want 9, 6900, 690", p.Seconds, p.Ops, p.Commits)
	}
	if *p.MsgsPerSec != 900 || *p.CeilingPerSec != 1000 || *p.P99Ns != 7 {
		t.Errorf("publish medians: %v msgs/s, ceiling %v, p99 %v; want 900, 1000, 7", *p.MsgsPerSec, *p.CeilingPerSec, *p.P99Ns)
	}
	// The rounds' ratios are 0.9, 0.5, 0.45: median 0.5. The ratio of the
	// medians would be 0.9.
	if *p.VsCeiling != 0.5 || p.Ranges["vs_ceiling"] != [2]float64{0.45, 0.9} || len(p.Ranges) != 1 {
		t.Errorf("÷ ceiling %v, ranges %v; want 0.5, only vs_ceiling's [0.45 0.9]", *p.VsCeiling, p.Ranges)
	}
	if p.VsFdatasync != nil {
		t.Errorf("÷ fdatasyncs/s %v, in no round", *p.VsFdatasync)
	}
	if !reflect.DeepEqual(p.Notes, []string{"round 2: odd"}) {
		t.Errorf("notes %q", p.Notes)
	}
	d := sum[1]
	if d.Rounds != 2 || *d.MsgsPerSec != 10 || d.Interrupted || d.Ops != 200 || d.Ranges != nil {
		t.Errorf("drain: %d rounds, %v msgs/s, interrupted %v, %d ops, ranges %v; want 2, 10 (the one round with it), false, 200, none",
			d.Rounds, *d.MsgsPerSec, d.Interrupted, d.Ops, d.Ranges)
	}
	rounds[1][1].Interrupted = true
	if !summarizeRows(rounds)[1].Interrupted {
		t.Errorf("a round interrupted, the summary not")
	}
	// One round: its own figures, no range, notes as they are.
	one := summarizeRows(rounds[1:2])[0]
	if *one.VsCeiling != 0.5 || one.Ranges != nil || !reflect.DeepEqual(one.Notes, []string{"odd"}) {
		t.Errorf("one round: ÷ ceiling %v, ranges %v, notes %q", *one.VsCeiling, one.Ranges, one.Notes)
	}
}

func TestSummarizeSeriesAndCeilings(t *testing.T) {
	mixed := func(backlog ...int) Row { return Row{Kind: kindMixed, Backlog: backlog} }
	s := summarize([]Row{mixed(1, 5, 9, 4), mixed(3, 2, 7), mixed(2, 8, 8, 8)}, true)
	if !reflect.DeepEqual(s.Backlog, []int{2, 5, 8}) {
		t.Errorf("backlog %v, want the element-wise median as long as the shortest, [2 5 8]", s.Backlog)
	}
	// Each ceiling is the median of the rounds' for the same producers and
	// size.
	probe := func(c1, c64, c1Large float64) Probe {
		return Probe{Ceilings: []Ceiling{{Producers: 1, Size: 1024, MsgsPerSec: &c1}, {Producers: 64, Size: 1024, MsgsPerSec: &c64},
			{Producers: 1, Size: 16384, MsgsPerSec: &c1Large}}}
	}
	p := summarize([]Probe{probe(1000, 50000, 900), probe(3000, 40000, 800), probe(2000, 60000, 700)}, true)
	if len(p.Ceilings) != 3 || *p.Ceilings[0].MsgsPerSec != 2000 || *p.Ceilings[1].MsgsPerSec != 50000 || p.Ceilings[1].Producers != 64 ||
		*p.Ceilings[2].MsgsPerSec != 800 || p.Ceilings[2].Size != 16384 {
		t.Errorf("ceilings %+v, want the medians 2000, 50000 and, for 16 KiB, 800", p.Ceilings)
	}
	r := summarize([]Reopen{{RebuildVsCheckpoint: ptr(100.0), Round: 1}, {RebuildVsCheckpoint: ptr(200.0), Round: 2}}, true)
	if *r.RebuildVsCheckpoint != 150 || r.Ranges["rebuild_vs_checkpoint"] != [2]float64{100, 200} || r.Rounds != 2 {
		t.Errorf("reopen: %v, %v, %d rounds", *r.RebuildVsCheckpoint, r.Ranges, r.Rounds)
	}
}

// TestNotesSayTheirRoundInARunOfSeveral: in a run of several rounds, a
// note says the round it came from, also in a row that only one round
// measured (the next one cut short before it).
func TestNotesSayTheirRoundInARunOfSeveral(t *testing.T) {
	row := func(kind string, round int, notes ...string) Row {
		return Row{Kind: kind, Workload: kind, Round: round, Notes: notes}
	}
	rounds := [][]Row{
		{row(kindPublish, 1), row(kindDrain, 1, "cut at -limit")},
		{row(kindPublish, 2, "odd")},
	}
	sum := summarizeRows(rounds)
	if len(sum) != 2 {
		t.Fatalf("%d rows, want 2", len(sum))
	}
	if !reflect.DeepEqual(sum[0].Notes, []string{"round 2: odd"}) || !reflect.DeepEqual(sum[1].Notes, []string{"round 1: cut at -limit"}) {
		t.Errorf("notes %q and %q; want each prefixed with its round", sum[0].Notes, sum[1].Notes)
	}
}

// TestSummarizeCeilingsOfTheRoundsThatHaveThem: a round whose probe
// measured no bandwidth (cut short before it) has no ceiling; each
// ceiling is the median of the rounds that have it, and one no round has
// stays null.
func TestSummarizeCeilingsOfTheRoundsThatHaveThem(t *testing.T) {
	probe := func(c1 *float64) Probe {
		return Probe{Ceilings: []Ceiling{{Producers: 1, Size: 1024, MsgsPerSec: c1}, {Producers: 0, Size: 1024}}}
	}
	p := summarize([]Probe{probe(ptr(1000.0)), probe(nil), probe(ptr(3000.0))}, true)
	if len(p.Ceilings) != 2 || p.Ceilings[0].MsgsPerSec == nil || *p.Ceilings[0].MsgsPerSec != 2000 || p.Ceilings[1].MsgsPerSec != nil {
		t.Errorf("ceilings %+v; want 2000, the median of the two rounds that have it, and none for any number of producers", p.Ceilings)
	}
}

// TestSummarizeRowsMatchesRoundsByWorkload: a round that lacks a workload
// (a sweep point skipped there for its memory) does not shift the others:
// each row summarizes the rounds of its own workload, in the order the
// workloads ran, and says in how many rounds it was measured. Two mixed
// workloads whose names round their rates alike stay apart.
func TestSummarizeRowsMatchesRoundsByWorkload(t *testing.T) {
	row := func(round int, name string, msgs float64) Row {
		return Row{Kind: kindSweep, Workload: name, Round: round, MsgsPerSec: &msgs}
	}
	mixed := func(round int, rate, msgs float64) Row {
		return Row{Kind: kindMixed, Workload: "mixed at 2000 msgs/s", TargetPerSec: rate, Round: round, MsgsPerSec: &msgs}
	}
	rounds := [][]Row{
		{row(1, "b", 20), row(1, "d", 40), mixed(1, 2000.2, 1), mixed(1, 2000.4, 2)},
		{row(2, "a", 10), row(2, "b", 22), row(2, "c", 30), row(2, "d", 42), mixed(2, 2000.2, 3), mixed(2, 2000.4, 4)},
		{row(3, "a", 12), row(3, "b", 24), row(3, "d", 44)},
	}
	type summary struct {
		workload string
		rate     float64
		rounds   []int
		median   float64
	}
	var got []summary
	for _, r := range summarizeRows(rounds) {
		s := summary{workload: r.Workload, rate: r.TargetPerSec, median: *r.MsgsPerSec}
		for _, pr := range r.PerRound {
			if pr.Workload != r.Workload || pr.TargetPerSec != r.TargetPerSec {
				t.Errorf("row %q (%v) summarizes round %d of %q (%v)", r.Workload, r.TargetPerSec, pr.Round, pr.Workload, pr.TargetPerSec)
			}
			s.rounds = append(s.rounds, pr.Round)
		}
		if r.Rounds != len(r.PerRound) {
			t.Errorf("row %q: rounds %d, but %d per round", r.Workload, r.Rounds, len(r.PerRound))
		}
		got = append(got, s)
	}
	want := []summary{
		{"a", 0, []int{2, 3}, 11},
		{"b", 0, []int{1, 2, 3}, 22},
		{"c", 0, []int{2}, 30},
		{"d", 0, []int{1, 2, 3}, 42},
		{"mixed at 2000 msgs/s", 2000.2, []int{1, 2}, 2},
		{"mixed at 2000 msgs/s", 2000.4, []int{1, 2}, 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summaries\n%+v\nwant\n%+v", got, want)
	}
}
