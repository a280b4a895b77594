package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestAnExtendThatShortensALeaseClosesTheWakeSignal: as with the memory
// broker and the file store (broker/wake_test.go), an Extend that brings
// a lease's lapse closer closes the wake signal: a consumer told to wait
// for the old lapse would sleep past the new one.
func TestAnExtendThatShortensALeaseClosesTheWakeSignal(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "shorten", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute }))
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	w := q.Wake()
	if !w.Scheduled || w.In < 30*time.Second {
		t.Fatalf("Wake after the Receive: %+v, want the lease's lapse about a minute away", w)
	}
	if isClosed(w.Signal) {
		t.Fatalf("signal closed before the Extend")
	}
	l, err := q.Extend(ctx, d.Lease.Receipt, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if isClosed(w.Signal) {
		t.Fatalf("an Extend that moved the lapse further away closed the wake signal")
	}
	if _, err := q.Extend(ctx, l.Receipt, time.Second); err != nil {
		t.Fatal(err)
	}
	if !isClosed(w.Signal) {
		t.Errorf("an Extend that moved the lease's lapse from ~%v to 1s away left the wake signal open (Wake now says In=%v): a consumer waiting on the old value sleeps past the lapse", w.In, q.Wake().In)
	}
}

// TestRaisingMaxDeliveriesClosesTheWakeSignal: a queue declared again
// with a higher MaxDeliveries makes a lease on its formerly last delivery
// one whose lapse hands the message back; as the file store does
// (broker/wake_test.go), the changed policy closes the wake signal, so
// that a consumer told nothing was scheduled asks again.
func TestRaisingMaxDeliveriesClosesTheWakeSignal(t *testing.T) {
	ctx := context.Background()
	st := openBackend(t).Store
	pol := func(max int) broker.PolicyValue {
		return policy(func(p *broker.PolicyValue) { p.MaxDeliveries = max; p.VisibilityTimeout = time.Minute })
	}
	q := mustQueue(t, st, "raise", pol(1))
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	receiveN(t, q, 1)
	w := q.Wake()
	if w.Scheduled {
		t.Fatalf("Wake with only a last-delivery lease out: %+v, want nothing scheduled", w)
	}
	mustQueue(t, st, "raise", pol(1))
	if isClosed(w.Signal) {
		t.Fatalf("declaring the queue again with the same policy closed the wake signal")
	}
	mustQueue(t, st, "raise", pol(5))
	after := q.Wake()
	if !after.Scheduled {
		t.Fatalf("Wake after raising MaxDeliveries: %+v, want the lease's lapse", after)
	}
	if !isClosed(w.Signal) {
		t.Errorf("raising MaxDeliveries left the wake signal handed out before it open, though Wake now schedules the lapse In=%v: a consumer that got Scheduled=false sleeps until some unrelated publish", after.In)
	}
}

// TestAFullReceiveLeavesWakeReadyOnlyWhileSomethingIsLeft: a Receive that
// got all it asked for clears Wake's "receivable now" only when nothing is
// left: not while new messages are (the server's count of them, with the
// last delivery), nor while a message nacked without delay waits for its
// redelivery, which that count leaves out, long after the nack (Wake
// names a nack's instant for a second only).
func TestAFullReceiveLeavesWakeReadyOnlyWhileSomethingIsLeft(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "full", policy())
	for _, p := range []string{"a", "b"} {
		if _, err := q.Publish(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive(1): %d, %v", len(ds), err)
	}
	if w := q.Wake(); !w.Scheduled || w.In != 0 {
		t.Fatalf("Wake after a Receive(1) that left a message: %+v, want Scheduled now", w)
	}
	// b first: the server redelivers in the order of the nacks, and a
	// Receive that took the queue's newest message knows of nothing
	// stored after it.
	ds = append(receiveN(t, q, 1), ds...)
	for _, d := range ds {
		if _, err := q.Nack(ctx, d.Lease.Receipt, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 1 {
		t.Fatalf("Receive(1) with two redeliveries due: %d, %v", len(ds), err)
	}
	if w := q.Wake(); !w.Scheduled || w.In != 0 {
		t.Fatalf("Wake after a Receive(1) that left a due redelivery: %+v, want Scheduled now", w)
	}
}

// TestAFullReceiveKeepsTheRecheckForAnotherStoresLease: while another
// Store holds a lease on the queue (its consumer may have died), Wake asks
// to be called again within Options.Recheck, also after a Receive that got
// all it asked for and took the last message: that Receive clears "now",
// and the held message becomes receivable when the other lease lapses,
// which this Store cannot see (doc.go, Wake).
func TestAFullReceiveKeepsTheRecheckForAnotherStoresLease(t *testing.T) {
	ctx := context.Background()
	c := openBackend(t) // Recheck 1 s
	other, err := natsjs.Open(connect(t, sharedServer(t).ClientURL()), natsjs.Options{Prefix: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	qc, qb := mustQueue(t, c.Store, "both", policy()), mustQueue(t, other, "both", policy())
	if _, err := qb.Publish(ctx, []byte("held by b")); err != nil {
		t.Fatal(err)
	}
	receiveOneWithin(t, qb, "b's message") // and b's consumer dies
	if _, err := qc.Publish(ctx, []byte("c's")); err != nil {
		t.Fatal(err)
	}
	ds, err := qc.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive(1): %d deliveries, %v; want the message just published", len(ds), err)
	}
	if err := qc.Ack(ctx, ds[0].Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	if w := qc.Wake(); !w.Scheduled || w.In > 2*time.Second {
		t.Fatalf("Wake %+v while another Store holds a lease on the queue, want a look again within the 1 s Recheck", w)
	}
}
