package main

import (
	"context"
	"fmt"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// publishLoad is one publish workload: producers goroutines, each calling
// Publish with one payload of size bytes in a loop (closed loop: the next
// call starts when the last returns), on the queue of a new store.
type publishLoad struct {
	producers    int
	size         int
	sync         broker.SyncMode
	segmentBytes int64 // 0: the default
	warmup       time.Duration
	duration     time.Duration

	// For tests: the store's file system (nil: the real one) and how long
	// a hang may last (zero: hangTimeout).
	fs          vfs.FS
	hangTimeout time.Duration
}

func (l publishLoad) String() string {
	return fmt.Sprintf("publish, %s, %d B, sync=%v", plural(l.producers, "producer"), l.size, l.sync)
}

// plural is "1 producer", "64 producers".
func plural(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (l publishLoad) storeOptions() storeOptions {
	return storeOptions{sync: l.sync, segmentBytes: l.segmentBytes, size: l.size, fs: l.fs}
}

// runPublish opens a new store in a new subdirectory of parent, runs l on
// its queue, and closes and removes it. ctx ending stops the workload
// early: what was measured until then is returned, Interrupted set;
// measured is false when nothing was (cut short in the warm-up).
func runPublish(ctx context.Context, env *env, parent string, l publishLoad) (r Row, measured bool, err error) {
	st, err := openStore(l, l.hangTimeout, parent, fmt.Sprintf("publish-%d-", l.producers), l.storeOptions())
	defer st.release(&err)
	if err != nil {
		return r, false, err
	}
	return publishOn(ctx, env, st, l)
}

// publishOn runs l on the queue of st, a store nothing else writes to.
func publishOn(ctx context.Context, env *env, st *benchStore, l publishLoad) (r Row, measured bool, err error) {
	s, q := st.s, st.q
	start := s.Stats()
	startQueue := q.Stats()

	// A failed Publish ends the window; every producer stops. The calls
	// do not take ctx: the gate stops them, and a Publish refused because
	// Ctrl-C came is not a failure of the broker.
	lr := closedLoop[broker.StoreStats]{
		label: l.String(), workers: l.producers, warmup: l.warmup, duration: l.duration, hang: st.hang,
		worker: "producer", call: "Publish",
		newOp: func(i int) func() error {
			payload := randomPayload(l.size, uint64(i))
			return func() error { _, err := q.Publish(context.Background(), payload); return err }
		},
		stats:    s.Stats,
		opened:   func() { env.windowOpened(l.String()) },
		progress: storeProgress(s),
	}.run(ctx, env.progress)
	if lr.hung {
		// Close would wait for the same stuck commit; leave the store open
		// (the process's exit ends it) and let the caller remove its
		// directory.
		st.leaveOpen = true
		return r, false, fmt.Errorf("%v: the broker hung: producers still inside Publish after the window closed, %d of %d, none returning and no commit made for %v (store Stats now: %+v)",
			l, lr.inside, l.producers, st.hang, s.Stats())
	}
	if lr.err != nil {
		return r, false, fmt.Errorf("%v: %w", l, lr.err)
	}
	if !lr.window.opened {
		return r, false, nil
	}

	secs := lr.window.elapsed.Seconds()
	records := lr.after.Records - lr.before.Records
	r = Row{
		Kind:           kindPublish,
		Workload:       l.String(),
		Sync:           l.sync.String(),
		Producers:      l.producers,
		Size:           l.size,
		SegmentBytes:   effectiveSegmentBytes(l.segmentBytes),
		Seconds:        secs,
		Interrupted:    lr.window.interrupted,
		Ops:            callerRecords(lr.before, lr.after), // one record per Publish
		Commits:        lr.after.Commits - lr.before.Commits,
		LatencySamples: lr.hist.TotalCount(),
	}
	r.setRates(r.Ops)
	lat := percentilesOf(lr.hist)
	r.P50Ns, r.P99Ns, r.P999Ns, r.MaxNs = lat.p50, lat.p99, lat.p999, lat.max

	// Cross-check the store's counters with what the producers saw: this
	// store is new and nobody else writes to it.
	final := s.Stats()
	grew := (final.Records - final.OwnRecords) - (start.Records - start.OwnRecords)
	if n := lr.succeeded; grew != n {
		r.Notes = append(r.Notes, fmt.Sprintf("store Stats().Records less OwnRecords grew by %d, but %d Publishes of one message succeeded", grew, n))
	}
	if qs := q.Stats(); qs.Published-startQueue.Published != lr.succeeded {
		r.Notes = append(r.Notes, fmt.Sprintf("queue Stats().Published grew by %d, but %d Publishes succeeded", qs.Published-startQueue.Published, lr.succeeded))
	}
	if durable(l.sync.String()) {
		if final.MaxRecordsPerCommit > int64(l.producers) && start.MaxRecordsPerCommit <= int64(l.producers) && final.OwnRecords == start.OwnRecords {
			r.Notes = append(r.Notes, fmt.Sprintf("store Stats().MaxRecordsPerCommit = %d with only %d producers, each waiting for its commit", final.MaxRecordsPerCommit, l.producers))
		}
		if records > 0 && r.Commits == 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("store Stats() counted %d records but no commit under sync=%v", records, l.sync))
		}
	}
	return r, true, nil
}
