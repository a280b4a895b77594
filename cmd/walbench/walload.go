package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// walLoad is one WAL workload: appenders goroutines, each calling
// Append(rec) with one record of recordBytes in a loop, on a fresh log.
type walLoad struct {
	appenders    int
	recordBytes  int
	sync         wal.SyncMode
	segmentBytes int64 // zero: wal.DefaultSegmentBytes
	segments     segmentSource
	warmup       time.Duration
	duration     time.Duration

	// For tests: the log's file system (nil: vfs.Default) and how long a
	// hang may last (zero: hangTimeout).
	fs          vfs.FS
	hangTimeout time.Duration
}

func (w walLoad) String() string {
	s := fmt.Sprintf("wal append, %s, %d B, sync=%v", plural(w.appenders, "appender"), w.recordBytes, w.sync)
	if w.segments == reusedSegments {
		s += ", segments reused"
	}
	return s
}

// segmentSource is where a log's rotations take their next segment from.
//
// A log that only grows has nothing to reuse: the log writes each new
// segment full of zeros in the background before it is needed (see
// segment.Create), so the disk writes every byte twice, and at high rates
// the zero-fill's writeback queues in front of the commits' fdatasyncs. A
// log whose reader keeps up retires its old segments (RemoveBelow), and
// its rotations reuse them, writing nothing ahead. The broker's store is
// the one or the other as its consumers keep up with its producers.
type segmentSource int

const (
	newSegments    segmentSource = iota // the log only grows
	reusedSegments                      // a trimmer retires what is behind
)

func (s segmentSource) String() string {
	if s == reusedSegments {
		return "reused"
	}
	return "new"
}

// trimEvery is how often a reused-segments workload's trimmer retires the
// segments behind the log's end.
const trimEvery = 2 * time.Millisecond

// trimmer retires, every trimEvery until stop is closed, every segment of
// l but the active one, as a reader that keeps up would let it. So the
// retired file a rotation reuses was retired a whole segment earlier, and a
// trimmer a little late never makes a rotation write zeros. It returns the
// first error of RemoveBelow.
func trimmer(l *wal.Log, stop <-chan struct{}) error {
	t := time.NewTicker(trimEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		if end := l.End().Segment(); end > 1 {
			if _, err := l.RemoveBelow(wal.MakePosition(end, 0)); err != nil {
				return fmt.Errorf("wal RemoveBelow: %w", err)
			}
		}
	}
}

// reusesWanted is how many rotations fillUntilReused waits to see reuse a
// retired segment: after two, the log has a spare at each rotation.
const reusesWanted = 2

// fillUntilReused appends batches of records of the workload's size to
// l, untimed, until reusesWanted of its rotations have reused a retired
// segment (trimmer running): from then on each rotation finds one. It
// stops early, with ctx's error, when ctx ends.
func fillUntilReused(ctx context.Context, l *wal.Log, recordBytes int, segmentBytes int64) error {
	rec := make([]byte, recordBytes)
	// Batches of up to 1 MiB, and a quarter of a segment at most: a
	// batch must fit in one.
	batchBytes := min(1<<20, int(segmentBytes/4))
	batch := make([][]byte, max(1, batchBytes/(recordBytes+64)))
	for i := range batch {
		batch[i] = rec
	}
	for l.Stats().RecycledSegments < reusesWanted {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := l.Append(batch...); err != nil {
			return fmt.Errorf("filling the log until it reuses its segments: %w", err)
		}
	}
	return nil
}

