package main

import "testing"

// TestVsWALComparesGrowingLogs: a publish row's "÷ log" is to the log
// with as many appenders that makes new segments, as the publish
// workload's store does, not to the faster log that reuses them.
func TestVsWALComparesGrowingLogs(t *testing.T) {
	walRow := func(producers int, segments string, msgs float64) Row {
		return Row{Kind: kindWAL, Sync: "always", Producers: producers, Size: 1024, Segments: segments, MsgsPerSec: ptr(msgs)}
	}
	earlier := []Row{
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
	setRatios(&onlyReused, nil, earlier[:1])
	if onlyReused.VsWAL != nil {
		t.Errorf("÷ log %v with only a log that reuses its segments; want none", *onlyReused.VsWAL)
	}
}
