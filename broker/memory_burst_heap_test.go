package broker_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestAMemoryGivesBackTheHeapOfABurst: a Memory holds every message until
// it is acknowledged, and every dedup key for one window; once a burst of
// either is gone (a backlog drained, a window of keys evicted), the heap it
// took is given back, as the store's index gives it back, not kept at the
// largest burst the Memory ever saw for its life (a Go map keeps the room
// of the most entries it held, and a heap's slice its array).
func TestAMemoryGivesBackTheHeapOfABurst(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: publishes 100,000 messages, seconds under -race; go test without -short runs it")
	}
	clock := newFakeClock()
	m := newMemory(t, clock, func(p *broker.PolicyValue) { p.DedupWindow = time.Minute })
	const n = 100_000
	drain := func() {
		for {
			ds, err := m.Receive(ctx(t), 5000)
			require.NoError(t, err)
			if len(ds) == 0 {
				return
			}
			for _, d := range ds {
				require.NoError(t, m.Ack(ctx(t), d.Lease.Receipt))
			}
		}
	}
	// What a Memory keeps whatever the burst is in the base.
	_, err := m.PublishKeyed(ctx(t), "warm-up", nil)
	require.NoError(t, err)
	drain()
	base := heapInUse()

	for range n / 1000 {
		_, err := m.PublishBatch(ctx(t), make([][]byte, 1000))
		require.NoError(t, err)
	}
	drain()
	require.Zero(t, broker.MemoryHeld(m))
	left := heapInUse() - base
	t.Logf("after a backlog of %d was drained: %d bytes more than before it", n, left)
	require.Less(t, left, int64(n*8),
		"after a backlog of %d was drained, the heap holds %d bytes more than before it (%.1f B a message)", n, left, float64(left)/n)

	for i := range n / 2 {
		_, err := m.PublishKeyed(ctx(t), fmt.Sprintf("k-%06d", i), nil)
		require.NoError(t, err)
	}
	drain()
	clock.Advance(2 * time.Minute)
	first, err := m.PublishKeyed(ctx(t), "k-000000", nil)
	require.NoError(t, err)
	require.NotNil(t, first.Payload, "k-000000 is past the window: a new message, not a duplicate")
	drain()
	left = heapInUse() - base
	runtime.KeepAlive(m)
	t.Logf("after %d keys were evicted: %d bytes more than before them", n/2, left)
	require.Less(t, left, int64(n/2*16),
		"after %d keys were evicted, the heap holds %d bytes more than before them (%.1f B a key)", n/2, left, float64(left)/(n/2))
}
