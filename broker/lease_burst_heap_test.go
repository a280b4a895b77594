package broker_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestAnAckedBurstOfLeasesGivesBackTheHeapItTook: a leased message is
// held on the heap (in its queue's map of active messages and a heap of
// lease deadlines) until it is acked, and once a burst of leases is acked
// the room it took is given back, not kept at the largest burst the queue
// ever saw until the store is reopened (a consumer that took 400,000
// messages and acked them left about 32 bytes a message on the heap: the
// map and the array kept their size).
func TestAnAckedBurstOfLeasesGivesBackTheHeapItTook(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: leases 100,000 messages, seconds under -race; go test without -short runs it")
	}
	e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone; o.SegmentBytes = 8 << 20 })
	q := e.queue("jobs", policy())
	burst := func(n int) {
		for range n / 1000 {
			_, err := q.PublishBatch(ctx(t), make([][]byte, 1000))
			require.NoError(t, err)
		}
		receipts := make([]broker.ReceiptValue, 0, n)
		for len(receipts) < n {
			ds, err := q.Receive(ctx(t), 5000)
			require.NoError(t, err)
			require.NotEmpty(t, ds, "leased %d of %d", len(receipts), n)
			for _, d := range ds {
				receipts = append(receipts, d.Lease.Receipt)
			}
		}
		require.Equal(t, n, broker.ActiveMessages(q), "every leased message is held on the heap")
		for _, r := range receipts {
			require.NoError(t, q.Ack(ctx(t), r))
		}
		require.Zero(t, broker.ActiveMessages(q))
	}
	// A small burst first, so that what the store keeps whatever the
	// burst (buffers, pools) is in the base.
	burst(2_000)
	base := heapInUse()
	const n = 100_000
	burst(n)
	left := heapInUse() - base
	runtime.KeepAlive(q)
	t.Logf("after a burst of %d leases was acked: %d bytes more than before it", n, left)
	require.Less(t, left, int64(n*8),
		"after a burst of %d leases was acked, the heap holds %d bytes more than before it (%.1f B a message)", n, left, float64(left)/n)
}
