package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// near reports whether a and b agree to 1e-9 of their size.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestProfile runs walbench with no command, as the README does, but
// with windows of milliseconds and two rounds, and checks the report: the
// tables are those of the JSON, every ratio is to the probe of its own
// round, the summaries are the medians of the rounds, and the run ends
// with the recommendation. A loaded machine may let a window of
// milliseconds pass with no publish done, which leaves that round without
// latencies to compare: the run is then made again with windows twice as
// long.
func TestProfile(t *testing.T) {
	var res runResult
	var rep *Report
	window := 60 * time.Millisecond
	for try := 1; ; try, window = try+1, 2*window {
		dir, jsonFile := benchDir(t), jsonPath(t)
		res = runOK(t, "-dir", dir, "-rounds", "2", "-time", window.String(), "-probe-time", "60ms", "-warmup", "5ms",
			"-producers", "1,4", "-size", "100", "-segment-bytes", "64KiB", "-messages", "300", "-json", jsonFile)
		assertDirEmpty(t, dir)
		rep = assertTablesFromJSON(t, res.stdout, jsonFile)
		stalled := stalledRound(rep)
		if stalled == "" || try == 5 {
			break
		}
		t.Logf("-time %v: %s; again with windows twice as long", window, stalled)
	}

	if rep.Schema != schemaVersion || rep.Command != "profile" || rep.Rounds != 2 || rep.Interrupted || rep.Error != "" {
		t.Fatalf("report %q %q, %d rounds, interrupted %v, error %q", rep.Schema, rep.Command, rep.Rounds, rep.Interrupted, rep.Error)
	}
	if _, err := time.Parse(time.RFC3339, rep.Machine.Date); err != nil || rep.Machine.NumCPU < 1 || rep.Machine.LoadAvg[0] < 0 {
		t.Errorf("machine: %+v", rep.Machine)
	}

	p := rep.Probe
	if p == nil || p.Rounds != 2 || len(p.PerRound) != 2 || p.FdatasyncsPerSec == nil || p.WriteMBPerSec == nil || p.FdatasyncP99Ns == nil {
		t.Fatalf("probe: %+v", p)
	}
	var ceilings []Ceiling
	for _, c := range p.Ceilings {
		ceilings = append(ceilings, Ceiling{Producers: c.Producers, Size: c.Size})
	}
	if want := []Ceiling{{1, 100, nil}, {4, 100, nil}, {0, 100, nil}}; !equalCeilings(ceilings, want) {
		t.Errorf("probe ceilings for %v, want %v", ceilings, want)
	}
	for _, pr := range p.PerRound {
		for _, c := range pr.Ceilings {
			if want := ceiling(pr, c.Producers, c.Size); c.MsgsPerSec == nil || want == nil || !near(*c.MsgsPerSec, *want) {
				t.Errorf("probe round %d: ceiling for %d producers: %v, want %v", pr.Round, c.Producers, c.MsgsPerSec, want)
			}
		}
	}

	wantRows := []struct{ kind, sync string }{{kindPublish, "all"}, {kindPublish, "all"}, {kindDrain, "all"}, {kindDrain, "publish"}}
	if len(rep.Rows) != len(wantRows) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(wantRows))
	}
	for i, r := range rep.Rows {
		if r.Kind != wantRows[i].kind || r.Sync != wantRows[i].sync || r.Rounds != 2 || len(r.PerRound) != 2 || len(r.Notes) > 0 {
			t.Errorf("row %d: %s, %s, sync %s, %d rounds, notes %q; want %s, sync %s, 2 rounds, no notes",
				i, r.Workload, r.Kind, r.Sync, r.Rounds, r.Notes, wantRows[i].kind, wantRows[i].sync)
		}
		if r.MsgsPerSec == nil || *r.MsgsPerSec <= 0 || r.Size != 100 || r.SegmentBytes != 64<<10 {
			t.Errorf("%s: msgs/s %v, size %d, segment %d", r.Workload, r.MsgsPerSec, r.Size, r.SegmentBytes)
		}
		checkFiguresFromCounts(t, r)
		switch r.Kind {
		case kindPublish:
			checkRatios(t, r, p)
		case kindDrain:
			if r.Ops != 2*300 || r.Messages != 300 || r.Method != drainConsume {
				t.Errorf("%s: %d handled over 2 rounds of %d, method %s; want all 600, consume", r.Workload, r.Ops, r.Messages, r.Method)
			}
		}
	}

	rec := rep.Recommendation
	if rec == nil || rec.Basis != "profile" || !durable(rec.Sync) || rec.Size != 100 || (rec.Producers != 1 && rec.Producers != 4) {
		t.Fatalf("recommendation: %+v", rec)
	}
	if rec.PublishMeasuredAs != "all" || rec.DrainMsgsPerSec == nil || len(rec.Scores) != 2 {
		t.Errorf("recommendation: measured as %q, drain %v, %d scores; want all, a drain rate, 2", rec.PublishMeasuredAs, rec.DrainMsgsPerSec, len(rec.Scores))
	}
	lines := recommendationLines(rec)
	if !strings.HasSuffix(res.stdout, "\n\n"+strings.Join(lines, "\n")+"\n") || !strings.HasPrefix(res.stdout, "date ") {
		t.Errorf("the output does not start with the machine and end with the recommendation")
	}
}

