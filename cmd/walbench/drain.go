package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

var (
	// errStalled is the cause that ends a drain in which nothing was
	// handled for the hang timeout.
	errStalled = errors.New("stalled")
	// errDrainLimit is the cause that ends a drain at its time limit.
	errDrainLimit = errors.New("time limit reached")
)

// Drain methods: how a drain takes the messages off the queue.
const (
	// drainConsume runs broker.Consume with a handler that only counts.
	drainConsume = "consume"
	// drainReceiveAck runs goroutines that each call Receive and then Ack
	// each delivery, one call after the other.
	drainReceiveAck = "receive-ack"
)

// drainLoad is one drain workload: the queue of a new store is filled,
// untimed, with messages payloads of size bytes, then drained, timed.
type drainLoad struct {
	method string
	sync   broker.SyncMode
	// consumers is ConsumeOptions.Concurrency (drainConsume) or the number
	// of goroutines calling Receive and Ack (drainReceiveAck); batch is
	// ConsumeOptions.Batch or Receive's max; prefetch is
	// ConsumeOptions.Prefetch (drainConsume only).
	consumers    int
	batch        int
	prefetch     int
	messages     int
	size         int
	segmentBytes int64 // 0: the default
	// limit, when positive, ends the drain after that long even if
	// messages are left: the rate is then of those handled.
	limit time.Duration

	// For tests: the store's file system, and how long a drain may go
	// without handling a message and the broker gets to return from the
	// calls in flight after the drain and from Close (zero: hangTimeout).
	fs          vfs.FS
	hangTimeout time.Duration
}

func (d drainLoad) String() string {
	if d.method == drainConsume && d.prefetch > 0 {
		return fmt.Sprintf("drain via Consume, batch %d, concurrency %d, prefetch %d, sync=%v", d.batch, d.consumers, d.prefetch, d.sync)
	}
	if d.method == drainConsume {
		return fmt.Sprintf("drain via Consume, batch %d, concurrency %d, sync=%v", d.batch, d.consumers, d.sync)
	}
	return fmt.Sprintf("drain via Receive+Ack, %s, batch %d, sync=%v", plural(d.consumers, "consumer"), d.batch, d.sync)
}

// drainResult is what a drain measured; the counts are deltas of
// Store.Stats over it.
type drainResult struct {
	elapsed     time.Duration // from the drain's start until every call it made returned
	handled     int64         // messages acked (Receive+Ack) or passed to Consume's handler, counted before Consume acks them
	limited     bool          // the drain reached its time limit with messages left
	records     int64         // log records: leases and acks, and the store's own
	own         int64         // of records, the store's own
	commits     int64         // fdatasyncs
	interrupted bool
}

