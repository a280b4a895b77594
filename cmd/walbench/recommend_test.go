package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// sweepRow is a fabricated sweep point: publish rate pub, drain rate drain
// (0: none measured), p99 of p99us µs.
func sweepRow(sync string, seg int64, producers, size int, pub, drain float64, p99us int64) Row {
	r := Row{Kind: kindSweep, Sync: sync, SegmentBytes: seg, Producers: producers, Size: size, MsgsPerSec: &pub, P99Ns: ptr(p99us * 1000)}
	if drain > 0 {
		r.DrainMsgsPerSec = &drain
	}
	return r
}

// grid fabricates the rows of one setting over producers 1, 16, 64 and
// sizes 1024 and 16384, from the publish rates at 1 KiB for 1, 16 and 64
// producers (halved at 16 KiB) and one drain rate.
func grid(sync string, seg int64, pub [3]float64, drain float64) []Row {
	var rows []Row
	for _, size := range []int{1024, 16384} {
		for i, p := range []int{1, 16, 64} {
			rate := pub[i]
			if size > 1024 {
				rate /= 2
			}
			rows = append(rows, sweepRow(sync, seg, p, size, rate, drain, int64(100*(i+1))))
		}
	}
	return rows
}

const mib = 1 << 20

func TestRecommendPicksTheBest(t *testing.T) {
	var rows []Row
	rows = append(rows, grid("all", 64*mib, [3]float64{4000, 30000, 60000}, 50000)...)
	rows = append(rows, grid("all", 4*mib, [3]float64{4000, 28000, 55000}, 50000)...)
	rows = append(rows, grid("publish", 64*mib, [3]float64{4000, 30000, 60000}, 100000)...)
	// The best: as fast to publish as the others at 64 producers, faster
	// at 16, and the fastest drain.
	rows = append(rows, grid("publish", 4*mib, [3]float64{4100, 40000, 60000}, 110000)...)
	// Faster still, but not durable.
	rows = append(rows, grid("none", 64*mib, [3]float64{200000, 300000, 400000}, 120000)...)

	rec := recommend(rows)
	if rec == nil {
		t.Fatal("no recommendation")
	}
	if rec.Basis != "sweep" || rec.Sync != "publish" || rec.SegmentBytes != 4*mib {
		t.Fatalf("recommended %s, sync %s, %d-byte segments; want the sweep's sync publish, 4 MiB", rec.Basis, rec.Sync, rec.SegmentBytes)
	}
	if rec.Size != 1024 {
		t.Errorf("expectations for %d B, want the default size measured, 1024", rec.Size)
	}
	// 40,000 at 16 producers is at least 80% of 60,000? No (67%): 64.
	if rec.BestProducers != 64 || rec.BestMsgsPerSec != 60000 || rec.Producers != 64 || rec.MsgsPerSec != 60000 || *rec.P99Ns != 300_000 {
		t.Errorf("expect %d producers at %v (p99 %v), best %d at %v; want 64 at 60000 (300µs), best the same",
			rec.Producers, rec.MsgsPerSec, *rec.P99Ns, rec.BestProducers, rec.BestMsgsPerSec)
	}
	if rec.DrainMsgsPerSec == nil || *rec.DrainMsgsPerSec != 110000 || rec.PublishMeasuredAs != "publish" {
		t.Errorf("drain %v, measured as %q", rec.DrainMsgsPerSec, rec.PublishMeasuredAs)
	}
	if rec.NotDurable == nil || *rec.NotDurable != 400000 {
		t.Errorf("not durable: %v, want sync none's best, 400000", rec.NotDurable)
	}
	if len(rec.Scores) != 4 || rec.Scores[0].Sync != "publish" || rec.Scores[0].SegmentBytes != 4*mib || rec.Scores[0].Points != 6 {
		t.Errorf("scores %+v; want the four durable settings, the best first, each over its 6 points", rec.Scores)
	}
	for i := 1; i < len(rec.Scores); i++ {
		if rec.Scores[i].MsgsPerSec > rec.Scores[i-1].MsgsPerSec {
			t.Errorf("scores not best first: %+v", rec.Scores)
		}
	}
	text := strings.Join(recommendationLines(rec), "\n")
	for _, want := range []string{"Sync: broker.SyncPublish, SegmentBytes: 4 << 20", "60,000 durable msgs/s of 1024 B, p99 300µs, from 64 producers", "sync=none published up to 400,000"} {
		if !strings.Contains(text, want) {
			t.Errorf("the recommendation does not say %q:\n%s", want, text)
		}
	}
}

// TestRecommendFewestProducers: when fewer producers reach 80% of the
// best rate, the recommendation says so, with their figures and the best's.
func TestRecommendFewestProducers(t *testing.T) {
	rows := grid("all", 64*mib, [3]float64{4000, 50000, 60000}, 50000)
	rec := recommend(rows)
	if rec.Producers != 16 || rec.MsgsPerSec != 50000 || *rec.P99Ns != 200_000 || rec.BestProducers != 64 || *rec.BestP99Ns != 300_000 {
		t.Fatalf("expect %d producers at %v (p99 %v), best %d (p99 %v); want 16 at 50000 (200µs), best 64 (300µs)",
			rec.Producers, rec.MsgsPerSec, *rec.P99Ns, rec.BestProducers, *rec.BestP99Ns)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); !strings.Contains(text, "with 64") || !strings.Contains(text, "SegmentBytes: 0 (the default, 64 MiB)") {
		t.Errorf("recommendation:\n%s", text)
	}
	// Exactly 80% of the best reaches it.
	rec = recommend(grid("all", 64*mib, [3]float64{4000, 48000, 60000}, 50000))
	if rec.Producers != 16 || rec.MsgsPerSec != 48000 {
		t.Errorf("expect %d producers at %v; want 16 at 48000, 80%% of the best", rec.Producers, rec.MsgsPerSec)
	}
}

