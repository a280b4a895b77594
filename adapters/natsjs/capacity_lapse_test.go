package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// TestCapacityFreedWhenARedeliveredLastLeaseLapses: the conformance case
// CapacityFreedWhenLastLeaseLapses (the message is dead from the instant
// of the lapse, whether or not anyone looked, and dead letters do not
// count toward Capacity) on a message whose last delivery is not its
// first. nats-server notices such a lapse only at the consumer's next
// pull, so no advisory comes and the message stays pending, holding its
// place; the Store that handed the lease out buries it itself when a
// publish is refused as full, and the publish is admitted.
func TestCapacityFreedWhenARedeliveredLastLeaseLapses(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "capredeliver", policy(func(p *broker.PolicyValue) {
		p.Capacity = 1
		p.MaxDeliveries = 2
		p.VisibilityTimeout = time.Second
	}))
	m, err := q.Publish(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Nack(ctx, receiveN(t, q, 1)[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	var d broker.DeliveryValue
	until(t, 5*time.Second, "the redelivery", func() bool {
		ds, err := q.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			d = ds[0]
		}
		return len(ds) == 1
	})
	if d.Deliveries != 2 {
		t.Fatalf("redelivery has Deliveries %d, want 2", d.Deliveries)
	}
	if _, err := q.Publish(ctx, []byte("b")); err == nil {
		t.Fatalf("Publish into a queue of Capacity 1 whose message is leased: admitted")
	}
	time.Sleep(time.Until(d.Lease.ExpiresAt))
	b, err := q.Publish(ctx, []byte("b"))
	if err != nil {
		t.Fatalf("Publish %v after the last lease (delivery 2) lapsed at %v: %v; the dead message holds the only place",
			time.Since(d.Lease.ExpiresAt).Round(time.Millisecond), d.Lease.ExpiresAt.Format(time.RFC3339Nano), err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Delivery 1 was nacked with a nil cause: the lapse records that
	// last failure, UNEXPLAINED.
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != broker.ReasonUnexplained || dls[0].Deliveries != 2 || !dls[0].FailedAt.Equal(d.Lease.ExpiresAt) {
		t.Fatalf("dead letters %+v, want %s UNEXPLAINED (its last nack's nil cause) with 2 deliveries, FailedAt the lapse %v", dls, m.ID, d.Lease.ExpiresAt)
	}
	if got := receiveN(t, q, 1)[0]; got.Message.ID != b.ID {
		t.Fatalf("received %s, want the admitted %s", got.Message.ID, b.ID)
	}
}

// TestAReplayIntoAPlaceHeldByALapsedLastDeliveryIsAdmitted: as
// TestCapacityFreedWhenARedeliveredLastLeaseLapses, for a replay: the
// queue's only live message died when its last lease (delivery 2, handed
// out by this Store) lapsed, so the queue is below its Capacity and
// ReplayDeadLetter is admitted, as a Publish would be.
func TestAReplayIntoAPlaceHeldByALapsedLastDeliveryIsAdmitted(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "capreplay", policy(func(p *broker.PolicyValue) {
		p.Capacity = 1
		p.MaxDeliveries = 2
		p.VisibilityTimeout = time.Second
	}))
	dead, err := q.Publish(ctx, []byte("rejected"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Reject(ctx, receiveOneWithin(t, q, "the message to reject").Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Publish(ctx, []byte("doomed")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Nack(ctx, receiveOneWithin(t, q, "the doomed message").Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	d := receiveOneWithin(t, q, "the redelivery")
	if d.Deliveries != 2 {
		t.Fatalf("redelivery has Deliveries %d, want 2", d.Deliveries)
	}
	time.Sleep(time.Until(d.Lease.ExpiresAt) + 50*time.Millisecond)
	if err := q.ReplayDeadLetter(ctx, dead.ID); err != nil {
		t.Fatalf("ReplayDeadLetter %v after the only live message's last lease lapsed at %v: %v",
			time.Since(d.Lease.ExpiresAt).Round(time.Millisecond), d.Lease.ExpiresAt.Format(time.RFC3339Nano), err)
	}
	if got := receiveOneWithin(t, q, "the replayed message"); got.Message.ID != dead.ID {
		t.Fatalf("received %s, want the replayed %s", got.Message.ID, dead.ID)
	}
}
