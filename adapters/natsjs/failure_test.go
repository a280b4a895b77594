package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// TestALapseBuriedByAnotherStoreRecordsTheLastNacksCause: the last Nack's
// classified cause is kept on the server (the failures stream), not in the
// Store that nacked: a Store that never held the message, burying it from
// the server's advisory after its last lease lapsed, records that cause,
// never its private detail. The record goes with the message.
func TestALapseBuriedByAnotherStoreRecordsTheLastNacksCause(t *testing.T) {
	ctx := context.Background()
	a := openBackend(t)
	b, err := natsjs.Open(connect(t, sharedServer(t).ClientURL()), natsjs.Options{Prefix: a.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	p := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 2
		p.VisibilityTimeout = 500 * time.Millisecond
	})
	qa := mustQueue(t, a.Store, "lastnack", p)
	qb := mustQueue(t, b, "lastnack", p)
	m, err := qa.Publish(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	cause := broker.NewError("PARSE_FAILED", 0x2A00000B, "unparsable order", "secret detail")
	if _, err := qa.Nack(ctx, receiveN(t, qa, 1)[0].Lease.Receipt, cause); err != nil {
		t.Fatal(err)
	}
	var d broker.DeliveryValue
	until(t, 10*time.Second, "the redelivery", func() bool {
		ds, err := qa.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			d = ds[0]
		}
		return len(ds) == 1
	})
	if d.Deliveries != 2 {
		t.Fatalf("redelivery #%d, want #2", d.Deliveries)
	}
	time.Sleep(time.Until(d.Lease.ExpiresAt))
	var dls []broker.DeadLetterValue
	until(t, 20*time.Second, "the other Store buries the lapsed message", func() bool {
		if ds, err := qb.Receive(ctx, 1); err != nil || len(ds) > 0 {
			t.Fatalf("Receive after the last lease lapsed: %d deliveries, %v", len(ds), err)
		}
		if dls, err = qb.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) == 1
	})
	dl := dls[0]
	if dl.Message.ID != m.ID || dl.Reason != "PARSE_FAILED" || dl.Code != 0x2A00000B || dl.Cause != "unparsable order" || dl.Deliveries != 2 {
		t.Fatalf("dead letter %+v, want %s PARSE_FAILED 0x2A00000B %q after 2 deliveries", dl, m.ID, "unparsable order")
	}
	failures(t, a, "lastnack", 0)
}

// TestAnAckForgetsTheLastNacksCause: the failure record a Nack stored is
// deleted when the redelivered message is acknowledged.
func TestAnAckForgetsTheLastNacksCause(t *testing.T) {
	ctx := context.Background()
	a := openBackend(t)
	q := mustQueue(t, a.Store, "acked", policy())
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Nack(ctx, receiveN(t, q, 1)[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	failures(t, a, "acked", 1)
	var d broker.DeliveryValue
	until(t, 10*time.Second, "the redelivery", func() bool {
		ds, err := q.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			d = ds[0]
		}
		return len(ds) == 1
	})
	if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	failures(t, a, "acked", 0)
}

// failures checks that the failures stream of queue name holds want
// records.
func failures(t *testing.T, b backend, name string, want uint64) {
	t.Helper()
	info, err := b.stream(t, "_F_"+name).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != want {
		t.Fatalf("the failures stream of %s holds %d records, want %d", name, info.State.Msgs, want)
	}
}