// TestRecommendScoresByGeometricMean: a setting's score is the geometric
// mean of its points' rates, so that one fast point does not outweigh
// the rest: 1,000 and 100,000 score 10,000, below a steady 20,000 (their
// arithmetic mean, 50,500, would win).
func TestRecommendScoresByGeometricMean(t *testing.T) {
	rows := []Row{
		sweepRow("all", 64*mib, 1, 1024, 1000, 0, 100), sweepRow("all", 64*mib, 64, 1024, 100000, 0, 100),
		sweepRow("all", 4*mib, 1, 1024, 20000, 0, 100), sweepRow("all", 4*mib, 64, 1024, 20000, 0, 100),
	}
	rec := recommend(rows)
	if rec == nil || rec.SegmentBytes != 4*mib || len(rec.Scores) != 2 {
		t.Fatalf("recommendation %+v; want the steady 4 MiB segments", rec)
	}
	for i, want := range []float64{20000, 10000} {
		if s := rec.Scores[i]; !near(s.MsgsPerSec, want) || s.Points != 2 {
			t.Errorf("score %d: %+v, want %v over 2 points", i, s, want)
		}
	}
}

// TestRecommendExpectationsOfOneSize: the expectations are for one
// message size, and their figures are of that size's points alone, even
// where another size published more messages a second.
func TestRecommendExpectationsOfOneSize(t *testing.T) {
	rows := []Row{
		sweepRow("all", 64*mib, 1, 1024, 4000, 0, 100), sweepRow("all", 64*mib, 64, 1024, 60000, 0, 300),
		sweepRow("all", 64*mib, 1, 2048, 3900, 0, 110), sweepRow("all", 64*mib, 64, 2048, 61000, 0, 400),
	}
	rec := recommend(rows)
	if rec == nil || rec.Size != 1024 || rec.BestMsgsPerSec != 60000 || *rec.BestP99Ns != 300_000 || rec.Producers != 64 || rec.MsgsPerSec != 60000 {
		t.Fatalf("recommendation %+v; want the figures of the 1024 B points: 64 producers, 60000 msgs/s, p99 300µs", rec)
	}
}

// TestRecommendTies: on a noisy disk, a setting less than 3% better is no
// better; the safer sync mode and the default segment size win a tie.
// Each case measures two settings, each at one rate at every point.
func TestRecommendTies(t *testing.T) {
	type setting struct {
		sync string
		seg  int64
		rate float64
	}
	for _, tc := range []struct {
		name             string
		a, b             setting
		wantSync         string
		wantSegmentBytes int64
	}{
		{
			name: "publish 2% better: a tie, SyncAll",
			a:    setting{"all", 64 * mib, 1000}, b: setting{"publish", 64 * mib, 1020},
			wantSync: "all", wantSegmentBytes: 64 * mib,
		},
		{
			name: "publish 10% better",
			a:    setting{"all", 64 * mib, 1000}, b: setting{"publish", 64 * mib, 1100},
			wantSync: "publish", wantSegmentBytes: 64 * mib,
		},
		{
			name: "small segments 2% better: a tie, the default",
			a:    setting{"all", 4 * mib, 1020}, b: setting{"all", 64 * mib, 1000},
			wantSync: "all", wantSegmentBytes: 64 * mib,
		},
		{
			// The default is not the largest here: it wins for being the
			// default.
			name: "large segments 2% better: a tie, the default",
			a:    setting{"all", 128 * mib, 1020}, b: setting{"all", 64 * mib, 1000},
			wantSync: "all", wantSegmentBytes: 64 * mib,
		},
		{
			name: "small segments 10% better",
			a:    setting{"all", 4 * mib, 1100}, b: setting{"all", 64 * mib, 1000},
			wantSync: "all", wantSegmentBytes: 4 * mib,
		},
		{
			name: "publish 5% better: more than a tie",
			a:    setting{"all", 64 * mib, 1000}, b: setting{"publish", 64 * mib, 1050},
			wantSync: "publish", wantSegmentBytes: 64 * mib,
		},
		{
			// Neither is the default: the larger segments win.
			name: "small segments 2% better than other large ones: a tie, the larger",
			a:    setting{"all", 4 * mib, 1020}, b: setting{"all", 16 * mib, 1000},
			wantSync: "all", wantSegmentBytes: 16 * mib,
		},
		{
			name: "the safer mode before the default size",
			a:    setting{"all", 4 * mib, 1000}, b: setting{"publish", 64 * mib, 1010},
			wantSync: "all", wantSegmentBytes: 4 * mib,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []Row
			for _, s := range []setting{tc.a, tc.b} {
				rows = append(rows, grid(s.sync, s.seg, [3]float64{s.rate, s.rate, s.rate}, 0)...)
			}
			rec := recommend(rows)
			if rec == nil || rec.Sync != tc.wantSync || rec.SegmentBytes != tc.wantSegmentBytes {
				t.Fatalf("recommended %+v; want sync %s, %d", rec, tc.wantSync, tc.wantSegmentBytes)
			}
		})
	}
}

