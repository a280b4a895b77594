package broker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// countingQueue is a caller's decorator of a *Queue: it counts the
// Receive and Ack calls made through it (metrics, tracing, a pause
// switch), as any Broker wrapper does.
type countingQueue struct {
	*broker.Queue
	receives, acks atomic.Int64
}

func (w *countingQueue) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	w.receives.Add(1)
	return w.Queue.Receive(ctx, max)
}

func (w *countingQueue) Ack(ctx context.Context, r broker.ReceiptValue) error {
	w.acks.Add(1)
	return w.Queue.Ack(ctx, r)
}

// TestConsumeCallsAWrappersOwnReceiveAndAck: API.md §3: Consume "Polls
// with Receive ... Ack on nil" of the Broker it is given. A caller's
// Broker that embeds a *Queue has the queue's unexported fast path (acks
// carried by the next Receive) promoted to it; Consume must not take it,
// or it would go around the wrapper's own Receive and Ack.
func TestConsumeCallsAWrappersOwnReceiveAndAck(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	mustPublish(t, q, "a")
	mustPublish(t, q, "b")
	w := &countingQueue{Queue: q}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	err := broker.Consume(ctx, w, func(context.Context, broker.DeliveryValue) error {
		if handled.Add(1) == 2 {
			cancel()
		}
		return nil
	}, broker.ConsumeOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume returned %v, want context.Canceled", err)
	}
	if st := q.Stats(); st.Acked != 2 {
		t.Fatalf("setup: %d acked, want 2", st.Acked)
	}
	if w.receives.Load() == 0 || w.acks.Load() != 2 {
		t.Fatalf("Consume handled and acked 2 messages of the Broker it was given, but called its Receive %d times and its Ack %d times (want at least 1 and 2): it went around the wrapper to the embedded *Queue", w.receives.Load(), w.acks.Load())
	}
}
