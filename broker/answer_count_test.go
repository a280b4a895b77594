package broker_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Close's frozen Stats count every duplicate and shed publish the queue
// answered before Close, as they count every publish its checkpoint
// holds: however late such a call gets back from its wait to count
// itself, and even when it returns after Close. Nor does its return
// after Close move the frozen figures.
func TestClosedStatsCountAnswersInFlight(t *testing.T) {
	var armed atomic.Bool
	parked := make(chan struct{}, 3)
	release := make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let) // a failure below leaves no call parked
	opts := broker.Options{}
	broker.ManualMaintenance(&opts)
	broker.AnswerWaited(func() {
		if armed.Load() {
			parked <- struct{}{}
			<-release
		}
	})(&opts)
	s, err := broker.Open(t.TempDir(), opts)
	require.NoError(t, err)
	q, err := s.Queue("a", broker.PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, Capacity: 1})
	require.NoError(t, err)
	_, err = q.PublishKeyed(t.Context(), "k", []byte("original"))
	require.NoError(t, err)

	armed.Store(true)
	calls := []func() error{
		func() error { _, err := q.PublishKeyed(t.Context(), "k", []byte("again")); return err },
		func() error { _, err := q.Publish(t.Context(), []byte("no room")); return err },
		func() error { _, err := q.PublishKeyed(t.Context(), "other", []byte("no room")); return err },
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	for range calls {
		<-parked
	}
	// Every call has its answer and is on its way back to count it.
	require.NoError(t, s.Close())
	want := broker.QueueStats{Published: 1, Duplicates: 1, Shed: 2}
	require.Equal(t, want, counters(q.Stats()), "Close's frozen Stats miss answers given before Close")

	let()
	wg.Wait()
	require.NoError(t, errs[0], "the duplicate")
	for i, err := range errs[1:] {
		require.Truef(t, errors.Is(err, broker.QueueFull), "publish %d: want QueueFull, got %v", i+1, err)
	}
	require.Equal(t, want, counters(q.Stats()), "answers returned after Close moved its frozen Stats")
}
