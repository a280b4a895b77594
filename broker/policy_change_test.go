package broker_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestALoweredMaxDeliveriesAgreesAcrossAReopen: a lease that lapsed on
// a delivery that was not its last under the old policy is back in the
// queue when MaxDeliveries is lowered below its count. The live store
// delivers it again; a reopen (from the checkpoint or rebuilt from the
// log) must hold the same state, not a dead letter.
func TestALoweredMaxDeliveriesAgreesAcrossAReopen(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(map[bool]string{false: "checkpoint", true: "rebuild"}[rebuild], func(t *testing.T) {
			e := newEnv(t)
			three := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 })
			one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
			q := e.queue("jobs", three)
			m := mustPublish(t, q, "a")
			d := mustReceiveOne(t, q)
			require.Equal(t, 1, d.Deliveries)
			e.clock.Advance(time.Minute) // the lease lapses on delivery 1 of 3
			st := q.Stats()
			require.Equal(t, 1, st.Ready, "a lapsed lease with deliveries left is ready")
			require.Equal(t, 0, st.DeadLetters)

			q = e.queue("jobs", one) // lowered: 1 delivery was already the last
			live := broker.Dump(e.s)
			liveStats := q.Stats()

			e.close()
			if rebuild {
				require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
			}
			e.open()
			q = e.queue("jobs", one)
			requireSameState(t, live, broker.Dump(e.s), "reopen changed the state after a policy change")
			got := q.Stats()
			require.Equal(t, [2]int{liveStats.Ready, liveStats.DeadLetters}, [2]int{got.Ready, got.DeadLetters},
				"ready and dead letters: live store vs reopen")
			_ = m
		})
	}
}
