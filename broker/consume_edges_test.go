package broker_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestConsumeAcksWhenNoNewLeaseCouldBeRecorded: a handler that succeeds
// while its lease is live is acked, even when a new lease taken now would
// lapse after 2262 (which no broker can record): over a *Queue, Consume
// carries the ack with its next Receive, which must make the acks when it
// refuses the leases.
func TestConsumeAcksWhenNoNewLeaseCouldBeRecorded(t *testing.T) {
	const vt = time.Hour
	for _, name := range []string{"store", "memory"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			// The lease taken now lapses 10 s before the last instant.
			e.clock.Set(time.Unix(0, math.MaxInt64-int64(vt)-int64(10*time.Second)))
			b := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))[name]
			_, err := b.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
			cctx, cancel := context.WithCancel(ctx(t))
			defer cancel()
			done := make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				errc <- broker.Consume(cctx, b, func(context.Context, broker.DeliveryValue) error {
					// Half the lease later: still live, but a new lease
					// taken now could not be recorded.
					e.clock.Advance(vt / 2)
					close(done)
					return nil
				}, broker.ConsumeOptions{PollInterval: 10 * time.Millisecond})
			}()
			<-done
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) && b.Stats().Acked == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-errc
			st := b.Stats()
			require.Equal(t, int64(1), st.Acked, "the handler succeeded with its lease live: its ack must be made (stats %+v)", st)
			require.Equal(t, 0, st.Leased)
		})
	}
}

// TestConsumeStopGraceHandlerGivingUpWithConsumesErrorIsConsumerStopped: a
// handler that gives up when Consume's ctx ends, returning that ctx's
// error and nothing of its own, is nacked as CONSUMER_STOPPED, also under
// a StopGrace, while its own context is still live.
func TestConsumeStopGraceHandlerGivingUpWithConsumesErrorIsConsumerStopped(t *testing.T) {
	for _, name := range []string{"store", "memory"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			b := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))[name]
			_, err := b.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
			cctx, cancel := context.WithCancel(ctx(t))
			started := make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				errc <- broker.Consume(cctx, b, func(context.Context, broker.DeliveryValue) error {
					close(started)
					<-cctx.Done()
					return cctx.Err() // Consume's ctx's error, nothing of its own
				}, broker.ConsumeOptions{StopGrace: 5 * time.Second})
			}()
			<-started
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled)
			dls, err := b.DeadLetters(ctx(t), 10)
			require.NoError(t, err)
			require.Len(t, dls, 1)
			require.Equal(t, broker.ReasonConsumerStopped, dls[0].Reason)
		})
	}
}
