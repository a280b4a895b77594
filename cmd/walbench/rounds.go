package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// env is what the workloads share besides their configuration: where
// progress goes, and what tests inject.
type env struct {
	progress *progress
	// For tests: the stores' and logs' file system (nil: the real one),
	// how long a hang may last (zero: hangTimeout), a function called
	// after each probe and each row a round measures, with its name, and
	// one called when the window of a publish, wal, mixed or sweep
	// workload opens, with the workload's name, and when a step of the
	// probe starts, with "probe: " and the step's name (probeFdatasync,
	// ...).
	fs          vfs.FS
	hangTimeout time.Duration
	afterStep   func(name string)
	onWindow    func(name string)
	// outFS is the file system of the files written for the operator
	// (-json, BENCH.md); nil: the real one. For tests.
	outFS vfs.FS
	// memAvailable, when not nil, is the memory available, in place of
	// the system's figure (see available). For tests.
	memAvailable func() (int64, error)
	// freeSpace, when not nil, is the free space of a directory, in place
	// of the file system's figure (see freeBytes). For tests.
	freeSpace func(dir string) (int64, error)
	// skipped are the points of the sweep skipped because their estimated
	// memory did not fit, each once, whatever the round, with the figures
	// of the first round that skipped it; skips counts the rounds that
	// skipped each, by its point().
	skipped []Setting
	skips   map[Setting]int
}

// outputFS is the file system of the files written for the operator.
func (e *env) outputFS() vfs.FS {
	if e.outFS == nil {
		return vfs.Default
	}
	return e.outFS
}

func (e *env) step(name string) {
	if e.afterStep != nil {
		e.afterStep(name)
	}
}

func (e *env) windowOpened(name string) {
	if e.onWindow != nil {
		e.onWindow(name)
	}
}

// job measures one row of a round in a new subdirectory of dir.
type job func(ctx context.Context, e *env, dir string) (r Row, measured bool, err error)

// jobs are the workloads of one round, in order.
func (c *config) jobs(e *env) []job {
	var out []job
	for _, w := range c.workloads {
		switch w {
		case kindWAL:
			for _, n := range c.wal.appenders {
				for _, src := range c.wal.segments {
					l := walLoad{appenders: n, recordBytes: c.wal.size, sync: c.wal.sync, segmentBytes: c.wal.segmentBytes, segments: src,
						warmup: c.warmup, duration: c.wal.duration, fs: e.fs, hangTimeout: e.hangTimeout}
					out = append(out, func(ctx context.Context, e *env, dir string) (Row, bool, error) { return runWAL(ctx, e, dir, l) })
				}
			}
		case kindPublish:
			for _, m := range c.publish.syncs {
				for _, size := range c.publish.sizes {
					for _, n := range c.publish.producers {
						l := publishLoad{producers: n, size: size, sync: m, segmentBytes: c.publish.segmentBytes,
							warmup: c.warmup, duration: c.publish.duration, fs: e.fs, hangTimeout: e.hangTimeout}
						out = append(out, func(ctx context.Context, e *env, dir string) (Row, bool, error) { return runPublish(ctx, e, dir, l) })
					}
				}
			}
		case kindDrain:
			for _, m := range c.drain.syncs {
				for _, b := range c.drain.batches {
					for _, n := range c.drain.consumers {
						l := drainLoad{method: c.drain.method, sync: m, consumers: n, batch: b, prefetch: c.drain.prefetch, messages: c.drain.messages,
							size: c.drain.size, segmentBytes: c.drain.segmentBytes, limit: c.drain.limit, fs: e.fs, hangTimeout: e.hangTimeout}
						out = append(out, func(ctx context.Context, e *env, dir string) (Row, bool, error) { return runDrain(ctx, e, dir, l) })
					}
				}
			}
		case kindMixed:
			for _, rate := range c.mixedRates {
				l := c.mixed
				l.rate, l.warmup, l.fs, l.hangTimeout = rate, c.warmup, e.fs, e.hangTimeout
				out = append(out, func(ctx context.Context, e *env, dir string) (Row, bool, error) { return runMixed(ctx, e, dir, l) })
			}
		case kindSweep:
			l := sweepLoad{warmup: c.warmup, duration: c.sweep.duration, consumers: c.sweep.consumers, batch: c.sweep.batch,
				forceMemory: c.forceMemory, fs: e.fs, hangTimeout: e.hangTimeout}
			for _, p := range sweepGrid(c.sweep.producers, c.sweep.sizes, c.sweep.segments, c.sweep.syncs) {
				out = append(out, func(ctx context.Context, e *env, dir string) (Row, bool, error) {
					return runSweepPoint(ctx, e, dir, l, p)
				})
			}
		}
	}
	return out
}