// checkRatios checks the ratios of a publish row against the probe: each
// round's are to the probe of the same round, and the summary's are the
// medians (with two rounds, the means) of the rounds', with their range.
func checkRatios(t *testing.T, r Row, p *Probe) {
	t.Helper()
	var vs, vsCeiling, vsP99, vsLarge []float64
	for k, pr := range r.PerRound {
		probe := p.PerRound[k]
		if pr.Round != k+1 || probe.Round != k+1 {
			t.Fatalf("%s: per round %d is round %d, probe round %d", r.Workload, k, pr.Round, probe.Round)
		}
		if pr.MsgsPerSec == nil || pr.P99Ns == nil {
			t.Fatalf("%s round %d: msgs/s %v, p99 %v", r.Workload, k+1, pr.MsgsPerSec, pr.P99Ns)
		}
		c := ceiling(probe, r.Producers, r.Size)
		for _, check := range []struct {
			name      string
			got, want *float64
		}{
			{"ceiling", pr.CeilingPerSec, c},
			{"÷ fdatasyncs/s", pr.VsFdatasync, ptr(*pr.MsgsPerSec / *probe.FdatasyncsPerSec)},
			{"÷ ceiling", pr.VsCeiling, ptr(*pr.MsgsPerSec / *c)},
			{"p99 ÷ fdatasync p99", pr.P99VsFdatasyncP99, ptr(float64(*pr.P99Ns) / float64(*probe.FdatasyncP99Ns))},
			{"p99 ÷ 64 KiB p99", pr.P99VsLargeP99, ptr(float64(*pr.P99Ns) / float64(*probe.LargeP99Ns))},
		} {
			if check.got == nil || !near(*check.got, *check.want) {
				t.Errorf("%s round %d: %s %v, want %v", r.Workload, k+1, check.name, check.got, *check.want)
			}
		}
		vs, vsCeiling, vsP99 = append(vs, *pr.VsFdatasync), append(vsCeiling, *pr.VsCeiling), append(vsP99, *pr.P99VsFdatasyncP99)
		vsLarge = append(vsLarge, *pr.P99VsLargeP99)
	}
	for _, m := range []struct {
		name   string
		got    *float64
		rounds []float64
	}{{"vs_fdatasync", r.VsFdatasync, vs}, {"vs_ceiling", r.VsCeiling, vsCeiling}, {"p99_vs_fdatasync_p99", r.P99VsFdatasyncP99, vsP99}, {"p99_vs_large_p99", r.P99VsLargeP99, vsLarge}} {
		want := (m.rounds[0] + m.rounds[1]) / 2
		rg, ok := r.Ranges[m.name]
		if m.got == nil || !near(*m.got, want) || !ok || rg[0] != math.Min(m.rounds[0], m.rounds[1]) || rg[1] != math.Max(m.rounds[0], m.rounds[1]) {
			t.Errorf("%s: %s %v, range %v; the rounds' are %v", r.Workload, m.name, m.got, rg, m.rounds)
		}
	}
}

