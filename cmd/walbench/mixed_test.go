package main

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestMixedLatencyCountsFromTheSchedule: mixed measures a publish's
// latency from the instant the call was scheduled, not from the instant it
// started, so a stall also counts against the calls it kept from starting
// (coordinated omission). Every fdatasync is held until 300 ms after the
// window of 400 ms opens: the one producer falls 300 calls behind its
// schedule of one per millisecond and makes them late, each quick on its
// own. From the schedule, the median call waited about 100 ms (more if the
// machine is slow to catch up); from their start, all calls but the first
// took a commit's time, microseconds here.
func TestMixedLatencyCountsFromTheSchedule(t *testing.T) {
	const stall = 300 * time.Millisecond
	fs := vfs.NewFaultFS(vfs.Default)
	var opened atomic.Int64 // UnixNano of the window's opening; 0 before
	fs.Observe(func(ev vfs.Event) {
		if ev.Op != vfs.OpSync {
			return
		}
		if at := opened.Load(); at != 0 {
			time.Sleep(time.Until(time.Unix(0, at).Add(stall)))
		}
	})
	e := &env{fs: fs, hangTimeout: time.Minute, onWindow: func(string) { opened.CompareAndSwap(0, time.Now().UnixNano()) }}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, context.Background(), e, "mixed", "-dir", dir, "-json", jsonFile, "-producers", "1", "-rate", "1000",
		"-consumers", "1", "-batch", "16", "-time", "400ms", "-warmup", "0", "-sample", "100ms", "-size", "64", "-segment-bytes", "64KiB")
	if res.code != exitOK {
		t.Fatalf("exit %d, want %d", res.code, exitOK)
	}
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 || rep.Rows[0].P50Ns == nil || rep.Rows[0].Ops == 0 {
		t.Fatalf("rows %+v; want one mixed row with its latencies", rep.Rows)
	}
	if p50 := time.Duration(*rep.Rows[0].P50Ns); p50 < 20*time.Millisecond {
		t.Errorf("publish p50 %v over %d calls, behind a %v stall of every fdatasync; want it counted from each call's scheduled instant (above 20ms)",
			p50, rep.Rows[0].Ops, stall)
	}
}