// TestRecommendComparesCommonPoints: a setting measured at fewer points
// (an interrupted sweep) is compared on the points all share.
func TestRecommendComparesCommonPoints(t *testing.T) {
	rows := grid("all", 64*mib, [3]float64{1000, 10000, 20000}, 0)
	// Sync publish only at 1 producer, where it is 10% better: on the
	// grid as a whole it would look far worse.
	rows = append(rows, sweepRow("publish", 64*mib, 1, 1024, 1100, 0, 100), sweepRow("publish", 64*mib, 1, 16384, 550, 0, 100))
	rec := recommend(rows)
	if rec.Sync != "publish" || rec.Scores[0].Points != 2 {
		t.Fatalf("recommended sync %s, scores %+v; want publish, compared on the 2 common points", rec.Sync, rec.Scores)
	}
	// The text says over which points, not the points each measured.
	if text := strings.Join(recommendationLines(rec), "\n"); !strings.Contains(text, "geometric mean over the points they share") {
		t.Errorf("the recommendation does not say that the scores are over the points the settings share:\n%s", text)
	}
}

// TestRecommendFromProfile: without a sweep, the publish rows (under
// SyncAll) pair with the drain of each mode.
func TestRecommendFromProfile(t *testing.T) {
	pub := func(producers int, rate float64) Row {
		return Row{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: producers, Size: 1024, MsgsPerSec: &rate, P99Ns: ptr(int64(1000 * producers))}
	}
	drain := func(sync string, rate float64) Row {
		return Row{Kind: kindDrain, Method: drainConsume, Sync: sync, SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: &rate}
	}
	receiveAck := drain("publish", 1e9)
	receiveAck.Method = drainReceiveAck
	rows := []Row{pub(1, 4000), pub(16, 30000), pub(64, 60000), receiveAck, drain("all", 50000), drain("publish", 110000)}
	rec := recommend(rows)
	if rec == nil || rec.Basis != "profile" || rec.Sync != "publish" || rec.PublishMeasuredAs != "all" || *rec.DrainMsgsPerSec != 110000 {
		t.Fatalf("recommendation %+v; want sync publish (its Consume drain is faster), publish figures measured under all", rec)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); !strings.Contains(text, "measured under sync=all") {
		t.Errorf("the recommendation does not say where the publish figures come from:\n%s", text)
	}
	// Without drains, the publish rows alone.
	rec = recommend(rows[:3])
	if rec == nil || rec.Sync != "all" || rec.DrainMsgsPerSec != nil || rec.Producers != 64 {
		t.Fatalf("recommendation without drains: %+v", rec)
	}
}

func TestRecommendNothingDurable(t *testing.T) {
	if rec := recommend(grid("none", 64*mib, [3]float64{1, 2, 3}, 4)); rec != nil {
		t.Errorf("recommended %+v from sync none alone", rec)
	}
	if rec := recommend(nil); rec != nil {
		t.Errorf("recommended %+v from nothing", rec)
	}
}

func TestExpectationSize(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		want  int
	}{{[]int{16384, 1024, 256}, 1024}, {[]int{16384, 256}, 256}, {[]int{4096}, 4096}} {
		var points []recPoint
		for _, s := range tc.sizes {
			points = append(points, recPoint{size: s})
		}
		if got := expectationSize(points); got != tc.want {
			t.Errorf("sizes %v: %d, want %d", tc.sizes, got, tc.want)
		}
	}
}

func TestThrough(t *testing.T) {
	for _, tc := range []struct {
		pub, drain *float64
		want       *float64
	}{
		{ptr(100.0), ptr(100.0), ptr(50.0)},
		{ptr(300.0), ptr(600.0), ptr(200.0)},
		{ptr(300.0), nil, ptr(300.0)},
		{ptr(300.0), ptr(0.0), ptr(0.0)},
		{nil, ptr(1.0), nil},
		{ptr(0.0), ptr(1.0), nil},
	} {
		got := through(tc.pub, tc.drain)
		if (got == nil) != (tc.want == nil) || got != nil && !near(*got, *tc.want) {
			t.Errorf("through(%v, %v) = %v, want %v", deref(tc.pub), deref(tc.drain), deref(got), deref(tc.want))
		}
	}
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

// TestRecommendIgnoresEmptyWindows: a window that published nothing (too
// short, or cut at once) is not a point of the recommendation; with no
// other, there is none, and the report says why.
func TestRecommendIgnoresEmptyWindows(t *testing.T) {
	pub := func(producers int, rate float64) Row {
		return Row{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: producers, Size: 1024, MsgsPerSec: &rate}
	}
	rows := []Row{pub(1, 0), pub(16, 0)}
	if rec := recommend(rows); rec != nil {
		t.Errorf("recommended %+v from windows that published nothing", rec)
	}
	rep := &Report{Command: "profile", Rounds: 1, Rows: rows}
	var b strings.Builder
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No recommendation: no publish workload") || !strings.Contains(markdown(rep), "No recommendation: no publish workload") {
		t.Errorf("the report does not say why there is no recommendation:\n%s", b.String())
	}
	// The same for the sweep's windows.
	sweep := []Row{sweepRow("all", 64*mib, 1, 1024, 0, 0, 100), sweepRow("publish", 64*mib, 1, 1024, 0, 0, 100)}
	if rec := recommend(sweep); rec != nil {
		t.Errorf("recommended %+v from sweep windows that published nothing", rec)
	}
	b.Reset()
	if err := printReport(&b, &Report{Command: kindSweep, Rounds: 1, Rows: sweep}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No recommendation: no publish workload") {
		t.Errorf("the sweep's report does not say why there is no recommendation:\n%s", b.String())
	}
	rec := recommend([]Row{pub(1, 0), pub(16, 30000)})
	if rec == nil || rec.Producers != 16 || rec.MsgsPerSec != 30000 || !near(rec.Scores[0].MsgsPerSec, 30000) || rec.Scores[0].Points != 1 {
		t.Errorf("recommendation %+v; want it from the 16 producers alone", rec)
	}
}

