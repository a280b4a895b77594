package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// decoratedQueue is a caller's decorator of a *Queue (as
// countingQueue in consume_wrapper_test.go is): its own Receive, and the
// rest of the *Queue's methods promoted.
type decoratedQueue struct{ *Queue }

func (w *decoratedQueue) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	return w.Queue.Receive(ctx, max)
}

// decoratedMemory is the same decorator over a *Memory.
type decoratedMemory struct{ *Memory }

func (w *decoratedMemory) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	return w.Memory.Receive(ctx, max)
}

// TestConsumeOverADecoratorOfAnUnmadeQueueRefusesIt: a nil or zero
// *Queue or *Memory (the caller went on past the error of Store.Queue or
// NewMemory) answers every method with an error wrapping
// QueueMisconfigured (nilreceiver.go), and Consume refuses one at once
// (newConsumer: "a %T its constructor did not make"). A caller's
// decorator that embeds such a queue has its unexported ended, endErr and
// stopped methods promoted, so Consume takes it for an ender and a
// failStopper and calls them on the nil queue: a nil-pointer panic on the
// caller's goroutine instead of an error ("Bad input must get a clear
// error ... never a panic"). The wrapper's own Receive returns the clear
// QueueMisconfigured error.
func TestConsumeOverADecoratorOfAnUnmadeQueueRefusesIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Broker
	}{
		{"nil *Queue", &decoratedQueue{}},
		{"zero *Queue", &decoratedQueue{Queue: new(Queue)}},
		{"nil *Memory", &decoratedMemory{}},
		{"zero *Memory", &decoratedMemory{Memory: new(Memory)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			panicked := func() (p any) {
				defer func() { p = recover() }()
				err = Consume(ctx, tc.b, ackAll, ConsumeOptions{PollInterval: time.Millisecond})
				return nil
			}()
			if panicked != nil {
				t.Fatalf("Consume over a decorator embedding a %s panicked (%v); want an error wrapping QueueMisconfigured, as the embedded queue's own methods return", tc.name, panicked)
			}
			if !errors.Is(err, QueueMisconfigured) {
				t.Fatalf("Consume over a decorator embedding a %s returned %v; want an error wrapping QueueMisconfigured", tc.name, err)
			}
		})
	}
}
