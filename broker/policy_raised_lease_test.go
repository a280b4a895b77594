package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestARaisedMaxDeliveriesJudgesALastLeaseByWhereItWasAtTheRaise: a lease
// on a message's last allowed delivery, when MaxDeliveries is raised, is
// judged by whether it had lapsed at the raise, whether or not any call
// looked, and whether or not the store was reopened in between:
//   - lapsed before the raise: a dead letter from the instant it lapsed
//     (FailedAt its expiry), which the raise does not revive, even when
//     no call had looked at the queue since, or the lapse came while the
//     store was closed and the raise is the reopened store's first
//     declaration (which counts it in no DeadLettered: it died before
//     this open);
//   - still held at the raise: no longer the last delivery; at its lapse
//     the message is receivable again, its delivery count kept.
//
// SQS reads maxReceiveCount when a receive would hand the message out,
// so there a raise revives a message whose last receive lapsed and that
// no receive looked at since. The store does not: the lapse is the
// death's instant, the gauges count it from then on, and a replay of the
// log, which records no look, must find the same state.
func TestARaisedMaxDeliveriesJudgesALastLeaseByWhereItWasAtTheRaise(t *testing.T) {
	one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	three := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 })

	t.Run("lapsed, no call looked", func(t *testing.T) {
		e := newEnv(t)
		q := e.queue("jobs", one)
		m := mustPublish(t, q, "a")
		d := mustReceiveOne(t, q)
		e.clock.Set(d.Lease.ExpiresAt.Add(time.Second)) // nothing looks
		q = e.queue("jobs", three)
		requireNoneReceivable(t, q)
		dead := mustDeadLetters(t, q)
		require.Len(t, dead, 1)
		require.Equal(t, m.ID, dead[0].Message.ID)
		require.Equal(t, broker.ReasonLeaseExpired, dead[0].Reason)
		requireSameInstant(t, d.Lease.ExpiresAt, dead[0].FailedAt)
		require.EqualValues(t, 1, q.Stats().DeadLettered)
	})

	t.Run("lapsed while the store was closed", func(t *testing.T) {
		e := newEnv(t)
		q := e.queue("jobs", one)
		m := mustPublish(t, q, "a")
		d := mustReceiveOne(t, q)
		e.close()
		e.clock.Set(d.Lease.ExpiresAt.Add(time.Second))
		e.open()
		q = e.queue("jobs", three) // the reopened store's first declaration raises it
		requireNoneReceivable(t, q)
		dead := mustDeadLetters(t, q)
		require.Len(t, dead, 1)
		require.Equal(t, m.ID, dead[0].Message.ID)
		requireSameInstant(t, d.Lease.ExpiresAt, dead[0].FailedAt)
		st := q.Stats()
		require.Equal(t, 1, st.DeadLetters)
		require.EqualValues(t, 0, st.DeadLettered, "it died before this open")
		e.reopen()
		q = e.queue("jobs", three)
		require.Len(t, mustDeadLetters(t, q), 1, "after a reopen")
		requireNoneReceivable(t, q)
	})

	for _, reopen := range []bool{false, true} {
		name := map[bool]string{false: "held at the raise", true: "held at the raise, reopened before its lapse"}[reopen]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			q := e.queue("jobs", one)
			m := mustPublish(t, q, "a")
			d := mustReceiveOne(t, q)
			require.Equal(t, 1, d.Deliveries)
			q = e.queue("jobs", three) // the lease is still held: no longer the last
			if reopen {
				e.reopen()
				q = e.queue("jobs", three)
			}
			e.clock.Set(d.Lease.ExpiresAt)
			require.Equal(t, 0, q.Stats().DeadLetters)
			again := mustReceiveOne(t, q)
			require.Equal(t, m.ID, again.Message.ID)
			require.Equal(t, 2, again.Deliveries)
			require.Empty(t, mustDeadLetters(t, q))
		})
	}
}
