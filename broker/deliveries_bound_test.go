package broker_test

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A store counts a message's deliveries in 32 bits, so a MaxDeliveries
// above math.MaxUint32 (which Validate accepts: the seed bounds it only
// below) is refused by Store.Queue, naming the field, before anything is
// declared; and by NewMemory, so that a program tested against a Memory
// meets the refusal. Under such a policy the count of a message delivered
// math.MaxUint32 times went back to 0 at its next delivery
// (TestADeliveryCountAtTheBoundIsTheLast covers the bound itself).
func TestAMaxDeliveriesAboveWhatAStoreCountsIsRefused(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("an int cannot hold a MaxDeliveries above math.MaxUint32")
	}
	var wide int64 = math.MaxUint32 + 1
	for _, n := range []int{int(wide), math.MaxInt} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = n })
			require.NoError(t, p.Validate(), "Validate holds the seed's rules only")

			e := newEnv(t)
			_, err := e.s.Queue("jobs", p)
			requireErrorIs(t, err, broker.QueueMisconfigured, "MaxDeliveries", strconv.Itoa(n), "4294967295", `"jobs"`)
			require.Empty(t, e.s.Queues(), "a refused declaration declares nothing")
			e.reopen()
			require.Empty(t, e.s.Queues(), "nor in the log")

			_, err = broker.NewMemory(p, broker.MemoryOptions{})
			requireErrorIs(t, err, broker.QueueMisconfigured, "MaxDeliveries", strconv.Itoa(n), "4294967295")
		})
	}
	t.Run("the bound itself", func(t *testing.T) {
		p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = int(wide - 1) })
		e := newEnv(t)
		q := e.queue("jobs", p)
		mustPublish(t, q, "x")
		require.Equal(t, 1, mustReceiveOne(t, q).Deliveries)
		mem, err := broker.NewMemory(p, broker.MemoryOptions{})
		require.NoError(t, err)
		require.NoError(t, mem.Close())
	})
}
