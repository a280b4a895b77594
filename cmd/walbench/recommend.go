package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/wal"
)

// Recommendation is what walbench advises for this disk, from the figures
// of the run: the store's settings (Options.Sync and SegmentBytes) that
// moved the most durable messages, and what to expect with them. Its
// JSON form is documented in doc.go.
type Recommendation struct {
	// Basis is where it comes from: "sweep" (the sweep's grid) or
	// "profile" (the publish and drain workloads).
	Basis string `json:"basis"`
	// PublishOnly: the profile measured no drain whole (Ctrl-C or a
	// failure stopped it first), so the scores are publish rates alone,
	// and the sync modes, which only the drains tell apart, were not
	// compared: those the drains were to measure are in Unscored or
	// NotMeasured.
	PublishOnly  bool   `json:"publish_only,omitempty"`
	Sync         string `json:"sync"`
	SegmentBytes int64  `json:"segment_bytes"`
	// MaxMessageBytes is the largest message a store of SegmentBytes
	// segments takes (broker.Options.MaxMessageBytes), when that is less
	// than the default policy's bound, broker.DefaultMaxMessageBytes:
	// each queue must then be declared with a PolicyValue.MaxMessageBytes
	// of at most this, or the store refuses it (QueueMisconfigured). 0
	// when the default fits.
	MaxMessageBytes int `json:"max_message_bytes,omitempty"`
	// Size is the message size the expectations are for.
	Size int `json:"size"`
	// Producers is the fewest concurrent producers measured that reached
	// at least producersShare of the best durable publish rate at these
	// settings: what it takes to get most of what the disk gives. Its
	// figures are MsgsPerSec and P99Ns; BestProducers' are Best*.
	Producers         int      `json:"producers"`
	MsgsPerSec        float64  `json:"msgs_per_sec"`
	P99Ns             *int64   `json:"p99_ns"`
	BestProducers     int      `json:"best_producers"`
	BestMsgsPerSec    float64  `json:"best_msgs_per_sec"`
	BestP99Ns         *int64   `json:"best_p99_ns"`
	DrainMsgsPerSec   *float64 `json:"drain_msgs_per_sec"`
	PublishMeasuredAs string   `json:"publish_measured_as"` // the sync mode the publish figures were measured under
	// Scores ranks every durable setting measured, best first.
	Scores []Score `json:"scores"`
	// NotDurable is the best publish rate measured under SyncNone, which
	// is never recommended: a power loss loses what its last SyncInterval
	// acknowledged. Nil if none was measured.
	NotDurable *float64 `json:"not_durable_msgs_per_sec"`
	// InMemory is the file system of the run's directory when it keeps
	// its files in memory (tmpfs, ramfs): every figure is then the CPU's,
	// not a disk's. "" for any other.
	InMemory string `json:"in_memory"`
	// Unscored are the durable settings measured only in workloads Ctrl-C
	// cut short, or in sweep points whose drain failed: not scored, so
	// not recommended. Their figures would be of half a point (a sweep's
	// window without its drain), and compared with whole ones.
	Unscored []Setting `json:"unscored,omitempty"`
	// NotMeasured are the durable settings a sweep, or the drains of a
	// profile the recommendation comes from, was to measure that the run
	// ended before (a failure, or Ctrl-C), and the points of the sweep it
	// skipped in every round because their estimated memory did not fit
	// (Producers and Size set): the recommendation did not compare them.
	NotMeasured []Setting `json:"not_measured,omitempty"`
}

