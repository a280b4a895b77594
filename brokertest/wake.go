package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// signalled requires w's signal to be closed (at once on the suite's
// clock, where events are synchronous; by a real deadline otherwise).
func (e *env) signalled(w broker.WakeValue, what string) {
	e.Helper()
	if e.clock != nil {
		if !closed(w.Signal) {
			e.Fatalf("%s did not close the wake signal handed out before it", what)
		}
		return
	}
	e.eventually(what+" closes the wake signal handed out before it", func() bool { return closed(w.Signal) })
}

// checkIn requires w to be scheduled in want: exactly on the suite's
// clock, within the tolerance otherwise.
func (e *env) checkIn(w broker.WakeValue, want time.Duration, what string) {
	e.Helper()
	if !w.Scheduled {
		e.Fatalf("%s: Wake is not scheduled, want In %v", what, want)
	}
	if e.clock != nil {
		if w.In != want {
			e.Fatalf("%s: Wake.In %v, want %v", what, w.In, want)
		}
		return
	}
	if w.In < want-e.tol() || w.In > want+e.tol() {
		e.Fatalf("%s: Wake.In %v, want %v within %v", what, w.In, want, e.tol())
	}
}

// wakeCases: Waker and WakeValue (API.md §5.3).
var wakeCases = []testCase{
	{name: "WakeSignalIsNeverNil", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy())
		w := e.waker(q).Wake()
		if w.Signal == nil {
			e.Fatalf("Wake returned a nil Signal")
		}
		if closed(w.Signal) {
			e.Fatalf("the Signal of an idle queue is closed")
		}
		if w.Scheduled {
			e.Fatalf("an empty queue is Scheduled (In %v): it holds nothing that becomes receivable on its own", w.In)
		}
	}},
	{name: "WakeClosedByPublish", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy())
		publishes := []struct {
			name string
			do   func()
		}{{"Publish", func() { e.publish(q, "a") }}}
		if x, ok := q.(KeyedPublisher); ok && e.caps.Keyed {
			publishes = append(publishes, struct {
				name string
				do   func()
			}{"PublishKeyed", func() {
				if _, err := x.PublishKeyed(e.ctx(), "k", nil); err != nil {
					e.Fatalf("PublishKeyed: %v", err)
				}
			}})
		}
		if x, ok := q.(BatchPublisher); ok && e.caps.Batch {
			publishes = append(publishes, struct {
				name string
				do   func()
			}{"PublishBatch", func() {
				if _, err := x.PublishBatch(e.ctx(), [][]byte{nil, nil}); err != nil {
					e.Fatalf("PublishBatch: %v", err)
				}
			}})
		}
		for _, p := range publishes {
			w := e.waker(q).Wake()
			p.do()
			e.signalled(w, p.name)
		}
	}},
	{name: "WakeClosedByNackThatHandsBack", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Hour }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		w := e.waker(q).Wake()
		e.nack(q, d.Lease.Receipt, nil)
		e.signalled(w, "a Nack that hands the message back")
	}},
	{name: "WakeClosedByAnExtendThatBringsALapseCloser", needs: []string{"Waker", "LeaseExtender"}, run: func(e *env) {
		// A consumer told to wait for the old lapse would sleep past the
		// new one: Consume never sleeps past a Wake.In.
		vt := 8 * e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		w := e.waker(q).Wake()
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, e.short())
		if err != nil {
			e.Fatalf("Extend: %v", err)
		}
		e.signalled(w, "an Extend that brings the lapse closer")
		e.checkIn(e.waker(q).Wake(), l.ExpiresAt.Sub(e.now()), "a lease shortened by Extend")
	}},
	{name: "WakeClosedByReplay", needs: []string{"Waker", "Rejecter", "DeadLetterManager"}, run: func(e *env) {
		q := e.queue(e.policy())
		m := e.publish(q, "a")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		w := e.waker(q).Wake()
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		e.signalled(w, "a replay")
	}},
	{name: "WakeNotClosedByPublishToAnotherQueue", needs: []string{"Waker"}, run: func(e *env) {
		q, other := e.queue(e.policy()), e.queue(e.policy())
		w := e.waker(q).Wake()
		e.publish(other, "elsewhere")
		if e.clock == nil {
			time.Sleep(50 * time.Millisecond) // room for an asynchronous wrong wake-up
		}
		if closed(w.Signal) {
			e.Fatalf("a publish to another queue closed this queue's wake signal")
		}
		e.publish(q, "here")
		e.signalled(w, "a publish to this queue")
	}},
	{name: "WakeBeforeReceiveDoesNotMissPublish", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy())
		w := e.waker(q).Wake()
		e.none(q, "an empty queue")
		e.publish(q, "a") // lands between the empty Receive and the wait
		if _, ok := within(e, w.Signal); !ok {
			e.Fatalf("the publish between Wake and the wait did not close the signal within %v", e.patience())
		}
		e.receiveOne(q)
	}},
	{name: "WakeScheduledNowWhenReady", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		var w broker.WakeValue
		e.eventually("Wake scheduled with a message ready", func() bool { w = e.waker(q).Wake(); return w.Scheduled })
		if w.In > e.tol() {
			e.Fatalf("Wake.In %v with a message ready, want zero or less (now)", w.In)
		}
	}},
	{name: "WakeScheduledNowWhenReadyThoughALeaseLapsesLater", needs: []string{"Waker"}, run: func(e *env) {
		// A message receivable now outranks one that becomes receivable
		// later: In names the earliest moment.
		q := e.queue(e.policy())
		e.publish(q, "a")
		e.publish(q, "b")
		if ds := e.receive(q, 1); len(ds) != 1 { // its lease lapses later; the other is ready now
			e.Fatalf("Receive(1) returned %v, want one delivery", ids(ds))
		}
		var w broker.WakeValue
		e.eventually("Wake scheduled with a message ready", func() bool { w = e.waker(q).Wake(); return w.Scheduled })
		if w.In > e.tol() {
			e.Fatalf("with a message ready and a lease lapsing later: Wake.In %v, want zero or less (now)", w.In)
		}
	}},
	{name: "WakeScheduledNowAfterANackWithoutDelay", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.none(q, "the only message is leased")
		e.nack(q, d.Lease.Receipt, nil) // no retry delay: receivable at once
		if w := e.waker(q).Wake(); !w.Scheduled || w.In > e.tol() {
			e.Fatalf("after a Nack without retry delay: Wake %+v, want Scheduled with In zero or less (now)", w)
		}
	}},
	{name: "WakeInNamesRetryDelayEnd", needs: []string{"Waker"}, run: func(e *env) {
		delay := 4 * e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
		e.publish(q, "a")
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		if e.clock != nil {
			e.clock.Advance(delay / 4)
		}
		e.checkIn(e.waker(q).Wake(), nv.VisibleAt.Sub(e.now()), "a retry delay ending")
		if e.clock != nil {
			e.set(nv.VisibleAt)
			if w := e.waker(q).Wake(); !w.Scheduled || w.In > 0 {
				e.Fatalf("at VisibleAt: Wake %+v, want Scheduled with In zero or less", w)
			}
		}
	}},
	{name: "WakeInNamesLeaseLapse", needs: []string{"Waker"}, run: func(e *env) {
		vt := 4 * e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		if e.clock != nil {
			e.clock.Advance(time.Second)
		}
		e.checkIn(e.waker(q).Wake(), d.Lease.ExpiresAt.Sub(e.now()), "a dead consumer's lease lapsing")
	}},
	{name: "WakeInNamesTheLeaseOfARedeliveredRetry", needs: []string{"Waker"}, run: func(e *env) {
		// Once the retried message is leased again, its ended retry delay
		// makes nothing receivable: only the new lease's lapse does.
		delay := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
		e.publish(q, "a")
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		d := e.appearsAt(q, nv.VisibleAt, true, "the nacked message")
		e.checkIn(e.waker(q).Wake(), d.Lease.ExpiresAt.Sub(e.now()), "the redelivery's lease lapsing")
	}},
	{name: "WakeInStaysAheadAfterTheClockStepsBackCenturies", needs: []string{"Waker", "Clock"}, run: func(e *env) {
		// A lease lapsing further ahead than a Duration holds (about 292
		// years) is still ahead: In must not wrap to a negative "now".
		// Both instants are within the years a broker clock may read.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = 30 * time.Second }))
		e.set(time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC))
		e.publish(q, "a")
		e.receiveOne(q)
		e.set(time.Date(1750, 1, 1, 0, 0, 0, 0, time.UTC))
		if w := e.waker(q).Wake(); !w.Scheduled || w.In < 290*365*24*time.Hour {
			e.Fatalf("a lease lapsing 500 years ahead: Wake %+v, want Scheduled with In the longest Duration", w)
		}
	}},
	{name: "WakeInNamesEarliestMoment", needs: []string{"Waker", "Clock"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = 5 * time.Second; p.VisibilityTimeout = 30 * time.Second }))
		e.publish(q, "a")
		e.publish(q, "b")
		ds := e.receive(q, 2) // both leases lapse at 30 s
		e.nack(q, ds[0].Lease.Receipt, nil)
		e.checkIn(e.waker(q).Wake(), 5*time.Second, "the retry delay ends before the other lease lapses")
	}},
	{name: "WakeInNamesALeaseLapsingBeforeARetryDelayEnds", needs: []string{"Waker"}, run: func(e *env) {
		// As WakeInNamesEarliestMoment, the other way round: a lease that
		// lapses (its consumer died) before another message's retry delay
		// ends is the earliest moment, and an idle consumer told the retry
		// would sleep past the message that came back.
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt; p.RetryDelay = 6 * vt }))
		e.publish(q, "nacked")
		e.publish(q, "abandoned")
		ds := e.receive(q, 2)
		if len(ds) != 2 {
			e.Fatalf("received %d, want 2", len(ds))
		}
		nv := e.nack(q, ds[0].Lease.Receipt, nil) // back after 6 leases' time; the other lease lapses after one
		if !nv.VisibleAt.After(ds[1].Lease.ExpiresAt) {
			e.Fatalf("the nacked message is visible at %v, not after the other lease lapses at %v", nv.VisibleAt, ds[1].Lease.ExpiresAt)
		}
		e.checkIn(e.waker(q).Wake(), ds[1].Lease.ExpiresAt.Sub(e.now()), "a lease lapses before a retry delay ends")
	}},
	{name: "WakeNotScheduledWhenOnlyDeadLetters", needs: []string{"Waker", "Rejecter"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		if w := e.waker(q).Wake(); w.Scheduled {
			e.Fatalf("Wake is Scheduled (In %v) with only a dead letter held", w.In)
		}
	}},
	{name: "WakeNotScheduledForLeaseOnLastDelivery", needs: []string{"Waker"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
		e.publish(q, "a")
		e.receiveOne(q)
		if w := e.waker(q).Wake(); w.Scheduled {
			e.Fatalf("Wake is Scheduled (In %v): the only message will die when its lease lapses, not become receivable", w.In)
		}
	}},
	{name: "WakeInSkipsLeaseOnLastDelivery", needs: []string{"Waker", "Clock"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 2
			p.RetryDelay = time.Minute
			p.VisibilityTimeout = 30 * time.Second
		}))
		e.publish(q, "x")
		e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		e.set(t0.Add(time.Minute))
		if dx := e.receiveOne(q); dx.Deliveries != 2 { // x's last delivery, leased until t0+90s
			e.Fatalf("delivery %d, want 2", dx.Deliveries)
		}
		e.publish(q, "y")
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil) // y visible at t0+120s
		e.checkIn(e.waker(q).Wake(), nv.VisibleAt.Sub(e.now()), "x's lapse makes nothing receivable; y's retry does")
	}},
	{name: "WakeFollowsExtendAndAck", needs: []string{"Waker", "LeaseExtender"}, run: func(e *env) {
		// In is how long until a message the broker holds becomes
		// receivable with no further event: a lease renewed by Extend
		// lapses at its new ExpiresAt, and an acknowledged one never.
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, 4*vt)
		if err != nil {
			e.Fatalf("Extend: %v", err)
		}
		e.checkIn(e.waker(q).Wake(), l.ExpiresAt.Sub(e.now()), "a lease renewed by Extend")
		e.ack(q, l.Receipt)
		if w := e.waker(q).Wake(); w.Scheduled {
			e.Fatalf("Wake is Scheduled (In %v) after the only lease was acknowledged", w.In)
		}
	}},
	{name: "WakeNotScheduledAfterAFullReceiveLeasedTheOnlyMessage", needs: []string{"Waker"}, run: func(e *env) {
		// As WakeNotScheduledForLeaseOnLastDelivery, after a Receive that
		// got all it asked for: a broker that learns that nothing is left
		// only from a Receive that comes back short must not go on saying
		// a message is receivable now.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
		e.publish(q, "a")
		e.eventually("the message is received", func() bool { return len(e.receive(q, 1)) == 1 })
		if w := e.waker(q).Wake(); w.Scheduled {
			e.Fatalf("Wake with the only message leased on its last delivery: Scheduled, In %v; want not Scheduled", w.In)
		}
	}},
}

