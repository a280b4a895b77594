package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/internal/leakcheck"
)

// "Several Consume calls may share one broker, in one process or many;
// each leaves no goroutine behind when it returns": three Consume calls of
// different shapes over one *Queue hand each message to one handler once,
// never to two at a time, ack every one (the acks each carries with its
// own Receives), and leave none of their goroutines running.
func TestConsumeCallsShareOneQueue(t *testing.T) {
	const messages = 300
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	for i := range messages {
		_, err := q.Publish(context.Background(), fmt.Appendf(nil, "m%d", i))
		require.NoError(t, err)
	}
	before := leakcheck.Running()

	var mu sync.Mutex
	handled := map[string]int{}
	running := map[string]bool{}
	var twice []string
	h := func(_ context.Context, d DeliveryValue) error {
		mu.Lock()
		handled[d.Message.ID]++
		if running[d.Message.ID] {
			twice = append(twice, d.Message.ID)
		}
		running[d.Message.ID] = true
		mu.Unlock()
		time.Sleep(100 * time.Microsecond) // let the calls overlap
		mu.Lock()
		delete(running, d.Message.ID)
		mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shapes := []ConsumeOptions{
		{Concurrency: 2},
		{Batch: 8, Concurrency: 3, Prefetch: 8},
		{Batch: 4, Concurrency: 4, ExtendEvery: 20 * time.Millisecond},
	}
	done := make(chan error, len(shapes))
	for _, opts := range shapes {
		go func() { done <- Consume(ctx, q, h, opts) }()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == messages
	}, eventually, tick)
	require.Eventually(t, func() bool { return q.Stats().Acked == messages }, eventually, tick, "every success is acked while the calls run")
	cancel()
	for range shapes {
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("a Consume call did not return after its ctx ended")
		}
	}
	mu.Lock()
	for id, n := range handled {
		require.Equal(t, 1, n, "message %s handled %d times", id, n)
	}
	require.Empty(t, twice, "messages handed to two handlers at once")
	mu.Unlock()
	st := q.Stats()
	require.EqualValues(t, messages, st.Acked)
	require.Zero(t, st.Ready+st.Leased+st.Delayed, "nothing is left in the queue: %+v", st)
	// Not at once: a goroutine that told Consume it was done is still on
	// its way out for a moment.
	left := leakcheck.Since(before)
	for deadline := time.Now().Add(eventually); len(left) > 0 && time.Now().Before(deadline); left = leakcheck.Since(before) {
		time.Sleep(tick)
	}
	require.Empty(t, left, "goroutines left behind by Consume:\n%s", strings.Join(left, "\n\n"))
}
