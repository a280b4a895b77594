package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNoAttemptFollowsAFailedPublish: a message no journal entry names is
// accepted only as the publish its goroutine had in flight at the kill:
// the attempt after its last journaled one, or one journaled as failed
// (which may or may not have happened). A publisher stops at its first
// failed call, so after a failed attempt N there is no attempt N+1: a
// store that shows one shows a message nobody published.
func TestNoAttemptFollowsAFailedPublish(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	published := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	journal := func(n int64, id string) []Entry {
		ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: n})
		return []Entry{
			{Op: OpStart, Cycle: 1, Sync: "all"},
			{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{"0000000000000001"}, Refs: []string{published}, Enq: base, T0: base, T1: base},
			{Op: OpFailed, Who: "pub0", Queue: QueueWork, N: 2, Err: "Publish: injected"},
			maybeAt("con0", id, ref, base+ms, 1, base+2*ms, IntentHold),
		}
	}
	unknown := "no publish of it returned, and it is not the publish its goroutine had in flight"

	t.Run("the attempt after a failed one", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal(3, "0000000000000003"))
		require.ErrorContains(t, c.Err(), unknown, "pub0's attempt 2 failed and the goroutine stopped: attempt 3 never ran")
	})

	t.Run("control: the failed attempt itself", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal(2, "0000000000000002"))
		require.Error(t, c.Err()) // the failed call itself
		require.NotContains(t, c.Err().Error(), unknown, "a failed publish may have happened")
	})
}
