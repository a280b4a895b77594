package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// "Zero is a working value and means 'eligible as soon as the nack
// returns'" (PolicyValue.RetryDelay): the message is receivable whatever
// the clock reads next, one stepped back (an NTP step, a VM resume)
// included, not only from the clock reading of the nack on.
func TestNackWithZeroRetryDelayIsReceivableAfterTheClockStepsBack(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 })
	for name, b := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			e.clock.Set(t0)
			m, err := b.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
			ds, err := b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			_, err = b.Nack(ctx(t), ds[0].Lease.Receipt, nil)
			require.NoError(t, err)
			// The nack returned: with a zero retry delay the message is
			// eligible now. The clock then steps back (NTP, a VM resume).
			e.clock.Advance(-time.Millisecond)
			st := b.Stats()
			assert.Equal(t, 0, st.Delayed, "%s: a message nacked with RetryDelay 0 is counted as delayed: %+v", name, st)
			again, err := b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, again, 1, "%s: a message nacked with RetryDelay 0 is not receivable after the clock stepped back 1 ms", name)
			require.Equal(t, m.ID, again[0].Message.ID)
		})
	}
}
