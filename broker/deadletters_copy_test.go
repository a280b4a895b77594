package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestDeadLettersCopiesOnlyThePayloadsItReturns: DeadLetters(max) hands
// the caller a copy of each payload it returns (DeadLetterValue: the
// payload belongs to the receiver), and of no other: asking for two of
// 1,000 dead letters of 1 KiB allocates what asking for two of ten does,
// in the store and in the Memory.
func TestDeadLettersCopiesOnlyThePayloadsItReturns(t *testing.T) {
	for _, kind := range []string{"store", "memory"} {
		allocs := map[int]float64{}
		for _, n := range []int{10, 1000} {
			e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
			q := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))[kind]
			payloads := make([][]byte, n)
			for i := range payloads {
				payloads[i] = make([]byte, 1024)
			}
			_, err := q.PublishBatch(ctx(t), payloads)
			require.NoError(t, err)
			for got := 0; got < n; {
				ds, err := q.Receive(ctx(t), n)
				require.NoError(t, err)
				got += len(ds)
			}
			e.clock.Advance(time.Minute) // every lease lapses on its last delivery
			dls, err := q.DeadLetters(ctx(t), n)
			require.NoError(t, err)
			require.Len(t, dls, n, "%s: the dead letters", kind)
			allocs[n] = testing.AllocsPerRun(20, func() {
				dls, err := q.DeadLetters(ctx(t), 2)
				if err != nil || len(dls) != 2 {
					t.Fatalf("%s: DeadLetters(2) = %d, %v", kind, len(dls), err)
				}
			})
		}
		require.Equal(t, allocs[10], allocs[1000], "%s: allocations of DeadLetters(2) with 10 dead letters and with 1,000", kind)
	}
}
