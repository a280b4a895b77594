package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// mixedLoad is the mixed workload: producers publishing at a target rate
// while broker.Consume consumers take the messages off the same queue, on
// a new store. Each producer is one goroutine calling Publish: a call
// starts at its scheduled instant, or, when it falls due while the one
// before it still runs, as soon as that returns, and the calls behind it
// follow back to back until the producer is on schedule again. Their
// latency runs from the scheduled instant, so that the wait counts
// against each of them (see recordCorrected).
type mixedLoad struct {
	producers    int
	rate         float64 // messages per second, all producers together
	consumers    int     // ConsumeOptions.Concurrency
	batch        int     // ConsumeOptions.Batch
	size         int     // at least mixedHeaderBytes
	sync         broker.SyncMode
	segmentBytes int64
	warmup       time.Duration
	duration     time.Duration
	sample       time.Duration // between two samples of the backlog

	fs          vfs.FS
	hangTimeout time.Duration
}

// A mixed workload's payload starts with the instant its publish was
// scheduled for, in nanoseconds since the workload's start, and a byte
// that is 1 when it was scheduled inside the window.
const mixedHeaderBytes = 9

func (l mixedLoad) String() string {
	return fmt.Sprintf("mixed, %s at %s msgs/s, Consume batch %d × %d, %d B, sync=%v",
		plural(l.producers, "producer"), strconv.FormatFloat(l.rate, 'f', -1, 64), l.batch, l.consumers, l.size, l.sync)
}

// runMixed opens a new store in a new subdirectory of parent, runs l on it,
// and closes and removes it. ctx ending stops it early, as for runPublish.
func runMixed(ctx context.Context, env *env, parent string, l mixedLoad) (r Row, measured bool, err error) {
	st, err := openStore(l, l.hangTimeout, parent, "mixed-", storeOptions{sync: l.sync, segmentBytes: l.segmentBytes, size: l.size, fs: l.fs})
	defer st.release(&err)
	if err != nil {
		return r, false, err
	}
	s := st.s
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m := &mixedRun{
		l: l, q: st.q, base: time.Now(), cancel: cancel, windowClosed: make(chan struct{}),
		e2e:       newLatencies(),
		corrected: make([]*hdr.Histogram, l.producers),
		service:   make([]*hdr.Histogram, l.producers),
		startLate: make([]lateness, l.producers),
	}

	var consumeWG, prodWG, sampledWG sync.WaitGroup
	consumeCtx, stopConsume := context.WithCancel(runCtx)
	defer stopConsume()
	consumeWG.Go(func() { m.consume(consumeCtx) })
	for i := range l.producers {
		m.corrected[i], m.service[i] = newLatencies(), newLatencies()
		prodWG.Go(func() { m.produce(runCtx, i) })
	}
	sampling := make(chan struct{})
	var before, after broker.StoreStats
	w := runWindow(runCtx, env.progress, l.String(), l.warmup, l.duration, &m.g,
		func() {
			before = s.Stats()
			env.windowOpened(l.String())
			sampledWG.Go(func() { m.sampleBacklog(sampling) })
		},
		func() {
			m.closedAt.Store(int64(time.Since(m.base)))
			after = s.Stats()
			close(sampling)
		})
	close(m.windowClosed)
	sampledWG.Wait()
	store := storeProgress(s)
	if !(inFlight{
		done: wgDone(&prodWG), hang: st.hang, progress: func() int64 { return m.returned.Load() + store() },
		label: l.String() + ": the calls in flight", total: int64(l.producers), returned: m.returned.Load,
		format: func(n int64) string { return fmt.Sprintf("%d/%d producers returned", n, l.producers) },
	}).await(env.progress) {
		st.leaveOpen = true
		return r, false, fmt.Errorf("%v: the broker hung: producers still inside Publish after the window closed, %d of %d, none returning and no commit made for %v (store Stats now: %+v)",
			l, int64(l.producers)-m.returned.Load(), l.producers, st.hang, s.Stats())
	}
	notes := m.awaitConsumers(runCtx)
	stopConsume()
	if !(inFlight{
		done: wgDone(&consumeWG), hang: st.hang, progress: func() int64 { return m.handled.Load() + store() },
		label: l.String() + ": stopping Consume", returned: m.handled.Load,
		format: func(n int64) string { return fmt.Sprintf("%d messages handled", n) },
	}).await(env.progress) {
		st.leaveOpen = true
		return r, false, fmt.Errorf("%v: the broker hung: Consume did not return after it was stopped, no message handled and no commit made for %v", l, st.hang)
	}
	if cause := context.Cause(runCtx); cause != nil && cause != context.Cause(ctx) {
		return r, false, fmt.Errorf("%v: %w", l, cause)
	}
	if !w.opened {
		return r, false, nil
	}
	return m.row(w, after.Commits-before.Commits, callerRecords(before, after), notes), true, nil
}