// stalledRound names a round of a publish row of rep that recorded no
// latency, or is "".
func stalledRound(rep *Report) string {
	for _, r := range rep.Rows {
		for _, pr := range r.PerRound {
			if r.Kind == kindPublish && pr.LatencySamples == 0 {
				return fmt.Sprintf("%s round %d recorded no latency", r.Workload, pr.Round)
			}
		}
	}
	return ""
}

func equalCeilings(a, b []Ceiling) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Producers != b[i].Producers || a[i].Size != b[i].Size {
			return false
		}
	}
	return true
}

// TestCommands runs each command with windows of milliseconds and checks
// what its report holds: the rows of its workloads, each with the figures
// its kind has, and no note on the store's counters.
func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, rep *Report)
		// short, if set, says why a run measured too little for check
		// (a loaded machine did less in its windows than they are sized
		// for): the command then runs again with -time doubled, up to
		// five times in all.
		short func(rep *Report) string
	}{
		{
			name: "probe",
			args: []string{"probe", "-time", "50ms", "-producers", "1,2", "-size", "10,20"},
			check: func(t *testing.T, rep *Report) {
				if rep.Probe == nil || len(rep.Rows) != 0 || len(rep.Probe.Ceilings) != 6 {
					t.Fatalf("probe %+v, %d rows; want the probe alone, with 2 sizes × 3 ceilings", rep.Probe, len(rep.Rows))
				}
				if p := rep.Probe; p.AppendFdatasyncsPerSec == nil || p.AppendP99Ns == nil || p.FdatasyncP999Ns == nil || p.FdatasyncMaxNs == nil || p.LargeFdatasyncsPerSec == nil || p.LargeP99Ns == nil {
					t.Errorf("probe: %+v", p)
				}
			},
		},
		{
			name: "publish",
			args: []string{"publish", "-producers", "2", "-size", "50,100", "-sync", "all,none", "-time", "50ms", "-probe-time", "30ms", "-warmup", "0", "-segment-bytes", "64KiB"},
			check: func(t *testing.T, rep *Report) {
				if len(rep.Rows) != 4 || rep.Recommendation != nil {
					t.Fatalf("%d rows, recommendation %v; want 4, none", len(rep.Rows), rep.Recommendation)
				}
				for i, r := range rep.Rows {
					wantSync, wantSize := []string{"all", "all", "none", "none"}[i], []int{50, 100, 50, 100}[i]
					// Under sync=none a 50ms window may hold no commit at
					// all (the background one runs every 100ms).
					if r.Sync != wantSync || r.Size != wantSize || r.Producers != 2 || r.P99Ns == nil || (r.RecordsPerCommit == nil && r.Sync == "all") {
						t.Errorf("row %d: %s: sync %s, size %d, p99 %v, records/commit %v", i, r.Workload, r.Sync, r.Size, r.P99Ns, r.RecordsPerCommit)
					}
					// Under sync=none a Publish does not wait for the disk:
					// the ratios to the probe mean nothing.
					if hasRatios := r.VsFdatasync != nil && r.VsCeiling != nil && r.P99VsFdatasyncP99 != nil; hasRatios != (r.Sync == "all") {
						t.Errorf("%s: ratios %v %v %v", r.Workload, r.VsFdatasync, r.VsCeiling, r.P99VsFdatasyncP99)
					}
				}
			},
		},
		{
			name: "drain receive-ack",
			args: []string{"drain", "-method", "receive-ack", "-consumers", "1,3", "-batch", "8", "-messages", "200", "-sync", "all", "-size", "50", "-segment-bytes", "64KiB"},
			check: func(t *testing.T, rep *Report) {
				if rep.Probe != nil || len(rep.Rows) != 2 {
					t.Fatalf("probe %v, %d rows; want no probe, 2 rows", rep.Probe, len(rep.Rows))
				}
				for i, r := range rep.Rows {
					if r.Ops != 200 || r.Consumers != []int{1, 3}[i] || r.Batch != 8 || r.Method != drainReceiveAck || r.RecordsPerCommit == nil {
						t.Errorf("%s: %d handled, %d consumers, batch %d, %s, records/commit %v", r.Workload, r.Ops, r.Consumers, r.Batch, r.Method, r.RecordsPerCommit)
					}
				}
			},
		},
		{
			name: "drain consume with prefetch",
			args: []string{"drain", "-consumers", "2", "-batch", "16", "-prefetch", "30", "-messages", "300", "-sync", "all", "-size", "50", "-segment-bytes", "64KiB"},
			check: func(t *testing.T, rep *Report) {
				if len(rep.Rows) != 1 {
					t.Fatalf("%d rows, want 1", len(rep.Rows))
				}
				r := rep.Rows[0]
				if r.Ops != 300 || r.Consumers != 2 || r.Batch != 16 || r.Prefetch != 30 || r.Method != drainConsume || !strings.Contains(r.Workload, "prefetch 30") {
					t.Errorf("%s: %d handled, %d consumers, batch %d, prefetch %d, %s", r.Workload, r.Ops, r.Consumers, r.Batch, r.Prefetch, r.Method)
				}
				// Two handlers with nothing held would lease and ack at
				// most 2 + 2 messages a commit.
				if r.RecordsPerCommit == nil || *r.RecordsPerCommit <= 4 {
					t.Errorf("%s: records per commit %v, want more than two handlers' leases and acks", r.Workload, r.RecordsPerCommit)
				}
			},
		},
		{
			name: "mixed",
			args: []string{"mixed", "-producers", "4", "-rate", "400,800", "-consumers", "4", "-batch", "4", "-time", "300ms", "-sample", "50ms", "-size", "64", "-segment-bytes", "64KiB", "-warmup", "50ms"},
			check: func(t *testing.T, rep *Report) {
				if len(rep.Rows) != 2 {
					t.Fatalf("%d rows, want one per rate", len(rep.Rows))
				}
				if rep.Rows[1].TargetPerSec != 800 || rep.Rows[1].Workload == rep.Rows[0].Workload {
					t.Errorf("second row: target %v, workload %q; want 800 and a name of its own", rep.Rows[1].TargetPerSec, rep.Rows[1].Workload)
				}
				r := rep.Rows[0]
				if r.Kind != kindMixed || r.TargetPerSec != 400 || r.Ops == 0 || r.E2EP50Ns == nil || r.E2EMaxNs == nil || r.ServiceP99Ns == nil || r.P99Ns == nil {
					t.Fatalf("mixed row: %+v", r)
				}
				// Measured from the scheduled instant, a publish takes at
				// least as long as the call alone.
				if *r.P99Ns < *r.ServiceP99Ns {
					t.Errorf("publish p99 %d ns from the scheduled instant, below the calls' own %d ns", *r.P99Ns, *r.ServiceP99Ns)
				}
				if len(r.Backlog) < 2 || r.BacklogIntervalNs != int64(50*time.Millisecond) || r.BacklogMax == nil {
					t.Errorf("backlog %v every %d ns, max %v", r.Backlog, r.BacklogIntervalNs, r.BacklogMax)
				}
				if !strings.Contains(backlogLine(r), "every 50ms") {
					t.Errorf("backlog line %q", backlogLine(r))
				}
			},
		},
		{
			name: "reopen",
			args: []string{"reopen", "-messages", "300", "-size", "100", "-segment-bytes", "64KiB", "-rounds", "2"},
			check: func(t *testing.T, rep *Report) {
				r := rep.Reopen
				if r == nil || r.Rounds != 2 || len(r.PerRound) != 2 || r.Segments < 1 || r.IndexBytes <= 0 || r.CheckpointOpenNs == nil || r.RebuildOpenNs == nil || r.HeapInUseBytes == nil {
					t.Fatalf("reopen: %+v", r)
				}
				for _, pr := range r.PerRound {
					if want := float64(*pr.RebuildOpenNs) / float64(*pr.CheckpointOpenNs); pr.RebuildVsCheckpoint == nil || !near(*pr.RebuildVsCheckpoint, want) {
						t.Errorf("reopen round %d: rebuild ÷ checkpoint %v, want %v (%d ns ÷ %d ns)", pr.Round, pr.RebuildVsCheckpoint, want, *pr.RebuildOpenNs, *pr.CheckpointOpenNs)
					}
				}
				ratios := []float64{*r.PerRound[0].RebuildVsCheckpoint, *r.PerRound[1].RebuildVsCheckpoint}
				if !near(*r.RebuildVsCheckpoint, (ratios[0]+ratios[1])/2) || r.Ranges["rebuild_vs_checkpoint"] != [2]float64{min(ratios[0], ratios[1]), max(ratios[0], ratios[1])} {
					t.Errorf("reopen: rebuild ÷ checkpoint %v, ranges %v; the rounds' are %v", *r.RebuildVsCheckpoint, r.Ranges, ratios)
				}
				if want := float64(*r.HeapInUseBytes) / 300; !near(*r.HeapBytesPerMessage, want) {
					t.Errorf("heap per message %v, want %v", *r.HeapBytesPerMessage, want)
				}
			},
		},
		{
			name: "sweep",
			args: []string{"sweep", "-producers", "1,2", "-size", "100", "-segment-bytes", "64KiB,128KiB", "-sync", "all,none",
				"-time", "50ms", "-warmup", "0", "-probe-time", "30ms", "-consumers", "4", "-batch", "8"},
			check: func(t *testing.T, rep *Report) {
				if len(rep.Rows) != 8 {
					t.Fatalf("%d rows, want the 8 points of the grid", len(rep.Rows))
				}
				// The grid in the order -sync × -segment-bytes × -size ×
				// -producers: sync modes outermost, producers innermost.
				for i, r := range rep.Rows {
					wantSync, wantSeg, wantProducers := []string{"all", "none"}[i/4], []int64{64 << 10, 128 << 10}[i/2%2], []int{1, 2}[i%2]
					if r.Sync != wantSync || r.SegmentBytes != wantSeg || r.Producers != wantProducers || r.Size != 100 {
						t.Errorf("row %d: %s; want sync %s, %d-byte segments, %d producers", i, r.Workload, wantSync, wantSeg, wantProducers)
					}
				}
				for _, r := range rep.Rows {
					if r.Kind != kindSweep || r.DrainMsgsPerSec == nil || r.ThroughMsgsPerSec == nil {
						t.Errorf("%s: kind %s, drain %v, through %v", r.Workload, r.Kind, r.DrainMsgsPerSec, r.ThroughMsgsPerSec)
						continue
					}
					if want := through(r.MsgsPerSec, r.DrainMsgsPerSec); !near(*r.ThroughMsgsPerSec, *want) {
						t.Errorf("%s: through %v, want %v", r.Workload, *r.ThroughMsgsPerSec, *want)
					}
				}
				rec := rep.Recommendation
				if rec == nil || rec.Basis != "sweep" || rec.Sync != "all" || rec.NotDurable == nil || len(rec.Scores) != 2 {
					t.Fatalf("recommendation %+v; want sync all, the only durable mode, and sync none's rate beside", rec)
				}
			},
		},
		{
			name: "wal",
			// Records of 1 KiB in segments of 16 MiB: on tmpfs, where
			// fdatasync is free, every window rotates a few times, and
			// each rotation comes long after the trimmer (every 2 ms)
			// retired the segment it reuses.
			args: []string{"wal", "-producers", "1,2", "-size", "1024", "-time", "1s", "-probe-time", "30ms", "-segment-bytes", "16MiB", "-warmup", "0"},
			check: func(t *testing.T, rep *Report) {
				if len(rep.Rows) != 4 {
					t.Fatalf("%d rows, want 4: 1 and 2 appenders, each with new and reused segments", len(rep.Rows))
				}
				for i, r := range rep.Rows {
					if r.Kind != kindWAL || r.Sync != "always" || r.VsCeiling == nil || r.RecordsPerCommit == nil {
						t.Errorf("%s: kind %s, sync %s, ÷ ceiling %v", r.Workload, r.Kind, r.Sync, r.VsCeiling)
					}
					want := []string{"new", "reused"}[i%2]
					if r.Segments != want || r.Rotations == 0 {
						t.Errorf("%s: segments %q, %d rotations; want %q and some", r.Workload, r.Segments, r.Rotations, want)
					}
					// A growing log makes every segment; one whose reader
					// keeps up reuses them all.
					if wantNew := map[string]int64{"new": r.Rotations, "reused": 0}[want]; r.NewSegments != wantNew {
						t.Errorf("%s: %d of %d rotations to a new segment, want %d", r.Workload, r.NewSegments, r.Rotations, wantNew)
					}
					if r.RushedSegments > r.NewSegments {
						t.Errorf("%s: %d rushed of %d new segments", r.Workload, r.RushedSegments, r.NewSegments)
					}
				}
			},
			short: func(rep *Report) string {
				for _, r := range rep.Rows {
					if r.Rotations == 0 {
						return fmt.Sprintf("%s filled no segment (%d appends)", r.Workload, r.Ops)
					}
				}
				return ""
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "publish" && tc.name != "mixed" {
				t.Skip("-short runs publish and mixed only: the other commands take seconds each, and the full run covers them")
			}
			args := slices.Clone(tc.args)
			var res runResult
			var rep *Report
			for try := 1; ; try++ {
				dir, jsonFile := benchDir(t), jsonPath(t)
				res = runOK(t, append(args, "-dir", dir, "-json", jsonFile)...)
				assertDirEmpty(t, dir)
				rep = assertTablesFromJSON(t, res.stdout, jsonFile)
				why := ""
				if tc.short != nil {
					why = tc.short(rep)
				}
				if why == "" || try == 5 {
					break
				}
				i := slices.Index(args, "-time") + 1
				d, err := time.ParseDuration(args[i])
				if err != nil {
					t.Fatalf("-time %q: %v", args[i], err)
				}
				args[i] = (2 * d).String()
				t.Logf("%s; again with -time %s", why, args[i])
			}
			if rep.Command != tc.args[0] {
				t.Errorf("command %q, want %q", rep.Command, tc.args[0])
			}
			for _, r := range rep.Rows {
				// A sweep's drain is bounded by -time, as its window is:
				// on tmpfs, where publish and drain run at about one
				// speed, a 50 ms drain may not take everything a 50 ms
				// window published, and says so. Any other note is a
				// failure.
				notes := slices.DeleteFunc(slices.Clone(r.Notes), func(n string) bool {
					return r.Kind == kindSweep && strings.HasPrefix(n, "the drain after the window was cut at -time")
				})
				if len(notes) > 0 {
					t.Errorf("%s: notes %q", r.Workload, notes)
				}
				checkFiguresFromCounts(t, r)
			}
			if rep.Reopen != nil && len(rep.Reopen.Notes) > 0 {
				t.Errorf("%s: notes %q", rep.Reopen.Workload, rep.Reopen.Notes)
			}
			tc.check(t, rep)
		})
	}
}

