package broker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Over a *Queue, Consume carries acks in the commit of its next Receive.
// Every success must still be acked: in a busy queue, when the queue goes
// idle, and when ctx ends.
func TestConsumeOverStoreAcksEverySuccess(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentBytes: 4 << 20})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const busy = 500
	for i := 0; i < busy; i++ {
		_, err := q.Publish(ctx, []byte{byte(i)})
		require.NoError(t, err)
	}
	var handled atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, q, func(context.Context, DeliveryValue) error {
			handled.Add(1)
			return nil
		}, ConsumeOptions{Batch: 16, Concurrency: 8})
	}()
	require.Eventually(t, func() bool { return q.Stats().Acked == busy }, 10*time.Second, time.Millisecond,
		"every message of a busy queue is acked")

	// The queue is idle now: one more message, handled, must be acked
	// without any later message to carry its ack.
	_, err = q.Publish(ctx, []byte("lone"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return q.Stats().Acked == busy+1 }, 10*time.Second, time.Millisecond,
		"a lone message's ack does not wait for another message")

	// Messages in flight when ctx ends are acked before Consume returns.
	for i := 0; i < 100; i++ {
		_, err := q.Publish(ctx, []byte{byte(i)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return handled.Load() > busy+1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	st := q.Stats()
	require.Equal(t, handled.Load(), st.Acked, "every handled message is acked when Consume returns")
	require.Zero(t, st.Leased)
	require.Equal(t, int64(busy+101)-st.Acked, int64(st.Ready))
}