// mixedRun is one run of a mixedLoad: what its producers, its consumers
// and its backlog sampler share.
type mixedRun struct {
	l      mixedLoad
	q      *broker.Queue
	base   time.Time // the schedule's origin
	cancel context.CancelCauseFunc
	g      gate
	// windowClosed is closed once the window is: a producer waiting for
	// its next instant returns at once, rather than up to an interval
	// later, which a hang verdict would take for a stuck Publish.
	windowClosed chan struct{}
	// closedAt is when the window closed, since base (set before
	// windowClosed is closed; 0: it never opened). A call scheduled
	// before it that a stall kept from starting in the window is still
	// the window's: it is made late, for at most l.duration after.
	closedAt atomic.Int64
	returned atomic.Int64 // producers that returned
	handled  atomic.Int64 // handler calls, warm-up and after the window included
	inWindow atomic.Int64 // of consumed, those handled while the window was open

	e2eMu     sync.Mutex
	e2e       *hdr.Histogram   // guarded by e2eMu while Consume runs; row reads it once Consume returned
	consumed  atomic.Int64     // the window's, handled
	published atomic.Int64     // started in the window, returned
	late      atomic.Int64     // scheduled before the window closed, started after it, returned
	missed    atomic.Int64     // scheduled before the window closed, not made l.duration after it
	corrected []*hdr.Histogram // per producer: from the scheduled instant
	service   []*hdr.Histogram // per producer: from the call
	// startLate is, per producer, how late it began the window's calls it
	// was on schedule for (its last call having returned before their
	// instant): the load generator's own lateness.
	startLate []lateness
	backlog   []int // Ready + Leased, every l.sample; the sampler's
	// unmade counts the calls scheduled before the window closed that
	// the producers had not made when ctx ended (Ctrl-C) after it, and
	// unconsumed the window's messages the consumers had not taken then:
	// the latencies leave them out, so the row is not whole.
	unmade, unconsumed atomic.Int64
}

// consume runs broker.Consume until ctx ends: every handler call records
// the time from its message's scheduled instant to its own start.
func (m *mixedRun) consume(ctx context.Context) {
	err := broker.Consume(ctx, m.q, func(_ context.Context, d broker.DeliveryValue) error {
		now := time.Now()
		m.handled.Add(1)
		open := m.g.load() == phaseMeasuring
		p := d.Message.Payload
		if len(p) < mixedHeaderBytes || p[8] != 1 {
			return nil
		}
		intended := m.base.Add(time.Duration(binary.LittleEndian.Uint64(p)))
		m.e2eMu.Lock()
		recordLatency(m.e2e, now.Sub(intended))
		m.e2eMu.Unlock()
		m.consumed.Add(1)
		if open {
			m.inWindow.Add(1)
		}
		return nil
	}, broker.ConsumeOptions{Batch: m.l.batch, Concurrency: m.l.consumers})
	if err != nil && ctx.Err() == nil {
		m.cancel(fmt.Errorf("broker.Consume: %w", err))
	}
}