// ceilings are the (producers, size) pairs whose durable-message ceiling
// the probe computes: those of the closed-loop workloads, and unbounded
// producers for each size.
func (c *config) ceilings() []Ceiling {
	var out []Ceiling
	add := func(producers, sizes []int) {
		for _, s := range sizes {
			for _, p := range append(slices.Clone(producers), 0) {
				if !slices.Contains(out, Ceiling{Producers: p, Size: s}) {
					out = append(out, Ceiling{Producers: p, Size: s})
				}
			}
		}
	}
	if c.command == "probe" {
		add(c.probeProducers, c.probeSizes)
	}
	for _, w := range c.workloads {
		switch w {
		case kindWAL:
			add(c.wal.appenders, []int{c.wal.size})
		case kindPublish:
			add(c.publish.producers, c.publish.sizes)
		case kindSweep:
			add(c.sweep.producers, c.sweep.sizes)
		}
	}
	unboundedLast := func(p int) int {
		if p == 0 {
			return math.MaxInt
		}
		return p
	}
	slices.SortStableFunc(out, func(a, b Ceiling) int {
		return cmp.Or(cmp.Compare(a.Size, b.Size), cmp.Compare(unboundedLast(a.Producers), unboundedLast(b.Producers)))
	})
	return out
}

// measure runs cfg.rounds rounds in dir, then the reopen workload if cfg
// has it, until ctx ends or a measurement fails, and summarizes them. It
// returns what was measured so far with the error.
func measure(ctx context.Context, e *env, dir string, cfg config) (*Report, error) {
	rep := &Report{
		Schema: schemaVersion, Command: cfg.command, Args: cfg.args,
		Machine: describeMachine(dir, time.Now()), Rounds: cfg.rounds, Rows: []Row{},
	}
	var (
		probes []Probe
		rounds [][]Row
		err    error
	)
	jobs := cfg.jobs(e)
	for i := range cfg.rounds {
		if ctx.Err() != nil || (cfg.probeTime <= 0 && len(jobs) == 0) {
			break
		}
		if cfg.rounds > 1 {
			e.progress.printf("round %d/%d", i+1, cfg.rounds)
		}
		var (
			p    *Probe
			rows []Row
		)
		p, rows, err = runRound(ctx, e, dir, cfg, jobs, i+1)
		if p != nil {
			probes = append(probes, *p)
		}
		if len(rows) > 0 {
			rounds = append(rounds, rows)
		}
		if err != nil {
			break
		}
	}
	if err == nil && ctx.Err() == nil && len(e.skipped) > 0 && !slices.ContainsFunc(rounds, func(rows []Row) bool {
		return slices.ContainsFunc(rows, func(r Row) bool { return r.Kind == kindSweep })
	}) {
		// A sweep that measured nothing is not a success: each point it
		// skipped said why on stderr.
		err = fmt.Errorf("sweep: every point skipped, its estimated memory above %.0f%% of what this machine has available: lower -producers or -size, or pass -force-memory", 100*memoryShare)
	}
	if len(probes) > 0 {
		s := summarize(probes, len(probes) > 1)
		// A probe Ctrl-C stopped in its prefill measured nothing: its round
		// stays in PerRound, which says where each round stopped, but is
		// not one of the rounds that measured the probe.
		s.Rounds = 0
		for _, p := range probes {
			if p.measuredAny() {
				s.Rounds++
			}
		}
		rep.Probe = &s
	}
	rep.Rows = append(rep.Rows, summarizeRows(rounds)...)
	noteSkippedRounds(rep.Rows, e, cfg.rounds)
	if cfg.reopen && err == nil && ctx.Err() == nil {
		rep.Reopen, err = measureReopen(ctx, e, dir, cfg.reopenLoad, cfg.rounds)
	}
	if cfg.recommend {
		rep.Recommendation = recommend(rep.Rows)
		if rep.Recommendation == nil && err == nil && ctx.Err() == nil {
			err = durablesSkipped(e.skipped)
		}
		if rep.Recommendation != nil {
			rep.Recommendation.InMemory = inMemory(rep.Machine)
			if slices.Contains(cfg.workloads, kindSweep) {
				rep.Recommendation.setNotMeasured(rep.Rows, cfg.sweep.syncs, cfg.sweep.segments, e.skipped)
			}
			if rep.Recommendation.Basis == "profile" && slices.Contains(cfg.workloads, kindDrain) {
				rep.Recommendation.setDrainsNotMeasured(rep.Rows, cfg.drain.syncs, cfg.drain.segmentBytes)
			}
		}
	}
	return rep, err
}

