package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestABatchLargerThanCapacityObservesTheClockAlike: a PublishBatch of
// more messages than Capacity, refused, has observed the clock in both
// brokers: once the clock steps back, the lease whose lapse it saw is
// gone in both.
func TestABatchLargerThanCapacityObservesTheClockAlike(t *testing.T) {
	results := map[string]error{}
	for _, name := range []string{"store", "memory"} {
		e := newEnv(t)
		b := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.Capacity = 2; p.MaxDeliveries = 5 }))[name]
		_, err := b.Publish(ctx(t), []byte("a"))
		require.NoError(t, err)
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		e.clock.Advance(31 * time.Second) // the 30 s lease lapsed
		_, err = b.PublishBatch(ctx(t), [][]byte{[]byte("1"), []byte("2"), []byte("3")})
		require.ErrorIs(t, err, broker.QueueFull, name)
		e.clock.Advance(-2 * time.Second) // back before ExpiresAt
		results[name] = b.Ack(ctx(t), ds[0].Lease.Receipt)
	}
	require.Equal(t, results["store"] == nil, results["memory"] == nil,
		"same calls, same answer: store %v, memory %v", results["store"], results["memory"])
}

// TestABatchLargerThanCapacityWithABadClockAnswersAlike: with a clock no
// broker can record, both brokers refuse a PublishBatch larger than
// Capacity for the clock, and neither counts it shed.
func TestABatchLargerThanCapacityWithABadClockAnswersAlike(t *testing.T) {
	errs := map[string]error{}
	shed := map[string]int64{}
	for _, name := range []string{"store", "memory"} {
		e := newEnv(t)
		b := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.Capacity = 2 }))[name]
		e.clock.Set(time.Time{}) // year 1: no broker can record it
		_, errs[name] = b.PublishBatch(ctx(t), [][]byte{[]byte("1"), []byte("2"), []byte("3")})
		e.clock.Set(t0)
		shed[name] = b.Stats().Shed
	}
	for _, name := range []string{"store", "memory"} {
		require.ErrorIs(t, errs[name], broker.QueueMisconfigured, name)
		require.NotErrorIs(t, errs[name], broker.QueueFull, name)
		require.Zero(t, shed[name], "%s: Shed", name)
	}
}

// TestAPayloadAboveTheQueuesBoundWithABadClockIsMessageTooLarge: a
// payload above the queue's MaxMessageBytes (below the store's own bound)
// is MessageTooLarge whatever the clock reads: sizes are checked before
// the clock is read.
func TestAPayloadAboveTheQueuesBoundWithABadClockIsMessageTooLarge(t *testing.T) {
	for _, name := range []string{"store", "memory"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			b := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 10 }))[name]
			e.clock.Set(time.Time{})
			_, err := b.Publish(ctx(t), make([]byte, 11))
			require.ErrorIs(t, err, broker.MessageTooLarge)
		})
	}
}
