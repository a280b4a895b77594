package natsjs

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/walbroker/walbroker/broker"
)

// TestARecheckSurvivesAConsumerStateTheServerDidNotAnswer: while other
// processes hold leases on the queue, Wake asks to be called again within
// Options.Recheck, so that an idle consumer picks up the message of one
// that died elsewhere that long after its lapse at most. A Receive that is
// the look a due recheck asked for settles it by reading the consumer's
// state from the server: after a Receive that came back short (settle), or
// that took the last message (drained). When that state does not come,
// the recheck stays due, and Wake goes on asking for a look within
// Recheck, rather than forgetting the other process's lease.
func TestARecheckSurvivesAConsumerStateTheServerDidNotAnswer(t *testing.T) {
	for _, full := range []bool{false, true} {
		name := "short"
		if full {
			name = "full"
		}
		t.Run(name, func(t *testing.T) { recheckWithoutConsumerState(t, full) })
	}
}

func recheckWithoutConsumerState(t *testing.T, full bool) {
	ctx := context.Background()
	const recheck = 300 * time.Millisecond
	p := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}
	srv := embeddedServer(t)
	b, err := openStoreOn(t, srv, Options{Recheck: recheck}).Queue("recheck", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, []byte("held by b")); err != nil {
		t.Fatal(err)
	}
	receiveOneOf(t, b, "b's message") // and b's consumer dies
	gate := NewWriteGate()
	a, err := openStoreOn(t, srv, Options{Recheck: recheck}, nats.SetCustomDialer(gate.Dialer())).Queue("recheck", p)
	if err != nil {
		t.Fatal(err)
	}
	if full {
		// A message for a's Receive to take; a, which has not called
		// Wake yet, does not hear of it.
		if _, err := b.Publish(ctx, []byte("for a")); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	due, ready := a.recheck, a.ready
	a.mu.Unlock()
	if due.IsZero() || ready {
		t.Fatalf("at open while b holds a lease: recheck %v, ready %v; want a recheck, not ready", due, ready)
	}
	time.Sleep(time.Until(due) + 10*time.Millisecond)

	// The consumer state the Receive asks for after its pull does not
	// come within the call's deadline.
	rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	restore := HoldAfterPull(func() { gate.Arm("CONSUMER.INFO.") })
	defer restore()
	go func() {
		<-gate.Held()
		<-rctx.Done()
		time.Sleep(300 * time.Millisecond)
		gate.Release()
	}()
	ds, err := a.Receive(rctx, 1)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	if full != (len(ds) == 1) {
		t.Fatalf("Receive(1) leased %d", len(ds))
	}
	select {
	case <-gate.Held():
	default:
		t.Fatal("the Receive asked nothing after its pull")
	}
	if w := a.Wake(); !w.Scheduled || w.In > recheck+wakeSlack {
		t.Fatalf("Wake after a recheck whose consumer state the server did not answer: %+v; b still holds its lease, want a look within Recheck %v", w, recheck)
	}
}
