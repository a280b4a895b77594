package main

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"
)

// TestVsWALComparesGrowingLogs: a publish row's "÷ log" is to the log
// with as many appenders that makes new segments, as the publish
// workload's store does, not to the faster log that reuses them.
func TestVsWALComparesGrowingLogs(t *testing.T) {
	walRow := func(producers int, segments string, msgs float64) Row {
		return Row{Kind: kindWAL, Sync: "always", Producers: producers, Size: 1024, Segments: segments, MsgsPerSec: ptr(msgs)}
	}
	otherSize := walRow(64, "new", 300_000)
	otherSize.Size = 100
	earlier := []Row{
		otherSize,
		walRow(64, "reused", 200_000),
		walRow(1, "new", 5_000),
		walRow(64, "new", 120_000),
	}
	pub := Row{Kind: kindPublish, Sync: "all", Producers: 64, Size: 1024, MsgsPerSec: ptr(96_000.0)}
	setRatios(&pub, nil, earlier)
	if pub.VsWAL == nil || *pub.VsWAL != 0.8 {
		t.Fatalf("÷ log %v, want 0.8 (96,000 ÷ the 120,000 of the log with new segments)", pub.VsWAL)
	}

	onlyReused := Row{Kind: kindPublish, Sync: "all", Producers: 64, Size: 1024, MsgsPerSec: ptr(96_000.0)}
	setRatios(&onlyReused, nil, earlier[:2])
	if onlyReused.VsWAL != nil {
		t.Errorf("÷ log %v with only a log that reuses its segments, or of records of another size; want none", *onlyReused.VsWAL)
	}
}

// TestRatiosOnlyWhereCallsWaitForFdatasync: the ratios to the probe are
// those of closed-loop rows whose every call waits for an fdatasync:
// publish and sweep rows under sync all or publish, wal rows under
// always. Elsewhere they would compare the disk with what does not wait
// for it, and are null.
func TestRatiosOnlyWhereCallsWaitForFdatasync(t *testing.T) {
	probe := &Probe{FdatasyncsPerSec: ptr(5000.0), FdatasyncP99Ns: ptr(int64(400_000)), LargeP99Ns: ptr(int64(800_000)), WriteMBPerSec: ptr(500.0)}
	for _, tc := range []struct {
		kind, sync string
		want       bool
	}{
		{kindPublish, "all", true}, {kindPublish, "publish", true}, {kindPublish, "none", false},
		{kindSweep, "all", true}, {kindSweep, "publish", true}, {kindSweep, "none", false},
		{kindWAL, "always", true}, {kindWAL, "interval", false}, {kindWAL, "never", false},
		{kindDrain, "all", false}, {kindMixed, "all", false},
	} {
		r := Row{Kind: tc.kind, Sync: tc.sync, Producers: 4, Size: 1024, MsgsPerSec: ptr(10000.0), P99Ns: ptr(int64(1_000_000))}
		setRatios(&r, probe, nil)
		for _, f := range []struct {
			name string
			v    *float64
		}{{"ceiling", r.CeilingPerSec}, {"÷ fdatasyncs/s", r.VsFdatasync}, {"÷ ceiling", r.VsCeiling}, {"p99 ÷ fdatasync p99", r.P99VsFdatasyncP99}, {"p99 ÷ 64 KiB p99", r.P99VsLargeP99}} {
			if (f.v != nil) != tc.want {
				t.Errorf("%s row, sync %s: %s %v; want it set: %v", tc.kind, tc.sync, f.name, deref(f.v), tc.want)
			}
		}
	}
}

// TestVsWALInARound runs the log's workload and then the publish
// workload in one round, as full does: the publish row's "÷ log" is its
// msgs/s ÷ the log's appends/s measured just before, and the publish
// table has the column.
func TestVsWALInARound(t *testing.T) {
	window := 50 * time.Millisecond
	for try := 1; ; try, window = try+1, 2*window {
		cfg, err := parseConfig([]string{"wal", "-producers", "2", "-segments", "new", "-size", "100", "-segment-bytes", "64KiB",
			"-time", window.String(), "-warmup", "0", "-probe-time", "0"}, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg.workloads = append(cfg.workloads, kindPublish)
		cfg.publish.producers, cfg.publish.sizes, cfg.publish.segmentBytes, cfg.publish.duration = []int{2}, []int{100}, 64<<10, window
		dir := benchDir(t)
		rep, err := measure(context.Background(), &env{progress: newProgress(io.Discard)}, dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		assertDirEmpty(t, dir)
		if len(rep.Rows) != 2 || rep.Rows[0].Kind != kindWAL || rep.Rows[1].Kind != kindPublish {
			t.Fatalf("%d rows; want the log's, then the publish workload's", len(rep.Rows))
		}
		logRow, pub := rep.Rows[0], rep.Rows[1]
		if (logRow.Ops == 0 || pub.Ops == 0) && try < 5 {
			t.Logf("-time %v: %d appends, %d publishes; again with windows twice as long", window, logRow.Ops, pub.Ops)
			continue
		}
		if want := *pub.MsgsPerSec / *logRow.MsgsPerSec; pub.VsWAL == nil || !near(*pub.VsWAL, want) {
			t.Errorf("÷ log %v, want %v (%v msgs/s ÷ %v appends/s)", deref(pub.VsWAL), want, *pub.MsgsPerSec, *logRow.MsgsPerSec)
		}
		for _, tb := range tablesOf(rep) {
			if tb.title == "Publish: closed-loop producers" && !slices.Contains(tb.header, "÷ log") {
				t.Errorf("the publish table has no ÷ log column: %q", tb.header)
			}
		}
		return
	}
}

// TestVsWALOnlyForPublishRows: "÷ log" is a publish row's: a sweep row of
// the same round, with as many producers of the same size under sync
// all, has none.
func TestVsWALOnlyForPublishRows(t *testing.T) {
	earlier := []Row{{Kind: kindWAL, Sync: "always", Producers: 64, Size: 1024, Segments: "new", MsgsPerSec: ptr(120_000.0)}}
	for _, kind := range []string{kindPublish, kindSweep} {
		r := Row{Kind: kind, Sync: "all", Producers: 64, Size: 1024, MsgsPerSec: ptr(96_000.0)}
		setRatios(&r, nil, earlier)
		if got := r.VsWAL != nil; got != (kind == kindPublish) {
			t.Errorf("%s row: ÷ log %v; want one only for a publish row", kind, deref(r.VsWAL))
		}
	}
}
