package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// miscCases: policies, independence of queues, concurrency, Close.
var miscCases = []testCase{
	{name: "QueueMisconfiguredForRefusedPolicies", run: func(e *env) {
		ok := e.policy()
		bad := map[string]func(*broker.PolicyValue){
			"zero VisibilityTimeout":       func(p *broker.PolicyValue) { p.VisibilityTimeout = 0 },
			"negative VisibilityTimeout":   func(p *broker.PolicyValue) { p.VisibilityTimeout = -time.Second },
			"VisibilityTimeout past bound": func(p *broker.PolicyValue) { p.VisibilityTimeout = broker.MaxDeadlineOffset + 1 },
			"RetryDelay past bound":        func(p *broker.PolicyValue) { p.RetryDelay = broker.MaxDeadlineOffset + 1 },
			"negative MaxRetryDelay":       func(p *broker.PolicyValue) { p.RetryDelay = time.Second; p.MaxRetryDelay = -1 },
			"MaxRetryDelay past bound": func(p *broker.PolicyValue) {
				p.RetryDelay = time.Second
				p.MaxRetryDelay = broker.MaxDeadlineOffset + 1
			},
			"MaxRetryDelay without base": func(p *broker.PolicyValue) { p.MaxRetryDelay = time.Minute },
			"MaxRetryDelay over a negative RetryDelay": func(p *broker.PolicyValue) {
				p.RetryDelay = -time.Second // read as zero: nothing to grow from
				p.MaxRetryDelay = time.Minute
			},
			"MaxRetryDelay below RetryDelay": func(p *broker.PolicyValue) {
				p.RetryDelay = time.Minute
				p.MaxRetryDelay = time.Second
			},
			"MaxRetryDelay a nanosecond below RetryDelay": func(p *broker.PolicyValue) {
				p.RetryDelay = time.Minute
				p.MaxRetryDelay = time.Minute - 1 // the ceiling equal to it is a bound (PolicyBoundsAreAccepted)
			},
			"zero MaxDeliveries":       func(p *broker.PolicyValue) { p.MaxDeliveries = 0 },
			"negative MaxDeliveries":   func(p *broker.PolicyValue) { p.MaxDeliveries = -1 },
			"negative MaxMessageBytes": func(p *broker.PolicyValue) { p.MaxMessageBytes = -1 },
			"negative Capacity":        func(p *broker.PolicyValue) { p.Capacity = -1 },
			"negative DedupWindow":     func(p *broker.PolicyValue) { p.DedupWindow = -time.Second },
			"DedupWindow past bound":   func(p *broker.PolicyValue) { p.DedupWindow = broker.MaxDeadlineOffset + 1 },
			"the zero policy":          func(p *broker.PolicyValue) { *p = broker.PolicyValue{} },
		}
		for name, mod := range bad {
			p := ok
			mod(&p)
			q, err := e.b.Queue(e.queueName(), p)
			if !errors.Is(err, broker.QueueMisconfigured) {
				e.Fatalf("Queue with %s (%+v): %v, %v; want QueueMisconfigured", name, p, q, err)
			}
		}
	}},
	{name: "ANilContextIsRefusedAndChangesNothing", run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "x")
		d := e.receiveOne(q)
		r := d.Lease.Receipt
		var nilCtx context.Context
		calls := map[string]func() error{
			"Publish": func() error { _, err := q.Publish(nilCtx, []byte("y")); return err },
			"Receive": func() error { _, err := q.Receive(nilCtx, 1); return err },
			"Ack":     func() error { return q.Ack(nilCtx, r) },
			"Nack":    func() error { _, err := q.Nack(nilCtx, r, nil); return err },
		}
		if x, ok := q.(broker.Rejecter); ok {
			calls["Reject"] = func() error { return x.Reject(nilCtx, r, nil) }
		}
		if x, ok := q.(broker.LeaseExtender); ok {
			calls["Extend"] = func() error { _, err := x.Extend(nilCtx, r, time.Minute); return err }
		}
		if x, ok := q.(broker.DeadLetterReader); ok {
			calls["DeadLetters"] = func() error { _, err := x.DeadLetters(nilCtx, 1); return err }
		}
		if x, ok := q.(broker.DeadLetterManager); ok {
			calls["ReplayDeadLetter"] = func() error { return x.ReplayDeadLetter(nilCtx, d.Message.ID) }
			calls["DeleteDeadLetter"] = func() error { return x.DeleteDeadLetter(nilCtx, d.Message.ID) }
		}
		if x, ok := q.(KeyedPublisher); ok {
			calls["PublishKeyed"] = func() error { _, err := x.PublishKeyed(nilCtx, "k", []byte("y")); return err }
		}
		if x, ok := q.(BatchPublisher); ok {
			calls["PublishBatch"] = func() error { _, err := x.PublishBatch(nilCtx, [][]byte{[]byte("y")}); return err }
		}
		for name, call := range calls {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						e.Fatalf("%s with a nil context panicked: %v", name, p)
					}
				}()
				err = call()
			}()
			e.isErr(err, broker.QueueMisconfigured, name+" with a nil context")
		}
		e.ack(q, r) // the lease still holds
		e.none(q, "nothing was published with a nil context")
	}},
	{name: "QueuesDeliverOnlyTheirOwnMessages", run: func(e *env) {
		a, b := e.queue(e.policy()), e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
		ma, mb := e.publish(a, "a"), e.publish(b, "b")
		da, db := e.receiveOne(a), e.receiveOne(b)
		if da.Message.ID != ma.ID || db.Message.ID != mb.ID {
			e.Fatalf("queue a delivered %q (want %q), queue b %q (want %q)", da.Message.ID, ma.ID, db.Message.ID, mb.ID)
		}
		if nv := e.nack(b, db.Lease.Receipt, nil); !nv.DeadLettered {
			e.Fatalf("queue b (MaxDeliveries 1) did not dead-letter: %+v", nv)
		}
		if nv := e.nack(a, da.Lease.Receipt, nil); nv.DeadLettered {
			e.Fatalf("queue a (MaxDeliveries 5) dead-lettered: same call, different policy")
		}
	}},
	{name: "ConcurrentUseDeliversEveryMessage", run: func(e *env) {
		const producers, each = 4, 25
		q := e.queue(e.policy())
		var wg sync.WaitGroup
		errs := make(chan error, producers*each+8)
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer catch(func(gp *goPanic) { errs <- gp })
				for i := range each {
					if _, err := q.Publish(e.ctx(), fmt.Appendf(nil, "%d-%d", p, i)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		var mu sync.Mutex
		got := map[string]int{}
		done := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer catch(func(gp *goPanic) { errs <- gp })
				for {
					select {
					case <-done:
						return
					default:
					}
					ds, err := q.Receive(e.ctx(), 3)
					if err != nil {
						errs <- err
						return
					}
					for _, d := range ds {
						mu.Lock()
						got[string(d.Message.Payload)]++
						mu.Unlock()
						if err := q.Ack(e.ctx(), d.Lease.Receipt); err != nil {
							errs <- err
							return
						}
					}
					if len(ds) == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		e.eventually("every message delivered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == producers*each || len(errs) > 0
		})
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			e.Fatalf("concurrent call: %v", err)
		}
		for k, n := range got {
			if n != 1 {
				e.Fatalf("message %s delivered %d times under leases that never lapsed", k, n)
			}
		}
	}},
	{name: "CloseMakesLaterCallsClosed", needs: []string{"Closer"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		if e.caps.Keyed {
			// A key seen before Close is Closed too, not answered from
			// what the broker remembers of it.
			e.publishKeyed(q, "k", "a")
		}
		if err := e.b.(io.Closer).Close(); err != nil {
			e.Fatalf("Close: %v", err)
		}
		ctx := context.Background()
		_, err := q.Publish(ctx, []byte("b"))
		e.isErr(err, broker.Closed, "Publish after Close")
		_, err = q.Receive(ctx, 1)
		e.isErr(err, broker.Closed, "Receive after Close")
		e.isErr(q.Ack(ctx, d.Lease.Receipt), broker.Closed, "Ack after Close")
		_, err = q.Nack(ctx, d.Lease.Receipt, nil)
		e.isErr(err, broker.Closed, "Nack after Close")
		if x, ok := q.(broker.Rejecter); ok {
			e.isErr(x.Reject(ctx, d.Lease.Receipt, nil), broker.Closed, "Reject after Close")
		}
		if x, ok := q.(broker.LeaseExtender); ok {
			_, err := x.Extend(ctx, d.Lease.Receipt, time.Minute)
			e.isErr(err, broker.Closed, "Extend after Close")
		}
		if x, ok := q.(broker.DeadLetterReader); ok {
			_, err := x.DeadLetters(ctx, 1)
			e.isErr(err, broker.Closed, "DeadLetters after Close")
		}
		if x, ok := q.(broker.DeadLetterManager); ok {
			e.isErr(x.ReplayDeadLetter(ctx, d.Message.ID), broker.Closed, "ReplayDeadLetter after Close")
			e.isErr(x.DeleteDeadLetter(ctx, d.Message.ID), broker.Closed, "DeleteDeadLetter after Close")
		}
		if x, ok := q.(KeyedPublisher); ok {
			_, err := x.PublishKeyed(ctx, "k", []byte("a"))
			e.isErr(err, broker.Closed, "PublishKeyed of a key seen before Close")
			_, err = x.PublishKeyed(ctx, "new", []byte("a"))
			e.isErr(err, broker.Closed, "PublishKeyed of a new key after Close")
		}
		if x, ok := q.(BatchPublisher); ok {
			_, err := x.PublishBatch(ctx, [][]byte{[]byte("b")})
			e.isErr(err, broker.Closed, "PublishBatch after Close")
			if _, err := x.PublishBatch(ctx, nil); err == nil {
				e.Fatalf("PublishBatch of nothing after Close succeeded")
			}
		}
		if err := broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{}); !errors.Is(err, broker.Closed) {
			e.Fatalf("Consume after Close: %v, want Closed", err)
		}
	}},
	{name: "PolicyBoundsAreAccepted", run: func(e *env) {
		// Only a duration ABOVE MaxDeadlineOffset is refused, and a
		// MaxRetryDelay only BELOW RetryDelay: each bound itself is a
		// policy like any other (a Validate written with >= is wrong).
		good := map[string]func(*broker.PolicyValue){
			"VisibilityTimeout = MaxDeadlineOffset": func(p *broker.PolicyValue) { p.VisibilityTimeout = broker.MaxDeadlineOffset },
			"RetryDelay = MaxDeadlineOffset":        func(p *broker.PolicyValue) { p.RetryDelay = broker.MaxDeadlineOffset },
			"MaxRetryDelay = MaxDeadlineOffset": func(p *broker.PolicyValue) {
				p.RetryDelay = time.Second
				p.MaxRetryDelay = broker.MaxDeadlineOffset
			},
			"MaxRetryDelay = RetryDelay": func(p *broker.PolicyValue) {
				p.RetryDelay = time.Minute
				p.MaxRetryDelay = time.Minute
			},
			"DedupWindow = MaxDeadlineOffset": func(p *broker.PolicyValue) { p.DedupWindow = broker.MaxDeadlineOffset },
			"MaxDeliveries 1":                 func(p *broker.PolicyValue) { p.MaxDeliveries = 1 },
			"Capacity 0 (unbounded)":          func(p *broker.PolicyValue) { p.Capacity = 0 },
		}
		for name, mod := range good {
			q, err := e.b.Queue(e.queueName(), e.policy(mod))
			if err != nil {
				e.Fatalf("Queue with %s: %v, want it accepted", name, err)
			}
			m := e.publish(q, name)
			d := e.receiveOne(q)
			if d.Message.ID != m.ID {
				e.Fatalf("%s: delivered %q, want %q", name, d.Message.ID, m.ID)
			}
			e.ack(q, d.Lease.Receipt)
		}
	}},
	{name: "MisconfiguredPolicyErrorNamesTheField", run: func(e *env) {
		// API.md §1: the refusal of a policy names the field at fault, so
		// that the operator knows what to change. The name is a word of
		// the text, not a part of one: "MaxRetryDelay" does not name
		// RetryDelay.
		for field, mod := range map[string]func(*broker.PolicyValue){
			"VisibilityTimeout": func(p *broker.PolicyValue) { p.VisibilityTimeout = 0 },
			"RetryDelay":        func(p *broker.PolicyValue) { p.RetryDelay = broker.MaxDeadlineOffset + 1 },
			"MaxRetryDelay":     func(p *broker.PolicyValue) { p.RetryDelay = time.Minute; p.MaxRetryDelay = time.Second },
			"MaxDeliveries":     func(p *broker.PolicyValue) { p.MaxDeliveries = 0 },
			"MaxMessageBytes":   func(p *broker.PolicyValue) { p.MaxMessageBytes = -1 },
			"Capacity":          func(p *broker.PolicyValue) { p.Capacity = -1 },
			"DedupWindow":       func(p *broker.PolicyValue) { p.DedupWindow = -1 },
		} {
			_, err := e.b.Queue(e.queueName(), e.policy(mod))
			e.isErr(err, broker.QueueMisconfigured, "a bad "+field)
			if !regexp.MustCompile(`\b` + field + `\b`).MatchString(err.Error()) {
				e.Fatalf("a bad %s: error %q does not name the field", field, err)
			}
		}
	}},
}