// TestMixedRowFigures feeds a mixed run's figures to its row: each goes
// to its field. The publish latencies are those from the scheduled
// instants, "call p99" those of the calls alone; the rates are per second
// of the window, published and consumed apart (the window's messages
// handled while it was open: those handled after it, while the consumers
// catch up, are not in the window's time); records per commit are the
// window's records of the calls (the store's own left out by the caller)
// per commit; the backlog's maximum is its largest sample.
func TestMixedRowFigures(t *testing.T) {
	l := mixedLoad{producers: 2, rate: 1000, consumers: 1, batch: 1, size: 100, sync: broker.SyncAll, duration: 2 * time.Second, sample: 250 * time.Millisecond}
	st, err := openStore(l, time.Minute, benchDir(t), "mixed-", storeOptions{sync: l.sync, size: l.size})
	t.Cleanup(func() {
		var err error
		if st.release(&err); err != nil {
			t.Errorf("release the store: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// From the scheduled instants: 1..1000 µs over the two producers;
	// the calls alone: 10..10,000 ns; end to end: 1..1000 ms.
	m := &mixedRun{l: l, q: st.q, e2e: newLatencies(),
		corrected: []*hdr.Histogram{newLatencies(), newLatencies()}, service: []*hdr.Histogram{newLatencies(), newLatencies()},
		backlog: []int{5, 40, 7}}
	for v := 1; v <= 1000; v++ {
		recordLatency(m.corrected[v%2], time.Duration(v)*time.Microsecond)
		recordLatency(m.service[v%2], time.Duration(10*v))
		recordLatency(m.e2e, time.Duration(v)*time.Millisecond)
	}
	m.published.Store(300)
	m.consumed.Store(250) // by the end of the wait after the window
	m.inWindow.Store(230) // while it was open
	r := m.row(window{elapsed: 2 * time.Second, opened: true}, 100, 600, nil)

	for _, f := range []struct {
		name string
		got  *int64
		want time.Duration
	}{
		{"p50", r.P50Ns, 500 * time.Microsecond}, {"p99", r.P99Ns, 990 * time.Microsecond},
		{"p99.9", r.P999Ns, 999 * time.Microsecond}, {"max", r.MaxNs, time.Millisecond},
		{"call p99", r.ServiceP99Ns, 9900},
		{"end-to-end p50", r.E2EP50Ns, 500 * time.Millisecond}, {"end-to-end p99", r.E2EP99Ns, 990 * time.Millisecond},
		{"end-to-end p99.9", r.E2EP999Ns, 999 * time.Millisecond}, {"end-to-end max", r.E2EMaxNs, time.Second},
	} {
		// Three significant digits.
		if f.got == nil || *f.got < int64(f.want)-int64(f.want)/1000 || *f.got > int64(f.want)+int64(f.want)/1000 {
			t.Errorf("%s %v, want %v", f.name, f.got, f.want)
		}
	}
	for _, f := range []struct {
		name string
		got  *float64
		want float64
	}{
		{"published/s", r.MsgsPerSec, 150}, {"consumed/s", r.DrainMsgsPerSec, 115}, {"MB/s", r.MBPerSec, 0.015},
		{"commits/s", r.CommitsPerSec, 50}, {"records/commit", r.RecordsPerCommit, 6}, {"backlog max", r.BacklogMax, 40},
	} {
		if f.got == nil || !near(*f.got, f.want) {
			t.Errorf("%s %v, want %v", f.name, deref(f.got), f.want)
		}
	}
	if r.Ops != 300 || r.LatencySamples != 300 || r.Commits != 100 || r.Seconds != 2 {
		t.Errorf("ops %d, latency samples %d, commits %d, seconds %v; want 300, 300, 100, 2", r.Ops, r.LatencySamples, r.Commits, r.Seconds)
	}
}

// TestMixedProducersShareTheRate: -rate is the rate of all producers
// together, each publishing at its share. A producer makes at most one
// call per instant of its schedule, and one that falls behind makes up
// only the instants it missed: the window can hold at most the instants
// scheduled in it, and those before it the producers were late for,
// fewer than the window's own unless the machine stalled longer than the
// window. Here 4 producers share 200 msgs/s for 500 ms: about 100 calls;
// each publishing at 200 msgs/s would make about 400.
func TestMixedProducersShareTheRate(t *testing.T) {
	const producers, rate = 4, 200.0
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, context.Background(), nil, "mixed", "-dir", dir, "-json", jsonFile, "-producers", "4", "-rate", "200",
		"-consumers", "1", "-batch", "16", "-time", "500ms", "-warmup", "0", "-sample", "100ms", "-size", "64", "-segment-bytes", "64KiB")
	if res.code != exitOK {
		t.Fatalf("exit %d, want %d", res.code, exitOK)
	}
	rep := readReport(t, jsonFile)
	if len(rep.Rows) != 1 || rep.Rows[0].Ops == 0 {
		t.Fatalf("rows %+v; want one mixed row that published", rep.Rows)
	}
	r := rep.Rows[0]
	if most := 2*rate*r.Seconds + 2*producers; float64(r.Ops) > most {
		t.Errorf("%d messages published in %v s at a target of %v msgs/s for all %d producers together; want at most %v",
			r.Ops, r.Seconds, rate, producers, most)
	}
}

// runStalledMixed runs mixed with one producer at 250 msgs/s over a
// window of 400 ms, every fdatasync from 300 ms into the window held until
// holdUntil into it, and returns its report.
func runStalledMixed(t *testing.T, holdUntil time.Duration) *Report {
	t.Helper()
	fs := vfs.NewFaultFS(vfs.Default)
	var opened atomic.Int64 // UnixNano of the window's opening; 0 before
	fs.Observe(func(ev vfs.Event) {
		if ev.Op != vfs.OpSync {
			return
		}
		if at := opened.Load(); at != 0 && time.Since(time.Unix(0, at)) >= 300*time.Millisecond {
			time.Sleep(time.Until(time.Unix(0, at).Add(holdUntil)))
		}
	})
	e := &env{fs: fs, hangTimeout: time.Minute, onWindow: func(string) { opened.CompareAndSwap(0, time.Now().UnixNano()) }}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, context.Background(), e, "mixed", "-dir", dir, "-json", jsonFile, "-producers", "1", "-rate", "250",
		"-consumers", "1", "-batch", "16", "-time", "400ms", "-warmup", "0", "-sample", "100ms", "-size", "64")
	if res.code != exitOK {
		t.Fatalf("exit %d, want %d", res.code, exitOK)
	}
	return assertTablesFromJSON(t, res.stdout, jsonFile)
}

// TestMixedStallAtTheWindowsEnd: a stall that holds the producer past
// the window's end still counts against every call it kept from starting
// in the window. One producer at 250 msgs/s; every fdatasync from 300 ms
// into the window of 400 ms is held until 600 ms: the calls scheduled in
// the last 100 ms can start only after the window closed. They are made
// then, and each waited at least 200 ms from its scheduled instant: a
// quarter of the window's calls, so the p99 is above 150 ms. Left out,
// the window would hold one slow call among 75 quick ones, and a p99 of
// microseconds. (The rate is low so that a slow machine, the race
// detector on, still makes the 25 held calls in the 200 ms left of the
// catch-up: at 1,000 msgs/s a loaded one fell 19 of 100 short.)
func TestMixedStallAtTheWindowsEnd(t *testing.T) {
	rep := runStalledMixed(t, 600*time.Millisecond)
	if len(rep.Rows) != 1 || rep.Rows[0].P99Ns == nil || rep.Rows[0].Ops == 0 {
		t.Fatalf("rows %+v; want one mixed row with its latencies", rep.Rows)
	}
	r := rep.Rows[0]
	if p99 := time.Duration(*r.P99Ns); p99 < 150*time.Millisecond {
		t.Errorf("publish p99 %v over %d calls, the last 100 ms of the window's held until 200 ms after it; want above 150ms", p99, r.LatencySamples)
	}
	if r.LatencySamples <= r.Ops {
		t.Errorf("%d latencies for %d calls made in the window; want more: those scheduled in it and made after it", r.LatencySamples, r.Ops)
	}
	if r.E2EP99Ns == nil {
		t.Errorf("no end-to-end p99; want one above 150ms, as the calls held were")
	} else if e2e := time.Duration(*r.E2EP99Ns); e2e < 150*time.Millisecond {
		t.Errorf("end-to-end p99 %v; want above 150ms, as the calls held were", e2e)
	}
	if len(r.Notes) > 0 {
		t.Errorf("notes %q; want none: the producer made up every call within -time of the window's end", r.Notes)
	}
}

// TestMixedStallPastTheCatchUp: the calls a stall keeps from starting in
// the window are made after it for as long as the window lasted at most;
// those it holds longer are said to be left out. Every fdatasync from
// 300 ms into a window of 400 ms is held until 1.2 s: 400 ms after the
// window, the producer still has not made the calls of its last 100 ms.
func TestMixedStallPastTheCatchUp(t *testing.T) {
	rep := runStalledMixed(t, 1200*time.Millisecond)
	if len(rep.Rows) != 1 {
		t.Fatalf("rows %+v; want one mixed row", rep.Rows)
	}
	r := rep.Rows[0]
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "calls behind their schedule when the window closed") {
		t.Errorf("notes %q; want one saying that the calls of the window's last 100 ms were not made", r.Notes)
	}
}

// TestMixedCutInTheCatchUpIsInterrupted: the calls a stall kept from
// starting in the window, made after it, are the window's worst, and so
// are the messages its consumers take after it. Ctrl-C while they are
// still to come cuts them out of the latencies: the row is then not
// whole, and says so (interrupted, with a note), as a row Ctrl-C cut in
// its window does. Every fdatasync from 600 ms into a window of 800 ms is
// held until 1.4 s; Ctrl-C comes at 1.1 s, after the window closed and
// before the producer could make the calls of its last 200 ms.
func TestMixedCutInTheCatchUpIsInterrupted(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.Default)
	var opened atomic.Int64 // UnixNano of the window's opening; 0 before
	fs.Observe(func(ev vfs.Event) {
		if ev.Op != vfs.OpSync {
			return
		}
		if at := opened.Load(); at != 0 && time.Since(time.Unix(0, at)) >= 600*time.Millisecond {
			time.Sleep(time.Until(time.Unix(0, at).Add(1400 * time.Millisecond)))
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{fs: fs, hangTimeout: time.Minute, onWindow: func(string) {
		if opened.CompareAndSwap(0, time.Now().UnixNano()) {
			time.AfterFunc(1100*time.Millisecond, cancel)
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "mixed", "-dir", dir, "-json", jsonFile, "-producers", "1", "-rate", "250",
		"-consumers", "1", "-batch", "16", "-time", "800ms", "-warmup", "0", "-sample", "100ms", "-size", "64")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 {
		t.Fatalf("rows %+v; want one mixed row", rep.Rows)
	}
	r := rep.Rows[0]
	if !r.Interrupted || !strings.Contains(res.stdout, r.Workload+" (interrupted)") {
		t.Errorf("the row, cut in the calls after its window, is not marked interrupted (interrupted %v):\n%s", r.Interrupted, res.stdout)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "the publish and end-to-end latencies leave them out") }) {
		t.Errorf("notes %q; want one saying what Ctrl-C left out", r.Notes)
	}
}
