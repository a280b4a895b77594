package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsumeNamesTheStopInTheCauseOfAHandlerThatGaveUp: at shutdown, a
// handler that returns its ctx's error, and nothing of its own, is nacked
// with a cause whose reason says the consumer stopped; the handler's error
// is still in the chain. What the handler classified itself is kept, and
// a context error while Consume runs is the handler's own failure.
func TestConsumeNamesTheStopInTheCauseOfAHandlerThatGaveUp(t *testing.T) {
	mine := NewError("DOWNSTREAM_GONE", 0x2A000001, "the downstream went away", "")
	cases := []struct {
		name string
		// giveUp is what the handler returns once its ctx is done.
		giveUp func(ctx context.Context) error
		reason string
		code   uint32 // the code recorded: the handler's own, kept
	}{
		{"ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, ReasonConsumerStopped, 0},
		{"wrapped", func(ctx context.Context) error { return fmt.Errorf("fetch: %w", ctx.Err()) }, ReasonConsumerStopped, 0},
		{"classified by the handler", func(ctx context.Context) error { return mine.Wrap(ctx.Err()) }, "DOWNSTREAM_GONE", 0x2A000001},
		{"with a public text only", func(ctx context.Context) error {
			return fmt.Errorf("%w: %w", publicText("gave up"), ctx.Err())
		}, ReasonUnclassified, 0},
		{"with a code only", func(ctx context.Context) error {
			return fmt.Errorf("%w: %w", userCode{0x2A000002}, ctx.Err())
		}, ReasonUnclassified, 0x2A000002},
		{"another error", func(context.Context) error { return errors.New("boom") }, ReasonUnclassified, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.Publish(context.Background(), []byte("x"))
			started := make(chan struct{})
			r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
				close(started)
				<-ctx.Done()
				return tc.giveUp(ctx)
			}, ConsumeOptions{})
			<-started
			require.ErrorIs(t, r.stop(t), context.Canceled)
			calls := f.calls()
			require.Len(t, calls, 1)
			require.Equal(t, "nack", calls[0].call)
			reason, code, public, _ := classify(calls[0].cause)
			require.Equal(t, tc.reason, reason)
			require.Equal(t, tc.code, code)
			if tc.reason == ReasonConsumerStopped {
				require.ErrorIs(t, calls[0].cause, context.Canceled, "the handler's error stays in the chain")
				require.Equal(t, "the consumer stopped before the handler finished", public)
			}
		})
	}

	t.Run("while Consume runs", func(t *testing.T) {
		f := newFake()
		f.Publish(context.Background(), []byte("x"))
		r := startConsume(t, f, func(context.Context, DeliveryValue) error {
			return context.Canceled // the handler's own context, say
		}, ConsumeOptions{})
		require.Eventually(t, func() bool { return f.count("nack") == 1 }, eventually, tick)
		reason, _, _, _ := classify(f.calls()[0].cause)
		require.Equal(t, ReasonUnclassified, reason, "Consume had not stopped")
		require.ErrorIs(t, r.stop(t), context.Canceled)
	})
}

// publicText is a cause with a public text and nothing else.
type publicText string

func (p publicText) Error() string  { return string(p) }
func (p publicText) Public() string { return string(p) }

