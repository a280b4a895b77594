package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// The broker workloads run the store of package broker as an application
// would, on a fresh store each: producers publishing, consumers draining a
// backlog. They show what the broker's own work costs on top of the log's.

// brokerQueue is the name of the one queue of every store walbench opens.
const brokerQueue = "bench"

// brokerPolicy is the queue's policy: leases long enough that no message
// is delivered twice during a drain. A store refuses a queue whose largest
// message would not fit in one of its segments: with segments of less
// than twice the default bound, the bound is the workload's message size.
func brokerPolicy(segmentBytes int64, payloadBytes int) broker.PolicyValue {
	p := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}
	if segmentBytes > 0 && segmentBytes < 2*broker.DefaultMaxMessageBytes {
		p.MaxMessageBytes = max(payloadBytes, 1)
	}
	return p
}

// fillBatch is how many messages one PublishBatch of a drain's prefill
// carries, unless they do not fit in one log segment.
const fillBatch = 256

var (
	// errStalled is the cause that ends a drain in which nothing was
	// handled for the hang timeout.
	errStalled = errors.New("stalled")
	// errDrainLimit is the cause that ends a drain at its time limit.
	errDrainLimit = errors.New("time limit reached")
)

// brokerPublishLoad is one publish workload: producers goroutines, each
// calling Publish with one payload of payloadBytes in a loop, on the one
// queue of a new store under SyncAll.
type brokerPublishLoad struct {
	producers    int
	payloadBytes int
	segmentBytes int64 // zero: the broker's default
	warmup       time.Duration
	duration     time.Duration

	hangTimeout time.Duration // for tests; zero: hangTimeout
}

func (b brokerPublishLoad) String() string {
	s := "s"
	if b.producers == 1 {
		s = ""
	}
	return fmt.Sprintf("broker publish, %d producer%s, %d B, sync=all", b.producers, s, b.payloadBytes)
}

// brokerPublishResult is what one publish workload measured. The counts
// are deltas of Store.Stats over the window.
type brokerPublishResult struct {
	load        brokerPublishLoad
	window      window
	records     int64 // log records: one per Publish
	commits     int64 // fdatasyncs
	hist        *Histogram
	interrupted bool
	notes       []string // what looked wrong in the store's counters
}

// drainMethod is how a drain workload takes the messages off the queue.
type drainMethod int

const (
	// drainConsume runs broker.Consume with a handler that only counts.
	drainConsume drainMethod = iota
	// drainReceiveAck runs goroutines that each call Receive and then Ack
	// each delivery, one call after the other.
	drainReceiveAck
)

func (m drainMethod) String() string {
	if m == drainConsume {
		return "consume"
	}
	return "receive-ack"
}

// brokerDrainLoad is one drain workload: a new store's queue is filled with
// messages payloads of payloadBytes, untimed, and then drained, timed.
type brokerDrainLoad struct {
	method drainMethod
	sync   broker.SyncMode
	// consumers is ConsumeOptions.Concurrency (drainConsume) or the number
	// of goroutines calling Receive and Ack (drainReceiveAck); batch is
	// ConsumeOptions.Batch or Receive's max.
	consumers    int
	batch        int
	messages     int
	payloadBytes int
	segmentBytes int64 // zero: the broker's default
	// limit, when positive, ends the drain after that long even if
	// messages are left: the rate is then of those handled.
	limit time.Duration

	// For tests: how long a drain may go without handling a message, and
	// how long the broker gets to return from calls in flight after the
	// drain and from Close (zero: hangTimeout).
	hangTimeout time.Duration
}

func (d brokerDrainLoad) String() string {
	if d.method == drainConsume {
		return fmt.Sprintf("broker drain via Consume, %d×%d, sync=%v", d.batch, d.consumers, d.sync)
	}
	s := "s"
	if d.consumers == 1 {
		s = ""
	}
	return fmt.Sprintf("broker drain via Receive+Ack, %d consumer%s, batch %d, sync=%v", d.consumers, s, d.batch, d.sync)
}

// brokerDrainResult is what one drain measured. The counts are deltas of
// Store.Stats over the drain.
type brokerDrainResult struct {
	load        brokerDrainLoad
	fill        time.Duration // the untimed prefill
	elapsed     time.Duration // from the drain's start until every call it made returned
	opened      bool          // false: cut short during the prefill
	handled     int64         // messages handled and acked
	limited     bool          // the drain reached its time limit with messages left
	records     int64         // log records: leases and acks
	commits     int64         // fdatasyncs
	interrupted bool
	notes       []string // what looked wrong in the store's counters
}