// consumeCases: broker.Consume over the implementation.
var consumeCases = []testCase{
	{name: "ConsumeAcksOnNil", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		want := map[string]bool{}
		for _, p := range []string{"a", "b", "c"} {
			want[e.publish(q, p).ID] = true
		}
		var mu sync.Mutex
		got := map[string]int{}
		e.consume(q, func(_ context.Context, d broker.DeliveryValue) error {
			mu.Lock()
			defer mu.Unlock()
			got[d.Message.ID]++
			return nil
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == len(want)
		})
		for id := range want {
			if got[id] != 1 {
				e.Fatalf("message %s handled %d times, want once", id, got[id])
			}
		}
		e.after(e.now().Add(e.short()))
		e.none(q, "every message was acknowledged")
	}},
	{name: "ConsumeWithPrefetchHandlesEachMessageOnce", run: func(e *env) {
		// One handler, and up to 7 messages held for it: each is handled
		// once, in a few Receives, and none is left leased.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		want := map[string]bool{}
		for i := range 20 {
			want[e.publish(q, fmt.Sprintf("m%d", i)).ID] = true
		}
		var mu sync.Mutex
		got := map[string]int{}
		running, most := 0, 0
		e.consumeWith(q, func(_ context.Context, d broker.DeliveryValue) error {
			mu.Lock()
			got[d.Message.ID]++
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == len(want)
		}, broker.ConsumeOptions{Batch: 8, Concurrency: 1, Prefetch: 7, PollInterval: 10 * time.Millisecond})
		for id := range want {
			if got[id] != 1 {
				e.Fatalf("message %s handled %d times, want once", id, got[id])
			}
		}
		if most != 1 {
			e.Fatalf("%d handlers ran at once, want 1: Prefetch holds messages, it runs no more handlers", most)
		}
		e.after(e.now().Add(e.short()))
		e.none(q, "every message was acknowledged")
	}},
	{name: "ConsumeNacksOnError", run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		var deliveries []int
		var mu sync.Mutex
		e.consume(q, func(_ context.Context, d broker.DeliveryValue) error {
			mu.Lock()
			defer mu.Unlock()
			deliveries = append(deliveries, d.Deliveries)
			if d.Deliveries == 1 {
				return errors.New("transient")
			}
			return nil
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(deliveries) == 2
		})
		if deliveries[0] != 1 || deliveries[1] != 2 {
			e.Fatalf("handled deliveries %v, want [1 2]", deliveries)
		}
	}},
	{name: "ConsumeRecoversPanicAsNack", run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		var calls atomic.Int32
		e.consume(q, func(_ context.Context, d broker.DeliveryValue) error {
			if calls.Add(1) == 1 {
				panic("handler bug")
			}
			return nil
		}, func() bool { return calls.Load() == 2 })
	}},
	{name: "ConsumeRejectsDoNotRetry", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy())
		m := e.publish(q, "a")
		var calls atomic.Int32
		e.consume(q, func(_ context.Context, d broker.DeliveryValue) error {
			calls.Add(1)
			return broker.DoNotRetry(broker.NewError("BAD_INPUT", 0x07090001, "bad input", secret))
		}, func() bool { return len(e.deadLetters(q)) == 1 })
		dl := e.deadLetters(q)[0]
		e.checkDeadLetter(dl, causeCase{name: "DoNotRetry", reason: "BAD_INPUT", code: 0x07090001, public: "bad input"}, m, "a", 1)
		if n := calls.Load(); n != 1 {
			e.Fatalf("the handler ran %d times, want once: DoNotRetry is not retried", n)
		}
	}},
	{name: "ConsumeWakesOnPublish", run: func(e *env) {
		q := e.queue(e.policy())
		var handled atomic.Int32
		published := false
		e.consume(q, func(context.Context, broker.DeliveryValue) error {
			handled.Add(1)
			return nil
		}, func() bool {
			if !published {
				time.Sleep(20 * time.Millisecond) // let Consume go idle first
				e.publish(q, "late")
				published = true
			}
			return handled.Load() == 1
		})
	}},
	{name: "ConsumeNacksWithTheHandlersCause", needs: []string{"DeadLetterReader"}, run: func(e *env) {
		// API.md §3: Consume nacks with the handler's error, and a
		// recovered panic as an UNCLASSIFIED cause; the dead letter of the
		// last delivery shows which.
		for _, c := range []struct {
			name string
			h    broker.Handler
			want causeCase
		}{
			{"panic", func(context.Context, broker.DeliveryValue) error { panic("handler bug " + secret) },
				causeCase{name: "a panic", reason: broker.ReasonUnclassified}},
			{"classified error", func(context.Context, broker.DeliveryValue) error {
				return broker.NewError("HANDLER_FAILED", 0x2A00000A, "the handler failed", secret)
			}, causeCase{name: "a classified error", reason: "HANDLER_FAILED", code: 0x2A00000A, public: "the handler failed"}},
		} {
			q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
			m := e.publish(q, "a")
			e.consume(q, c.h, func() bool { return len(e.deadLetters(q)) == 1 })
			e.checkDeadLetter(e.deadLetters(q)[0], c.want, m, "a", 1)
		}
	}},
	{name: "ConsumeIdleIsWokenByPublishNotByPolling", needs: []string{"Waker"}, run: func(e *env) {
		// API.md §3: an idle Consume waits on Wake and never busy-spins,
		// and a Waker is trusted, not polled: with an hour's PollInterval
		// only the signal brings a late message in, and an idle queue
		// whose signal never fires sees hardly any Receive.
		q := e.queue(e.policy())
		var handled, receives atomic.Int32
		var once sync.Once
		counting := countingReceives{Broker: q, Waker: e.waker(q), n: &receives}
		start := time.Now()
		e.consumeWith(counting, func(context.Context, broker.DeliveryValue) error {
			handled.Add(1)
			return nil
		}, func() bool {
			if time.Since(start) > 50*time.Millisecond {
				once.Do(func() {
					if n := receives.Load(); n > 3 {
						e.Errorf("Consume made %d Receives on an idle queue whose Wake never fired: it polls", n)
					}
					e.publish(q, "late")
				})
			}
			return handled.Load() == 1
		}, broker.ConsumeOptions{PollInterval: time.Hour})
	}},
	{name: "ConsumeReturnsOnlyAfterItsHandlersFinish", run: func(e *env) {
		// API.md §3: when ctx ends, Consume returns ctx.Err() after its
		// in-flight handlers finish, not before: the caller may then
		// release what the handlers use.
		q := e.queue(e.policy())
		e.publish(q, "a")
		started, release := make(chan struct{}), make(chan struct{})
		var finished atomic.Bool
		var once sync.Once
		ctx, cancel := context.WithCancel(e.ctx())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			defer catch(func(p *goPanic) { errc <- p })
			errc <- broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error {
				once.Do(func() { close(started) })
				<-release // ignores its context, as slow handlers do
				finished.Store(true)
				return nil
			}, broker.ConsumeOptions{})
		}()
		released := false
		defer func() {
			if !released {
				close(release) // a failure below leaves no handler waiting
			}
		}()
		if _, ok := within(e, started); !ok {
			e.Fatalf("Consume (Batch 1, Concurrency 1) did not hand the published message to its handler within %v", e.patience())
		}
		cancel()
		select {
		case err := <-errc:
			e.Fatalf("Consume returned %v while its handler was still running", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		released = true
		if err, ok := within(e, errc); !ok {
			e.Fatalf("Consume did not return within %v of its context ending and its handler finishing", e.patience())
		} else if !errors.Is(err, context.Canceled) {
			e.Fatalf("Consume returned %v, want context.Canceled", err)
		}
		if !finished.Load() {
			e.Fatalf("Consume returned before its handler finished")
		}
	}},
	{name: "ConsumeExtendsTheLeaseOfALongRunningHandler", needs: []string{"LeaseExtender"}, run: func(e *env) {
		// API.md §3: Consume extends the leases of long-running handlers
		// when b is a LeaseExtender and the option asks for it. A handler
		// that runs past its Receive's lease keeps the message from every
		// other Receive, and is acked under the newest receipt: once that
		// lease lapses too, nothing comes back.
		short := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = short }))
		e.publish(q, "slow")
		// Renewals run on real time; the suite's clock moves only when
		// the case moves it, and a round minute is a long wait.
		every := 10 * time.Millisecond
		if e.clock == nil {
			every = short / 4
		}
		extendBy := short + short/2
		var extends, calls atomic.Int32
		counting := countingExtends{Broker: q, LeaseExtender: e.extender(q), n: &extends}
		leased, release := make(chan broker.LeaseValue, 1), make(chan struct{})
		ctx, cancel := context.WithCancel(e.ctx())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			defer catch(func(p *goPanic) { errc <- p })
			errc <- broker.Consume(ctx, counting, func(_ context.Context, d broker.DeliveryValue) error {
				if calls.Add(1) == 1 {
					leased <- d.Lease
				}
				<-release
				return nil
			}, broker.ConsumeOptions{ExtendEvery: every, ExtendBy: extendBy, PollInterval: 10 * time.Millisecond})
		}()
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		first, ok := within(e, leased)
		if !ok {
			e.Fatalf("Consume did not hand the published message to its handler within %v", e.patience())
		}
		e.eventually("a renewal of the running handler's lease", func() bool { return extends.Load() > 0 })
		e.lapse(first)
		if ds := e.receive(q, 10); len(ds) > 0 {
			e.Fatalf("Receive after the first lease lapsed returned %v while its handler still ran: Consume did not keep the lease", ids(ds))
		}
		close(release)
		released = true
		cancel()
		if err, ok := within(e, errc); !ok {
			e.Fatalf("Consume did not return within %v of its context ending and its handler finishing", e.patience())
		} else if !errors.Is(err, context.Canceled) {
			e.Fatalf("Consume returned %v, want context.Canceled", err)
		}
		if n := calls.Load(); n != 1 {
			e.Fatalf("the handler ran %d times, want once: its lease was kept while it ran", n)
		}
		e.after(e.now().Add(extendBy + e.caps.tolerance()))
		e.none(q, "the handler returned nil: Consume acked the message under its newest receipt")
	}},
}

