package broker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// unprintable is a panic value whose String method panics with a value
// whose String method panics too: fmt recovers the first panic of a
// String method, and gives up on the second (it panics in turn).
type unprintable struct{ depth int }

func (u unprintable) String() string {
	if u.depth > 0 {
		panic(unprintable{u.depth - 1})
	}
	panic("and printing this one panics too")
}

// bothBrokers makes, for each test, a file queue and a Memory whose
// messages get two deliveries.
func bothBrokers() []struct {
	name string
	make func(t *testing.T) fullBroker
} {
	return []struct {
		name string
		make func(t *testing.T) fullBroker
	}{
		{"Store", func(t *testing.T) fullBroker { return newEnv(t).queue("jobs", twoDeliveries()) }},
		{"Memory", func(t *testing.T) fullBroker {
			m, err := broker.NewMemory(twoDeliveries(), broker.MemoryOptions{Now: newFakeClock().Now})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			return m
		}},
	}
}

// consumeUntil runs Consume on b with h and opts until cond holds, then
// ends it and requires that it returned for that. It fails t with why (as
// require's msgAndArgs) if cond does not hold within 30 s, and at once if
// Consume returns first.
func consumeUntil(t *testing.T, b broker.Broker, h broker.Handler, opts broker.ConsumeOptions, cond func() bool, why ...any) {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- broker.Consume(cctx, b, h, opts) }()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), why...)
		select {
		case err := <-done:
			t.Fatalf("Consume returned %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A handler that panics with a value that cannot be printed is recovered
// as any other panic: Consume logs what it can of the value (its type),
// nacks the delivery, and goes on. Printing the value with fmt alone
// panicked again, in the deferred function that had recovered the first
// panic, and ended the process.
func TestConsumeRecoversAHandlerPanicThatCannotBePrinted(t *testing.T) {
	for _, b := range bothBrokers() {
		t.Run(b.name, func(t *testing.T) {
			q := b.make(t)
			msg, err := q.Publish(ctx(t), []byte("m"))
			require.NoError(t, err)
			var logs lockedBuffer
			var deliveries atomic.Int32
			consumeUntil(t, q, func(context.Context, broker.DeliveryValue) error {
				if deliveries.Add(1) == 1 {
					panic(unprintable{1})
				}
				return nil
			}, broker.ConsumeOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))},
				func() bool { return q.Stats().Acked > 0 }, "the message was not delivered again and acked")
			require.Equal(t, int32(2), deliveries.Load())
			require.Equal(t, int64(1), q.Stats().Nacked)
			var panicked map[string]any
			for _, r := range logs.records(t) {
				if m, _ := r["msg"].(string); strings.Contains(m, "handler panicked") && r["message"] == msg.ID {
					panicked = r
				}
			}
			require.NotNil(t, panicked, "the panic was logged with the message ID")
			require.Contains(t, panicked["panic"], "broker_test.unprintable", "the value is named by its type")
		})
	}
}

// brokenChain is a handler's error whose Unwrap panics: errors.Is and
// errors.As, which Consume uses to tell DoNotRetry and a handler that gave
// up when Consume stopped, call it.
type brokenChain struct{}

func (brokenChain) Error() string { return "broken chain" }
func (brokenChain) Unwrap() error { panic("Unwrap trouble") }

// A handler's error is the handler's code, methods and all: one whose
// Unwrap panics is nacked as an error that carries nothing (UNCLASSIFIED),
// on the delivery's last attempt dead-lettered so, and Consume goes on.
// Before, the panic ended the process from Consume's goroutine, at the
// check for DoNotRetry.
func TestConsumeNacksAHandlerErrorWhoseMethodsPanic(t *testing.T) {
	for _, b := range bothBrokers() {
		t.Run(b.name, func(t *testing.T) {
			q := b.make(t)
			msg, err := q.Publish(ctx(t), []byte("m"))
			require.NoError(t, err)
			var deliveries atomic.Int32
			consumeUntil(t, q, func(context.Context, broker.DeliveryValue) error {
				deliveries.Add(1)
				return brokenChain{}
			}, broker.ConsumeOptions{},
				func() bool { return q.Stats().DeadLetters > 0 }, "the message was not nacked to the dead-letter store")
			require.Equal(t, int32(2), deliveries.Load())
			dls, err := q.DeadLetters(ctx(t), 10)
			require.NoError(t, err)
			require.Len(t, dls, 1)
			require.Equal(t, msg.ID, dls[0].Message.ID)
			require.Equal(t, broker.ReasonUnclassified, dls[0].Reason)
		})
	}
}
