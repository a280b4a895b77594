package natsjs_test

import (
	"context"
	"errors"
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
