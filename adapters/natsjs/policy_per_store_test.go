package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// TestAStoreKeepsThePolicyItDeclaredUntilItDeclaresTheChange: a
// declaration through Store B changes the server's consumer and streams,
// but Store A decides what it decides itself by the policy it declared
// last (Store.Queue; the package documentation, Policy changes): its Nack
// dead-letters on what its own MaxDeliveries holds to be the last
// delivery, and its publishes are checked against its own
// MaxMessageBytes.
func TestAStoreKeepsThePolicyItDeclaredUntilItDeclaresTheChange(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "stale", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	if _, err := qa.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	mustQueue(t, b, "stale", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5; p.MaxMessageBytes = 10 }))
	ds := receiveN(t, qa, 1)
	nv, err := qa.Nack(ctx, ds[0].Lease.Receipt, errors.New("transient"))
	if err != nil {
		t.Fatalf("Nack: %v", err)
	}
	if !nv.DeadLettered {
		t.Fatalf("Nack through Store A (MaxDeliveries 1) of delivery 1 after Store B declared 5: %+v; the package documents A's own policy as deciding, so want it dead-lettered (update the documentation if B's policy now applies)", nv)
	}
	if _, err := qa.Publish(ctx, make([]byte, 100)); err != nil {
		t.Fatalf("Publish of 100 bytes through Store A (default MaxMessageBytes) after Store B declared 10: %v; the package documents A's own policy as deciding (update the documentation if B's policy now applies)", err)
	}
}

// TestAPolicyChangeReachesAnotherStoreWhenItDeclaresItToo: a change
// declared through every Store that serves the queue applies to each of
// them from then on (Store.Queue): MaxDeliveries to Nack and to which
// deliveries Receive returns, VisibilityTimeout to ExpiresAt, which the
// server's deadline never precedes, and MaxMessageBytes to Publish.
func TestAPolicyChangeReachesAnotherStoreWhenItDeclaresItToo(t *testing.T) {
	ctx := context.Background()
	t.Run("a raised MaxDeliveries leaves Nack deliveries", func(t *testing.T) {
		a, b, _ := twoStores(t)
		qa := mustQueue(t, a, "raised", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
		if _, err := qa.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		raised := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5 })
		mustQueue(t, b, "raised", raised)
		mustQueue(t, a, "raised", raised)
		ds := receiveN(t, qa, 1)
		nv, err := qa.Nack(ctx, ds[0].Lease.Receipt, errors.New("transient"))
		if err != nil {
			t.Fatalf("Nack: %v", err)
		}
		if nv.DeadLettered {
			t.Fatalf("Nack of delivery 1 dead-lettered the message although both Stores declared MaxDeliveries 5: %+v", nv)
		}
	})
	t.Run("a raised MaxDeliveries lets Receive return a later delivery", func(t *testing.T) {
		a, b, _ := twoStores(t)
		qa := mustQueue(t, a, "raised2", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
		raised := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5 })
		qb := mustQueue(t, b, "raised2", raised)
		mustQueue(t, a, "raised2", raised)
		if _, err := qa.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			ds := receiveN(t, qb, 1)
			if _, err := qb.Nack(ctx, ds[0].Lease.Receipt, errors.New("transient")); err != nil {
				t.Fatalf("Nack through B: %v", err)
			}
		}
		ds, err := qa.Receive(ctx, 5)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		dls, err := qa.DeadLetters(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || len(dls) != 0 {
			t.Fatalf("third delivery of a queue both Stores declared with MaxDeliveries 5: Receive through A got %d deliveries and the queue has %d dead letters (%s); want 1 delivery, no dead letter", len(ds), len(dls), dlText(dls))
		}
	})
	t.Run("a lowered VisibilityTimeout bounds ExpiresAt", func(t *testing.T) {
		a, b, _ := twoStores(t)
		qa := mustQueue(t, a, "shortened", policy())
		shortened := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Second })
		qb := mustQueue(t, b, "shortened", shortened)
		mustQueue(t, a, "shortened", shortened)
		if _, err := qa.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		ds := receiveN(t, qa, 1)
		expires := ds[0].Lease.ExpiresAt
		if limit := time.Now().Add(time.Second); expires.After(limit) {
			t.Fatalf("Store A leased the message until %v, %v after the 1 s VisibilityTimeout both Stores declared allows", expires.Format(time.StampMilli), expires.Sub(limit))
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got, err := qb.Receive(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > 0 {
				if now := time.Now(); now.Before(expires) {
					t.Fatalf("Store B received the message at %v, before the ExpiresAt %v of Store A's lease", now.Format(time.StampMilli), expires.Format(time.StampMilli))
				}
				return
			}
		}
		t.Fatalf("Store B did not receive the message within 5 s of Store A's lease, which ends at %v", expires.Format(time.StampMilli))
	})
	t.Run("a lowered MaxMessageBytes refuses a larger payload", func(t *testing.T) {
		a, b, _ := twoStores(t)
		qa := mustQueue(t, a, "smaller", policy())
		smaller := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 10 })
		mustQueue(t, b, "smaller", smaller)
		mustQueue(t, a, "smaller", smaller)
		m, err := qa.Publish(ctx, make([]byte, 100))
		if !errors.Is(err, broker.MessageTooLarge) {
			t.Fatalf("Publish of 100 bytes through Store A after both Stores declared MaxMessageBytes 10: %v, message %s; want MessageTooLarge", err, m.ID)
		}
	})
}
