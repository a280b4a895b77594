package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLatencyShowsThreeSignificantDigits: a latency is shown with three
// significant digits in the unit that fits, at each unit's bounds too.
func TestLatencyShowsThreeSignificantDigits(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{999, "999ns"}, {time.Microsecond, "1.00µs"}, {9990, "9.99µs"},
		{10 * time.Microsecond, "10.0µs"}, {99_900, "99.9µs"}, {100 * time.Microsecond, "100µs"}, {999_000, "999µs"},
		{time.Millisecond, "1.00ms"}, {10 * time.Millisecond, "10.0ms"}, {100 * time.Millisecond, "100ms"},
		{999 * time.Millisecond, "999ms"}, {time.Second, "1.00s"}, {1_234 * time.Millisecond, "1.23s"},
		// Rounded up across a bound: three digits still, in the next unit.
		{9_996, "10.0µs"}, {99_960, "100µs"}, {999_600, "1.00ms"}, {999_600_000, "1.00s"},
		{12_345 * time.Millisecond, "12.3s"}, {123_456 * time.Millisecond, "123s"}, {1_234_567 * time.Millisecond, "1235s"},
	} {
		if got := latency(ptr(int64(tc.d))); got != tc.want {
			t.Errorf("latency(%d ns) = %q, want %q", int64(tc.d), got, tc.want)
		}
	}
	if got := latency(nil); got != "-" {
		t.Errorf("latency(nil) = %q, want -", got)
	}
}

// TestOneRoundTablesHaveNoRanges: the tables of a run of one round have
// no min–max columns, every row as many cells as its header, and no note
// of medians.
func TestOneRoundTablesHaveNoRanges(t *testing.T) {
	pub := Row{Kind: kindPublish, Workload: "publish, 4 producers, 100 B, sync=all", Sync: "all", Producers: 4, Size: 100, Rounds: 1,
		MsgsPerSec: ptr(1000.0), VsFdatasync: ptr(0.5), VsCeiling: ptr(0.25), VsWAL: ptr(0.8)}
	sweep := Row{Kind: kindSweep, Workload: "sweep, 4 producers, 100 B, 64 MiB segments, sync=all", Sync: "all", Producers: 4, Size: 100, Rounds: 1,
		MsgsPerSec: ptr(1000.0), VsCeiling: ptr(0.25)}
	rep := &Report{Command: "full", Rounds: 1, Probe: &Probe{Rounds: 1}, Rows: []Row{pub, sweep}, Reopen: &Reopen{Rounds: 1, RebuildVsCheckpoint: ptr(3.0)}}
	for _, tb := range tablesOf(rep) {
		if slices.Contains(tb.header, "min–max") {
			t.Errorf("%s: a min–max column with one round: %q", tb.title, tb.header)
		}
		for _, row := range tb.rows {
			if len(row) != len(tb.header) {
				t.Errorf("%s: %d cells under %d headers: %q", tb.title, len(row), len(tb.header), row)
			}
		}
		for _, n := range tb.notes {
			if strings.Contains(n, "medians") {
				t.Errorf("%s: note %q with one round", tb.title, n)
			}
		}
	}
}

// TestRowTableNoteCountsRoundsMeasured: of a run of three rounds cut
// short, a table whose rows two rounds measured says "medians of 2
// rounds", not of the 3 asked for.
func TestRowTableNoteCountsRoundsMeasured(t *testing.T) {
	row := func(name string, rounds int) Row {
		return Row{Kind: kindPublish, Workload: name, Sync: "all", Producers: 1, Size: 100, Rounds: rounds,
			MsgsPerSec: ptr(1000.0), VsFdatasync: ptr(0.5)}
	}
	tb := rowTable("Publish", []Row{row("a", 2), row("b", 1)}, closedLoopColumns(true), 3, true)
	notes := strings.Join(tb.notes, "\n")
	if !strings.Contains(notes, "medians of 2 rounds;") || strings.Contains(notes, "medians of 3") {
		t.Errorf("rows measured in at most 2 of 3 rounds; want the note to say medians of 2 rounds:\n%s", notes)
	}
}

