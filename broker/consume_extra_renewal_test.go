package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAnExtraDeliveryThatWaitedForASlotIsRenewedForItsWait: a broker that
// returns more deliveries than Consume asked for leases them all at once.
// One beyond the free slots waits for a handler to finish, its lease
// running meanwhile, as a delivery Prefetch holds does; when its handler
// starts, its lease must be renewed for that wait (at once, when it waited
// ExtendEvery or more), not ExtendEvery after the start, by which time the
// lease may have lapsed.
func TestAnExtraDeliveryThatWaitedForASlotIsRenewedForItsWait(t *testing.T) {
	f := newFake()
	f.overDeliver = 1
	_, _ = f.Publish(context.Background(), []byte("first"))
	_, _ = f.Publish(context.Background(), []byte("extra"))
	const every = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renewedEarly := make(chan bool, 1)
	h := func(hctx context.Context, d DeliveryValue) error {
		if string(d.Message.Payload) == "first" {
			time.Sleep(every + every/5) // the extra waits this long for the one slot
			return nil
		}
		// The extra: its lease ran for the whole wait; a renewal must
		// come well before ExtendEvery from now.
		deadline := time.After(every * 9 / 10)
		for {
			f.mu.Lock()
			n := 0
			for _, e := range f.extends {
				if e.old == d.Lease.Receipt {
					n++
				}
			}
			f.mu.Unlock()
			if n > 0 {
				renewedEarly <- true
				return nil
			}
			select {
			case <-deadline:
				renewedEarly <- false
				return nil
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, f, h, ConsumeOptions{Batch: 1, Concurrency: 1, ExtendEvery: every, PollInterval: time.Millisecond})
	}()
	var early bool
	select {
	case early = <-renewedEarly:
	case <-time.After(30 * time.Second):
		t.Fatal("the extra delivery's handler never ran")
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.True(t, early, "the extra delivery waited %v for a slot with its lease running, and was not renewed within %v of its handler's start", every+every/5, every*9/10)
}
