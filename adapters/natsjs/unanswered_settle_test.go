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

// TestADeathWhoseTerminationGotNoAnswerIsDoneWhenTriedAgain: a Reject, or
// a Nack of the last delivery, stores the dead letter, then terminates
// the delivery; when the server applied the "+TERM" but its answer was
// lost, the call fails and keeps its lease, for the caller to try again.
// The message has left the queue then, and the call tried again used to
// fail for good (it read the message back to dead-letter it, and found
// none), while an Ack of the same receipt reported success for a message
// that is a dead letter. Tried again, it now finds its dead letter stored
// and the message gone, and is done.
func TestADeathWhoseTerminationGotNoAnswerIsDoneWhenTriedAgain(t *testing.T) {
	ctx := context.Background()
	cause := broker.NewError("PARSE_FAILED", 0x2A00000B, "unparsable order", "secret detail")
	for _, c := range []struct {
		name string
		die  func(q *natsjs.Queue, r broker.ReceiptValue) error
	}{
		{"reject", func(q *natsjs.Queue, r broker.ReceiptValue) error { return q.Reject(ctx, r, cause) }},
		{"nack", func(q *natsjs.Queue, r broker.ReceiptValue) error {
			nv, err := q.Nack(ctx, r, cause)
			if err == nil && !nv.DeadLettered {
				t.Fatalf("Nack of the last delivery: %+v, want DeadLettered", nv)
			}
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := mustQueue(t, openBackend(t).Store, "termlost"+c.name, policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
			m, err := q.Publish(ctx, []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			d := receiveN(t, q, 1)[0]
			restore := answerLost("+TERM")
			err = c.die(q, d.Lease.Receipt)
			restore()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the %s whose +TERM lost its answer: %v; want an error wrapping the deadline", c.name, err)
			}
			if err := c.die(q, d.Lease.Receipt); err != nil {
				t.Fatalf("the %s tried again: %v; want it done", c.name, err)
			}
			if err := q.Ack(ctx, d.Lease.Receipt); !errors.Is(err, broker.LeaseExpired) {
				t.Fatalf("Ack of the dead message's receipt: %v; want LeaseExpired", err)
			}
			dls, err := q.DeadLetters(ctx, 10)
			if err != nil || len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != "PARSE_FAILED" || dls[0].Deliveries != 1 {
				t.Fatalf("dead letters %+v, %v; want %s PARSE_FAILED after 1 delivery", dls, err, m.ID)
			}
		})
	}
}

// TestAnExtendThatReachesTheServerLateMovesTheNextDelivery pins what the
// package documents of an Extend that reaches the server after its
// deadline, when the message is another consumer's already: the server
// restarts the deadline of the delivery pending, the other one, and its
// answer does not say so, so the Extend succeeds and its receipt settles
// the other consumer's delivery. Both consumers hold the message:
// duplicate processing, which at-least-once permits, never a loss.
func TestAnExtendThatReachesTheServerLateMovesTheNextDelivery(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = 500 * time.Millisecond })
	qa := mustQueue(t, a, "extendlate", p)
	qb := mustQueue(t, b, "extendlate", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, qa, 1)[0]
	var again broker.DeliveryValue
	restore := natsjs.SendTellThrough(func(body string, send func() error) error {
		if strings.HasPrefix(body, "-NAK {") {
			// Held on its way until the lease lapsed and the other
			// Store holds the message.
			again = receiveForeign(t, qb, 1)[0]
		}
		return send()
	})
	l, err := qa.Extend(ctx, d.Lease.Receipt, time.Minute)
	restore()
	if err != nil {
		t.Fatalf("the Extend that reached the server late: %v; want it to succeed (the server's answer does not tell)", err)
	}
	if again.Message.ID != m.ID || again.Deliveries != 2 {
		t.Fatalf("the other Store received %s #%d, want %s #2", again.Message.ID, again.Deliveries, m.ID)
	}
	if err := qa.Ack(ctx, l.Receipt); err != nil {
		t.Fatalf("Ack with the late Extend's receipt: %v", err)
	}
	if _, err := qb.Nack(ctx, again.Lease.Receipt, nil); err != nil {
		t.Fatalf("the other Store's Nack after the message was acknowledged: %v", err)
	}
	if ds, err := qb.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("Receive after the late Extend's Ack: %d deliveries, %v; want the message gone", len(ds), err)
	}
}
