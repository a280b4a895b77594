package main

import "testing"

// TestRecommendFromProfileScoresTheRoundsThrough: with several rounds, the
// profile scores a publish point by the median of its rounds' through
// rates, each round's publish with that round's drain, as a sweep point
// is scored: not by the formula on the medians of the publishes and of
// the drains, which pairs a publish with a drain of another round.
func TestRecommendFromProfileScoresTheRoundsThrough(t *testing.T) {
	var rounds [][]Row
	for i, pd := range [][2]float64{{100, 1000}, {1000, 100}, {500, 500}} {
		pub := Row{Kind: kindPublish, Workload: "publish", Sync: "all", SegmentBytes: 64 * mib, Producers: 64, Size: 1024,
			Round: i + 1, MsgsPerSec: ptr(pd[0]), P99Ns: ptr(int64(1000))}
		drain := Row{Kind: kindDrain, Workload: "drain", Method: drainConsume, Sync: "all", SegmentBytes: 64 * mib, Size: 1024,
			Round: i + 1, MsgsPerSec: ptr(pd[1])}
		rounds = append(rounds, []Row{pub, drain})
	}
	rec := recommend(summarizeRows(rounds))
	if rec == nil || rec.Basis != "profile" || len(rec.Scores) != 1 {
		t.Fatalf("recommendation %+v; want one score, from the profile", rec)
	}
	// The rounds' through rates are 90.9, 90.9 and 250: median 90.9. The
	// formula on the medians, 500 and 500, would give 250.
	if want := 1 / (1/100.0 + 1/1000.0); !near(rec.Scores[0].MsgsPerSec, want) {
		t.Errorf("score %v; want %v, the median of the rounds' through rates", rec.Scores[0].MsgsPerSec, want)
	}
	// What the recommendation says to expect stays the medians'.
	if rec.MsgsPerSec != 500 || rec.DrainMsgsPerSec == nil || *rec.DrainMsgsPerSec != 500 {
		t.Errorf("expected %v msgs/s published and %v drained; want the medians, 500 and 500", rec.MsgsPerSec, deref(rec.DrainMsgsPerSec))
	}
}
