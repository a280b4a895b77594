package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// hangTimeout is how long the log gets to return from the Appends in flight
// when a window closes, and from Close. Longer means it hung: walbench says
// so and exits rather than wait forever.
const hangTimeout = 20 * time.Second

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
	s := "s"
	if w.appenders == 1 {
		s = ""
	}
	return fmt.Sprintf("wal sync=%v, %d appender%s, %d B", w.sync, w.appenders, s, w.recordBytes)
}

// walResult is what one WAL workload measured. The counts are deltas of
// Log.Stats over the window.
type walResult struct {
	load        walLoad
	window      window
	records     int64
	syncs       int64
	writes      int64
	fileBytes   int64 // bytes the log wrote: records with their framing
	rotations   int64
	hist        *Histogram // one sample per Append started in the window
	interrupted bool
	notes       []string // what looked wrong in the log's counters
}

// runWAL opens a new log in a new subdirectory of parent, runs w on it and
// closes and removes it. ctx ending stops the workload early; what was
// measured until then is returned with interrupted set.
func runWAL(ctx context.Context, progress io.Writer, parent string, w walLoad) (res walResult, err error) {
	res = walResult{load: w, hist: new(Histogram)}
	hang := orHangTimeout(w.hangTimeout)
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("wal-%v-%d-", w.sync, w.appenders))
	if err != nil {
		return res, fmt.Errorf("%v: %w", w, err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%v: remove log directory: %w", w, rerr))
		}
	}()
	l, err := wal.Open(dir, wal.Options{FS: w.fs, SegmentBytes: w.segmentBytes, Sync: w.sync})
	if err != nil {
		return res, fmt.Errorf("%v: wal.Open: %w", w, err)
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
	}.run(ctx, progress)
	res.window = lr.window
	if lr.hung {
		// Close would wait for the same stuck writer; leave the log open
		// (os.Exit ends it) and let the caller remove its directory.
		closeLog = false
		return res, fmt.Errorf("%v: the log hung: appenders still inside Append %v after the window closed (wal Stats now: %+v)", w, hang, l.Stats())
	}
	if lr.err != nil {
		return res, fmt.Errorf("%v: %w", w, lr.err)
	}
	res.interrupted = ctx.Err() != nil

	res.hist = lr.hist
	before, after := lr.before, lr.after
	res.records = after.Records - before.Records
	res.syncs = after.Syncs - before.Syncs
	res.writes = after.Writes - before.Writes
	res.fileBytes = after.BytesWritten - before.BytesWritten
	res.rotations = after.Rotations - before.Rotations

	// Cross-check the log's counters with what the appenders saw: this
	// log is new and nobody else appends to it.
	final := l.Stats()
	if n := lr.succeeded; final.Records != n {
		res.notes = append(res.notes, fmt.Sprintf("wal Stats().Records = %d, but %d Appends of one record succeeded", final.Records, n))
	}
	if w.sync == wal.SyncAlways && final.MaxRecordsPerSync > int64(w.appenders) {
		res.notes = append(res.notes, fmt.Sprintf("wal Stats().MaxRecordsPerSync = %d with only %d appenders, each waiting for its fdatasync", final.MaxRecordsPerSync, w.appenders))
	}
	if w.sync == wal.SyncAlways && res.records > 0 && res.syncs == 0 {
		res.notes = append(res.notes, fmt.Sprintf("wal Stats() counted %d records but no fdatasync under sync=always", res.records))
	}
	return res, nil
}
