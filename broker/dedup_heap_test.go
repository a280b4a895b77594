package broker_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// heapInUse is the live heap after the garbage collector has run.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestEvictedDedupKeysGiveBackTheHeapTheyTook: the keys a queue keeps on
// the heap are bounded by one window's worth (DESIGN.md, "Keys leave only
// at keyed publishes"), and once the window has passed and a keyed publish
// evicted them all, the heap they took is given back, not kept at the
// largest window the queue ever saw until the store is reopened (a burst
// of 300,000 keys in one window left about 45 MiB on the heap after every
// key was evicted: the seen map and the eviction heap kept their size).
func TestEvictedDedupKeysGiveBackTheHeapTheyTook(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: publishes 50,000 keyed messages, seconds under -race; go test without -short runs it")
	}
	e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone; o.SegmentBytes = 8 << 20 })
	pol := policy(func(p *broker.PolicyValue) { p.DedupWindow = time.Minute })
	q := e.queue("jobs", pol)
	const n = 50_000
	for i := range n {
		_, err := q.PublishKeyed(ctx(t), fmt.Sprintf("k-%06d", i), nil)
		require.NoError(t, err)
	}
	for acked := 0; acked < n; {
		ds, err := q.Receive(ctx(t), 5000)
		require.NoError(t, err)
		require.NotEmpty(t, ds, "acked %d of %d", acked, n)
		for _, d := range ds {
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
		}
		acked += len(ds)
	}
	// Reopened, the store holds the keys and nothing else of those
	// messages (their table entries are in files, not on the heap).
	e.close()
	base := heapInUse()
	e.open()
	q = e.queue("jobs", pol)
	loaded := heapInUse() - base
	require.Greater(t, loaded, int64(n*32), "the %d keys loaded from the checkpoint should take some heap", n)

	e.clock.Advance(2 * time.Minute)
	_, err := q.PublishKeyed(ctx(t), "fresh", nil)
	require.NoError(t, err)
	first, err := q.PublishKeyed(ctx(t), "k-000000", nil)
	require.NoError(t, err)
	require.NotNil(t, first.Payload, "k-000000 is past the window: a new message, not a duplicate")

	left := heapInUse() - base
	runtime.KeepAlive(q)
	require.Less(t, left, loaded/4,
		"after every one of %d keys was evicted, the heap holds %d bytes more than before the store opened; the keys took %d (%.0f B a key, %.0f still held)",
		n, left, loaded, float64(loaded)/n, float64(left)/n)
}