// TestAMemoryFileSystemIsCalledOut: on tmpfs or ramfs an fdatasync reaches
// no device, so the report says its figures are not a disk's, beside the
// machine facts and as the recommendation's last line, and BENCH.md's
// section says it too; on a disk's file system it says nothing of the kind.
func TestAMemoryFileSystemIsCalledOut(t *testing.T) {
	rate := 30000.0
	rows := []Row{{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 16, Size: 1024, MsgsPerSec: &rate}}
	for _, tc := range []struct {
		fs   string
		want bool
	}{{"tmpfs", true}, {"ramfs", true}, {"ext4", false}, {"unknown", false}} {
		rep := &Report{Command: "profile", Rounds: 1, Rows: rows, Machine: Machine{Filesystem: tc.fs}}
		rep.Recommendation = recommend(rows)
		rep.Recommendation.InMemory = inMemory(rep.Machine)
		var b strings.Builder
		if err := printReport(&b, rep); err != nil {
			t.Fatal(err)
		}
		text, md := b.String(), markdown(rep)
		const warns = "which keeps files in memory"
		if got := strings.Count(text, warns); got != map[bool]int{true: 2, false: 0}[tc.want] {
			t.Errorf("%s: the text report warns %d times:\n%s", tc.fs, got, text)
		}
		if !tc.want {
			continue
		}
		if !strings.Contains(text, "on "+tc.fs+",") {
			t.Errorf("%s: the warning does not name the file system:\n%s", tc.fs, text)
		}
		if strings.Index(text, "warning:") > strings.Index(text, "Publish") {
			t.Errorf("%s: the first warning is not beside the machine facts:\n%s", tc.fs, text)
		}
		if lines := recommendationLines(rep.Recommendation); !strings.Contains(lines[len(lines)-1], warns) || !strings.HasSuffix(text, lines[len(lines)-1]+"\n") {
			t.Errorf("%s: the recommendation does not end with the warning:\n%s", tc.fs, text)
		}
		if strings.Count(md, warns) != 2 {
			t.Errorf("%s: BENCH.md's section warns %d times, want 2:\n%s", tc.fs, strings.Count(md, warns), md)
		}
	}
}

// cut marks r as cut short by Ctrl-C.
func cut(r Row) Row { r.Interrupted = true; return r }

// drainFailed marks r as a sweep point whose drain failed.
func drainFailed(r Row) Row { r.DrainFailed = true; return r }

// TestRecommendScoresWholePointsOnly: a sweep point Ctrl-C cut short (its
// window without its drain) is not scored: here it would have won on its
// publish rate alone against the others' publish and drain. A setting
// left without a whole point is not scored, and the recommendation says
// so.
func TestRecommendScoresWholePointsOnly(t *testing.T) {
	rows := grid("all", 64*mib, [3]float64{1000, 10000, 20000}, 50000)
	rows = append(rows,
		sweepRow("publish", 4*mib, 1, 1024, 1000, 50000, 100),
		cut(sweepRow("publish", 4*mib, 16, 1024, 1e6, 0, 100)),
		cut(sweepRow("publish", 64*mib, 1, 1024, 2000, 0, 100)),
	)
	rec := recommend(rows)
	if rec == nil || rec.Sync != "all" || rec.SegmentBytes != 64*mib {
		t.Fatalf("recommendation %+v; want sync all, 64 MiB: the cut point must not count", rec)
	}
	if len(rec.Scores) != 2 || rec.Scores[0].Points != 1 || rec.Scores[1].Points != 1 {
		t.Errorf("scores %+v; want the two settings with a whole point, compared on the one they share", rec.Scores)
	}
	if len(rec.Unscored) != 1 || rec.Unscored[0] != (Setting{Sync: "publish", SegmentBytes: 64 * mib}) {
		t.Errorf("unscored %+v; want sync publish with 64 MiB segments, which has no whole point", rec.Unscored)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); !strings.Contains(text, "not scored, the run having been interrupted or having failed before any of their workloads was measured whole: sync=publish, 64 MiB segments") {
		t.Errorf("the recommendation does not say what it did not score:\n%s", text)
	}
}

