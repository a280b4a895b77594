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
// queue; MaxDeliveries lowered to its count leaves it no delivery
// (PolicyValue.MaxDeliveries: "how many times one message may be handed
// to a consumer before the broker gives up"), so the declaration moves it
// to the dead-letter store: LEASE_EXPIRED (no consumer reported anything),
// its count of deliveries, failed at the declaration's clock reading. A
// reopen (from the checkpoint or rebuilt from the log) must hold the same
// state, before the Unix epoch too. (Until the seed was followed here, the
// declaration handed it back and the next delivery, beyond the maximum,
// was its last.)
func TestALoweredMaxDeliveriesAgreesAcrossAReopen(t *testing.T) {
	for _, start := range []time.Time{t0, time.Unix(-3600, 0)} {
		for _, rebuild := range []bool{false, true} {
			t.Run(start.UTC().Format("2006")+"/"+map[bool]string{false: "checkpoint", true: "rebuild"}[rebuild], func(t *testing.T) {
				e := newEnv(t)
				e.clock.Set(start)
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

				declared := e.clock.Now()
				q = e.queue("jobs", one) // lowered: 1 delivery was already the last
				live := broker.Dump(e.s)
				liveStats := q.Stats()
				require.Equal(t, [2]int{0, 1}, [2]int{liveStats.Ready, liveStats.DeadLetters}, "dead-lettered by the declaration")

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
				require.Empty(t, mustReceive(t, q, 1), "no delivery beyond the maximum")
				dls, err := q.DeadLetters(ctx(t), 10)
				require.NoError(t, err)
				require.Len(t, dls, 1)
				require.Equal(t, m.ID, dls[0].Message.ID)
				require.Equal(t, broker.ReasonLeaseExpired, dls[0].Reason)
				require.Equal(t, 1, dls[0].Deliveries)
				require.Equal(t, declared.UnixNano(), dls[0].FailedAt.UnixNano(), "failed at the declaration")
			})
		}
	}
}

// TestAPolicyChangeAppliesTheRetryCurveSizeBoundAndDedupWindow: Queue with
// a different policy applies the new one from then on, every field of it
// (TestPolicyChangeAppliesFromThenOn covers Capacity, MaxDeliveries and
// VisibilityTimeout): the next nack waits by the new RetryDelay and
// MaxRetryDelay, the next publish is bounded by the new MaxMessageBytes,
// and the seen-set forgets by the new DedupWindow.
func TestAPolicyChangeAppliesTheRetryCurveSizeBoundAndDedupWindow(t *testing.T) {
	e := newEnv(t)
	before := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 5
		p.RetryDelay = time.Second
		p.MaxMessageBytes = 16
		p.DedupWindow = time.Hour
	})
	after := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 5
		p.RetryDelay = 10 * time.Second
		p.MaxRetryDelay = 15 * time.Second
		p.MaxMessageBytes = 32
		p.DedupWindow = 10 * time.Minute
	})
	q := e.queue("jobs", before)
	k, err := q.PublishKeyed(ctx(t), "k", []byte("keyed"))
	require.NoError(t, err)
	_, err = q.Publish(ctx(t), make([]byte, 17))
	requireErrorIs(t, err, broker.MessageTooLarge)
	m := mustPublish(t, q, "m")
	ds := mustReceive(t, q, 2)
	require.Len(t, ds, 2)
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	require.Equal(t, m.ID, ds[1].Message.ID)
	nv := mustNack(t, q, ds[1].Lease.Receipt, nil)
	requireSameInstant(t, t0.Add(time.Second), nv.VisibleAt, "the old RetryDelay")

	require.Same(t, q, e.queue("jobs", after))
	_, err = q.Publish(ctx(t), make([]byte, 32))
	require.NoError(t, err, "the new MaxMessageBytes admits 32 bytes")
	_, err = q.Publish(ctx(t), make([]byte, 33))
	requireErrorIs(t, err, broker.MessageTooLarge)

	e.clock.Set(nv.VisibleAt)
	d := mustReceiveOne(t, q)
	require.Equal(t, m.ID, d.Message.ID)
	require.Equal(t, 2, d.Deliveries)
	nv = mustNack(t, q, d.Lease.Receipt, nil)
	requireSameInstant(t, nv.VisibleAt, e.clock.Now().Add(15*time.Second),
		"the new curve: RetryDelay 10 s doubled for the second delivery, held at MaxRetryDelay 15 s")

	e.clock.Set(t0.Add(10 * time.Minute))
	dup, err := q.PublishKeyed(ctx(t), "k", []byte("again"))
	require.NoError(t, err)
	require.Equal(t, k.ID, dup.ID, "exactly the new window old: still remembered")
	e.clock.Set(t0.Add(10*time.Minute + time.Nanosecond))
	fresh, err := q.PublishKeyed(ctx(t), "k", []byte("again"))
	require.NoError(t, err)
	require.NotEqual(t, k.ID, fresh.ID, "older than the new DedupWindow, younger than the old one: forgotten")
}