// brokerStore is the new store of one broker workload, in its own
// directory, with its queue.
type brokerStore struct {
	what fmt.Stringer // the workload, for errors
	hang time.Duration
	dir  string // "" if not made
	s    *broker.Store
	q    *broker.Queue
	// leaveOpen: release does not close the store, which hung.
	leaveOpen bool
}

// openBrokerStore opens a new store under sync in a new subdirectory of
// parent, and declares its queue. The caller defers release, also after an
// error; the error returned is prefixed with what.
func openBrokerStore(what fmt.Stringer, hang time.Duration, parent, pattern string, sync broker.SyncMode, segmentBytes int64, payloadBytes int) (st *brokerStore, err error) {
	st = &brokerStore{what: what, hang: hang}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%v: %w", what, err)
		}
	}()
	st.dir, err = os.MkdirTemp(parent, pattern)
	if err != nil {
		st.dir = ""
		return st, err
	}
	st.s, err = broker.Open(st.dir, broker.Options{Sync: sync, SegmentBytes: segmentBytes})
	if err != nil {
		st.s = nil
		return st, fmt.Errorf("broker.Open: %w", err)
	}
	st.q, err = st.s.Queue(brokerQueue, brokerPolicy(segmentBytes, payloadBytes))
	if err != nil {
		return st, fmt.Errorf("Queue: %w", err)
	}
	return st, nil
}

// release closes the store, unless it hung, and removes its directory,
// joining what fails to *err.
func (st *brokerStore) release(err *error) {
	if st.s != nil && !st.leaveOpen {
		*err = errors.Join(*err, closeWithin(st.s, st.hang, st.what))
	}
	if st.dir != "" {
		if rerr := os.RemoveAll(st.dir); rerr != nil {
			*err = errors.Join(*err, fmt.Errorf("%v: remove store directory: %w", st.what, rerr))
		}
	}
}

