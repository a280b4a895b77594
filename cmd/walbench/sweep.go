package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// sweepPoint is one point of the sweep's grid.
type sweepPoint struct {
	producers    int
	size         int
	segmentBytes int64
	sync         broker.SyncMode
}

// sweepLoad is the sweep: at each point of its grid, on a new store, a
// publish window as for publishLoad, then a drain via Consume of every
// message the window left (warm-up included), for at most duration.
type sweepLoad struct {
	warmup, duration time.Duration
	consumers, batch int // of the drains
	// forceMemory: measure every point, however much memory it is
	// estimated to need; otherwise a point that would not fit is skipped.
	forceMemory bool

	fs          vfs.FS
	hangTimeout time.Duration
}

// sweepGrid is every combination of the lists, sync modes outermost and
// producers innermost.
func sweepGrid(producers, sizes []int, segments []int64, syncs []broker.SyncMode) []sweepPoint {
	var grid []sweepPoint
	for _, m := range syncs {
		for _, seg := range segments {
			for _, size := range sizes {
				for _, p := range producers {
					grid = append(grid, sweepPoint{producers: p, size: size, segmentBytes: seg, sync: m})
				}
			}
		}
	}
	return grid
}

func (p sweepPoint) String() string {
	return fmt.Sprintf("%s, %d B, %s segments, sync=%v", plural(p.producers, "producer"), p.size, formatBytes(effectiveSegmentBytes(p.segmentBytes)), p.sync)
}

// runSweepPoint measures point p of l on a new store in a new subdirectory
// of parent, and closes and removes it, as runPublish does.
func runSweepPoint(ctx context.Context, env *env, parent string, l sweepLoad, p sweepPoint) (r Row, measured bool, err error) {
	if skip := l.skipMemory(env, p); skip != nil {
		env.progress.printf("walbench: %v", skip)
		return r, false, nil
	}
	pl := publishLoad{
		producers: p.producers, size: p.size, sync: p.sync, segmentBytes: p.segmentBytes,
		warmup: l.warmup, duration: l.duration, fs: l.fs, hangTimeout: l.hangTimeout,
	}
	st, err := openStore(p, l.hangTimeout, parent, "sweep-", pl.storeOptions())
	defer st.release(&err)
	if err != nil {
		return r, false, err
	}
	r, measured, err = publishOn(ctx, env, st, pl)
	if err != nil {
		// Named as the point, as a failed drain is: the publish load's
		// own name leaves out the segment size, which tells the sweep's
		// points apart.
		return r, measured, fmt.Errorf("sweep, %v: %w", p, err)
	}
	if !measured {
		return r, false, nil
	}
	r.Kind = kindSweep
	r.Workload = "sweep, " + p.String()
	if ctx.Err() != nil {
		// Its drain will not run: the point is not whole, however whole
		// its window was.
		r.Interrupted = true
		return r, true, nil
	}
	backlog := st.q.Stats().Ready
	if backlog == 0 {
		return r, true, nil
	}
	d := drainLoad{method: drainConsume, sync: p.sync, consumers: l.consumers, batch: l.batch, size: p.size, limit: l.duration}
	res, err := drainOn(ctx, env, st, d, backlog)
	if err != nil {
		// Its window is reported, but the point is not whole: scored on
		// its publish rate alone, it would be compared with the others'
		// publish and drain.
		r.DrainFailed = true
		return r, true, fmt.Errorf("sweep, %v: %w", p, err)
	}
	r.Consumers, r.Batch = l.consumers, l.batch
	if res.limited {
		r.Notes = append(r.Notes, fmt.Sprintf("the drain after the window was cut at -time %v with %d of the %d messages left handled: its rate is of those", l.duration, res.handled, backlog))
	}
	r.DrainSeconds = res.elapsed.Seconds()
	r.DrainMsgsPerSec = rate(res.handled, r.DrainSeconds)
	r.ThroughMsgsPerSec = through(r.MsgsPerSec, r.DrainMsgsPerSec)
	r.Interrupted = r.Interrupted || res.interrupted
	return r, true, nil
}

// skipMemory is why point p of l is skipped: its estimated memory does
// not fit in what is available now. Nil when it fits, when l.forceMemory
// is set, or when the available memory cannot be told. A point skipped is
// added to env.skipped, once.
func (l sweepLoad) skipMemory(env *env, p sweepPoint) error {
	if l.forceMemory {
		return nil
	}
	need, lower := l.memory(p)
	available, err := env.available()
	if err != nil {
		return nil // not told (macOS): the point is measured
	}
	err = fitMemory(skippedPoint{p}, need, available, lower)
	if err == nil {
		return nil
	}
	s := Setting{Sync: p.sync.String(), SegmentBytes: effectiveSegmentBytes(p.segmentBytes), Producers: p.producers, Size: p.size,
		MemoryBytes: need, AvailableBytes: available}
	if !slices.ContainsFunc(env.skipped, func(k Setting) bool { return k.point() == s.point() }) {
		env.skipped = append(env.skipped, s)
	}
	if env.skips == nil {
		env.skips = map[Setting]int{}
	}
	env.skips[s.point()]++
	return err
}

// noteSkippedRounds adds a note to each sweep row of rows (summaries of
// rounds rounds) whose point env.skipped in some rounds and measured in
// others: its figures are of fewer rounds, and why.
func noteSkippedRounds(rows []Row, env *env, rounds int) {
	for i, r := range rows {
		if r.Kind != kindSweep {
			continue
		}
		at := slices.IndexFunc(env.skipped, func(k Setting) bool { return k.point() == rowPoint(r) })
		if at < 0 {
			continue
		}
		k := env.skipped[at]
		rows[i].Notes = append(rows[i].Notes, fmt.Sprintf("skipped in %d of %d rounds, its estimated memory, about %s, being above %.0f%% of the %s available then: its figures are of the rounds that measured it",
			env.skips[k.point()], rounds, formatMemory(k.MemoryBytes), 100*memoryShare, formatMemory(k.AvailableBytes)))
	}
}

// rowPoint is the point of the sweep's grid a sweep row measured, as a
// Setting without memory figures.
func rowPoint(r Row) Setting {
	return Setting{Sync: r.Sync, SegmentBytes: r.SegmentBytes, Producers: r.Producers, Size: r.Size}
}

// skippedPoint names a point of the sweep skipped for its memory.
type skippedPoint struct{ p sweepPoint }

func (s skippedPoint) String() string { return fmt.Sprintf("sweep, %v: skipped, not measured", s.p) }

// through is the rate at which messages pass through a queue whose
// producers publish at pub and whose consumers drain at drain, when the
// two take turns on the disk: 1 / (1/pub + 1/drain). It is pub alone
// when drain is unknown.
func through(pub, drain *float64) *float64 {
	switch {
	case pub == nil || *pub <= 0:
		return nil
	case drain == nil:
		return pub
	case *drain <= 0:
		return ptr(0.0)
	}
	return ptr(1 / (1 / *pub + 1 / *drain))
}

// formatBytes says a size in the largest binary unit it is a whole
// number of: "64 MiB", "16 KiB", "1000 B".
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