// produce is producer i: it publishes at base + offset_i + k×interval
// (waiting with a pacer, which wakes on time where a timer alone would
// not), or at once when its last call returned after that instant (late:
// the latency counts from the instant), until the window closes or ctx
// ends.
// The window's calls, recorded, are those it did not start before the
// window opened, and scheduled before it closed: a producer a stall holds
// at the window's end makes the calls it missed after it (for at most
// l.duration), as it would have in a longer window, so that the stall
// counts against each of them.
func (m *mixedRun) produce(ctx context.Context, i int) {
	defer m.returned.Add(1)
	defer func() {
		if r := recover(); r != nil {
			m.cancel(fmt.Errorf("producer %d: panic in Publish: %v\n%s", i, r, debug.Stack()))
		}
	}()
	l := m.l
	payload := randomPayload(l.size, uint64(i))
	interval := time.Duration(float64(l.producers) / l.rate * float64(time.Second))
	next := m.base.Add(interval * time.Duration(i) / time.Duration(l.producers))
	pace := newPacer(realClock{}, l.rate)
	for {
		closed := false
		select {
		case <-m.windowClosed:
			closed = true
		default:
		}
		if closed {
			at := m.closedAt.Load()
			if at == 0 || next.Sub(m.base) >= time.Duration(at) {
				return
			}
			if behind := time.Since(m.base.Add(time.Duration(at))); behind > l.duration {
				m.missed.Add(int64((time.Duration(at) - next.Sub(m.base) + interval - 1) / interval))
				return
			}
		}
		var closing <-chan struct{}
		if !closed {
			closing = m.windowClosed
		}
		onSchedule := time.Now().Before(next)
		switch pace.wait(next, closing, ctx.Done()) {
		case paceDone:
			m.cutAfterWindow(next, interval)
			return
		case paceStopped:
			continue
		}
		if ctx.Err() != nil {
			m.cutAfterWindow(next, interval)
			return
		}
		phase := m.g.load()
		if phase == phaseStopped && !closed {
			// Closing: closedAt is set once windowClosed is closed.
			select {
			case <-m.windowClosed:
			case <-ctx.Done():
				m.cutAfterWindow(next, interval)
				return
			}
			continue
		}
		inWindow := phase != phaseWarmup
		binary.LittleEndian.PutUint64(payload, uint64(next.Sub(m.base)))
		payload[8] = 0
		if inWindow {
			payload[8] = 1
		}
		began := time.Now()
		if _, err := m.q.Publish(context.Background(), payload); err != nil {
			m.cancel(fmt.Errorf("producer %d: Publish: %w", i, err))
			return
		}
		done := time.Now()
		if inWindow {
			recordCorrected(m.corrected[i], next, done)
			recordLatency(m.service[i], done.Sub(began))
			if onSchedule {
				m.startLate[i].add(began.Sub(next))
			}
			if phase == phaseMeasuring {
				m.published.Add(1)
			} else {
				m.late.Add(1)
			}
		}
		next = next.Add(interval)
	}
}

// cutAfterWindow counts in m.unmade the calls of a producer that ctx
// stopped with next its next instant: those scheduled before the window
// closed, which it would have made after it. None when the window has not
// closed: ctx ending then cuts the window itself short.
func (m *mixedRun) cutAfterWindow(next time.Time, interval time.Duration) {
	at := time.Duration(m.closedAt.Load())
	if due := next.Sub(m.base); at != 0 && due < at {
		m.unmade.Add(int64((at - due + interval - 1) / interval))
	}
}

// sampleBacklog appends the queue's backlog to m.backlog every l.sample
// until stop is closed.
func (m *mixedRun) sampleBacklog(stop <-chan struct{}) {
	t := time.NewTicker(m.l.sample)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			qs := m.q.Stats()
			m.backlog = append(m.backlog, qs.Ready+qs.Leased)
		}
	}
}