// runWAL opens a new log in a new subdirectory of parent, runs w on it and
// closes and removes it. ctx ending stops the workload early, as for
// runPublish. The log alone shows what the broker adds to it.
func runWAL(ctx context.Context, env *env, parent string, w walLoad) (r Row, measured bool, err error) {
	hang := orHangTimeout(w.hangTimeout)
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("wal-%v-%d-", w.sync, w.appenders))
	if err != nil {
		return r, false, fmt.Errorf("%v: %w", w, err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%v: remove log directory: %w", w, rerr))
		}
	}()
	l, err := wal.Open(dir, wal.Options{FS: w.fs, SegmentBytes: w.segmentBytes, Sync: w.sync})
	if err != nil {
		return r, false, fmt.Errorf("%v: wal.Open: %w", w, err)
	}
	closeLog := true
	defer func() {
		if !closeLog {
			return
		}
		cerr := closeWithin(l, hang, w)
		if err != nil && errors.Is(cerr, wal.ErrPoisoned) {
			cerr = nil // the poison again: the failed Append already said it
		}
		err = errors.Join(err, cerr)
	}()

	if w.segments == reusedSegments {
		stop := make(chan struct{})
		trimmed := make(chan error, 1)
		go func() { trimmed <- trimmer(l, stop) }()
		defer func() {
			close(stop)
			if terr := <-trimmed; terr != nil {
				err = errors.Join(err, fmt.Errorf("%v: %w", w, terr))
			}
		}()
		stopTrack := env.progress.track(w.String()+": fill", reusesWanted, func() int64 { return l.Stats().RecycledSegments },
			func(n int64) string { return fmt.Sprintf("%d/%d rotations reused a segment", n, reusesWanted) })
		ferr := fillUntilReused(ctx, l, w.recordBytes, effectiveSegmentBytes(w.segmentBytes))
		stopTrack()
		if ferr != nil {
			if ctx.Err() != nil {
				return r, false, nil
			}
			return r, false, fmt.Errorf("%v: %w", w, ferr)
		}
	}

	filled := l.Stats().Records

	// A failed Append ends the window; every appender stops.
	lr := closedLoop[wal.Stats]{
		label: w.String(), workers: w.appenders, warmup: w.warmup, duration: w.duration, hang: hang,
		worker: "appender", call: "Append",
		opened: func() { env.windowOpened(w.String()) },
		newOp: func(i int) func() error {
			rec := make([]byte, w.recordBytes)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for j := range rec {
				rec[j] = byte(rng.Uint32())
			}
			return func() error { _, err := l.Append(rec); return err }
		},
		stats: l.Stats,
		progress: func() int64 {
			st := l.Stats()
			return st.Syncs + st.Records + st.Writes
		},
	}.run(ctx, env.progress)
	if lr.hung {
		// Close would wait for the same stuck writer; leave the log open
		// (the process's exit ends it) and let the caller remove its
		// directory.
		closeLog = false
		return r, false, fmt.Errorf("%v: the log hung: appenders still inside Append after the window closed, %d of %d, none returning and no write made for %v (wal Stats now: %+v)",
			w, lr.inside, w.appenders, hang, l.Stats())
	}
	if lr.err != nil {
		return r, false, fmt.Errorf("%v: %w", w, lr.err)
	}
	if !lr.window.opened {
		return r, false, nil
	}
	before, after := lr.before, lr.after
	secs := lr.window.elapsed.Seconds()
	r = Row{
		Kind:           kindWAL,
		Workload:       w.String(),
		Sync:           w.sync.String(),
		Producers:      w.appenders,
		Size:           w.recordBytes,
		SegmentBytes:   effectiveSegmentBytes(w.segmentBytes),
		Seconds:        secs,
		Interrupted:    lr.window.interrupted,
		Segments:       w.segments.String(),
		Ops:            after.Records - before.Records,
		Commits:        after.Syncs - before.Syncs,
		Rotations:      after.Rotations - before.Rotations,
		NewSegments:    (after.Rotations - before.Rotations) - (after.RecycledSegments - before.RecycledSegments),
		RushedSegments: after.ZeroFillsRushed - before.ZeroFillsRushed,
		LatencySamples: lr.hist.TotalCount(),
	}
	r.setRates(r.Ops)
	lat := percentilesOf(lr.hist)
	r.P50Ns, r.P99Ns, r.P999Ns, r.MaxNs = lat.p50, lat.p99, lat.p999, lat.max

	// Cross-check the log's counters with what the appenders saw: this
	// log is new and nobody else appends to it.
	final := l.Stats()
	if n := lr.succeeded; final.Records-filled != n {
		r.Notes = append(r.Notes, fmt.Sprintf("wal Stats().Records grew by %d, but %d Appends of one record succeeded", final.Records-filled, n))
	}
	if w.segments == reusedSegments && r.NewSegments > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of the window's %d rotations found no retired segment to reuse and took one written full of zeros", r.NewSegments, r.Rotations))
	}
	if w.sync == wal.SyncAlways && w.segments == newSegments && final.MaxRecordsPerSync > int64(w.appenders) { // the fill's batches are larger
		r.Notes = append(r.Notes, fmt.Sprintf("wal Stats().MaxRecordsPerSync = %d with only %d appenders, each waiting for its fdatasync", final.MaxRecordsPerSync, w.appenders))
	}
	if w.sync == wal.SyncAlways && r.Ops > 0 && r.Commits == 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("wal Stats() counted %d records but no fdatasync under sync=always", r.Ops))
	}
	return r, true, nil
}
