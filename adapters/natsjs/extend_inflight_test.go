package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// inFlightContext runs hook at its n-th Err: a call's first check (begin) is
// the 1st, and the request an Extend sends to the server makes the next,
// just before the request leaves. It is never done, and its Deadline
// keeps the Store from wrapping it.
type inFlightContext struct {
	context.Context
	n     int
	calls int
	hook  func()
}

func (c *inFlightContext) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c *inFlightContext) Err() error {
	c.calls++
	if c.calls == c.n {
		c.hook()
	}
	return nil
}

// whileInFlight returns a hook that starts rival and gives it up to half
// a second to finish before the request under way leaves: a rival that
// is not held back by the request in flight runs to its end first.
func whileInFlight(rival func()) (hook func(), wait func()) {
	done := make(chan struct{})
	return func() {
			go func() { defer close(done); rival() }()
			select {
			case <-done:
			case <-time.After(500 * time.Millisecond):
			}
		}, func() {
			<-done
		}
}

// TestANackWhileAnExtendIsInFlightWaitsAndFindsTheLeaseReplaced: the
// server applies an acknowledgement to whichever delivery of the message
// is pending, so a lease is held while an Extend of it waits for the
// server. A Nack of the same receipt made meanwhile waits for the Extend,
// then finds its receipt replaced (LeaseExpired) and sends nothing: the
// message comes back when the Extend's lease lapses, not an hour later
// as a retry delay of the refused Nack would make it (API.md §5.7:
// nothing moves either way). Before, the Nack ran first, and the Extend,
// refused afterwards, replaced the Nack's retry delay on the server.
func TestANackWhileAnExtendIsInFlightWaitsAndFindsTheLeaseReplaced(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "extendnack", policy(func(p *broker.PolicyValue) {
		p.RetryDelay = time.Hour
		p.VisibilityTimeout = time.Minute
	}))
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	var nv broker.NackValue
	var nerr error
	hook, wait := whileInFlight(func() { nv, nerr = q.Nack(ctx, d.Lease.Receipt, nil) })
	l, err := q.Extend(&inFlightContext{Context: ctx, n: 2, hook: hook}, d.Lease.Receipt, time.Second)
	wait()
	if err != nil {
		t.Fatalf("the Extend in flight: %v (the Nack made meanwhile: %+v, %v)", err, nv, nerr)
	}
	if !errors.Is(nerr, broker.LeaseExpired) {
		t.Fatalf("a Nack made while the Extend was in flight: %+v, %v; want LeaseExpired, its receipt replaced", nv, nerr)
	}
	var again []broker.DeliveryValue
	until(t, 10*time.Second, "the message back once the extended lease lapsed", func() bool {
		if again, err = q.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return len(again) == 1
	})
	if again[0].Deliveries != 2 {
		t.Fatalf("delivered again with Deliveries %d, want 2", again[0].Deliveries)
	}
	if err := q.Ack(ctx, l.Receipt); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("Ack with the lapsed extended receipt once the message was delivered again: %v, want LeaseExpired", err)
	}
}

// TestAnExtendWhileAnotherIsInFlightWaitsAndMovesNothing: two Extends of
// one receipt; the second, made while the first waits for the server,
// waits for it and is refused (its receipt was replaced) without a
// request, so the server's deadline is the first's. Before, the second
// won in the adapter (an hour) while the first's delayed NAK, sent last,
// set the server's deadline to a second: another Store received the
// message while the hour-long receipt still acknowledged it — the other
// Store's delivery.
func TestAnExtendWhileAnotherIsInFlightWaitsAndMovesNothing(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	pol := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute })
	q := mustQueue(t, a, "extendextend", pol)
	other := mustQueue(t, b, "extendextend", pol)
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	var rival broker.LeaseValue
	var rerr error
	hook, wait := whileInFlight(func() { rival, rerr = q.Extend(ctx, d.Lease.Receipt, time.Hour) })
	won, err := q.Extend(&inFlightContext{Context: ctx, n: 2, hook: hook}, d.Lease.Receipt, time.Second)
	wait()
	if err != nil {
		t.Fatalf("the Extend in flight: %v (the Extend made meanwhile: %+v, %v)", err, rival, rerr)
	}
	if !errors.Is(rerr, broker.LeaseExpired) {
		t.Fatalf("an Extend made while another was in flight: %+v, %v; want LeaseExpired, its receipt replaced", rival, rerr)
	}
	var again []broker.DeliveryValue
	until(t, 10*time.Second, "another Store receives the message once the extended lease lapsed", func() bool {
		if again, err = other.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return len(again) == 1
	})
	if err := q.Ack(ctx, won.Receipt); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("the extended lease ran to %v; once another Store received the message, its Ack: %v, want LeaseExpired",
			won.ExpiresAt.Format(time.RFC3339Nano), err)
	}
	if err := other.Ack(ctx, again[0].Lease.Receipt); err != nil {
		t.Fatalf("the other Store's Ack: %v", err)
	}
}
