package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// A declaration that lowers MaxDeliveries to or below the count of a
// message that is not leased leaves it no delivery. The file store moves
// such a message to the dead-letter store at the declaration
// (broker.Store.Queue; DESIGN, "A lowered MaxDeliveries gives up on what
// has no delivery left"), and so does the adapter for the messages its
// Store nacked that still wait out their retry delay: no consumer holds
// them, and the server delivers them no more. A message whose lease
// lapsed with deliveries left is not buried at the declaration: the
// server handed it back at the lapse, and may have delivered it again,
// to another Store, since. It is left to the server, which delivers it
// no more under the lowered MaxDeliveries and gives it up at the next
// pull; a sweep then buries it.

// TestALoweredMaxDeliveriesEndsAWaitingMessage: a message nacked on its
// first delivery waits out a retry delay of 30 s when its queue is
// declared again with MaxDeliveries 1. It is a dead letter at once, with
// the nack's cause and its one delivery, as the file store records it:
// it no longer holds its place of the Capacity (a Publish into the queue
// of Capacity 1 is admitted), and Wake names no moment for it to become
// receivable.
func TestALoweredMaxDeliveriesEndsAWaitingMessage(t *testing.T) {
	ctx := context.Background()
	three := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 3
		p.Capacity = 1
		p.RetryDelay = 30 * time.Second
	})
	one := three
	one.MaxDeliveries = 1
	cause := broker.NewError("PARSE_FAILED", 0x2A00000B, "unparsable order", "secret")

	// The file store, for reference.
	fs, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	fq, err := fs.Queue("lowered", three)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fq.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	fds, err := fq.Receive(ctx, 1)
	if err != nil || len(fds) != 1 {
		t.Fatalf("file store Receive: %v, %v", fds, err)
	}
	if _, err := fq.Nack(ctx, fds[0].Lease.Receipt, cause); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Queue("lowered", one); err != nil {
		t.Fatal(err)
	}
	if w := fq.Wake(); w.Scheduled {
		t.Fatalf("file store: Wake after MaxDeliveries was lowered under the only message's count: %+v, want nothing scheduled", w)
	}
	if _, err := fq.Publish(ctx, []byte("b")); err != nil {
		t.Fatalf("file store: Publish after MaxDeliveries was lowered under the only message's count: %v", err)
	}
	if fdls, err := fq.DeadLetters(ctx, 10); err != nil || len(fdls) != 1 {
		t.Fatalf("file store: dead letters %+v, %v; want 1", fdls, err)
	}

	// The adapter.
	b := openBackend(t)
	q := mustQueue(t, b.Store, "lowered", three)
	m, err := q.Publish(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Nack(ctx, receiveN(t, q, 1)[0].Lease.Receipt, cause); err != nil {
		t.Fatal(err)
	}
	mustQueue(t, b.Store, "lowered", one)
	// The burial is the declaration's: another Store of the queue, which
	// knows nothing of the nack, finds the place free.
	other := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "lowered", one)
	if _, err := other.Publish(ctx, []byte("b")); err != nil {
		t.Errorf("Publish into a queue of Capacity 1 whose only message has no delivery left under the new MaxDeliveries: %v (QueueFull: %v); the file store admits it",
			err, errors.Is(err, broker.QueueFull))
	}
	if w := q.Wake(); w.Scheduled {
		t.Errorf("Wake after the declaration: Scheduled, In %v (the nacked message's retry), yet the message has no delivery left; want nothing scheduled, as the file store", w.In)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != "PARSE_FAILED" || dls[0].Deliveries != 1 {
		t.Errorf("dead letters after the declaration: %s; want %s PARSE_FAILED after 1 delivery, as the file store records at the declaration", dlText(dls), m.ID)
	}
}

// TestALoweredMaxDeliveriesEndsAMessageWhoseLeaseLapsed: a message whose
// first lease lapsed with deliveries left (MaxDeliveries 3) waits for its
// next delivery when its queue is declared again with MaxDeliveries 1.
// The declaration does not bury it (the server may have delivered it
// again since; see TestALoweringLeavesAMessageAnotherStoreHoldsAlone),
// but the server delivers it no more: the next Receive gets nothing, and
// the server gives the message up, so that it becomes a dead letter with
// its one delivery, LEASE_EXPIRED (no consumer reported a failure), and
// FailedAt the declaration, which left it no delivery, as the file store
// dates it (the lease lapsed when it still had deliveries left).
func TestALoweredMaxDeliveriesEndsAMessageWhoseLeaseLapsed(t *testing.T) {
	ctx := context.Background()
	three := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 3
		p.VisibilityTimeout = 200 * time.Millisecond
	})
	one := three
	one.MaxDeliveries = 1
	b := openBackend(t)
	q := mustQueue(t, b.Store, "lapsed", three)
	m, err := q.Publish(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	time.Sleep(time.Until(d.Lease.ExpiresAt) + 100*time.Millisecond)
	before := time.Now()
	mustQueue(t, b.Store, "lapsed", one)
	after := time.Now()
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("Receive after MaxDeliveries was lowered to the count of the only message: %d deliveries, %v; want none (the message has no delivery left)", len(ds), err)
	}
	dls := waitForDeadLetters(t, q, 1, "the server gives up the message whose lease lapsed before MaxDeliveries was lowered to its count")
	if dls[0].Message.ID != m.ID || dls[0].Reason != broker.ReasonLeaseExpired || dls[0].Deliveries != 1 {
		t.Fatalf("dead letters after the next Receive: %s; want %s LEASE_EXPIRED after 1 delivery", dlText(dls), m.ID)
	}
	if at := dls[0].FailedAt; at.Before(before.Round(0)) || at.After(after.Round(0)) {
		t.Errorf("FailedAt %v, want the declaration's, between %v and %v (the lease lapsed at %v with deliveries left)", at, before, after, d.Lease.ExpiresAt)
	}
}

