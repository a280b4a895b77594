package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