// consume runs broker.Consume on q with h until done holds, then stops it
// and requires it to return the context's error.
func (e *env) consume(q broker.Broker, h broker.Handler, done func() bool) {
	e.Helper()
	e.consumeWith(q, h, done, broker.ConsumeOptions{Batch: 4, Concurrency: 2, PollInterval: 10 * time.Millisecond})
}

// consumeWith is consume with the options given.
func (e *env) consumeWith(q broker.Broker, h broker.Handler, done func() bool, opts broker.ConsumeOptions) {
	e.Helper()
	ctx, cancel := context.WithCancel(e.ctx())
	errc := make(chan error, 1)
	go func() {
		defer catch(func(p *goPanic) { errc <- p })
		errc <- broker.Consume(ctx, q, h, opts)
	}()
	defer func() {
		cancel()
		var gp *goPanic
		if err, ok := within(e, errc); !ok {
			e.Errorf("Consume did not return within %v of its context ending", e.patience())
		} else if errors.As(err, &gp) {
			e.Errorf("Consume over %s: a call panicked: %v\n%s", e.f.Name, gp.value, gp.stack)
		} else if !errors.Is(err, context.Canceled) {
			e.Errorf("Consume returned %v, want context.Canceled", err)
		}
	}()
	// A Consume that returned early (an error, a call that panicked) does
	// no more work: the deferred check reports what it returned.
	e.eventually("Consume's work", func() bool { return len(errc) > 0 || done() })
}

// countingExtends is a LeaseExtender broker that counts the Extend calls
// that renewed a lease.
type countingExtends struct {
	broker.Broker
	broker.LeaseExtender
	n *atomic.Int32
}

func (c countingExtends) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, err := c.LeaseExtender.Extend(ctx, r, by)
	if err == nil {
		c.n.Add(1)
	}
	return l, err
}

// countingReceives is a Waker broker that counts its Receives.
type countingReceives struct {
	broker.Broker
	broker.Waker
	n *atomic.Int32
}

func (c countingReceives) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	c.n.Add(1)
	return c.Broker.Receive(ctx, max)
}
