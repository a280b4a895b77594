package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// leasingAsCtxEnds is the fake whose Receive ends Consume's ctx while it
// runs and returns the deliveries it leased all the same, as a network
// broker's Receive may return messages it leased just as the caller's ctx
// ended.
type leasingAsCtxEnds struct {
	*fakeBroker
	cancel context.CancelFunc
}

func (b leasingAsCtxEnds) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	ds, err := b.fakeBroker.Receive(ctx, max)
	if len(ds) > 0 {
		b.cancel()
	}
	return ds, err
}

// TestConsumeNacksUnstartedADeliveryReceivedAsCtxEnded: "When ctx ends,
// Consume stops receiving, nacks the deliveries it holds unstarted". A
// delivery whose Receive returned as ctx ended was handed to a handler
// started after ctx ended, under a context already done (or, with a
// StopGrace, soon to be): it is nacked unstarted, as CONSUMER_STOPPED,
// as a held one is.
func TestConsumeNacksUnstartedADeliveryReceivedAsCtxEnded(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("StopGrace=%v", grace), func(t *testing.T) {
			f := newFake()
			f.Publish(context.Background(), []byte("x"))
			f.Publish(context.Background(), []byte("y"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var started atomic.Int64
			err := Consume(ctx, leasingAsCtxEnds{fakeBroker: f, cancel: cancel}, func(context.Context, DeliveryValue) error {
				started.Add(1)
				return nil
			}, ConsumeOptions{Batch: 2, Concurrency: 2, StopGrace: grace})
			require.ErrorIs(t, err, context.Canceled)
			require.Zero(t, started.Load(), "no handler may start after Consume's ctx ended")
			requireNackedUnstarted(t, f, 2)
		})
	}
}

// cancelInReceive is a *Queue whose Receive that leases (and carries acks)
// ends Consume's ctx just as it starts: that call runs without ctx's
// cancellation, so it leases all the same, and ctx ends during its commit.
type cancelInReceive struct {
	*Queue
	cancel context.CancelFunc
}

func (c cancelInReceive) receiveAcking(ctx context.Context, max int, receipts []ReceiptValue) ([]DeliveryValue, []error, error) {
	if max > 0 {
		c.cancel()
	}
	return c.Queue.receiveAcking(ctx, max, receipts)
}

// TestConsumeOverStoreStartsNoHandlerWhenCtxEndsDuringTheReceive: over a
// *Queue the window in which ctx can end after the loop's check and before
// the deliveries are dispatched is a whole commit. The message leased in
// it is nacked unstarted; with one delivery allowed, its dead letter says
// the consumer stopped, not that a handler failed it.
func TestConsumeOverStoreStartsNoHandlerWhenCtxEndsDuringTheReceive(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1}, "work")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int64
	err := Consume(ctx, cancelInReceive{Queue: q, cancel: cancel}, func(hctx context.Context, d DeliveryValue) error {
		started.Add(1)
		return hctx.Err()
	}, ConsumeOptions{})
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, started.Load(), "no handler may start after Consume's ctx ended")
	st := q.Stats()
	require.EqualValues(t, 1, st.Delivered)
	require.EqualValues(t, 1, st.Nacked)
	require.Zero(t, st.Leased)
	dls, err := q.DeadLetters(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, ReasonConsumerStopped, dls[0].Reason)
}

// cancelThenCloseWaker is the fake whose Wake, once armed, first cancels
// Consume's ctx and then closes the broker: ctx ends, and b ends after
// it, both between the loop's look at ctx and its Receive. Its Receive,
// as a broker's may, looks at its own state before ctx and reports Closed.
// It is not an ender: that Receive is how Consume learns of the close.
type cancelThenCloseWaker struct {
	*fakeBroker
	cancel context.CancelFunc
	armed  atomic.Bool
	once   sync.Once
}

func (b *cancelThenCloseWaker) Wake() WakeValue {
	w := b.fakeBroker.Wake()
	if b.armed.Load() {
		b.once.Do(func() {
			b.cancel()
			b.fakeBroker.Close()
		})
	}
	return w
}

// TestConsumeReturnsCtxErrWhenTheBrokerClosesAfterCtxEnded: "When ctx
// ends, Consume ... returns ctx.Err(), even when b ended meanwhile". Here
// ctx ends first and the broker closes after it, both before the Receive,
// which reports Closed; Consume used to look at that error before ctx and
// return it. The running handler (under a StopGrace) still learns of the
// close at once, as "Once Consume learns of such an end" promises: nothing
// it does can be settled any more.
func TestConsumeReturnsCtxErrWhenTheBrokerClosesAfterCtxEnded(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b := &cancelThenCloseWaker{fakeBroker: newFake(), cancel: cancel}
		b.armed.Store(true)
		err := Consume(ctx, b, ackAll, ConsumeOptions{})
		require.ErrorIs(t, err, context.Canceled, "ctx ended before the broker closed")
		require.False(t, errors.Is(err, Closed))
	})
	t.Run("a handler running in its StopGrace", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b := &cancelThenCloseWaker{fakeBroker: newFake(), cancel: cancel}
		b.Publish(context.Background(), []byte("x"))
		causes := make(chan error, 1)
		h := func(hctx context.Context, d DeliveryValue) error {
			// The next Wake ends ctx, then b; this publication wakes the
			// loop for it.
			b.armed.Store(true)
			b.Publish(context.Background(), []byte("y"))
			select {
			case <-hctx.Done():
				causes <- context.Cause(hctx)
				return hctx.Err()
			case <-time.After(time.Minute):
				causes <- nil
				return nil
			}
		}
		done := make(chan error, 1)
		go func() {
			done <- Consume(ctx, b, h, ConsumeOptions{Concurrency: 2, StopGrace: time.Hour})
		}()
		select {
		case cause := <-causes:
			require.ErrorIs(t, cause, Closed, "the handler's context ended, with the close as its cause")
		case <-time.After(10 * time.Second):
			t.Fatal("the Receive found the broker closed, yet the handler's context was still live 10 s later")
		}
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled, "ctx ended before the broker closed")
			require.False(t, errors.Is(err, Closed))
		case <-time.After(10 * time.Second):
			t.Fatal("Consume did not return once its handler had")
		}
	})
}

// TestConsumeReturnsCtxErrWhenAWaitFindsCtxAndTheBrokerEnded: a wait of
// the loop that finds both ctx ended and b ended (an ender's channel
// closed) cannot tell which came first (a select picks either of two
// ready cases), and Consume promises ctx.Err() "even when b ended
// meanwhile". The loop used to return b's end whenever the select picked
// its channel: half the time. One round could pass by chance; a hundred
// cannot.
func TestConsumeReturnsCtxErrWhenAWaitFindsCtxAndTheBrokerEnded(t *testing.T) {
	m, err := NewMemory(PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}, MemoryOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, m.Close())
	for range 100 {
		c, err := newConsumer(m, ackAll, ConsumeOptions{PollInterval: time.Hour})
		require.NoError(t, err)
		require.NotNil(t, c.ender, "the test needs a broker that says it ended")
		// An idle wait on a signal nothing closes.
		require.False(t, c.idle(ctx, WakeValue{Signal: make(chan struct{})}, time.Now()))
		require.ErrorIs(t, c.why(ctx), context.Canceled)
		// A wait of PollInterval after a failed Receive.
		require.False(t, c.pause(ctx, time.Hour))
		require.ErrorIs(t, c.why(ctx), context.Canceled)
	}
}
