package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// A Receive whose pull is under way when the Store closes takes leases on
// the server after Close returned: it used to record them in the Queue
// that Close had emptied and return them, though no call could settle
// them any more (every later call is Closed), so each message was held
// from every other consumer for its VisibilityTimeout. The Receive now
// finds the Queue closed when it comes to record them, hands them back
// at once and returns Closed. (The server counts the delivery, as it
// would a lapse.)
func TestAReceiveThatFindsTheStoreClosedHandsBackWhatItPulled(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "handback", policy()) // leases of 10 minutes
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	restore := natsjs.HoldAfterPull(func() { b.Store.Close() })
	ds, err := q.Receive(ctx, 1)
	restore()
	if !errors.Is(err, broker.Closed) || len(ds) != 0 {
		t.Fatalf("Receive during which the Store closed: %d deliveries, %v; want none, Closed", len(ds), err)
	}
	other := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "handback", policy())
	ds = receiveN(t, other, 1)
	if ds[0].Message.ID != m.ID || ds[0].Deliveries != 2 {
		t.Fatalf("delivered %s on delivery %d; want %s, handed back at once, on its second", ds[0].Message.ID, ds[0].Deliveries, m.ID)
	}
}

// An Extend, Ack, Nack or Reject that began before Close and looks at its
// lease after it used to be told LeaseExpired ("the lease is no longer
// held"): Close forgets the leases, but the lease is held on the server
// until it lapses, and Consume, told so, reported a lost lease (its
// handler's context ending with LeaseExpired as cause) instead of the
// close. Each is now told Closed. Here the Store closes during Extend's
// request, after the server renewed the lease.
func TestAnExtendDuringWhichTheStoreClosesIsClosed(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "extend", policy())
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	restore := natsjs.HoldAfterTell(func() { b.Store.Close() })
	_, err := q.Extend(ctx, d.Lease.Receipt, time.Minute)
	restore()
	if !errors.Is(err, broker.Closed) || errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("Extend during which the Store closed: %v, want Closed", err)
	}
}

// Once the connection a Store was given closes, every call of the Store is
// Closed, as after Store.Close; an idle Consume must hear of it too, as it
// does of Close (which closes the queues' wake signals), not wait for good
// on a signal nothing closes. The Store watches the connection's CLOSED
// status and closes its queues then.
func TestAnIdleConsumeEndsWhenItsConnectionCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc := connect(t, sharedServer(t).ClientURL())
	prefix := fmt.Sprintf("ZZC%d", prefixes.Add(1))
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		deleteStreams(t, connect(t, sharedServer(t).ClientURL()), prefix)
	})
	q := mustQueue(t, st, "idle", policy())
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{})
	}()
	time.Sleep(300 * time.Millisecond) // idle by now (either way, nothing wakes it)
	nc.Close()
	if _, err := q.Receive(ctx, 1); !errors.Is(err, broker.Closed) {
		t.Fatalf("Receive on the closed connection: %v, want Closed", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, broker.Closed) {
			t.Fatalf("Consume after its connection closed: %v, want Closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Consume still running 5 s after its connection closed, while every call of the Store is Closed: nothing closes the wake signal")
	}
}