// TestARateAboveItsCeilingIsCalledOut: the ceiling is a bound (perfect
// group commit on the probe's disk), so a workload above it met a faster
// disk than the probe did, and the ratios to the probe overstate it: the
// table says so under it, naming the workload, and says nothing when all
// are below.
func TestARateAboveItsCeilingIsCalledOut(t *testing.T) {
	row := func(name string, vs float64) Row {
		return Row{Kind: kindPublish, Workload: name, Sync: "all", Producers: 1, Size: 100, Rounds: 1,
			MsgsPerSec: ptr(1000.0), VsFdatasync: ptr(vs), VsCeiling: ptr(vs)}
	}
	note := func(rows []Row) string {
		tb := rowTable("Publish", rows, closedLoopColumns(true), 1, false)
		return strings.Join(tb.notes, "\n")
	}
	if n := note([]Row{row("a", 0.9), row("b", 1.0)}); strings.Contains(n, "ceiling above 1") {
		t.Errorf("a note with every rate within its ceiling:\n%s", n)
	}
	if n := note([]Row{row("a", 0.9), row("publish, 1 producer", 5.03)}); !strings.Contains(n, "÷ ceiling above 1 (publish, 1 producer)") {
		t.Errorf("no note for a rate 5 times its ceiling:\n%s", n)
	}
}

// TestCeilingNoteAdvisesRoundsOnlyToOneRound: the note under a rate above
// its ceiling suggests -rounds 3 for medians to a run of one round; a run
// of several has its medians already, and is told only to run again.
func TestCeilingNoteAdvisesRoundsOnlyToOneRound(t *testing.T) {
	row := Row{Kind: kindPublish, Workload: "publish, 1 producer", Sync: "all", Producers: 1, Size: 100,
		MsgsPerSec: ptr(1000.0), VsFdatasync: ptr(1.05), VsCeiling: ptr(1.05)}
	for _, rounds := range []int{1, 3} {
		row.Rounds = rounds
		tb := rowTable("Publish", []Row{row}, closedLoopColumns(true), rounds, rounds > 1)
		notes := strings.Join(tb.notes, "\n")
		if !strings.Contains(notes, "÷ ceiling above 1 (publish, 1 producer)") || !strings.Contains(notes, "run again") {
			t.Errorf("%d rounds: no note that the rate is above its ceiling, or no advice to run again:\n%s", rounds, notes)
		}
		if advised := strings.Contains(notes, "-rounds 3"); advised != (rounds == 1) {
			t.Errorf("%d rounds: the note advises -rounds 3: %v; want it only of a run of one round:\n%s", rounds, advised, notes)
		}
	}
}

// TestARatioAndItsRangeShowTheSameDecimals: the min–max beside a ratio
// gives the rounds' values of that ratio, so it shows them with as many
// decimals as the ratio itself: the reopen table's rebuild ÷ checkpoint,
// a ratio in the tens or hundreds shown with one decimal, had a range of
// two ("22.8 | 21.38–28.95"), a precision its median does not claim.
func TestARatioAndItsRangeShowTheSameDecimals(t *testing.T) {
	ranges := map[string][2]float64{"vs_fdatasync": {0.41, 0.63}, "vs_ceiling": {0.2, 0.31}, "rebuild_vs_checkpoint": {21.38, 28.95}}
	pub := Row{Kind: kindPublish, Workload: "publish, 4 producers, 100 B, sync=all", Sync: "all", Producers: 4, Size: 100, Rounds: 3,
		MsgsPerSec: ptr(1000.0), VsFdatasync: ptr(0.5), VsCeiling: ptr(0.25), Ranges: ranges}
	rep := &Report{Command: "full", Rounds: 3, Rows: []Row{pub},
		Reopen: &Reopen{Workload: "reopen, 100000 pending, 1024 B", Rounds: 3, RebuildVsCheckpoint: ptr(22.8), Ranges: ranges}}
	decimals := func(cell string) int {
		if _, frac, ok := strings.Cut(cell, "."); ok {
			return len(frac)
		}
		return 0
	}
	checked := 0
	for _, tb := range tablesOf(rep) {
		for i, h := range tb.header {
			if h != "min–max" {
				continue
			}
			for _, row := range tb.rows {
				ratio, spread := row[i-1], row[i]
				if ratio == "-" || spread == "-" {
					continue
				}
				lo, hi, _ := strings.Cut(spread, "–")
				if decimals(lo) != decimals(ratio) || decimals(hi) != decimals(ratio) {
					t.Errorf("%s: %s %q, min–max %q: want as many decimals in both", tb.title, tb.header[i-1], ratio, spread)
				}
				checked++
			}
		}
	}
	if checked < 3 {
		t.Fatalf("checked %d ratios with a min–max; want those of the publish row and the reopen", checked)
	}
}