// notMeasured returns the durable settings among syncs × segments that no
// sweep row measured, a run that ended early never having reached them,
// then the durable points of skipped, the points the sweep skipped for
// their memory. A setting whose points were skipped is not listed whole:
// its points are. A point skipped in some rounds and measured in others
// has a row, and was compared: it is not listed (its row says in how many
// rounds it was measured, and its note in how many skipped).
func notMeasured(rows []Row, syncs []broker.SyncMode, segments []int64, skipped []Setting) []Setting {
	seen := map[Setting]bool{}
	measured := map[Setting]bool{}
	for _, r := range rows {
		if r.Kind == kindSweep {
			seen[Setting{Sync: r.Sync, SegmentBytes: r.SegmentBytes}] = true
			measured[rowPoint(r)] = true
		}
	}
	for _, k := range skipped {
		seen[k.setting()] = true
	}
	var out []Setting
	for _, m := range syncs {
		for _, seg := range segments {
			s := Setting{Sync: m.String(), SegmentBytes: effectiveSegmentBytes(seg)}
			if durable(s.Sync) && !seen[s] && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	for _, k := range skipped {
		if durable(k.Sync) && !measured[k.point()] {
			out = append(out, k)
		}
	}
	return out
}

// durablesSkipped is the error of a run that ended whole with no
// recommendation while its sweep skipped durable points for their memory:
// none is made because of them, not because no durable sync mode was asked
// for. nil when no durable point was skipped.
func durablesSkipped(skipped []Setting) error {
	var names []string
	for _, k := range skipped {
		if durable(k.Sync) {
			names = append(names, fmt.Sprintf("%s × %d B, sync=%s, %s segments (about %s, %s available)",
				plural(k.Producers, "producer"), k.Size, k.Sync, formatBytes(k.SegmentBytes), formatMemory(k.MemoryBytes), formatMemory(k.AvailableBytes)))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("sweep: no recommendation: %s, its estimated memory above %.0f%% of what this machine had available (lower -producers or -size, or pass -force-memory): %s",
		durablesSkippedText, 100*memoryShare, strings.Join(names, "; "))
}

// durablesSkippedText is in the error durablesSkipped returns, which the
// report keeps as text: noRecommendation looks for it there.
const durablesSkippedText = "every point under a durable sync mode was skipped"

// setNotMeasured sets rec.NotMeasured for a run that had a sweep of syncs
// × segments (see notMeasured), whatever rec's basis: a sweep cut short in
// its first points leaves the profile's workloads to decide, and the
// settings it never reached were not compared all the same. Those the
// profile's points scored were, and are not listed.
func (rec *Recommendation) setNotMeasured(rows []Row, syncs []broker.SyncMode, segments []int64, skipped []Setting) {
	rec.NotMeasured = slices.DeleteFunc(notMeasured(rows, syncs, segments, skipped), func(s Setting) bool {
		return s.Producers == 0 && slices.ContainsFunc(rec.Scores, func(sc Score) bool { return sc.Sync == s.Sync && sc.SegmentBytes == s.SegmentBytes })
	})
}

// setDrainsNotMeasured adds to rec.NotMeasured, for a recommendation from
// the profile, the durable settings its Consume drains under syncs (with
// segments of segmentBytes) were to tell apart that the run ended before
// draining under: the profile's publishes are measured under one sync
// mode, and stand for the others only with their drains. Those its points
// scored, and those a drain cut short left in rec.Unscored, are not
// listed.
func (rec *Recommendation) setDrainsNotMeasured(rows []Row, syncs []broker.SyncMode, segmentBytes int64) {
	for _, m := range syncs {
		s := Setting{Sync: m.String(), SegmentBytes: effectiveSegmentBytes(segmentBytes)}
		reached := slices.ContainsFunc(rows, func(r Row) bool { return r.Kind == kindDrain && r.Method == drainConsume && r.Sync == s.Sync })
		scored := slices.ContainsFunc(rec.Scores, func(sc Score) bool { return sc.Sync == s.Sync })
		if durable(s.Sync) && !reached && !scored && !slices.Contains(rec.Unscored, s) && !slices.Contains(rec.NotMeasured, s) {
			rec.NotMeasured = append(rec.NotMeasured, s)
		}
	}
}

// Setting is a store's durable setting, as the recommendation compares
// them.
type Setting struct {
	Sync         string `json:"sync"`
	SegmentBytes int64  `json:"segment_bytes"`
	// Producers and Size, when set, make it one point of a sweep's grid,
	// skipped because MemoryBytes, its estimated peak memory, did not fit
	// in AvailableBytes, the memory then available (see memory.go).
	Producers      int   `json:"producers,omitempty"`
	Size           int   `json:"size,omitempty"`
	MemoryBytes    int64 `json:"memory_bytes,omitempty"`
	AvailableBytes int64 `json:"available_bytes,omitempty"`
}

// setting is s without its point.
func (s Setting) setting() Setting { return Setting{Sync: s.Sync, SegmentBytes: s.SegmentBytes} }

// point is s without its memory figures: which point of the grid it is.
func (s Setting) point() Setting {
	s.MemoryBytes, s.AvailableBytes = 0, 0
	return s
}

// Score is how one setting did: the geometric mean, over the Points
// (producers × size) every setting scored was measured at (all of its own
// when they share none), of the rate at which messages passed through the
// queue (through: publish and drain taking turns on the disk, or the
// publish rate where no drain was measured).
type Score struct {
	Sync         string  `json:"sync"`
	SegmentBytes int64   `json:"segment_bytes"`
	MsgsPerSec   float64 `json:"msgs_per_sec"`
	Points       int     `json:"points"`
}

const (
	// producersShare is the share of the best durable publish rate that
	// the recommended concurrency reaches.
	producersShare = 0.8
	// tieMargin: settings whose scores are this close are as good as each
	// other on a noisy disk; the safer or default one is recommended.
	tieMargin = 0.03
	// defaultSize is the message size the expectations are for when the
	// run measured it.
	defaultSize = 1024
)

// recPoint is one measured point, as the recommendation sees it.
type recPoint struct {
	sync         string
	segmentBytes int64
	producers    int
	size         int
	publish      float64
	p99          *int64
	drain        *float64
	// through is the rate of messages through the queue, publish and
	// drain taking turns, the median of the rounds' (a sweep's as its row
	// has it, the profile's from each round's publish and drain); nil:
	// computed from publish and drain.
	through    *float64
	measuredAs string
}

// recommend makes the recommendation from the summary rows of a run: from
// its sweep rows if it has any whole one, else from its publish and drain
// rows. Only what ran to its end is scored (see wholeRounds). It returns
// nil when there is nothing durable to recommend from.
func recommend(rows []Row) *Recommendation {
	points, unscored := sweepPoints(rows)
	basis := "sweep"
	if len(points) == 0 {
		// A sweep cut short in its first points leaves the profile's
		// workloads to decide; the settings it left without a whole point
		// stay unscored, unless the profile's points score them.
		sweepUnscored := unscored
		points, unscored = profilePoints(rows)
		basis = "profile"
		for _, s := range sweepUnscored {
			if !slices.ContainsFunc(points, func(p recPoint) bool { return p.sync == s.Sync && p.segmentBytes == s.SegmentBytes }) &&
				!slices.Contains(unscored, s) {
				unscored = append(unscored, s)
			}
		}
	}
	var notDurable *float64
	var durablePoints []recPoint
	for _, p := range points {
		if p.sync == broker.SyncNone.String() {
			if notDurable == nil || p.publish > *notDurable {
				notDurable = ptr(p.publish)
			}
			continue
		}
		durablePoints = append(durablePoints, p)
	}
	if len(durablePoints) == 0 {
		return nil
	}
	scores := scoreSettings(durablePoints)
	best := scores[0]
	rec := &Recommendation{
		Basis: basis, Sync: best.Sync, SegmentBytes: best.SegmentBytes,
		Scores: scores, NotDurable: notDurable, Unscored: unscored,
		PublishOnly: basis == "profile" && !slices.ContainsFunc(durablePoints, func(p recPoint) bool { return p.drain != nil }),
	}
	if most := (broker.Options{SegmentBytes: best.SegmentBytes}).MaxMessageBytes(); most < broker.DefaultMaxMessageBytes {
		rec.MaxMessageBytes = most
	}
	var chosen []recPoint
	for _, p := range durablePoints {
		if p.sync == best.Sync && p.segmentBytes == best.SegmentBytes {
			chosen = append(chosen, p)
		}
	}
	rec.Size = expectationSize(chosen)
	var bySize []recPoint
	for _, p := range chosen {
		if p.size == rec.Size {
			bySize = append(bySize, p)
		}
	}
	slices.SortStableFunc(bySize, func(a, b recPoint) int { return cmp.Compare(a.producers, b.producers) })
	top := slices.MaxFunc(bySize, func(a, b recPoint) int { return cmp.Compare(a.publish, b.publish) })
	rec.BestProducers, rec.BestMsgsPerSec, rec.BestP99Ns = top.producers, top.publish, top.p99
	for _, p := range bySize {
		if p.publish >= producersShare*top.publish {
			rec.Producers, rec.MsgsPerSec, rec.P99Ns = p.producers, p.publish, p.p99
			rec.DrainMsgsPerSec, rec.PublishMeasuredAs = p.drain, p.measuredAs
			break
		}
	}
	return rec
}

// sweepPoints are the points of the sweep rows, from their whole rounds,
// and the durable settings an interruption left without a whole point.
func sweepPoints(rows []Row) (points []recPoint, unscored []Setting) {
	var cut []Setting
	scored := map[Setting]bool{}
	for _, r := range rows {
		if r.Kind != kindSweep {
			continue
		}
		s := Setting{Sync: r.Sync, SegmentBytes: r.SegmentBytes}
		w, ok := wholeRounds(r)
		if !ok {
			if durable(r.Sync) && !slices.Contains(cut, s) {
				cut = append(cut, s)
			}
			continue
		}
		if !publishedAny(w) {
			continue
		}
		scored[s] = true
		points = append(points, recPoint{
			sync: w.Sync, segmentBytes: w.SegmentBytes, producers: w.Producers, size: w.Size,
			publish: *w.MsgsPerSec, p99: w.P99Ns, drain: w.DrainMsgsPerSec, through: w.ThroughMsgsPerSec, measuredAs: w.Sync,
		})
	}
	for _, s := range cut {
		if !scored[s] {
			unscored = append(unscored, s)
		}
	}
	return points, unscored
}

// wholeRounds is r as the recommendation may score it: only the rounds of
// it that ran to their end, neither Ctrl-C cutting them short nor a
// failed drain (a sweep point's window and drain both: a window alone
// would be scored on its publish rate and compared with others' publish
// and drain). It is r when all did, the summary of those that did when
// some did, and ok is false when none did.
func wholeRounds(r Row) (w Row, ok bool) {
	if len(r.PerRound) == 0 {
		return r, !r.Interrupted && !r.DrainFailed
	}
	var whole []Row
	for _, pr := range r.PerRound {
		if !pr.Interrupted && !pr.DrainFailed {
			whole = append(whole, pr)
		}
	}
	switch len(whole) {
	case 0:
		return r, false
	case len(r.PerRound):
		return r, true
	}
	return summarize(whole, len(whole) > 1), true
}

// publishedAny reports whether the window of r published a message: a
// window that did not (too short, or cut at once) says nothing of the
// setting, and a rate of 0 would win no score, only spoil one.
func publishedAny(r Row) bool { return r.MsgsPerSec != nil && *r.MsgsPerSec > 0 }

// noRecommendation says why a run that ends with a recommendation has
// none, or is "" when it has one or was not to make one.
func noRecommendation(rep *Report) string {
	switch {
	case rep.Recommendation != nil:
		return ""
	case rep.Command != "profile" && rep.Command != kindSweep && rep.Command != "full":
		return ""
	}
	publishes, durables, cut := false, false, false
	for _, r := range rep.Rows {
		if r.Kind != kindPublish && r.Kind != kindSweep {
			continue
		}
		publishes = true
		if !durable(r.Sync) {
			continue
		}
		durables = true
		if _, whole := wholeRounds(r); !whole {
			cut = true
		}
	}
	// A run cut short before its first durable workload may have had one
	// to come: only a run that ended whole shows that none was asked for.
	ended := !rep.Interrupted && rep.Error == ""
	switch {
	case !durables && strings.Contains(rep.Error, durablesSkippedText):
		return "No recommendation: " + durablesSkippedText + " for its estimated memory (see the error)."
	case !publishes && rep.Interrupted:
		return "No recommendation: the run was interrupted before its publish workloads ran."
	case !publishes && rep.Error != "":
		return "No recommendation: the run failed before its publish workloads ran."
	case !durables && ended:
		return "No recommendation: no durable sync mode was measured (add -sync all or publish)."
	case (cut || !durables) && rep.Interrupted:
		return "No recommendation: the run was interrupted before a publish workload under a durable sync mode (all or publish) was measured whole."
	case cut || !durables:
		return "No recommendation: the run failed before a publish workload under a durable sync mode (all or publish) was measured whole."
	}
	return "No recommendation: no publish workload under a durable sync mode (all or publish) published a message."
}

// profilePoints are the points of the publish rows, each paired with the
// Consume drain of each sync mode the run drained under, all from their
// whole rounds (see wholeRounds). Under SyncAll and SyncPublish a Publish
// waits for the same fdatasync, so publish rows measured under either
// stand for both; the drain tells them apart. Where no drain was measured
// whole, the publish rows stand alone, scored under the sync mode they
// were measured under. A durable mode whose drain was cut short, and that
// no point scores, is returned in unscored.
// A point's through rate is the median of its rounds' (see roundsThrough).
func profilePoints(rows []Row) (points []recPoint, unscored []Setting) {
	drains := map[string]Row{} // the first whole Consume drain of each sync mode, its whole rounds
	var order []string
	var cut []Setting
	for _, r := range rows {
		if r.Kind != kindDrain || r.Method != drainConsume {
			continue
		}
		w, ok := wholeRounds(r)
		if !ok || w.MsgsPerSec == nil {
			if s := (Setting{Sync: r.Sync, SegmentBytes: r.SegmentBytes}); !ok && durable(r.Sync) && !slices.Contains(cut, s) {
				cut = append(cut, s)
			}
			continue
		}
		if _, ok := drains[r.Sync]; !ok {
			drains[r.Sync] = w
			order = append(order, r.Sync)
		}
	}
	for _, r := range rows {
		w, ok := wholeRounds(r)
		if r.Kind != kindPublish || !ok || !publishedAny(w) {
			continue
		}
		p := recPoint{
			sync: w.Sync, segmentBytes: w.SegmentBytes, producers: w.Producers, size: w.Size,
			publish: *w.MsgsPerSec, p99: w.P99Ns, measuredAs: w.Sync,
		}
		if !durable(w.Sync) || len(drains) == 0 {
			points = append(points, p)
			continue
		}
		for _, s := range order {
			if durable(s) {
				q := p
				q.sync, q.drain, q.through = s, drains[s].MsgsPerSec, roundsThrough(w, drains[s])
				points = append(points, q)
			}
		}
	}
	if len(points) > 0 {
		for _, s := range cut {
			if !slices.ContainsFunc(points, func(p recPoint) bool { return p.sync == s.Sync }) {
				unscored = append(unscored, s)
			}
		}
	}
	return points, unscored
}

// roundsThrough is the rate at which messages went through the queue with
// the publishes of pub and the drains of drain, both their whole rounds:
// each round's publish with that round's drain, as a sweep point's
// through is, and the median over the rounds that measured both; not the
// formula on the medians, which pairs a publish with a drain of another
// round. Nil when no round measured both (then the medians are paired).
func roundsThrough(pub, drain Row) *float64 {
	roundsOf := func(r Row) []Row {
		if len(r.PerRound) == 0 {
			return []Row{r}
		}
		return r.PerRound
	}
	var xs []float64
	for _, p := range roundsOf(pub) {
		for _, d := range roundsOf(drain) {
			if d.Round != p.Round {
				continue
			}
			if t := through(p.MsgsPerSec, d.MsgsPerSec); t != nil && d.MsgsPerSec != nil {
				xs = append(xs, *t)
			}
		}
	}
	m, ok := median(xs)
	if !ok {
		return nil
	}
	return &m
}

// scoreSettings scores each setting (sync mode, segment size) of points,
// best first, on the (producers, size) pairs every setting was measured
// at (all of its own if they share none). Scores within tieMargin of the
// best are ordered SyncAll first, then the default segment size, then the
// larger segments.
func scoreSettings(points []recPoint) []Score {
	type setting struct {
		sync string
		seg  int64
	}
	type key struct{ producers, size int }
	bySetting := map[setting]map[key]float64{}
	var settings []setting
	for _, p := range points {
		s := setting{p.sync, p.segmentBytes}
		if bySetting[s] == nil {
			bySetting[s] = map[key]float64{}
			settings = append(settings, s)
		}
		t := p.through
		if t == nil {
			t = through(&p.publish, p.drain)
		}
		if t != nil {
			bySetting[s][key{p.producers, p.size}] = *t
		}
	}
	common := map[key]bool{}
	for k := range bySetting[settings[0]] {
		common[k] = true
	}
	for _, s := range settings[1:] {
		for k := range common {
			if _, ok := bySetting[s][k]; !ok {
				delete(common, k)
			}
		}
	}
	var scores []Score
	for _, s := range settings {
		var logSum float64
		n := 0
		for k, v := range bySetting[s] {
			if len(common) > 0 && !common[k] {
				continue
			}
			logSum += math.Log(max(v, 1e-9))
			n++
		}
		sc := Score{Sync: s.sync, SegmentBytes: s.seg, Points: n}
		if n > 0 {
			sc.MsgsPerSec = math.Exp(logSum / float64(n))
		}
		scores = append(scores, sc)
	}
	slices.SortStableFunc(scores, func(a, b Score) int { return cmp.Compare(b.MsgsPerSec, a.MsgsPerSec) })
	top := scores[0].MsgsPerSec
	tied := 0
	for tied < len(scores) && scores[tied].MsgsPerSec >= (1-tieMargin)*top {
		tied++
	}
	slices.SortStableFunc(scores[:tied], func(a, b Score) int {
		return cmp.Or(
			cmp.Compare(syncSafety(a.Sync), syncSafety(b.Sync)),
			cmp.Compare(segmentPreference(a.SegmentBytes), segmentPreference(b.SegmentBytes)),
			cmp.Compare(b.SegmentBytes, a.SegmentBytes),
			cmp.Compare(b.MsgsPerSec, a.MsgsPerSec),
		)
	})
	return scores
}

// syncSafety orders sync modes, the one that keeps the most first.
func syncSafety(s string) int {
	switch s {
	case broker.SyncAll.String():
		return 0
	case broker.SyncPublish.String():
		return 1
	}
	return 2
}

// segmentPreference puts the default segment size first.
func segmentPreference(n int64) int {
	if n == wal.DefaultSegmentBytes {
		return 0
	}
	return 1
}

// expectationSize is defaultSize if points measured it, else the smallest
// size they did.
func expectationSize(points []recPoint) int {
	size := 0
	for _, p := range points {
		if p.size == defaultSize {
			return defaultSize
		}
		if size == 0 || p.size < size {
			size = p.size
		}
	}
	return size
}

// recommendationLines says rec in words: a heading, then one line per
// point. The text is made from rec's fields alone.
func recommendationLines(rec *Recommendation) []string {
	mode := "broker.SyncAll"
	if rec.Sync == broker.SyncPublish.String() {
		mode = "broker.SyncPublish"
	}
	seg := fmt.Sprintf("SegmentBytes: %d << 20", rec.SegmentBytes>>20)
	if rec.SegmentBytes%(1<<20) != 0 {
		seg = fmt.Sprintf("SegmentBytes: %d", rec.SegmentBytes)
	}
	if rec.SegmentBytes == wal.DefaultSegmentBytes {
		seg = "SegmentBytes: 0 (the default, 64 MiB)"
	}
	from, scored := "the publish and drain workloads", "msgs/s through the queue, publish and drain taking turns"
	switch {
	case rec.Basis == kindSweep:
		from = "the sweep"
	case rec.PublishOnly:
		from = "the publish workloads alone, the run having ended before a drain was measured whole"
		scored = "msgs/s published, no drain having been measured to tell the sync modes apart"
	}
	lines := []string{
		fmt.Sprintf("Recommendation for this disk, from %s:", from),
		fmt.Sprintf("settings: broker.Options{Sync: %s, %s}", mode, seg),
	}
	if rec.MaxMessageBytes > 0 {
		// Segments this small hold no message of the default bound: a
		// queue declared with the default policy would be refused.
		lines = append(lines, fmt.Sprintf("queues: a message must fit in one segment: declare each with broker.PolicyValue{MaxMessageBytes: %d} or less (the default, %s, is refused with QueueMisconfigured in %s segments)",
			rec.MaxMessageBytes, formatBytes(broker.DefaultMaxMessageBytes), formatBytes(rec.SegmentBytes)))
	}
	pub := fmt.Sprintf("expect: %s durable msgs/s of %d B, p99 %s, from %s publishing at once",
		count(&rec.MsgsPerSec), rec.Size, latency(rec.P99Ns), plural(rec.Producers, "producer"))
	if rec.BestProducers != rec.Producers {
		pub += fmt.Sprintf(" (at least %.0f%% of the best measured: %s msgs/s, p99 %s, with %d)",
			100*producersShare, count(&rec.BestMsgsPerSec), latency(rec.BestP99Ns), rec.BestProducers)
	}
	if rec.PublishMeasuredAs != "" && rec.PublishMeasuredAs != rec.Sync {
		pub += fmt.Sprintf("; measured under sync=%s, where a Publish waits for the same fdatasync", rec.PublishMeasuredAs)
	}
	lines = append(lines, pub)
	lines = append(lines, "publish from as many goroutines as that, or batch with PublishBatch: each Publish waits for an fdatasync, which concurrent calls share")
	if rec.DrainMsgsPerSec != nil {
		lines = append(lines, fmt.Sprintf("consume: Consume drained %s msgs/s under these settings", count(rec.DrainMsgsPerSec)))
	}
	var scores []string
	for _, s := range rec.Scores {
		scores = append(scores, fmt.Sprintf("sync=%s, %s segments: %s", s.Sync, formatBytes(s.SegmentBytes), count(&s.MsgsPerSec)))
	}
	lines = append(lines, fmt.Sprintf("scores (%s; geometric mean over the points they share, each its own where they share none; within %.0f%% of the best is a tie, which SyncAll, then the default segment size, wins): %s",
		scored, 100*tieMargin, strings.Join(scores, "; ")))
	if rec.Basis == "profile" {
		// Its workloads share one segment size: SegmentBytes is that size,
		// not one chosen among others.
		lines = append(lines, fmt.Sprintf("segment size: the profile measured %s segments alone (-segment-bytes); walbench sweep compares segment sizes", formatBytes(rec.SegmentBytes)))
	}
	if rec.Basis == kindSweep {
		// A sweep given one segment size, or one durable sync mode, chose
		// it for want of another. Those it was to measure and did not are
		// in Unscored and NotMeasured, and said below.
		segments, syncs := map[int64]bool{}, map[string]bool{}
		for _, s := range slices.Concat(rec.Unscored, rec.NotMeasured) {
			segments[s.SegmentBytes], syncs[s.Sync] = true, true
		}
		for _, s := range rec.Scores {
			segments[s.SegmentBytes], syncs[s.Sync] = true, true
		}
		if len(segments) == 1 {
			lines = append(lines, fmt.Sprintf("segment size: the sweep measured %s segments alone (-segment-bytes), so it compared none; give -segment-bytes several sizes to compare them", formatBytes(rec.SegmentBytes)))
		}
		if len(syncs) == 1 {
			lines = append(lines, fmt.Sprintf("sync mode: the sweep measured sync=%s alone of the durable modes (-sync), so it compared none; give -sync all,publish to compare them", rec.Sync))
		}
	}
	if len(rec.Unscored) > 0 {
		var cut []string
		for _, u := range rec.Unscored {
			cut = append(cut, fmt.Sprintf("sync=%s, %s segments", u.Sync, formatBytes(u.SegmentBytes)))
		}
		lines = append(lines, fmt.Sprintf("not scored, the run having been interrupted or having failed before any of their workloads was measured whole: %s", strings.Join(cut, "; ")))
	}
	var never, tooLarge []string
	for _, u := range rec.NotMeasured {
		if u.Producers == 0 {
			never = append(never, fmt.Sprintf("sync=%s, %s segments", u.Sync, formatBytes(u.SegmentBytes)))
			continue
		}
		tooLarge = append(tooLarge, fmt.Sprintf("%s × %d B, sync=%s, %s segments (about %s, %s available)",
			plural(u.Producers, "producer"), u.Size, u.Sync, formatBytes(u.SegmentBytes), formatMemory(u.MemoryBytes), formatMemory(u.AvailableBytes)))
	}
	if len(never) > 0 {
		lines = append(lines, fmt.Sprintf("not measured, the run having ended before them, so not compared: %s; this recommendation is only among the settings above", strings.Join(never, "; ")))
	}
	if len(tooLarge) > 0 {
		lines = append(lines, fmt.Sprintf("not measured, their estimated memory being above %.0f%% of what this machine had available, so not compared (lower -producers or -size, or pass -force-memory): %s",
			100*memoryShare, strings.Join(tooLarge, "; ")))
	}
	switch rec.Sync {
	case broker.SyncPublish.String():
		lines = append(lines, "SyncPublish: a Publish is on the device when it returns, as under SyncAll; a lease or an ack reaches it with the next commit, so after a power loss a few messages may be delivered again; keep SyncAll (the default) where that matters more than the difference in the scores")
	default:
		lines = append(lines, "SyncAll, the default: every call that changes state is on the device when it returns")
	}
	if rec.NotDurable != nil {
		lines = append(lines, fmt.Sprintf("sync=none published up to %s msgs/s, but is not durable: a power loss loses what its last SyncInterval acknowledged", count(rec.NotDurable)))
	}
	if rec.InMemory != "" {
		lines = append(lines, memoryWarning(rec.InMemory))
	}
	return lines
}