// TestDrainLimited: a drain that -limit ends with messages left is not
// shown as finished: its row is marked, in the table and in the JSON,
// and a note says how far it got.
func TestDrainLimited(t *testing.T) {
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runOK(t, "drain", "-dir", dir, "-json", jsonFile, "-messages", "20000", "-limit", "10ms", "-consumers", "1", "-batch", "1",
		"-method", "receive-ack", "-sync", "all", "-size", "10", "-segment-bytes", "64KiB")
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rep.Rows))
	}
	r := rep.Rows[0]
	if !r.Limited || r.Interrupted || r.Ops >= 20000 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "-limit 10ms ended the drain with") {
		t.Errorf("row: limited %v, interrupted %v, %d of 20000 handled, notes %q; want it limited, with a note", r.Limited, r.Interrupted, r.Ops, r.Notes)
	}
	checkFiguresFromCounts(t, r)
	if !strings.Contains(res.stdout, r.Workload+" (cut at -limit)") {
		t.Errorf("the table does not mark the row cut at -limit")
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil || !strings.Contains(string(b), `"limited": true`) {
		t.Errorf("the JSON does not say the drain was limited (%v)", err)
	}
}

// checkFiguresFromCounts checks the rates of each round of r against the
// counts of the same round: msgs/s and MB/s (10^6 bytes) are of the
// messages published (drain: handled) over the measured seconds, commits/s
// of the commits, a log's records/commit of its appends; a mixed row's
// consumed/s counts only messages its window published, and its backlog
// max is its largest sample; a sweep's drain rate is of whole messages
// over the drain's own seconds.
func checkFiguresFromCounts(t *testing.T, r Row) {
	t.Helper()
	for _, pr := range r.PerRound {
		name := fmt.Sprintf("%s round %d", r.Workload, pr.Round)
		if pr.Seconds <= 0 {
			t.Errorf("%s: %v seconds", name, pr.Seconds)
			continue
		}
		for _, c := range []struct {
			what string
			got  *float64
			want float64
		}{
			{"msgs/s", pr.MsgsPerSec, float64(pr.Ops) / pr.Seconds},
			{"MB/s", pr.MBPerSec, float64(pr.Ops) * float64(pr.Size) / pr.Seconds / 1e6},
			{"commits/s", pr.CommitsPerSec, float64(pr.Commits) / pr.Seconds},
		} {
			if c.got == nil || !near(*c.got, c.want) {
				t.Errorf("%s: %s %v, want %v (%d messages, %d commits, %v s, %d B)", name, c.what, deref(c.got), c.want, pr.Ops, pr.Commits, pr.Seconds, pr.Size)
			}
		}
		if r.Kind == kindWAL && pr.Commits > 0 && (pr.RecordsPerCommit == nil || !near(*pr.RecordsPerCommit, float64(pr.Ops)/float64(pr.Commits))) {
			t.Errorf("%s: records/commit %v, want %d ÷ %d", name, deref(pr.RecordsPerCommit), pr.Ops, pr.Commits)
		}
		if r.Kind == kindMixed {
			if pr.DrainMsgsPerSec == nil || *pr.DrainMsgsPerSec > *pr.MsgsPerSec {
				t.Errorf("%s: consumed %v/s, published %v/s: consumed counts messages the window did not publish", name, deref(pr.DrainMsgsPerSec), *pr.MsgsPerSec)
			}
			if len(pr.Backlog) > 0 && (pr.BacklogMax == nil || *pr.BacklogMax != float64(slices.Max(pr.Backlog))) {
				t.Errorf("%s: backlog max %v, samples %v", name, deref(pr.BacklogMax), pr.Backlog)
			}
		}
		if r.Kind == kindSweep && pr.DrainMsgsPerSec != nil {
			handled := *pr.DrainMsgsPerSec * pr.DrainSeconds
			if pr.DrainSeconds <= 0 || math.Abs(handled-math.Round(handled)) > 1e-6 {
				t.Errorf("%s: drain %v msgs/s over %v s is not a whole number of messages (%v)", name, *pr.DrainMsgsPerSec, pr.DrainSeconds, handled)
			}
		}
	}
}

