package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// mixedLoad is the mixed workload: producers publishing at a target rate
// (open loop: each call starts at its scheduled instant, whether or not
// the last returned) while broker.Consume consumers take the messages off
// the same queue, on a new store.
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
	return fmt.Sprintf("mixed, %s at %.0f msgs/s, Consume batch %d × %d, %d B, sync=%v",
		plural(l.producers, "producer"), l.rate, l.batch, l.consumers, l.size, l.sync)
}

// runMixed opens a new store in a new subdirectory of parent, runs l on it,
// and closes and removes it. ctx ending stops it early, as for runPublish.
func runMixed(ctx context.Context, env *env, parent string, l mixedLoad) (r Row, measured bool, err error) {
	st, err := openStore(l, l.hangTimeout, parent, "mixed-", storeOptions{sync: l.sync, segmentBytes: l.segmentBytes, size: l.size, fs: l.fs})
	defer st.release(&err)
	if err != nil {
		return r, false, err
	}
	s, q := st.s, st.q
	base := time.Now()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Consumers: every handler call records the time from the publish's
	// scheduled instant to its own start.
	var (
		e2eMu     sync.Mutex
		e2e       = newLatencies()
		consumed  atomic.Int64 // scheduled in the window, handled
		consumeWG sync.WaitGroup
	)
	consumeCtx, stopConsume := context.WithCancel(runCtx)
	defer stopConsume()
	consumeWG.Go(func() {
		err := broker.Consume(consumeCtx, q, func(_ context.Context, d broker.DeliveryValue) error {
			now := time.Now()
			p := d.Message.Payload
			if len(p) < mixedHeaderBytes || p[8] != 1 {
				return nil
			}
			intended := base.Add(time.Duration(binary.LittleEndian.Uint64(p)))
			e2eMu.Lock()
			recordLatency(e2e, now.Sub(intended))
			e2eMu.Unlock()
			consumed.Add(1)
			return nil
		}, broker.ConsumeOptions{Batch: l.batch, Concurrency: l.consumers})
		if err != nil && consumeCtx.Err() == nil {
			cancel(fmt.Errorf("Consume: %w", err))
		}
	})

	// Producers: producer i publishes at base + offset_i + k×interval.
	var (
		g         gate
		prodWG    sync.WaitGroup
		published atomic.Int64 // scheduled in the window, returned
		corrected = make([]*hdr.Histogram, l.producers)
		service   = make([]*hdr.Histogram, l.producers)
	)
	interval := time.Duration(float64(l.producers) / l.rate * float64(time.Second))
	for i := range l.producers {
		corrected[i], service[i] = newLatencies(), newLatencies()
		payload := randomPayload(l.size, uint64(i))
		prodWG.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					cancel(fmt.Errorf("producer %d: panic in Publish: %v\n%s", i, r, debug.Stack()))
				}
			}()
			next := base.Add(interval * time.Duration(i) / time.Duration(l.producers))
			for k := 0; ; k++ {
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-runCtx.Done():
						return
					}
				}
				phase := g.load()
				if phase == phaseStopped || runCtx.Err() != nil {
					return
				}
				binary.LittleEndian.PutUint64(payload, uint64(next.Sub(base)))
				payload[8] = 0
				if phase == phaseMeasuring {
					payload[8] = 1
				}
				began := time.Now()
				if _, err := q.Publish(context.Background(), payload); err != nil {
					cancel(fmt.Errorf("producer %d: Publish: %w", i, err))
					return
				}
				done := time.Now()
				if phase == phaseMeasuring {
					recordCorrected(corrected[i], next, done)
					recordLatency(service[i], done.Sub(began))
					published.Add(1)
				}
				next = next.Add(interval)
			}
		})
	}

	// The backlog, sampled through the window.
	var (
		backlog   []int
		sampling  = make(chan struct{})
		sampledWG sync.WaitGroup
	)
	var before, after broker.StoreStats
	w := runWindow(runCtx, env.progress, l.String(), l.warmup, l.duration, &g,
		func() {
			before = s.Stats()
			env.windowOpened(l.String())
			sampledWG.Go(func() {
				t := time.NewTicker(l.sample)
				defer t.Stop()
				for {
					select {
					case <-sampling:
						return
					case <-t.C:
						qs := q.Stats()
						backlog = append(backlog, qs.Ready+qs.Leased)
					}
				}
			})
		},
		func() {
			after = s.Stats()
			close(sampling)
		})
	sampledWG.Wait()
	if !waitTimeout(wgDone(&prodWG), st.hang) {
		st.leaveOpen = true
		return r, false, fmt.Errorf("%v: the broker hung: producers still inside Publish %v after the window closed (store Stats now: %+v)", l, st.hang, s.Stats())
	}
	// Let the consumers take what the window published, for as long as
	// the window lasted at most.
	var notes []string
	for deadline := time.Now().Add(l.duration); consumed.Load() < published.Load() && runCtx.Err() == nil; {
		if time.Now().After(deadline) {
			notes = append(notes, fmt.Sprintf("%d of the %d messages published in the window were not consumed %v after it: the end-to-end latencies leave them out",
				published.Load()-consumed.Load(), published.Load(), l.duration))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopConsume()
	if !waitTimeout(wgDone(&consumeWG), st.hang) {
		st.leaveOpen = true
		return r, false, fmt.Errorf("%v: the broker hung: Consume did not return %v after it was stopped", l, st.hang)
	}
	if cause := context.Cause(runCtx); cause != nil && cause != context.Cause(ctx) {
		return r, false, fmt.Errorf("%v: %w", l, cause)
	}
	if !w.opened {
		return r, false, nil
	}

	secs := w.elapsed.Seconds()
	pubLat := percentilesOf(mergeLatencies(corrected))
	svcLat := percentilesOf(mergeLatencies(service))
	e2eLat := percentilesOf(e2e)
	r = Row{
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
		Ops:               published.Load(),
		Commits:           after.Commits - before.Commits,
		LatencySamples:    published.Load(),
		MsgsPerSec:        rate(published.Load(), secs),
		DrainMsgsPerSec:   rate(consumed.Load(), secs),
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
		Backlog:           backlog,
		Notes:             notes,
	}
	if bytes := rate(published.Load()*int64(l.size), secs); bytes != nil {
		r.MBPerSec = ptr(*bytes / 1e6)
	}
	r.CommitsPerSec = rate(r.Commits, secs)
	if r.Commits > 0 {
		r.RecordsPerCommit = ptr(float64(after.Records-before.Records) / float64(r.Commits))
	}
	if len(backlog) > 0 {
		most := 0
		for _, b := range backlog {
			most = max(most, b)
		}
		r.BacklogMax = ptr(float64(most))
	}
	if qs := q.Stats(); qs.DeadLetters != 0 || qs.Nacked != 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("queue Stats: %d nacked, %d dead letters; the handler never fails", qs.Nacked, qs.DeadLetters))
	}
	return r, true, nil
}

// wgDone is a channel closed once wg's goroutines have returned.
func wgDone(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}
