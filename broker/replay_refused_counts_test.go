package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestAReplayRefusedForCapacityCountsNeitherShedNorReplayed: a replay
// refused for the queue's Capacity is QueueFull but no shed publish
// (ReplayDeadLetter: "not counted as shed") and no replay, in the file
// store and in Memory alike: the counters stay where they were and the
// dead letter stays a dead letter. The replay that then fits counts once
// in Replayed. (Tests that hold the two stores to agree with each other
// would pass a count both made wrong.)
func TestAReplayRefusedForCapacityCountsNeitherShedNorReplayed(t *testing.T) {
	e := newEnv(t)
	for name, b := range e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.Capacity = 1 })) {
		t.Run(name, func(t *testing.T) {
			m, err := b.Publish(ctx(t), []byte("dead"))
			require.NoError(t, err)
			ds, err := b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			require.NoError(t, b.Reject(ctx(t), ds[0].Lease.Receipt, nil))
			_, err = b.Publish(ctx(t), []byte("filler"))
			require.NoError(t, err)

			requireErrorIs(t, b.ReplayDeadLetter(ctx(t), m.ID), broker.QueueFull)
			st := b.Stats()
			require.Equal(t, broker.QueueStats{Published: 2, Delivered: 1, Rejected: 1, DeadLettered: 1}, counters(st),
				"a refused replay is neither shed nor replayed")
			require.Equal(t, [2]int{1, 1}, [2]int{st.Ready, st.DeadLetters}, "the refused replay moved nothing")

			ds, err = b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			require.NoError(t, b.Ack(ctx(t), ds[0].Lease.Receipt))
			require.NoError(t, b.ReplayDeadLetter(ctx(t), m.ID))
			st = b.Stats()
			require.Equal(t, broker.QueueStats{Published: 2, Delivered: 2, Acked: 1, Rejected: 1, DeadLettered: 1, Replayed: 1}, counters(st))
			require.Equal(t, [2]int{1, 0}, [2]int{st.Ready, st.DeadLetters}, "the replayed message is ready, no longer dead")
		})
	}
}