// TestWholeRounds: of a row of several rounds, the recommendation scores
// the rounds that ran to their end.
func TestWholeRounds(t *testing.T) {
	r1 := sweepRow("all", 64*mib, 1, 1024, 1000, 50000, 100)
	r1.Round = 1
	r2 := cut(sweepRow("all", 64*mib, 1, 1024, 1e6, 0, 100))
	r2.Round = 2
	r := summarize([]Row{r1, r2}, true)
	if w, ok := wholeRounds(r); !ok || *w.MsgsPerSec != 1000 || w.DrainMsgsPerSec == nil || *w.DrainMsgsPerSec != 50000 || w.Rounds != 1 {
		t.Errorf("whole rounds: %v, %+v; want round 1 alone", ok, w)
	}
	if _, ok := wholeRounds(summarize([]Row{r2}, false)); ok {
		t.Errorf("a row whose every round was cut short is whole")
	}
	// A round whose drain failed is no more whole than one cut short.
	r3 := drainFailed(sweepRow("all", 64*mib, 1, 1024, 1e6, 0, 100))
	r3.Round = 2
	if w, ok := wholeRounds(summarize([]Row{r1, r3}, true)); !ok || *w.MsgsPerSec != 1000 || w.Rounds != 1 {
		t.Errorf("whole rounds of a row whose second drain failed: %v, %+v; want round 1 alone", ok, w)
	}
	if _, ok := wholeRounds(summarize([]Row{r3}, false)); ok {
		t.Errorf("a row whose every drain failed is whole")
	}
	if w, ok := wholeRounds(r1); !ok || *w.MsgsPerSec != 1000 {
		t.Errorf("a whole row of one round: %v, %+v", ok, w)
	}
}

// TestRecommendFromProfileCutDrain: a profile whose SyncPublish drain was
// cut short scores SyncAll alone, and says SyncPublish was not scored.
func TestRecommendFromProfileCutDrain(t *testing.T) {
	rate := func(v float64) *float64 { return &v }
	rows := []Row{
		{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 1, Size: 1024, MsgsPerSec: rate(4000)},
		{Kind: kindDrain, Method: drainConsume, Sync: "all", SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: rate(50000)},
		cut(Row{Kind: kindDrain, Method: drainConsume, Sync: "publish", SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: rate(1e9)}),
	}
	rec := recommend(rows)
	if rec == nil || rec.Sync != "all" || len(rec.Scores) != 1 || len(rec.Unscored) != 1 || rec.Unscored[0].Sync != "publish" {
		t.Fatalf("recommendation %+v; want sync all alone scored, sync publish not", rec)
	}
}