// awaitConsumers lets the consumers take what the window published (its
// late calls included), for as long as the window lasted at most, and
// returns a note if they did not.
func (m *mixedRun) awaitConsumers(ctx context.Context) []string {
	window := func() int64 { return m.published.Load() + m.late.Load() }
	for deadline := time.Now().Add(m.l.duration); m.consumed.Load() < window() && ctx.Err() == nil; {
		if time.Now().After(deadline) {
			return []string{fmt.Sprintf("%d of the %d messages published in the window were not consumed %v after it: the end-to-end latencies leave them out",
				window()-m.consumed.Load(), window(), m.l.duration)}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ctx.Err() != nil {
		m.unconsumed.Store(max(0, window()-m.consumed.Load()))
	}
	return nil
}

// row is the run's result, given the window's commits and the records
// its calls made in it (publishes, leases and acks: not the store's own).
func (m *mixedRun) row(w window, commits, records int64, notes []string) Row {
	l := m.l
	secs := w.elapsed.Seconds()
	published := m.published.Load()
	pubLat := percentilesOf(mergeLatencies(m.corrected))
	svcLat := percentilesOf(mergeLatencies(m.service))
	e2eLat := percentilesOf(m.e2e)
	r := Row{
		Kind:              kindMixed,
		Workload:          l.String(),
		Sync:              l.sync.String(),
		Producers:         l.producers,
		Consumers:         l.consumers,
		Batch:             l.batch,
		Method:            drainConsume,
		Size:              l.size,
		SegmentBytes:      effectiveSegmentBytes(l.segmentBytes),
		TargetPerSec:      l.rate,
		Seconds:           secs,
		Interrupted:       w.interrupted,
		Ops:               published,
		Commits:           commits,
		LatencySamples:    published + m.late.Load(),
		DrainMsgsPerSec:   rate(m.inWindow.Load(), secs), // not consumed: some of those came after the window
		P50Ns:             pubLat.p50,
		P99Ns:             pubLat.p99,
		P999Ns:            pubLat.p999,
		MaxNs:             pubLat.max,
		ServiceP99Ns:      svcLat.p99,
		E2EP50Ns:          e2eLat.p50,
		E2EP99Ns:          e2eLat.p99,
		E2EP999Ns:         e2eLat.p999,
		E2EMaxNs:          e2eLat.max,
		BacklogIntervalNs: int64(l.sample),
		Backlog:           m.backlog,
		Notes:             notes,
	}
	r.setRates(records)
	if unmade, unconsumed := m.unmade.Load(), m.unconsumed.Load(); unmade > 0 || unconsumed > 0 {
		r.Interrupted = true
		r.Notes = append(r.Notes, fmt.Sprintf("interrupted with %d of the window's calls not yet made and %d of its messages not yet consumed: the publish and end-to-end latencies leave them out",
			unmade, unconsumed))
	}
	if n := m.missed.Load(); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("the producers were %d calls behind their schedule when the window closed, and still had not made them %v after it: the publish latencies leave them out", n, l.duration))
	}
	r.StartLateNs = meanLateness(m.startLate)
	if len(m.backlog) > 0 {
		r.BacklogMax = ptr(float64(slices.Max(m.backlog)))
	}
	// Nacks are no alarm: once stopped, Consume hands back (Nack) the
	// deliveries it held unstarted, as it does whenever the consumers
	// were behind. A dead letter takes MaxDeliveries deliveries of one
	// message, which a handler that never fails does not make.
	if qs := m.q.Stats(); qs.DeadLetters != 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("queue Stats: %d dead letters (%d nacked); the handler never fails", qs.DeadLetters, qs.Nacked))
	}
	return r
}

// wgDone is a channel closed once wg's goroutines have returned.
func wgDone(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// lateness sums how late a producer began the calls it was on schedule
// for, after its instants. Each producer has its own; it is read once the
// producers have returned.
type lateness struct {
	calls int64
	sum   time.Duration
}

func (l *lateness) add(d time.Duration) {
	l.calls++
	l.sum += max(d, 0)
}

// meanLateness is how late, on average, the producers began the calls
// they were on schedule for; nil if there were none.
func meanLateness(ls []lateness) *int64 {
	var calls int64
	var sum time.Duration
	for _, l := range ls {
		calls += l.calls
		sum += l.sum
	}
	if calls == 0 {
		return nil
	}
	return ptr(int64(sum / time.Duration(calls)))
}
