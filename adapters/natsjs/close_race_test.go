package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

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