// TestConsumeStopGraceLetsRunningHandlersFinish: with a StopGrace, the end
// of ctx stops the receiving, not the handlers: a handler still running
// keeps its context, finishes, and is acked as if nothing had stopped,
// its message spared a delivery attempt. Consume returns once it is done.
func TestConsumeStopGraceLetsRunningHandlersFinish(t *testing.T) {
	f := newFake()
	m, _ := f.Publish(context.Background(), []byte("x"))
	type ctxKey struct{}
	started := make(chan context.Context)
	release := make(chan struct{})
	r := startConsumeCtx(t, context.WithValue(context.Background(), ctxKey{}, "kept"), f, func(ctx context.Context, d DeliveryValue) error {
		started <- ctx
		<-release
		return ctx.Err()
	}, ConsumeOptions{StopGrace: time.Hour})
	hctx := <-started
	r.cancel()
	require.NoError(t, hctx.Err(), "the handler's context outlives Consume's by StopGrace")
	require.Equal(t, "kept", hctx.Value(ctxKey{}), "and keeps its values")
	received := f.receives.Load()
	require.False(t, r.returned(), "Consume waits for the running handler")
	close(release)
	require.ErrorIs(t, r.wait(t), context.Canceled)
	require.Equal(t, received, f.receives.Load(), "nothing was received after ctx ended")
	calls := f.calls()
	require.Len(t, calls, 1)
	require.Equal(t, "ack", calls[0].call)
	require.Equal(t, m.ID, calls[0].id)
	require.ErrorIs(t, hctx.Err(), context.Canceled, "ended when Consume returned")
}

// TestConsumeStopGraceEndsInTheHandlersCancellation: a handler still
// running when the grace is over has its context cancelled, with ctx's
// error as the cause, and is nacked as at any stop.
func TestConsumeStopGraceEndsInTheHandlersCancellation(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	const grace = 20 * time.Millisecond
	started := make(chan struct{})
	var cause error
	r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		close(started)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}, ConsumeOptions{StopGrace: grace})
	<-started
	stop := time.Now()
	require.ErrorIs(t, r.stop(t), context.Canceled)
	require.GreaterOrEqual(t, time.Since(stop), grace, "a timer never fires early")
	require.ErrorIs(t, cause, context.Canceled)
	calls := f.calls()
	require.Len(t, calls, 1)
	require.Equal(t, "nack", calls[0].call)
	reason, _, _, _ := classify(calls[0].cause)
	require.Equal(t, ReasonConsumerStopped, reason)
}

func TestConsumeRefusesANegativeStopGrace(t *testing.T) {
	err := Consume(context.Background(), newFake(), ackAll, ConsumeOptions{StopGrace: -time.Second})
	require.ErrorIs(t, err, QueueMisconfigured)
	require.ErrorContains(t, err, "StopGrace -1s")
}

// TestConsumeNacksUnstartedTheExtraDeliveriesWaitingWhenCtxEnds: the
// deliveries a broker returns beyond those asked for wait for a free slot.
// Once ctx has ended, each slot that frees must not start the next of
// them on an ended ctx: they are nacked unstarted, as CONSUMER_STOPPED,
// as Prefetch's held deliveries are.
func TestConsumeNacksUnstartedTheExtraDeliveriesWaitingWhenCtxEnds(t *testing.T) {
	f := newFake()
	f.overDeliver = 3
	for range 4 {
		f.Publish(context.Background(), []byte("x"))
	}
	var started atomic.Int64
	first := make(chan struct{})
	r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		if started.Add(1) == 1 {
			close(first)
		}
		<-ctx.Done()
		return ctx.Err()
	}, ConsumeOptions{Concurrency: 1})
	<-first
	require.Eventually(t, func() bool { return f.leased() == 4 }, eventually, tick, "the three extra deliveries wait")
	require.ErrorIs(t, r.stop(t), context.Canceled)

	require.EqualValues(t, 1, started.Load(), "no extra delivery started after ctx ended")
	requireNackedUnstarted(t, f, 4)
}

// requireNackedUnstarted checks that the fake's n settling calls were all
// nacks saying the consumer stopped, and that nothing is left leased.
func requireNackedUnstarted(t *testing.T, f *fakeBroker, n int) {
	t.Helper()
	calls := f.calls()
	require.Len(t, calls, n, "every delivery is settled: %v", calls)
	for _, c := range calls {
		require.Equal(t, "nack", c.call)
		var reason interface{ Reason() string }
		require.True(t, errors.As(c.cause, &reason), "cause %v", c.cause)
		require.Equal(t, ReasonConsumerStopped, reason.Reason())
	}
	require.Zero(t, f.leased())
}
