package natsjs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// TestAReceiveOvertakenByCloseBetweenItsPullsHandsItsLeasesBack:
// Store.Close promises that "a Receive whose pull Close overtook hands
// what it pulled back at once ... and returns Closed, so that no lease is
// taken after Close returned". A Receive that pulled two messages, then
// pulls again for more while Close runs, returns the two deliveries with
// a nil error after Close returned: their Ack is refused (Closed), and
// the server holds both messages from every other consumer for the whole
// VisibilityTimeout.
func TestAReceiveOvertakenByCloseBetweenItsPullsHandsItsLeasesBack(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "closepull", policy())
	qb := mustQueue(t, b, "closepull", policy())
	for i := 0; i < 2; i++ {
		if _, err := qa.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	pulls := 0
	restore := natsjs.HoldAfterPull(func() {
		pulls++
		if pulls == 2 { // after the first pull's deliveries were recorded
			a.Close()
		}
	})
	ds, err := qa.Receive(ctx, 5)
	restore()
	if pulls < 2 {
		t.Fatalf("Receive pulled %d times; the test needs a second pull to close the Store at", pulls)
	}
	if len(ds) > 0 || !errors.Is(err, broker.Closed) {
		ackErr := errors.New("no delivery")
		if len(ds) > 0 {
			ackErr = qa.Ack(ctx, ds[0].Lease.Receipt)
		}
		t.Fatalf("Receive overtaken by Close returned %d deliveries and error %v after Close returned; the first's Ack says %v; want no delivery and an error wrapping broker.Closed",
			len(ds), err, ackErr)
	}
	got, err := qb.Receive(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("another Store receives %d of the 2 messages the closed Store pulled; want both handed back (else the server holds them for the 10 min VisibilityTimeout)", len(got))
	}
}