// TestNoRecommendationSaysWhy: a run that ends without a recommendation
// says why: interrupted (or failed) before its publish workloads ran (in
// its probe, with no row at all, too), or before one was measured whole,
// or no durable sync mode was measured, or none published.
func TestNoRecommendationSaysWhy(t *testing.T) {
	wal := Row{Kind: kindWAL, Sync: "always", Size: 1024, Producers: 1, MsgsPerSec: ptr(5000.0)}
	for _, tc := range []struct {
		name string
		rep  Report
		want string
	}{
		{"full interrupted in the log's rows", Report{Command: "full", Interrupted: true, Rows: []Row{wal}},
			"No recommendation: the run was interrupted before its publish workloads ran."},
		{"full failed in the log's rows", Report{Command: "full", Error: "wal append: EIO", Rows: []Row{wal}},
			"No recommendation: the run failed before its publish workloads ran."},
		{"profile interrupted in its probe", Report{Command: "profile", Interrupted: true, Probe: &Probe{}},
			"No recommendation: the run was interrupted before its publish workloads ran."},
		{"sweep failed in its probe", Report{Command: kindSweep, Error: "probe: fdatasync: EIO", Probe: &Probe{}},
			"No recommendation: the run failed before its publish workloads ran."},
		{"sweep cut at its first point", Report{Command: kindSweep, Interrupted: true, Rows: []Row{cut(sweepRow("all", 64*mib, 1, 1024, 1000, 0, 100))}},
			"No recommendation: the run was interrupted before a publish workload under a durable sync mode (all or publish) was measured whole."},
		{"sweep failed in its first point's drain", Report{Command: kindSweep, Error: "drain: fdatasync: EIO", Rows: []Row{drainFailed(sweepRow("all", 64*mib, 1, 1024, 1000, 0, 100))}},
			"No recommendation: the run failed before a publish workload under a durable sync mode (all or publish) was measured whole."},
		{"nothing published", Report{Command: "profile", Rows: []Row{{Kind: kindPublish, Sync: "all", MsgsPerSec: ptr(0.0)}}},
			"No recommendation: no publish workload under a durable sync mode (all or publish) published a message."},
		{"sweep of sync none alone", Report{Command: kindSweep, Rows: []Row{sweepRow("none", 64*mib, 1, 1024, 9000, 0, 100)}},
			"No recommendation: no durable sync mode was measured (add -sync all or publish)."},
		{"sweep interrupted after its sync none points", Report{Command: kindSweep, Interrupted: true, Rows: []Row{sweepRow("none", 64*mib, 1, 1024, 9000, 0, 100)}},
			"No recommendation: the run was interrupted before a publish workload under a durable sync mode (all or publish) was measured whole."},
	} {
		tc.rep.Rounds = 1
		if rec := recommend(tc.rep.Rows); rec != nil {
			t.Errorf("%s: recommended %+v", tc.name, rec)
		}
		if got := noRecommendation(&tc.rep); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestSweepOfSyncNoneSaysNoDurableModeMeasured: a sweep of sync=none
// alone, whose point published, has no recommendation because it measured
// no durable sync mode, and says so, not that durable workloads published
// nothing.
func TestSweepOfSyncNoneSaysNoDurableModeMeasured(t *testing.T) {
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runOK(t, "sweep", "-dir", dir, "-json", jsonFile, "-sync", "none", "-producers", "1", "-size", "1024",
		"-segment-bytes", "64MiB", "-time", "20ms", "-warmup", "0s", "-probe-time", "0")
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 || !publishedAny(rep.Rows[0]) {
		t.Fatalf("want one sweep row that published; got %d rows", len(rep.Rows))
	}
	const want = "No recommendation: no durable sync mode was measured (add -sync all or publish)."
	if !strings.Contains(res.stdout, want) {
		t.Errorf("sweep -sync none: the tables do not say %q (the reason is %q)", want, noRecommendation(rep))
	}
}

// TestRecommendDrainOfTheExpectedPoint: the drain rate the recommendation
// expects is the one measured at the point whose publish figures it gives
// (the fewest producers that reached 80% of the best), not the best
// point's.
func TestRecommendDrainOfTheExpectedPoint(t *testing.T) {
	rows := []Row{
		sweepRow("all", 64*mib, 1, 1024, 4000, 30000, 100),
		sweepRow("all", 64*mib, 16, 1024, 50000, 40000, 200),
		sweepRow("all", 64*mib, 64, 1024, 60000, 70000, 300),
	}
	rec := recommend(rows)
	// 50,000 at 16 producers is at least 80% of the 60,000 at 64.
	if rec == nil || rec.Producers != 16 || rec.DrainMsgsPerSec == nil || *rec.DrainMsgsPerSec != 40000 {
		t.Fatalf("recommendation %+v; want 16 producers, with the 40000 msgs/s drain measured after their window", rec)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); !strings.Contains(text, "Consume drained 40,000 msgs/s") {
		t.Errorf("the recommendation does not give the drain of the point it expects:\n%s", text)
	}
}

// TestRecommendScoresSettingsSharingNoPointOnTheirOwn: settings measured
// at no common point (an interrupted sweep) are each scored over all of
// their own points, not over none.
func TestRecommendScoresSettingsSharingNoPointOnTheirOwn(t *testing.T) {
	rows := []Row{
		sweepRow("all", 64*mib, 1, 1024, 1000, 0, 100),
		sweepRow("publish", 64*mib, 64, 1024, 5000, 0, 100),
	}
	rec := recommend(rows)
	if rec == nil || rec.Sync != "publish" || len(rec.Scores) != 2 {
		t.Fatalf("recommendation %+v; want sync publish, whose one point is five times faster", rec)
	}
	for i, want := range []float64{5000, 1000} {
		if s := rec.Scores[i]; !near(s.MsgsPerSec, want) || s.Points != 1 {
			t.Errorf("score %d: %+v, want %v over its 1 point", i, s, want)
		}
	}
}

// TestRecommendUnscoredAreDurable: a sweep cut short in its sync none
// points (the last of its grid) names no setting as not scored: only
// durable settings are scored, so only they can be left unscored.
func TestRecommendUnscoredAreDurable(t *testing.T) {
	rows := append(grid("all", 64*mib, [3]float64{1000, 10000, 20000}, 50000),
		cut(sweepRow("none", 64*mib, 1, 1024, 100000, 0, 100)))
	rec := recommend(rows)
	if rec == nil || rec.Sync != "all" || len(rec.Unscored) != 0 {
		t.Fatalf("recommendation %+v; want sync all, and no unscored setting", rec)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); strings.Contains(text, "not scored") {
		t.Errorf("the recommendation names a setting not scored:\n%s", text)
	}
}

// TestRecommendFromProfileWithNoWholeDrain: a profile cut short in its
// first drain scores its publish rows alone, and so names no setting as
// not scored: SyncAll, recommended, would be named too.
func TestRecommendFromProfileWithNoWholeDrain(t *testing.T) {
	rows := []Row{
		{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 1, Size: 1024, MsgsPerSec: ptr(4000.0)},
		{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 16, Size: 1024, MsgsPerSec: ptr(30000.0)},
		cut(Row{Kind: kindDrain, Method: drainConsume, Sync: "all", SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: ptr(1e9)}),
	}
	rec := recommend(rows)
	if rec == nil || rec.Sync != "all" || rec.DrainMsgsPerSec != nil || rec.Producers != 16 {
		t.Fatalf("recommendation %+v; want sync all from the publish rows alone", rec)
	}
	if len(rec.Unscored) != 0 {
		t.Errorf("unscored %+v; want none: the publish rows stand alone where no drain was measured whole", rec.Unscored)
	}
}

// TestRecommendNamesTheSettingsARunNeverReached: a sweep that a failure or
// Ctrl-C ended before some of its settings recommends among those it
// measured, and says which it never compared; sync none is not among them
// (it is never recommended), nor a setting measured only in part.
func TestRecommendNamesTheSettingsARunNeverReached(t *testing.T) {
	rows := grid("all", 4*mib, [3]float64{1000, 10000, 20000}, 50000)
	rows = append(rows, cut(sweepRow("all", 16*mib, 1, 1024, 1000, 0, 100)))
	syncs := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}
	never := notMeasured(rows, syncs, []int64{4 * mib, 16 * mib, 0}, nil)
	want := []Setting{
		{Sync: "all", SegmentBytes: 64 * mib},
		{Sync: "publish", SegmentBytes: 4 * mib}, {Sync: "publish", SegmentBytes: 16 * mib}, {Sync: "publish", SegmentBytes: 64 * mib},
	}
	if !slices.Equal(never, want) {
		t.Fatalf("not measured %+v, want %+v", never, want)
	}
	rec := recommend(rows)
	rec.NotMeasured = never
	text := strings.Join(recommendationLines(rec), "\n")
	if !strings.Contains(text, "not measured, the run having ended before them, so not compared: sync=all, 64 MiB segments; sync=publish, 4 MiB segments") {
		t.Errorf("the recommendation does not say what it never measured:\n%s", text)
	}
	if notMeasured(append(rows, grid("all", 64*mib, [3]float64{1, 1, 1}, 1)...), []broker.SyncMode{broker.SyncAll}, []int64{4 * mib, 16 * mib, 0}, nil) != nil {
		t.Errorf("a sweep that reached every setting names some as not measured")
	}
}

// TestRecommendFromProfileNamesTheSweepSettingsLeftUnscored: a full run
// (publish, drain, then sweep) stopped in the sweep's first point
// recommends from the profile's workloads, and still names the sweep's
// setting cut short as unscored, and the settings the sweep never reached
// as not measured, but for those the profile's points scored.
func TestRecommendFromProfileNamesTheSweepSettingsLeftUnscored(t *testing.T) {
	rows := []Row{
		{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 1, Size: 1024, MsgsPerSec: ptr(4000.0)},
		{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 64, Size: 1024, MsgsPerSec: ptr(60000.0)},
		{Kind: kindDrain, Method: drainConsume, Sync: "all", SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: ptr(100000.0)},
		{Kind: kindDrain, Method: drainConsume, Sync: "publish", SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: ptr(200000.0)},
		cut(sweepRow("all", 4*mib, 1, 1024, 5000, 0, 100)),
	}
	rec := recommend(rows)
	if rec == nil || rec.Basis != "profile" {
		t.Fatalf("recommendation %+v; want one from the whole publish and drain rows", rec)
	}
	if want := []Setting{{Sync: "all", SegmentBytes: 4 * mib}}; !slices.Equal(rec.Unscored, want) {
		t.Errorf("unscored %+v; want %+v, the sweep's setting cut short", rec.Unscored, want)
	}
	rec.setNotMeasured(rows, []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}, []int64{4 * mib, 0}, nil)
	if want := []Setting{{Sync: "publish", SegmentBytes: 4 * mib}}; !slices.Equal(rec.NotMeasured, want) {
		t.Errorf("not measured %+v; want %+v: the sweep never reached it, and the profile scored the 64 MiB settings", rec.NotMeasured, want)
	}
}

