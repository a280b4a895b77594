package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
