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
	warmup       time.Duration
	duration     time.Duration

	// For tests: the log's file system (nil: vfs.Default) and how long a
	// hang may last (zero: hangTimeout).
	fs          vfs.FS
	hangTimeout time.Duration
}

func (w walLoad) String() string {
	return fmt.Sprintf("wal append, %s, %d B, sync=%v", plural(w.appenders, "appender"), w.recordBytes, w.sync)
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

	// A failed Append ends the window; every appender stops.
	lr := closedLoop[wal.Stats]{
		label: w.String(), workers: w.appenders, warmup: w.warmup, duration: w.duration, hang: hang,
		worker: "appender", call: "Append",
		newOp: func(i int) func() error {
			rec := make([]byte, w.recordBytes)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for j := range rec {
				rec[j] = byte(rng.Uint32())
			}
			return func() error { _, err := l.Append(rec); return err }
		},
		stats: l.Stats,
	}.run(ctx, env.progress)
	if lr.hung {
		// Close would wait for the same stuck writer; leave the log open
		// (the process's exit ends it) and let the caller remove its
		// directory.
		closeLog = false
		return r, false, fmt.Errorf("%v: the log hung: appenders still inside Append %v after the window closed (wal Stats now: %+v)", w, hang, l.Stats())
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
		Ops:            after.Records - before.Records,
		Commits:        after.Syncs - before.Syncs,
		LatencySamples: lr.hist.TotalCount(),
	}
	r.MsgsPerSec = rate(r.Ops, secs)
	if bytes := rate(r.Ops*int64(w.recordBytes), secs); bytes != nil {
		r.MBPerSec = ptr(*bytes / 1e6)
	}
	r.CommitsPerSec = rate(r.Commits, secs)
	if r.Commits > 0 {
		r.RecordsPerCommit = ptr(float64(r.Ops) / float64(r.Commits))
	}
	lat := percentilesOf(lr.hist)
	r.P50Ns, r.P99Ns, r.P999Ns, r.MaxNs = lat.p50, lat.p99, lat.p999, lat.max

	// Cross-check the log's counters with what the appenders saw: this
	// log is new and nobody else appends to it.
	final := l.Stats()
	if n := lr.succeeded; final.Records != n {
		r.Notes = append(r.Notes, fmt.Sprintf("wal Stats().Records = %d, but %d Appends of one record succeeded", final.Records, n))
	}
	if w.sync == wal.SyncAlways && final.MaxRecordsPerSync > int64(w.appenders) {
		r.Notes = append(r.Notes, fmt.Sprintf("wal Stats().MaxRecordsPerSync = %d with only %d appenders, each waiting for its fdatasync", final.MaxRecordsPerSync, w.appenders))
	}
	if w.sync == wal.SyncAlways && r.Ops > 0 && r.Commits == 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("wal Stats() counted %d records but no fdatasync under sync=always", r.Ops))
	}
	return r, true, nil
}
