package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stopsAsCtxEnds is a broker that stops for good (failStopper, as a
// Store does when a write or fdatasync fails) at the moment Consume's ctx
// ends during a Receive, which then returns ctx's error, as a Receive
// given an ended ctx does.
type stopsAsCtxEnds struct {
	*fakeBroker
	failure  error
	receives atomic.Int32
	down     atomic.Bool
	second   chan struct{} // closed when the second Receive has begun
}

func (s *stopsAsCtxEnds) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	if s.receives.Add(1) == 1 {
		return s.fakeBroker.Receive(ctx, max)
	}
	close(s.second)
	<-ctx.Done()
	s.down.Store(true)
	return nil, ctx.Err()
}

func (s *stopsAsCtxEnds) stopped() error {
	if s.down.Load() {
		return s.failure
	}
	return nil
}

// When ctx ends and the broker is found stopped for good at the same
// Receive, the handlers in their StopGrace are told of the broker's end
// with the failure it stopped on as their context's cause, as when the
// loop finds it any other way: not with ctx's error, which the Receive
// returned only because ctx ended as it ran.
func TestConsumeEndsTheGraceWithTheFailureTheBrokerStoppedOn(t *testing.T) {
	s := &stopsAsCtxEnds{
		fakeBroker: newFake(),
		failure:    errors.New("broker: fdatasync failed: disk gone"),
		second:     make(chan struct{}),
	}
	s.Publish(context.Background(), []byte("slow"))
	started := make(chan struct{})
	cause := make(chan error, 1)
	r := startConsume(t, s, func(ctx context.Context, d DeliveryValue) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, ConsumeOptions{Concurrency: 2, StopGrace: time.Hour})
	<-started
	<-s.second
	r.cancel()
	select {
	case got := <-cause:
		require.ErrorIs(t, got, s.failure, "the handler's context ended with %v, want the failure the broker stopped on", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end within its StopGrace once the broker stopped")
	}
	require.ErrorIs(t, r.wait(t), context.Canceled, "Consume returns ctx's error once ctx ended")
}

// stopsAtExtend is a broker that stops for good (failStopper) as a lease
// renewal runs, and whose Extend then fails with an error of its own that
// does not carry the failure (as a decorator's that keeps only its text
// does).
type stopsAtExtend struct {
	*fakeBroker
	failure error
	down    atomic.Bool
}

var errExtendUnavailable = errors.New("jobs service: extend: unavailable")

func (s *stopsAtExtend) Extend(ctx context.Context, r ReceiptValue, by time.Duration) (LeaseValue, error) {
	s.down.Store(true)
	return LeaseValue{}, errExtendUnavailable
}

func (s *stopsAtExtend) stopped() error {
	if s.down.Load() {
		return s.failure
	}
	return nil
}

// A renewal that fails, with ctx live, as the store stops for good ends
// the handlers' contexts and Consume with the failure the store stopped
// on, as a Receive that meets the stop does, not with the renewal's own
// error: the failure is what a caller can act on, and what errors.Is
// finds.
func TestConsumeEndsWithTheFailureTheBrokerStoppedOnWhateverTheRenewalSaid(t *testing.T) {
	s := &stopsAtExtend{fakeBroker: newFake(), failure: errors.New("broker: fdatasync failed: disk gone")}
	s.Publish(context.Background(), []byte("slow"))
	cause := make(chan error, 1)
	log, logs := newTestLogger()
	r := startConsume(t, s, func(ctx context.Context, d DeliveryValue) error {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, ConsumeOptions{ExtendEvery: time.Millisecond, Logger: log})
	err := r.wait(t)
	require.ErrorIs(t, err, s.failure, "Consume returned %v, want the failure the broker stopped on", err)
	require.ErrorIs(t, <-cause, s.failure, "the handler's context ends with the failure the broker stopped on")
	// The log names both: the renewal's own error, which the return
	// does not carry, and the failure the handler was cancelled with.
	out := logs.String()
	require.Contains(t, out, errExtendUnavailable.Error(), "the log names the renewal's own error")
	require.Contains(t, out, `stopped_on="`+s.failure.Error(), "the log names the failure the store stopped on")
}
