package broker_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// brokenHandler writes records as text, but panics in the method named.
type brokenHandler struct {
	slog.Handler
	in string
}

func (b brokenHandler) Handle(ctx context.Context, r slog.Record) error {
	if b.in == "Handle" {
		panic("the handler broke in Handle")
	}
	return b.Handler.Handle(ctx, r)
}

func (b brokenHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if b.in == "WithAttrs" {
		panic("the handler broke in WithAttrs")
	}
	return brokenHandler{b.Handler.WithAttrs(as), b.in}
}

// text is the text a lockedBuffer holds.
func (b *lockedBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// standardLog sends the standard log package's output to a buffer until
// the test ends.
func standardLog(t *testing.T) *lockedBuffer {
	var buf lockedBuffer
	flags := log.Flags()
	log.SetOutput(&buf)
	t.Cleanup(func() {
		log.SetOutput(os.Stderr)
		log.SetFlags(flags)
	})
	return &buf
}

// A record the caller's handler panics on, in Handle or in the WithAttrs
// that made the logger, is not lost without a word: the standard log
// package gets its message and the type of the panic's value, and none
// of its attributes, which carry the text of an unclassified cause
// (payload bytes, here a card number), nor the panic's value.
func TestARecordTheLoggerPanicsOnIsReportedWithoutItsAttributes(t *testing.T) {
	const secret = "4111 1111 1111 1111"
	for _, tc := range []struct {
		in, msg string
		run     func(t *testing.T, q *broker.Queue, logger *slog.Logger)
	}{
		{"Handle", "broker: unclassified handler failure", func(t *testing.T, q *broker.Queue, logger *slog.Logger) {
			ds, err := q.Receive(t.Context(), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			_, err = q.Nack(t.Context(), ds[0].Lease.Receipt, errors.New("declined: card "+secret))
			require.NoError(t, err)
		}},
		{"WithAttrs", "broker: Consume: handler failed; nacking", func(t *testing.T, q *broker.Queue, logger *slog.Logger) {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				done <- broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error {
					cancel() // one delivery: Consume logs its failure, then returns
					return errors.New("declined: card " + secret)
				}, broker.ConsumeOptions{Logger: logger})
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return")
			}
		}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			out := standardLog(t)
			var handled lockedBuffer
			logger := slog.New(brokenHandler{slog.NewTextHandler(&handled, nil), tc.in})
			s, err := broker.Open(t.TempDir(), broker.Options{Logger: logger})
			require.NoError(t, err)
			defer s.Close()
			q, err := s.Queue("a", broker.PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute})
			require.NoError(t, err)
			_, err = q.Publish(t.Context(), []byte("card "+secret))
			require.NoError(t, err)
			tc.run(t, q, logger)

			got := out.text()
			require.Contains(t, got, `msg="`+tc.msg+`"`, "the record's message")
			require.Contains(t, got, "panicked in "+tc.in+" (a panic of type string, its value withheld)", "the panic")
			require.NotContains(t, got, "the handler broke", "the panic's value")
			require.NotContains(t, got, secret, "an attribute: the cause's text")
			require.NotContains(t, handled.text(), tc.msg, "a record the handler panicked on")
		})
	}
}
