package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// A queue's first Wake subscribes to the publications of other clients
// and waits for the server to confirm: a round trip, up to
// Options.Timeout while the connection is down. The queue's other calls,
// and another Wake, do not wait with it; and once confirmed, the
// subscription wakes this queue for another client's publication.
func TestAFirstWakeDoesNotHoldUpTheQueue(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	restore := natsjs.HoldWakeSubscription(func() { close(entered); <-release })
	defer restore()
	ctx := context.Background()
	b := openBackend(t)
	st := b.Store
	q := mustQueue(t, st, "w", policy())

	first := make(chan broker.WakeValue, 1)
	go func() { first <- q.Wake() }()
	<-entered // the first Wake holds its subscription unconfirmed

	served := make(chan error, 1)
	go func() {
		m, err := q.Publish(ctx, []byte("meanwhile"))
		if err != nil {
			served <- err
			return
		}
		if w := q.Wake(); !w.Scheduled || w.In != 0 {
			t.Errorf("a Wake beside the subscribing one: %+v, want a message receivable now", w)
		}
		ds, err := q.Receive(ctx, 5)
		if err == nil && (len(ds) != 1 || ds[0].Message.ID != m.ID) {
			t.Errorf("Receive beside the subscribing Wake: %d deliveries, want the message just published", len(ds))
		}
		if err == nil {
			err = q.Ack(ctx, ds[0].Lease.Receipt)
		}
		served <- err
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("a call beside the subscribing Wake: %v", err)
		}
	case <-time.After(30 * time.Second): // against a hang only
		close(release)
		t.Fatal("the queue's calls waited for the first Wake's subscription")
	}
	close(release)
	w := <-first

	// Confirmed: another client's publication closes the signal.
	select {
	case <-w.Signal:
		t.Fatal("the first Wake's signal is closed before anything happened")
	default:
	}
	other, err := natsjs.Open(connect(t, sharedServer(t).ClientURL()), natsjs.Options{Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := mustQueue(t, other, "w", policy()).Publish(ctx, []byte("elsewhere")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Signal:
	case <-time.After(30 * time.Second):
		t.Fatal("another client's publication did not close the signal of the first Wake")
	}
}

// A Receive with many leases out drops the long-lapsed ones (a memory
// bound, see trimLeases). The wake signal an idle consumer already holds
// is still the one the next Publish closes: a trim that replaced it would
// leave a consumer waiting on the old one asleep through every later
// publication.
func TestTrimmingLeasesKeepsTheWakeSignal(t *testing.T) {
	ctx := context.Background()
	st := openBackend(t).Store
	// One delivery each: a lease on its last delivery names no instant to
	// Wake, so only the signal can wake the consumer.
	q := mustQueue(t, st, "t", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	const n = 1100 // more leases out than a Receive trims at (1,024)
	batch := make([][]byte, 100)
	for i := range batch {
		batch[i] = []byte("m")
	}
	for range n / len(batch) {
		if _, err := q.PublishBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	// Every Receive but the last starts with fewer than 1,024 leases out,
	// so none trims; the last comes back short, so that nothing is known
	// to be receivable.
	for got := 0; got < n; {
		ds, err := q.Receive(ctx, 200)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			t.Fatalf("received %d of %d messages, then none", got, n)
		}
		got += len(ds)
	}
	w := q.Wake() // an idle consumer's
	if w.Scheduled {
		t.Fatalf("Wake over leases on their last delivery and an empty queue: %+v, want nothing scheduled", w)
	}
	if _, err := q.Receive(ctx, 10); err != nil { // another consumer's look: the trim runs
		t.Fatal(err)
	}
	if _, err := q.Publish(ctx, []byte("new")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Signal:
	default:
		t.Fatal("a Publish did not close the wake signal the idle consumer holds")
	}
}

// TestAStoreClosedWhileAWakeSubscribesLeavesNoSubscription: a Close that
// runs while a first Wake waits for the server to confirm its subscription
// ends no subscription of that Wake's; the Wake ends it when it sees the
// Store closed, and the connection keeps none.
func TestAStoreClosedWhileAWakeSubscribesLeavesNoSubscription(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	restore := natsjs.HoldWakeSubscription(func() { close(entered); <-release })
	defer restore()
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "WAKECLOSE"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStreams(t, nc, "WAKECLOSE") })
	q := mustQueue(t, st, "w", policy())
	subs := nc.NumSubscriptions()
	done := make(chan struct{})
	go func() { q.Wake(); close(done) }()
	<-entered
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-done
	// Close ended the queue's own subscription (its deaths notice).
	if n := nc.NumSubscriptions(); n != subs-1 {
		t.Fatalf("%d subscriptions on the connection after the Wake, want %d: the Wake's outlived Close", n, subs-1)
	}
}

// TestAFailedWakeSubscriptionIsTriedAgainOnlyASecondLater: while the wake
// subscription fails (here made to), Wakes do not try it again, and report
// its failure, each time: once per second at most. (A closed connection
// no longer shows it: the Store closes its queues then.)
func TestAFailedWakeSubscriptionIsTriedAgainOnlyASecondLater(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	logged := lockedWriter{mu: new(sync.Mutex), w: new(bytes.Buffer)}
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "WAKEFAIL", Logger: slog.New(slog.NewTextHandler(logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, connect(t, sharedServer(t).ClientURL()), "WAKEFAIL") })
	q := mustQueue(t, st, "w", policy())
	t.Cleanup(natsjs.FailWakeSubscription(errors.New("no subscription for this test")))
	begun := time.Now()
	for range 3 {
		q.Wake()
	}
	if time.Since(begun) >= time.Second {
		t.Skip("the machine is too loaded to tell: three Wakes took a second or more, and a second apart a second try of the subscription is allowed, so a count of tries proves nothing either way")
	}
	logged.mu.Lock()
	n := strings.Count(logged.w.String(), "wake subscription failed")
	logged.mu.Unlock()
	if n != 1 {
		t.Fatalf("three Wakes within a second on a closed connection tried the subscription %d times, want once", n)
	}
}