// runRound runs the probe, then jobs, in order, until ctx ends or one
// fails. It returns what it measured with the error; each ratio in the
// rows is to the probe of this round.
func runRound(ctx context.Context, e *env, dir string, cfg config, jobs []job, round int) (*Probe, []Row, error) {
	var probe *Probe
	if cfg.probeTime > 0 {
		p, err := runProbe(ctx, e, dir, probeLoad{duration: cfg.probeTime, ceilings: cfg.ceilings()})
		p.Round = round
		probe = &p
		if err != nil {
			return probe, nil, err
		}
		e.step("probe")
	}
	var rows []Row
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		r, measured, err := j(ctx, e, dir)
		if measured {
			r.Round = round
			setRatios(&r, probe, rows)
			rows = append(rows, r)
			e.step(r.Workload)
		}
		if err != nil {
			return probe, rows, err
		}
	}
	return probe, rows, nil
}

// setRatios sets the ratios of r, a row of a round whose probe was p (nil:
// none) and whose rows before r are earlier. Only closed-loop rows whose
// every call waits for an fdatasync have them: their rate and latency are
// the disk's business.
func setRatios(r *Row, p *Probe, earlier []Row) {
	waits := (r.Kind == kindPublish || r.Kind == kindSweep) && durable(r.Sync) ||
		r.Kind == kindWAL && r.Sync == wal.SyncAlways.String()
	if !waits {
		return
	}
	if p != nil {
		r.CeilingPerSec = ceiling(*p, r.Producers, r.Size)
		r.VsFdatasync = ratio(r.MsgsPerSec, p.FdatasyncsPerSec)
		r.VsCeiling = ratio(r.MsgsPerSec, r.CeilingPerSec)
		r.P99VsFdatasyncP99 = ratioNs(r.P99Ns, p.FdatasyncP99Ns)
		r.P99VsLargeP99 = ratioNs(r.P99Ns, p.LargeP99Ns)
	}
	if r.Kind != kindPublish {
		return
	}
	for _, w := range earlier {
		// A publish workload's store only grows: compare it with the log
		// that makes new segments too.
		if w.Kind == kindWAL && w.Sync == wal.SyncAlways.String() && w.Segments != reusedSegments.String() &&
			w.Producers == r.Producers && w.Size == r.Size && r.Sync == broker.SyncAll.String() {
			r.VsWAL = ratio(r.MsgsPerSec, w.MsgsPerSec)
			return
		}
	}
}