// TestALoweringLeavesAMessageAnotherStoreHoldsAlone: Store A's lease on
// delivery 1 lapses with deliveries left; Store B then receives the
// message (delivery 2) and is handling it when A declares the queue again
// with MaxDeliveries 1. The file store keeps a leased message's lease
// (the delivery it is on is its last, and it dies at its lapse or nack),
// so A's declaration must not bury the message from its own lapsed lease:
// nothing is a dead letter, and B's Ack settles it.
func TestALoweringLeavesAMessageAnotherStoreHoldsAlone(t *testing.T) {
	ctx := context.Background()
	three := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 3
		p.VisibilityTimeout = time.Second
	})
	one := three
	one.MaxDeliveries = 1
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "handled", three)
	qb := mustQueue(t, b, "handled", three)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d1 := receiveN(t, qa, 1)[0]
	time.Sleep(time.Until(d1.Lease.ExpiresAt) + 300*time.Millisecond)
	db := receiveN(t, qb, 1)[0] // B now handles it, delivery 2
	if db.Message.ID != m.ID || db.Deliveries != 2 {
		t.Fatalf("B got %s delivery %d", db.Message.ID, db.Deliveries)
	}
	// B holds its lease for the rest of the test, however slow the
	// machine: a second's lease, extended at once by a minute.
	lb, err := qb.Extend(ctx, db.Lease.Receipt, time.Minute)
	if err != nil {
		t.Fatalf("B's Extend within its second-long lease: %v", err)
	}
	mustQueue(t, a, "handled", one) // A lowers; B's lease is live
	dls, err := qb.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	ackErr := qb.Ack(ctx, lb.Receipt)
	if len(dls) != 0 || ackErr != nil {
		t.Fatalf("while Store B held a live lease on delivery 2, Store A's lowering declaration buried the message from its lapsed lease of delivery 1: dead letters %s; B's Ack: %v (the file store keeps a leased message's lease: no dead letter, and the Ack settles it)",
			dlText(dls), ackErr)
	}
	if dls, err := qa.DeadLetters(ctx, 10); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after B's Ack: %s, %v; want none", dlText(dls), err)
	}
}

// TestARepeatedLoweringFinishesTheBurialThatFailed: the server's consumer
// takes a lowered MaxDeliver before the Store buries what the lowering
// left no delivery, and cannot take it back. When that burial fails (here:
// the connection may not publish dead-letter records), the declaration
// says the policy is in force and the burial failed, and the next
// declaration of the queue, with the same policy, changing nothing, still
// does not report success until the nacked message is a dead letter.
func TestARepeatedLoweringFinishesTheBurialThatFailed(t *testing.T) {
	ctx := context.Background()
	const prefix = "LOWFAIL"
	users := func(deny ...string) []*server.User {
		return []*server.User{
			{Username: "app", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
			}},
			{Username: "admin", Password: "pw"},
		}
	}
	var opts *server.Options
	srv := runServer(t, storeDir(t), func(o *server.Options) {
		o.Users = users(prefix + ".d.>")
		opts = o
	})
	nc := connect(t, srv.ClientURL(), nats.UserInfo("app", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	admin := connect(t, srv.ClientURL(), nats.UserInfo("admin", "pw"))
	s, err := natsjs.Open(nc, natsjs.Options{Prefix: prefix, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	q := mustQueue(t, s, "low", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute }))
	if _, err := q.Publish(ctx, []byte("m")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ds := receiveN(t, q, 1)
	if _, err := q.Nack(ctx, ds[0].Lease.Receipt, errors.New("boom")); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	lowered := policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute; p.MaxDeliveries = 1 })
	if _, err := s.Queue("low", lowered); err == nil || !strings.Contains(err.Error(), "is in force") {
		t.Fatalf("lowering MaxDeliveries while dead-letter records may not be published: %v; want an error saying the policy is in force but the burial failed", err)
	}
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	deadLetters := func() uint64 {
		t.Helper()
		dead, err := js.Stream(ctx, prefix+"_D_low")
		if err != nil {
			t.Fatalf("dead-letter stream: %v", err)
		}
		info, err := dead.Info(ctx)
		if err != nil {
			t.Fatalf("dead-letter stream info: %v", err)
		}
		return info.State.Msgs
	}
	if _, err := s.Queue("low", lowered); err == nil {
		t.Fatalf("the same declaration again, the burial still refused: returned the Queue and no error, with %d dead-letter records; want the burial's error", deadLetters())
	}
	allowed := opts.Clone()
	allowed.Users = users()
	if err := srv.ReloadOptions(allowed); err != nil {
		t.Fatalf("reload the server without the deny: %v", err)
	}
	if _, err := s.Queue("low", lowered); err != nil {
		t.Fatalf("the same declaration once dead-letter records may be published: %v", err)
	}
	if n := deadLetters(); n != 1 {
		t.Fatalf("after the declaration that finished the burial, the dead-letter stream holds %d records, want the nacked message's 1", n)
	}
}