// runDrain opens a new store in a new subdirectory of parent, fills its
// queue with d.messages messages, drains them as d says, and closes and
// removes the store. ctx ending stops it early: what was measured until
// then is returned, Interrupted set; measured is false when nothing was
// (cut short in the fill).
func runDrain(ctx context.Context, env *env, parent string, d drainLoad) (r Row, measured bool, err error) {
	st, err := openStore(d, d.hangTimeout, parent, fmt.Sprintf("drain-%v-%v-%d-", d.method, d.sync, d.consumers),
		storeOptions{sync: d.sync, segmentBytes: d.segmentBytes, size: d.size, fs: d.fs})
	defer st.release(&err)
	if err != nil {
		return r, false, err
	}
	t0 := time.Now()
	var filled atomic.Int64
	stop := env.progress.track(d.String()+": fill", int64(d.messages), filled.Load,
		func(n int64) string { return fmt.Sprintf("%d/%d messages", n, d.messages) })
	err = fillQueue(ctx, st.q, d.messages, d.size, &filled)
	stop()
	if err != nil {
		return r, false, fmt.Errorf("%v: prefill: %w", d, err)
	}
	if ctx.Err() != nil {
		return r, false, nil
	}
	fill := time.Since(t0)
	var notes []string
	if qs := st.q.Stats(); qs.Ready != d.messages {
		notes = append(notes, fmt.Sprintf("after the prefill of %d messages, queue Stats().Ready = %d", d.messages, qs.Ready))
	}

	res, err := drainOn(ctx, env, st, d, d.messages)
	if err != nil {
		return r, false, err
	}
	secs := res.elapsed.Seconds()
	r = Row{
		Kind:         kindDrain,
		Workload:     d.String(),
		Sync:         d.sync.String(),
		Consumers:    d.consumers,
		Batch:        d.batch,
		Prefetch:     d.prefetch,
		Method:       d.method,
		Size:         d.size,
		SegmentBytes: effectiveSegmentBytes(d.segmentBytes),
		Messages:     d.messages,
		Seconds:      secs,
		FillSeconds:  fill.Seconds(),
		Interrupted:  res.interrupted,
		Limited:      res.limited,
		Ops:          res.handled,
		Commits:      res.commits,
		Notes:        notes,
	}
	r.setRates(res.records - res.own) // its leases and acks
	if res.limited {
		r.Notes = append(r.Notes, fmt.Sprintf("-limit %v ended the drain with %d of %d messages handled: its rate is of those", d.limit, res.handled, d.messages))
	}
	if res.interrupted || res.limited {
		return r, true, nil
	}
	// Every message was leased once and acked once: nothing else may have
	// happened in the store.
	qs := st.q.Stats()
	if qs.Acked != int64(d.messages) || qs.Ready != 0 || qs.Leased != 0 || qs.Delivered != int64(d.messages) {
		r.Notes = append(r.Notes, fmt.Sprintf("after draining %d messages, queue Stats: %d acked, %d delivered, %d ready, %d leased",
			d.messages, qs.Acked, qs.Delivered, qs.Ready, qs.Leased))
	}
	if res.records-res.own != 2*int64(d.messages) {
		r.Notes = append(r.Notes, fmt.Sprintf("store Stats().Records less OwnRecords grew by %d during the drain of %d messages; want one lease and one ack each, %d",
			res.records-res.own, d.messages, 2*d.messages))
	}
	return r, true, nil
}

// drainOn drains n messages from the queue of st as d says (d.messages is
// not used), until they are handled, d.limit passes or ctx ends. A drain
// that handles no message and makes no commit for the hang timeout fails.
func drainOn(ctx context.Context, env *env, st *benchStore, d drainLoad, n int) (res drainResult, err error) {
	s, q := st.s, st.q
	// drainCtx ends when every message was handled (cause nil), when ctx
	// ends, when a call fails (cause: its error), at the time limit
	// (errDrainLimit) or when the drain stalls (errStalled).
	drainCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var handled atomic.Int64
	done := make(chan struct{})
	before := s.Stats()
	start := time.Now()
	if d.limit > 0 {
		t := time.AfterFunc(d.limit, func() { cancel(errDrainLimit) })
		defer t.Stop()
	}
	stop := env.progress.track(d.String(), int64(n), handled.Load,
		func(k int64) string { return fmt.Sprintf("%d/%d messages", k, n) })
	switch d.method {
	case drainConsume:
		go func() {
			defer close(done)
			err := broker.Consume(drainCtx, q, func(context.Context, broker.DeliveryValue) error {
				if handled.Add(1) == int64(n) {
					cancel(nil)
				}
				return nil
			}, broker.ConsumeOptions{Batch: d.batch, Concurrency: d.consumers, Prefetch: d.prefetch})
			if err != nil && drainCtx.Err() == nil {
				cancel(fmt.Errorf("broker.Consume: %w", err))
			}
		}()
	default:
		go func() {
			defer close(done)
			receiveAck(drainCtx, cancel, q, d, n, &handled)
		}()
	}
	hang := st.hang
	store := storeProgress(s)
	progress := func() int64 { return handled.Load() + store() }
	if watchDrain(drainCtx, progress, hang, done) {
		cancel(errStalled)
	}
	stop()
	if !(inFlight{
		done: done, hang: hang, progress: progress,
		label: d.String() + ": the calls in flight", returned: handled.Load,
		format: func(k int64) string { return fmt.Sprintf("%d/%d messages handled", k, n) },
	}).await(env.progress) {
		st.leaveOpen = true
		return res, fmt.Errorf("%v: the broker hung: calls still in flight after the drain ended, no message handled and no commit made for %v, %d of %d messages handled (store Stats now: %+v, queue Stats: %+v)",
			d, hang, handled.Load(), n, s.Stats(), q.Stats())
	}
	res.elapsed = time.Since(start)
	after := s.Stats()
	res.handled = handled.Load()
	res.records = after.Records - before.Records
	res.own = after.OwnRecords - before.OwnRecords
	res.commits = after.Commits - before.Commits
	cause := context.Cause(drainCtx)
	res.limited = cause == errDrainLimit && res.handled < int64(n)
	if cause != nil && cause != context.Canceled && cause != errDrainLimit && cause != context.Cause(ctx) {
		if errors.Is(cause, errStalled) {
			return res, fmt.Errorf("%v: %w: no message handled and no commit made for %v, %d of %d handled (store Stats: %+v, queue Stats: %+v)",
				d, errStalled, hang, res.handled, n, after, q.Stats())
		}
		return res, fmt.Errorf("%v: %w", d, cause)
	}
	res.interrupted = ctx.Err() != nil && res.handled < int64(n)
	return res, nil
}