// randomPayload returns n random bytes, the same for the same seed:
// nothing below may compress, skip or dedupe them.
func randomPayload(n int, seed uint64) []byte {
	p := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// runBrokerPublish opens a new store in a new subdirectory of parent, runs
// b on its queue, and closes and removes it. ctx ending stops the workload
// early; what was measured until then is returned with interrupted set.
func runBrokerPublish(ctx context.Context, progress io.Writer, parent string, b brokerPublishLoad) (res brokerPublishResult, err error) {
	res = brokerPublishResult{load: b, hist: new(Histogram)}
	hang := orHangTimeout(b.hangTimeout)
	st, err := openBrokerStore(b, hang, parent, fmt.Sprintf("broker-publish-%d-", b.producers), broker.SyncAll, b.segmentBytes, b.payloadBytes)
	defer st.release(&err)
	if err != nil {
		return res, err
	}
	s, q := st.s, st.q
	start := s.Stats() // the store's own records (its secret, the queue) are before it

	// A failed Publish ends the window; every producer stops. The
	// producers' calls do not take ctx: the gate stops them, and a Publish
	// refused because Ctrl-C came is not a failure of the broker.
	lr := closedLoop[broker.StoreStats]{
		label: b.String(), workers: b.producers, warmup: b.warmup, duration: b.duration, hang: hang,
		worker: "producer", call: "Publish",
		newOp: func(i int) func() error {
			payload := randomPayload(b.payloadBytes, uint64(i))
			return func() error { _, err := q.Publish(context.Background(), payload); return err }
		},
		stats: s.Stats,
	}.run(ctx, progress)
	res.window = lr.window
	if lr.hung {
		// Close would wait for the same stuck commit; leave the store open
		// (os.Exit ends it) and let the caller remove its directory.
		st.leaveOpen = true
		return res, fmt.Errorf("%v: the broker hung: producers still inside Publish %v after the window closed (store Stats now: %+v)", b, hang, s.Stats())
	}
	if lr.err != nil {
		return res, fmt.Errorf("%v: %w", b, lr.err)
	}
	res.interrupted = ctx.Err() != nil

	res.hist = lr.hist
	res.records = lr.after.Records - lr.before.Records
	res.commits = lr.after.Commits - lr.before.Commits

	// Cross-check the store's counters with what the producers saw: this
	// store is new and nobody else writes to it.
	final := s.Stats()
	// The store's own records (segment preambles, copies forward) aside.
	grew := (final.Records - final.OwnRecords) - (start.Records - start.OwnRecords)
	if n := lr.succeeded; grew != n {
		res.notes = append(res.notes, fmt.Sprintf("store Stats().Records less OwnRecords grew by %d, but %d Publishes of one message succeeded", grew, n))
	}
	if qs := q.Stats(); qs.Published != lr.succeeded {
		res.notes = append(res.notes, fmt.Sprintf("queue Stats().Published = %d, but %d Publishes succeeded", qs.Published, lr.succeeded))
	}
	if final.MaxRecordsPerCommit > int64(b.producers) && start.MaxRecordsPerCommit <= int64(b.producers) && final.OwnRecords == start.OwnRecords {
		res.notes = append(res.notes, fmt.Sprintf("store Stats().MaxRecordsPerCommit = %d with only %d producers, each waiting for its commit", final.MaxRecordsPerCommit, b.producers))
	}
	if res.records > 0 && res.commits == 0 {
		res.notes = append(res.notes, fmt.Sprintf("store Stats() counted %d records but no commit under sync=all", res.records))
	}
	return res, nil
}

// runBrokerDrain opens a new store in a new subdirectory of parent, fills
// its queue with d.messages messages, drains them as d says, and closes and
// removes the store. ctx ending stops it early; what was measured until
// then is returned with interrupted set. A drain that handles no message
// for the hang timeout fails.
func runBrokerDrain(ctx context.Context, progress io.Writer, parent string, d brokerDrainLoad) (res brokerDrainResult, err error) {
	res = brokerDrainResult{load: d}
	hang := orHangTimeout(d.hangTimeout)
	st, err := openBrokerStore(d, hang, parent, fmt.Sprintf("broker-drain-%v-%v-%d-", d.method, d.sync, d.consumers), d.sync, d.segmentBytes, d.payloadBytes)
	defer st.release(&err)
	if err != nil {
		return res, err
	}
	s, q := st.s, st.q

	t0 := time.Now()
	if interrupted, err := fillQueue(ctx, q, d.messages, d.payloadBytes); err != nil || interrupted {
		res.interrupted = interrupted
		if err != nil {
			err = fmt.Errorf("%v: prefill: %w", d, err)
		}
		return res, err
	}
	res.fill = time.Since(t0)
	if qs := q.Stats(); qs.Ready != d.messages {
		res.notes = append(res.notes, fmt.Sprintf("after the prefill of %d messages, queue Stats().Ready = %d", d.messages, qs.Ready))
	}

	// drainCtx ends when every message was handled (cause nil), when ctx
	// ends, when a call fails (cause: its error) or when the drain stalls
	// (errStalled).
	drainCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var handled atomic.Int64
	done := make(chan struct{})
	before := s.Stats()
	start := time.Now()
	res.opened = true
	if d.limit > 0 {
		t := time.AfterFunc(d.limit, func() { cancel(errDrainLimit) })
		defer t.Stop()
	}
	switch d.method {
	case drainConsume:
		go func() {
			defer close(done)
			err := broker.Consume(drainCtx, q, func(context.Context, broker.DeliveryValue) error {
				if handled.Add(1) == int64(d.messages) {
					cancel(nil)
				}
				return nil
			}, broker.ConsumeOptions{Batch: d.batch, Concurrency: d.consumers})
			if err != nil && drainCtx.Err() == nil {
				cancel(fmt.Errorf("Consume: %w", err))
			}
		}()
	case drainReceiveAck:
		go func() {
			defer close(done)
			receiveAck(drainCtx, cancel, q, d, &handled)
		}()
	}
	stalled := watchDrain(drainCtx, progress, d, &handled, start, hang, done)
	if stalled {
		cancel(errStalled)
	}
	if !waitTimeout(done, hang) {
		st.leaveOpen = true
		return res, fmt.Errorf("%v: the broker hung: calls still in flight %v after the drain ended, %d of %d messages handled (store Stats now: %+v, queue Stats: %+v)",
			d, hang, handled.Load(), d.messages, s.Stats(), q.Stats())
	}
	res.elapsed = time.Since(start)
	after := s.Stats()
	res.handled = handled.Load()
	res.records = after.Records - before.Records
	own := after.OwnRecords - before.OwnRecords
	res.commits = after.Commits - before.Commits
	cause := context.Cause(drainCtx)
	res.limited = cause == errDrainLimit && res.handled < int64(d.messages)
	if cause != nil && cause != context.Canceled && cause != errDrainLimit && cause != context.Cause(ctx) {
		if errors.Is(cause, errStalled) {
			return res, fmt.Errorf("%v: %w: no message handled for %v, %d of %d handled (store Stats: %+v, queue Stats: %+v)",
				d, errStalled, hang, res.handled, d.messages, after, q.Stats())
		}
		return res, fmt.Errorf("%v: %w", d, cause)
	}
	res.interrupted = ctx.Err() != nil && res.handled < int64(d.messages)
	if res.interrupted || res.limited {
		return res, nil
	}

	// Every message was leased once and acked once: nothing else may have
	// happened in the store.
	qs := q.Stats()
	if qs.Acked != int64(d.messages) || qs.Ready != 0 || qs.Leased != 0 || qs.Delivered != int64(d.messages) {
		res.notes = append(res.notes, fmt.Sprintf("after draining %d messages, queue Stats: %d acked, %d delivered, %d ready, %d leased",
			d.messages, qs.Acked, qs.Delivered, qs.Ready, qs.Leased))
	}
	if res.records-own != 2*int64(d.messages) {
		res.notes = append(res.notes, fmt.Sprintf("store Stats().Records less OwnRecords grew by %d during the drain of %d messages; want one lease and one ack each, %d",
			res.records-own, d.messages, 2*d.messages))
	}
	return res, nil
}

// fillQueue publishes n payloads of size bytes to q, in batches of
// fillBatch, or fewer when a batch does not fit in one log segment. It
// reports whether ctx ended it first.
func fillQueue(ctx context.Context, q *broker.Queue, n, size int) (interrupted bool, err error) {
	payload := randomPayload(size, 0)
	batch := make([][]byte, fillBatch)
	for i := range batch {
		batch[i] = payload
	}
	for n > 0 {
		if ctx.Err() != nil {
			return true, nil
		}
		k := min(n, len(batch))
		_, err := q.PublishBatch(context.Background(), batch[:k])
		if errors.Is(err, broker.InvalidBatchSize) && k > 1 {
			batch = batch[:k/2]
			continue
		}
		if err != nil {
			return false, fmt.Errorf("PublishBatch of %d: %w", k, err)
		}
		n -= k
	}
	return false, nil
}

// receiveAck runs d.consumers goroutines that each Receive up to d.batch
// messages and Ack them one by one, until d.messages were received or ctx
// ends. The first failure cancels ctx with its error as the cause.
func receiveAck(ctx context.Context, cancel context.CancelCauseFunc, q *broker.Queue, d brokerDrainLoad, handled *atomic.Int64) {
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
			for ctx.Err() == nil && received.Load() < int64(d.messages) {
				ds, err := q.Receive(bg, d.batch)
				if err != nil {
					cancel(fmt.Errorf("consumer %d: Receive: %w", i, err))
					return
				}
				if len(ds) == 0 {
					// Another consumer leased the last messages and has not
					// counted them yet.
					time.Sleep(100 * time.Microsecond)
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
					if handled.Add(1) == int64(d.messages) {
						cancel(nil)
					}
				}
			}
		})
	}
	wg.Wait()
}

// watchDrain waits until ctx ends or done is closed. Each second it prints
// the drain's progress on progress, once the drain has run for two. It
// reports true when no message was handled for hang.
func watchDrain(ctx context.Context, progress io.Writer, d brokerDrainLoad, handled *atomic.Int64, start time.Time, hang time.Duration, done <-chan struct{}) (stalled bool) {
	const check = 100 * time.Millisecond
	ticker := time.NewTicker(min(check, hang))
	defer ticker.Stop()
	last, lastAt, lastPrint := handled.Load(), time.Now(), start
	for {
		select {
		case <-ctx.Done():
			return false
		case <-done:
			return false
		case now := <-ticker.C:
			n := handled.Load()
			if n != last {
				last, lastAt = n, now
			} else if now.Sub(lastAt) >= hang {
				return true
			}
			if now.Sub(start) >= 2*time.Second && now.Sub(lastPrint) >= time.Second {
				lastPrint = now
				fmt.Fprintf(progress, "%v: %d/%d messages after %v\n", d, n, d.messages, now.Sub(start).Round(time.Second))
			}
		}
	}
}