// TestCPUProfile: -cpuprofile FILE writes a CPU profile of the run there,
// in the gzip-compressed form go tool pprof reads.
func TestCPUProfile(t *testing.T) {
	dir, prof := benchDir(t), filepath.Join(t.TempDir(), "cpu.pprof")
	runOK(t, "probe", "-dir", dir, "-time", "10ms", "-cpuprofile", prof)
	assertDirEmpty(t, dir)
	b, err := os.ReadFile(prof)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("-cpuprofile: %d bytes, %v; want a gzip-compressed profile", len(b), err)
	}
}

// TestCPUProfileEarlierFileKept: a run that fails leaves the profile an
// earlier run wrote as it was, and nothing beside it; one that succeeds
// replaces it.
func TestCPUProfileEarlierFileKept(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	if err := os.WriteFile(prof, []byte("EARLIER"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runWith(t, context.Background(), nil, "probe", "-dir", filepath.Join(t.TempDir(), "missing"), "-time", "10ms", "-cpuprofile", prof)
	if res.code != exitError {
		t.Fatalf("a missing -dir: exit %d, want %d", res.code, exitError)
	}
	if b, err := os.ReadFile(prof); err != nil || string(b) != "EARLIER" {
		t.Errorf("after a failed run the profile holds %q, %v; want it as it was", b, err)
	}
	if !strings.Contains(res.stderr, "not written, the run failed; the file that was there is left as it was") {
		t.Errorf("stderr does not say the profile was left as it was:\n%s", res.stderr)
	}
	assertDirEmptyBut(t, filepath.Dir(prof), filepath.Base(prof))

	runOK(t, "probe", "-dir", benchDir(t), "-time", "10ms", "-cpuprofile", prof)
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("after a run that succeeded: %d bytes, %v; want a gzip-compressed profile", len(b), err)
	}
	assertDirEmptyBut(t, filepath.Dir(prof), filepath.Base(prof))
}

// printWatch is a writer that calls check before its first write.
type printWatch struct {
	check   func()
	checked bool
	bytes.Buffer
}

func (w *printWatch) Write(p []byte) (int, error) {
	if !w.checked {
		w.checked = true
		w.check()
	}
	return w.Buffer.Write(p)
}

// TestDirRemovedBeforeTables: the tables say the temporary directory was
// removed; by the time they are printed, it is.
func TestDirRemovedBeforeTables(t *testing.T) {
	dir := benchDir(t)
	out := &printWatch{check: func() {
		if names, _ := os.ReadDir(dir); len(names) != 0 {
			t.Errorf("the tables are printed while %s still holds %v", dir, names)
		}
	}}
	var stderr bytes.Buffer
	code := runContext(context.Background(), []string{"probe", "-time", "10ms", "-dir", dir}, out, &stderr, &env{progress: newProgress(&stderr)}, nil)
	if code != exitOK || !out.checked || !strings.Contains(out.String(), " (removed)\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), stderr.String())
	}
}

// TestDirLeftSaid: a report whose directory could not be removed says so
// where the others say it was, in the tables and in the markdown.
func TestDirLeftSaid(t *testing.T) {
	rep := edgeReport()
	rep.Machine.DirLeft = "unlinkat /x/walbench-1/store: directory not empty"
	var b strings.Builder
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := "/x/walbench-1 (not removed: unlinkat /x/walbench-1/store: directory not empty)"
	if !strings.Contains(b.String(), "directory              "+want+"\n") || strings.Contains(b.String(), "(removed)") {
		t.Errorf("the tables do not say the directory was left:\n%s", b.String())
	}
	if md := markdown(rep); !strings.Contains(md, "| directory | "+want+" |") {
		t.Errorf("the markdown does not say the directory was left:\n%s", md)
	}
}
