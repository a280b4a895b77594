package broker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// "Consume receives again once half of what it holds has started"
// (ConsumeOptions.Prefetch), also when nothing else happens: a handler
// frees its slot, then takes the next held delivery, and refill, which
// counts what Consume holds, used to look again only when a slot freed or
// an ack waited. Losing that race (now and then: the test repeats the step
// many times), with Concurrency 1 and Prefetch 1, it held nothing for the
// whole run of the delivery that had just started. Each check is made
// once every goroutine of the bubble is blocked.
func TestConsumePrefetchRefillsOnceItsHeldDeliveryStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := NewMemory(PolicyValue{VisibilityTimeout: time.Hour, RetryDelay: time.Second, MaxDeliveries: 5, MaxMessageBytes: 64}, MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const steps = 400
		for range steps + 3 {
			if _, err := m.Publish(context.Background(), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Consume(ctx, m, func(context.Context, DeliveryValue) error {
				time.Sleep(time.Second)
				return nil
			}, ConsumeOptions{Batch: 2, Prefetch: 1})
		}()
		time.Sleep(500 * time.Millisecond) // mid-way through each handler's second
		var bad []int
		for i := range steps {
			synctest.Wait()
			if got := m.Stats().Leased; got != 2 {
				bad = append(bad, i)
			}
			time.Sleep(time.Second)
		}
		cancel()
		<-done
		if len(bad) > 0 {
			t.Fatalf("while a handler ran, Consume held no delivery (one leased, not two) at %d of %d steps (first at step %d): it did not receive again once its held delivery started",
				len(bad), steps, bad[0])
		}
	})
}