// TestRecommendScoresTheRoundsThrough: a sweep point's score is its
// "through msgs/s" as the table shows it, the median of the rate each
// round's publish and drain made together, not the rate the medians of
// its publishes and its drains would make: a round's drain goes with its
// own publish, on the disk as it was then. Here the median publish and
// the median drain, 500 each, come from the same round only in name:
// through them, 250; the rounds' own are 90.9, 90.9 and 250.
func TestRecommendScoresTheRoundsThrough(t *testing.T) {
	var rounds [][]Row
	for i, pd := range [][2]float64{{100, 1000}, {1000, 100}, {500, 500}} {
		r := sweepRow("all", 64*mib, 16, 1024, pd[0], pd[1], 100)
		r.Round = i + 1
		r.ThroughMsgsPerSec = through(r.MsgsPerSec, r.DrainMsgsPerSec)
		rounds = append(rounds, []Row{r})
	}
	rows := summarizeRows(rounds)
	rec := recommend(rows)
	if rec == nil || len(rec.Scores) != 1 {
		t.Fatalf("recommendation %+v; want one score", rec)
	}
	if want := *rows[0].ThroughMsgsPerSec; !near(rec.Scores[0].MsgsPerSec, want) {
		t.Errorf("score %v; want %v, the row's through msgs/s (the median of the rounds')", rec.Scores[0].MsgsPerSec, want)
	}
}

// TestProfileRecommendationSaysItComparedNoSegmentSizes: the profile
// measures one segment size, so its recommendation's SegmentBytes is that
// size, not one chosen among others: its text says so and names the
// command that compares them; a sweep's, which compares them, does not.
func TestProfileRecommendationSaysItComparedNoSegmentSizes(t *testing.T) {
	pub := Row{Kind: kindPublish, Sync: "all", SegmentBytes: 64 * mib, Producers: 1, Size: 1024, MsgsPerSec: ptr(4000.0), P99Ns: ptr(int64(1000))}
	drain := Row{Kind: kindDrain, Method: drainConsume, Sync: "all", SegmentBytes: 64 * mib, Size: 1024, MsgsPerSec: ptr(50000.0)}
	const said = "walbench sweep compares segment sizes"
	rec := recommend([]Row{pub, drain})
	if rec == nil || rec.Basis != "profile" {
		t.Fatalf("recommendation %+v; want one from the profile", rec)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); !strings.Contains(text, said) {
		t.Errorf("the profile's recommendation does not say that it compared no segment sizes:\n%s", text)
	}
	rec = recommend(slices.Concat(grid("all", 4*mib, [3]float64{4000, 30000, 60000}, 50000), grid("all", 64*mib, [3]float64{4000, 30000, 60000}, 50000)))
	if rec == nil || rec.Basis != "sweep" {
		t.Fatalf("recommendation %+v; want one from the sweep", rec)
	}
	if text := strings.Join(recommendationLines(rec), "\n"); strings.Contains(text, said) {
		t.Errorf("the sweep's recommendation, which compared segment sizes, says it compared none:\n%s", text)
	}
}

