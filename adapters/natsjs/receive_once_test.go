package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// TestAReceiveSpendsNoDeliveryOfAMessageItLeasedAlready: a Receive that
// found messages pulls again until a pull finds nothing, and a lease
// shorter than a few pulls lapsed meanwhile, so the server delivered the
// message again to the same Receive. One Receive of a single message
// under a 5 ms VisibilityTimeout used to return it five times, counted
// 1 to 5, every receipt but the last void on arrival, and the message a
// dead letter before any consumer ran it once. A Receive now hands out
// each message once and pulls no more once one of its leases may have
// lapsed.
func TestAReceiveSpendsNoDeliveryOfAMessageItLeasedAlready(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "shortlease", policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = 5 * time.Millisecond
		p.MaxDeliveries = 5
	}))
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, d := range ds {
		got = append(got, d.Deliveries)
	}
	if len(ds) != 1 || ds[0].Message.ID != m.ID || ds[0].Deliveries != 1 {
		t.Fatalf("one Receive of one message under a 5 ms lease: %d deliveries, counted %v; want %s once, delivery 1", len(ds), got, m.ID)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after one Receive: %+v, %v; want none", dls, err)
	}
}

// TestAReceiveThatBuriesADeliveryBeyondMaxDeliveriesPullsOn: a pull that
// found only a delivery beyond the policy's MaxDeliveries, which the
// Receive buries, leased nothing, and the Receive pulls on for what it
// was asked: the message published after it is returned by the same
// Receive.
func TestAReceiveThatBuriesADeliveryBeyondMaxDeliveriesPullsOn(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "buryon", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	qb := mustQueue(t, b, "buryon", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 }))
	dead, err := qb.Publish(ctx, []byte("twice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qb.Nack(ctx, receiveN(t, qb, 1)[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	live, err := qb.Publish(ctx, []byte("once"))
	if err != nil {
		t.Fatal(err)
	}
	// The server hands out the redelivery first: the first pull of one
	// message finds the delivery beyond qa's MaxDeliveries.
	ds, err := qa.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Message.ID != live.ID || ds[0].Deliveries != 1 {
		t.Fatalf("Receive(1) that met %s beyond MaxDeliveries: %v; want %s, delivery 1", dead.ID, ds, live.ID)
	}
	dls, err := qa.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || dls[0].Message.ID != dead.ID {
		t.Fatalf("dead letters %+v, %v; want %s", dls, err, dead.ID)
	}
}
