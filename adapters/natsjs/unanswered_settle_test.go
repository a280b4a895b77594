package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// answerLost makes every acknowledgement whose body begins with prefix
// reach the server and lose its answer, as a timeout after the server
// applied it does, and returns what restores the default.
func answerLost(prefix string) (restore func()) {
	return natsjs.SendTellThrough(func(body string, send func() error) error {
		if !strings.HasPrefix(body, prefix) {
			return send()
		}
		_ = send()
		return context.DeadlineExceeded
	})
}

// TestANackThatGotNoAnswerGivesItsLeaseUp: a "-NAK" the server applied
// but did not answer in time hands the message back all the same, and the
// server gives it to another consumer. The server applies an
// acknowledgement to whichever delivery of the message is pending, so the
// Nack's receipt must act no more: it used to be restored as if nothing
// had been sent, and its Ack then acknowledged the message the other
// Store held, which it would process with its own Ack refused by nothing.
func TestANackThatGotNoAnswerGivesItsLeaseUp(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy()
	qa := mustQueue(t, a, "nacklost", p)
	qb := mustQueue(t, b, "nacklost", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, qa, 1)[0]
	restore := answerLost("-NAK")
	_, err = qa.Nack(ctx, d.Lease.Receipt, nil)
	restore()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may or may not") {
		t.Errorf("a Nack whose answer was lost: %v; want an error wrapping the deadline that says the server may have applied it", err)
	}
	again := receiveForeign(t, qb, 1)[0]
	if again.Message.ID != m.ID || again.Deliveries != 2 {
		t.Fatalf("the other Store received %s #%d, want %s #2", again.Message.ID, again.Deliveries, m.ID)
	}
	if err := qa.Ack(ctx, d.Lease.Receipt); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("Ack with the receipt of the Nack whose answer was lost, while another Store holds the message: %v; want LeaseExpired", err)
	}
	if _, err := qa.Extend(ctx, d.Lease.Receipt, time.Minute); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("Extend with that receipt: %v; want LeaseExpired", err)
	}
	if err := qb.Ack(ctx, again.Lease.Receipt); err != nil {
		t.Fatalf("the other Store's Ack: %v", err)
	}
}

// TestAnExtendThatGotNoAnswerHoldsTheLeaseOnlyAsLongAsItAskedFor: an
// Extend shorter than what is left of the lease is a delayed "-NAK",
// which moves the server's deadline closer; applied but not answered in
// time, it lets the server hand the message to another consumer at that
// closer deadline. The lease must then lapse there too: it used to be kept
// as it was, and its receipt acknowledged the message the other Store
// held, minutes before the ExpiresAt it still claimed.
func TestAnExtendThatGotNoAnswerHoldsTheLeaseOnlyAsLongAsItAskedFor(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy()
	qa := mustQueue(t, a, "extendlost", p)
	qb := mustQueue(t, b, "extendlost", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, qa, 1)[0]
	restore := answerLost("-NAK")
	_, err = qa.Extend(ctx, d.Lease.Receipt, 200*time.Millisecond)
	restore()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may or may not") {
		t.Errorf("an Extend whose answer was lost: %v; want an error wrapping the deadline that says the server may have applied it", err)
	}
	again := receiveForeign(t, qb, 1)[0]
	if again.Message.ID != m.ID || again.Deliveries != 2 {
		t.Fatalf("the other Store received %s #%d, want %s #2", again.Message.ID, again.Deliveries, m.ID)
	}
	if err := qa.Ack(ctx, d.Lease.Receipt); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("Ack with the receipt of the Extend whose answer was lost, after the deadline it asked for and while another Store holds the message: %v; want LeaseExpired", err)
	}
	if err := qb.Ack(ctx, again.Lease.Receipt); err != nil {
		t.Fatalf("the other Store's Ack: %v", err)
	}
}