// TestSweepRecommendationSaysWhatItDidNotCompare: a sweep given one
// segment size (-segment-bytes 4MiB), or one durable sync mode (-sync
// publish), recommends it for want of another, not because it did better
// than the others: the recommendation says that it compared none, as the
// profile's says of its one segment size. A sweep that measured several,
// or was to and ended before them (named as not measured), says nothing
// of the kind.
func TestSweepRecommendationSaysWhatItDidNotCompare(t *testing.T) {
	const (
		sizes = "the sweep measured 4 MiB segments alone"
		syncs = "the sweep measured sync=publish alone"
	)
	pub := [3]float64{4000, 30000, 60000}
	for _, tc := range []struct {
		name     string
		rows     []Row
		notMeas  []Setting
		say, not []string
	}{
		{"one segment size", slices.Concat(grid("all", 4*mib, pub, 50000), grid("publish", 4*mib, pub, 90000)), nil, []string{sizes}, []string{"sync mode:"}},
		{"one sync mode", slices.Concat(grid("publish", 4*mib, pub, 90000), grid("publish", 64*mib, pub, 90000)), nil, []string{syncs}, []string{"segment size:"}},
		{"one setting", grid("publish", 4*mib, pub, 90000), nil, []string{sizes, syncs}, nil},
		{"both compared", slices.Concat(grid("all", 4*mib, pub, 50000), grid("publish", 64*mib, pub, 90000)), nil, nil, []string{"segment size:", "sync mode:"}},
		{"the others not reached", grid("publish", 4*mib, pub, 90000), []Setting{{Sync: "all", SegmentBytes: 64 * mib}}, nil, []string{"segment size:", "sync mode:"}},
	} {
		rec := recommend(slices.Concat(tc.rows, grid("none", 64*mib, pub, 90000)))
		if rec == nil || rec.Basis != "sweep" {
			t.Fatalf("%s: recommendation %+v; want one from the sweep", tc.name, rec)
		}
		rec.NotMeasured = tc.notMeas
		text := strings.Join(recommendationLines(rec), "\n")
		for _, s := range tc.say {
			if !strings.Contains(text, s) {
				t.Errorf("%s: the recommendation does not say %q:\n%s", tc.name, s, text)
			}
		}
		for _, s := range tc.not {
			if strings.Contains(text, s) {
				t.Errorf("%s: the recommendation says %q, which it compared:\n%s", tc.name, s, text)
			}
		}
	}
}

// TestRecommendationOfSmallSegmentsSaysTheMessageBound: segments of about
// 1 MiB or less hold no message of the default bound, so a store opened as
// the recommendation says refuses a queue declared with the default
// policy (QueueMisconfigured). The recommendation of such a segment size
// says what each queue must be declared with, and a store opened with its
// settings takes a queue declared so; one of larger segments says nothing
// of it.
func TestRecommendationOfSmallSegmentsSaysTheMessageBound(t *testing.T) {
	pub := [3]float64{4000, 30000, 60000}
	for _, tc := range []struct {
		name string
		rows []Row
		seg  int64
	}{
		{"sweep", slices.Concat(grid("all", 256<<10, pub, 90000), grid("all", 64*mib, pub, 50000)), 256 << 10},
		{"profile", []Row{
			{Kind: kindPublish, Sync: "all", SegmentBytes: mib, Producers: 1, Size: 1024, MsgsPerSec: ptr(4000.0), P99Ns: ptr(int64(1000))},
			{Kind: kindDrain, Method: drainConsume, Sync: "all", SegmentBytes: mib, Size: 1024, MsgsPerSec: ptr(50000.0)},
		}, mib},
		{"default segments", slices.Concat(grid("all", 2*mib, pub, 50000), grid("all", 64*mib, pub, 90000)), 64 * mib},
		{"2 MiB segments", slices.Concat(grid("all", 2*mib, pub, 90000), grid("all", 64*mib, pub, 50000)), 2 * mib},
	} {
		rec := recommend(tc.rows)
		if rec == nil || rec.SegmentBytes != tc.seg {
			t.Fatalf("%s: recommendation %+v; want %d-byte segments", tc.name, rec, tc.seg)
		}
		opts := broker.Options{SegmentBytes: rec.SegmentBytes}
		most := opts.MaxMessageBytes()
		text := strings.Join(recommendationLines(rec), "\n")
		if most >= broker.DefaultMaxMessageBytes {
			if rec.MaxMessageBytes != 0 || strings.Contains(text, "MaxMessageBytes") {
				t.Errorf("%s: max_message_bytes %d, text:\n%s\nwant nothing said: the default policy fits in %d-byte segments", tc.name, rec.MaxMessageBytes, text, tc.seg)
			}
			continue
		}
		if rec.MaxMessageBytes != most {
			t.Errorf("%s: max_message_bytes %d; want %d, what %d-byte segments hold", tc.name, rec.MaxMessageBytes, most, tc.seg)
		}
		if want := fmt.Sprintf("MaxMessageBytes: %d", most); !strings.Contains(text, want) {
			t.Errorf("%s: the recommendation of %d-byte segments does not say %q:\n%s", tc.name, tc.seg, want, text)
		}
		// The advice works: a queue declared as it says is taken, one
		// declared with the default policy is not.
		s, err := broker.Open(t.TempDir(), opts)
		if err != nil {
			t.Fatal(err)
		}
		policy := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}
		if _, err := s.Queue("default", policy); !errors.Is(err, broker.QueueMisconfigured) {
			t.Errorf("%s: a queue of the default policy in %d-byte segments: %v; want QueueMisconfigured", tc.name, tc.seg, err)
		}
		policy.MaxMessageBytes = rec.MaxMessageBytes
		if _, err := s.Queue("advised", policy); err != nil {
			t.Errorf("%s: a queue declared as the recommendation says: %v", tc.name, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