// receiveAck runs d.consumers goroutines that each Receive up to d.batch
// messages and Ack them one by one, until n were received or ctx ends. The
// first failure cancels ctx with its error as the cause.
func receiveAck(ctx context.Context, cancel context.CancelCauseFunc, q *broker.Queue, d drainLoad, n int, handled *atomic.Int64) {
	var (
		wg       sync.WaitGroup
		received atomic.Int64
	)
	// The calls do not take ctx: a call refused because the drain ended is
	// not a failure of the broker.
	bg := context.Background()
	for i := range d.consumers {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					cancel(fmt.Errorf("consumer %d: panic: %v\n%s", i, r, debug.Stack()))
				}
			}()
			for ctx.Err() == nil && received.Load() < int64(n) {
				w := q.Wake() // before the Receive that may come back empty
				ds, err := q.Receive(bg, d.batch)
				if err != nil {
					cancel(fmt.Errorf("consumer %d: Receive: %w", i, err))
					return
				}
				if len(ds) == 0 {
					// Another consumer leased the last messages and has not
					// counted them yet, or will nack them.
					select {
					case <-w.Signal:
					case <-ctx.Done():
					}
					continue
				}
				received.Add(int64(len(ds)))
				for _, dv := range ds {
					if ctx.Err() != nil {
						return
					}
					if err := q.Ack(bg, dv.Lease.Receipt); err != nil {
						cancel(fmt.Errorf("consumer %d: Ack: %w", i, err))
						return
					}
					if handled.Add(1) == int64(n) {
						cancel(nil)
					}
				}
			}
		})
	}
	wg.Wait()
}

// watchDrain waits until ctx ends or done is closed. It reports true when
// progress (messages handled, commits, records) did not move for hang.
func watchDrain(ctx context.Context, progress func() int64, hang time.Duration, done <-chan struct{}) (stalled bool) {
	moves, stop := pollProgress(progress, pollEvery(hang))
	defer stop()
	ticker := time.NewTicker(pollEvery(hang))
	defer ticker.Stop()
	w := newStallWatch(hang, moves(), time.Now())
	for {
		select {
		case <-ctx.Done():
			return false
		case <-done:
			return false
		case now := <-ticker.C:
			if w.stalled(now, moves()) {
				return true
			}
		}
	}
}
