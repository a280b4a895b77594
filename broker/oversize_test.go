package broker_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// allocatedBy returns the bytes f allocates.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// requireHugePayloadRefusedUncopied publishes huge to q (whose
// MaxMessageBytes is 1024) alone, keyed, and second in a batch, and
// requires each refused as MessageTooLarge, naming the limit or the
// payload, with under 1 MiB allocated for all three.
func requireHugePayloadRefusedUncopied(t *testing.T, q fullBroker, huge []byte) {
	t.Helper()
	n := allocatedBy(func() {
		_, err := q.Publish(ctx(t), huge)
		requireErrorIs(t, err, broker.MessageTooLarge, "MaxMessageBytes is 1024")
		_, err = q.PublishKeyed(ctx(t), "k", huge)
		requireErrorIs(t, err, broker.MessageTooLarge, "MaxMessageBytes is 1024")
		_, err = q.PublishBatch(ctx(t), [][]byte{[]byte("fits"), huge})
		requireErrorIs(t, err, broker.MessageTooLarge, "payload 1")
	})
	require.Less(t, n, uint64(1<<20), "bytes allocated refusing a 64 MiB payload three times")
}

// kibBatch is a batch of 8,192 payloads of 1 KiB, 8 MiB in all, each the
// first KiB of huge (so that making it copies nothing).
func kibBatch(huge []byte) [][]byte {
	batch := make([][]byte, 8192)
	for i := range batch {
		batch[i] = huge[:1024]
	}
	return batch
}

// A payload larger than any queue of the store takes, or a batch larger
// than one segment holds, is refused before its bytes are copied: a
// caller's oversized input costs the store no memory in proportion to it.
func TestOversizedInputIsRefusedBeforeItIsCopied(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance) // 2 MiB segments
	q := e.queue("jobs", keyedJobs)          // MaxMessageBytes 1 KiB
	huge := make([]byte, 64<<20)
	requireHugePayloadRefusedUncopied(t, q, huge)

	batch := kibBatch(huge) // four segments
	n := allocatedBy(func() {
		_, err := q.PublishBatch(ctx(t), batch)
		requireErrorIs(t, err, broker.InvalidBatchSize, "does not fit in one log segment")
	})
	require.Less(t, n, uint64(2<<20), "bytes allocated refusing an 8 MiB batch")
	// A payload above the queue's limit is named before the batch's size.
	batch[5000] = huge[:2048]
	_, err := q.PublishBatch(ctx(t), batch)
	requireErrorIs(t, err, broker.MessageTooLarge, "payload 5000")
	require.Zero(t, q.Stats().Ready)
}

// Memory refuses, before copying it, a payload above the queue's
// MaxMessageBytes and a batch larger than its Capacity (which no state of
// the queue admits). The batch counts as shed, as one refused under the
// lock does.
func TestMemoryRefusesOversizedInputBeforeItIsCopied(t *testing.T) {
	q, err := broker.NewMemory(policy(func(p *broker.PolicyValue) {
		p.MaxMessageBytes = 1024
		p.Capacity = 100
	}), broker.MemoryOptions{})
	require.NoError(t, err)
	huge := make([]byte, 64<<20)
	requireHugePayloadRefusedUncopied(t, q, huge)

	batch := kibBatch(huge) // 8,192 > Capacity
	n := allocatedBy(func() {
		_, err := q.PublishBatch(ctx(t), batch)
		requireErrorIs(t, err, broker.QueueFull, "at most 100 messages")
	})
	require.Less(t, n, uint64(1<<20), "bytes allocated refusing an 8 MiB batch")
	st := q.Stats()
	require.Zero(t, st.Ready)
	require.Equal(t, int64(1), st.Shed, "the batch too large for Capacity is shed")

	// Closed comes first, as for every call.
	require.NoError(t, q.Close())
	_, err = q.Publish(ctx(t), huge)
	require.ErrorIs(t, err, broker.Closed)
}
