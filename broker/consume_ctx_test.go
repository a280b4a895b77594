package broker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cancelOnWake is a *Queue (acks carried by Receive included) whose Wake
// cancels Consume's context: ctx ends after the loop checked it and before
// its Receive, the window a shutdown signal can land in.
type cancelOnWake struct {
	*Queue
	cancel context.CancelFunc
}

func (c cancelOnWake) Wake() WakeValue {
	c.cancel()
	return c.Queue.Wake()
}

// TestConsumeLeasesNothingOnceCtxHasEnded: "When ctx ends, Consume
// stops receiving". Over a *Queue, the Receive that carries acks ran
// without ctx's cancellation, so a ctx that ended just before it still
// leased messages and handed them to handlers whose context was already
// done: a handler that honours its context fails them, and a message with
// one delivery allowed is dead-lettered without ever being worked on.
func TestConsumeLeasesNothingOnceCtxHasEnded(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1}, "work")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	err := Consume(ctx, cancelOnWake{Queue: q, cancel: cancel}, func(hctx context.Context, d DeliveryValue) error {
		handled.Add(1)
		return hctx.Err() // a handler that honours its context
	}, ConsumeOptions{})
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, handled.Load(), "no delivery may start after ctx ended")
	st := q.Stats()
	require.Equal(t, 1, st.Ready, "the message is still in the queue")
	require.Zero(t, st.DeadLetters, "and was not dead-lettered")
}

// cancelOnCarry is a *Queue whose Receive, when it carries acks, first
// cancels Consume's context: ctx ends once the acks were taken, while the
// call that commits them is in flight.
type cancelOnCarry struct {
	*Queue
	cancel context.CancelFunc
}

func (c cancelOnCarry) receiveAcking(ctx context.Context, max int, receipts []ReceiptValue) ([]DeliveryValue, []error, error) {
	if len(receipts) > 0 {
		c.cancel()
	}
	return c.Queue.receiveAcking(ctx, max, receipts)
}

// TestConsumeKeepsTheAcksItCarriesWhenCtxEndsDuringTheReceive: the acks a
// Receive carries were taken from the handlers that succeeded; if ctx
// ending could make that Receive refuse them, nothing would ack those
// messages and they would be delivered again, though handled.
func TestConsumeKeepsTheAcksItCarriesWhenCtxEndsDuringTheReceive(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}, "work")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	// One handler at a time: the loop's next Receive waits for the
	// handler's slot, so it is the one that carries the ack.
	err := Consume(ctx, cancelOnCarry{Queue: q, cancel: cancel}, func(context.Context, DeliveryValue) error {
		handled.Add(1)
		return nil
	}, ConsumeOptions{})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 1, handled.Load())
	st := q.Stats()
	require.EqualValues(t, 1, st.Acked, "the carried ack was committed")
	require.Zero(t, st.Leased, "no lease is left for a message that was handled")
}
