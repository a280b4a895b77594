package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Causes whose chains do not end: errors.Is and errors.As never return on
// them (the last one, an Unwrap() []error that holds its own error, makes
// them recurse until the goroutine's stack is exhausted).
type (
	// wrapsItself is an error whose Unwrap returns itself.
	wrapsItself struct{}
	// ringError wraps next, which wraps it back. It carries a reason, so
	// that only the walks for a code or a public text go round.
	ringError struct {
		name string
		next *ringError
	}
	// joinsItself is an Unwrap() []error whose errors include itself.
	joinsItself struct{ errs []error }
)

func (e *wrapsItself) Error() string   { return "wraps itself: payload=SECRET" }
func (e *wrapsItself) Unwrap() error   { return e }
func (e *ringError) Error() string     { return "ring " + e.name + ": payload=SECRET" }
func (e *ringError) Reason() string    { return "CARD_DECLINED" }
func (e *ringError) Unwrap() error     { return e.next }
func (e *joinsItself) Error() string   { return "joins itself: payload=SECRET" }
func (e *joinsItself) Unwrap() []error { return e.errs }

// endlessCauses returns a cause of each shape, made afresh.
func endlessCauses() map[string]error {
	a, b := &ringError{name: "a"}, &ringError{name: "b"}
	a.next, b.next = b, a
	j := &joinsItself{}
	j.errs = []error{errors.New("first"), j}
	return map[string]error{
		"self-unwrapping":        &wrapsItself{},
		"two-error cycle":        a,
		"Unwrap() []error cycle": j,
	}
}

// withinBound runs f on a goroutine of its own and fails the test when
// it has not returned after a wait far beyond any it needs: a hang
// detector, not a measure of speed, so that a walk that does not end
// fails this test rather than hanging the test binary.
func withinBound(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return: the walk of the cause's chain does not end", what)
	}
}

// A cause whose chain does not end (a caller's buggy error type) is input
// like any other: Nack and Reject, on the store and on Memory, return and
// record the failure, the cause counting as one that carries nothing
// (UNCLASSIFIED, no code, no public text, even the ring whose errors have
// a reason), and the logger is told why. Classify, IsDoNotRetry and
// Consume's own looks (the DoNotRetry mark, a handler that gave up with
// ctx's error, a Broker's error that may be Closed) return too.
func TestACauseWhoseChainDoesNotEndIsRecordedAsCarryingNothing(t *testing.T) {
	for name, cause := range endlessCauses() {
		t.Run(name, func(t *testing.T) {
			withinBound(t, "Classify", func() {
				reason, code, public, unclassified := Classify(cause)
				require.Equal(t, ReasonUnclassified, reason)
				require.Zero(t, code)
				require.Empty(t, public)
				require.True(t, unclassified)
			})
			withinBound(t, "IsDoNotRetry", func() {
				require.False(t, IsDoNotRetry(cause))
				require.False(t, IsDoNotRetry(DoNotRetry(cause)), "a mark around a chain that does not end is not looked for")
			})
			withinBound(t, "causeIs", func() {
				require.False(t, causeIs(cause, Closed))
				require.False(t, causeIs(cause, context.Canceled))
			})
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			withinBound(t, "Consume's look for ctx's error", func() {
				require.Same(t, cause, stopped(cause, ended), "not taken for a handler that gave up as Consume stopped")
			})

			log, buf := newTestLogger()
			pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1}
			s, err := Open(t.TempDir(), Options{Logger: log})
			require.NoError(t, err)
			defer s.Close()
			q, err := s.Queue("jobs", pol)
			require.NoError(t, err)
			mem, err := NewMemory(pol, MemoryOptions{Logger: log})
			require.NoError(t, err)
			defer mem.Close()
			for bname, b := range map[string]interface {
				Broker
				Rejecter
				DeadLetterReader
			}{"store": q, "memory": mem} {
				for _, call := range []string{"nack", "reject"} {
					msg, err := b.Publish(t.Context(), []byte(call))
					require.NoError(t, err)
					ds, err := b.Receive(t.Context(), 1)
					require.NoError(t, err)
					require.Len(t, ds, 1)
					withinBound(t, bname+" "+call, func() {
						if call == "nack" {
							nv, err := b.Nack(t.Context(), ds[0].Lease.Receipt, cause)
							require.NoError(t, err)
							require.True(t, nv.DeadLettered)
						} else {
							require.NoError(t, b.Reject(t.Context(), ds[0].Lease.Receipt, cause))
						}
					})
					dls, err := b.DeadLetters(t.Context(), 10)
					require.NoError(t, err)
					var got *DeadLetterValue
					for i := range dls {
						if dls[i].Message.ID == msg.ID {
							got = &dls[i]
						}
					}
					require.NotNil(t, got, "%s %s: dead letter", bname, call)
					require.Equal(t, ReasonUnclassified, got.Reason, "%s %s", bname, call)
					require.Zero(t, got.Code, "%s %s", bname, call)
					require.Empty(t, got.Cause, "%s %s", bname, call)
				}
			}
			require.Contains(t, buf.String(), "does not end")
		})
	}
}

// Consume given a handler error whose chain does not end, bare or marked
// with DoNotRetry, settles the delivery (the mark is not looked for in
// such a chain: it is nacked) and goes on; and a Broker of the caller's
// whose Receive fails with such an error is retried, not taken for
// Closed, until ctx ends.
func TestConsumeGoesOnPastAnErrorWhoseChainDoesNotEnd(t *testing.T) {
	for name, cause := range endlessCauses() {
		t.Run(name, func(t *testing.T) {
			f := newFake()
			f.Publish(context.Background(), []byte("bare"))
			f.Publish(context.Background(), []byte("marked"))
			r := startConsume(t, f, func(_ context.Context, d DeliveryValue) error {
				if string(d.Message.Payload) == "marked" {
					return DoNotRetry(cause)
				}
				return cause
			}, ConsumeOptions{Concurrency: 1})
			require.Eventually(t, func() bool { return f.count("nack") == 2 }, eventually, tick, "both deliveries nacked")
			require.Zero(t, f.count("reject"))
			r.cancel()
			withinBound(t, "Consume", func() { require.ErrorIs(t, r.wait(t), context.Canceled) })

			failing := &endlessReceive{fakeBroker: newFake(), err: cause}
			r = startConsume(t, failing, ackAll, ConsumeOptions{PollInterval: time.Millisecond})
			require.Eventually(t, func() bool { return failing.receives.Load() >= 3 }, eventually, tick, "Receive retried")
			require.False(t, r.returned(), "not taken for Closed")
			r.cancel()
			withinBound(t, "Consume", func() { require.ErrorIs(t, r.wait(t), context.Canceled) })
		})
	}
}

// endlessReceive is a Broker whose every Receive fails with err.
type endlessReceive struct {
	*fakeBroker
	err      error
	receives atomic.Int64
}

func (f *endlessReceive) Receive(context.Context, int) ([]DeliveryValue, error) {
	f.receives.Add(1)
	return nil, f.err
}
