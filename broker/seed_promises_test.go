package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestMemoryPublishWithinMaxMessageBytesIsNeverInvalidBatchSize holds
// Memory to the seed's MaxMessageBytes ("bounds one payload. A larger
// payload is refused at Publish with MessageTooLarge") and to its own doc
// (the file-backed Queue's semantics, the same errors). A store refuses a
// queue declared with a MaxMessageBytes above Options.MaxMessageBytes
// (QueueMisconfigured); NewMemory used to take such a policy and then
// refuse a single Publish within it as a "batch of 1 messages" too large
// for one segment (InvalidBatchSize). It shows NewMemory refuses the
// policy as the store does, so no Publish within the policy is ever
// InvalidBatchSize; the branch that publishes stays as a guard should
// NewMemory ever take such a policy again.
func TestMemoryPublishWithinMaxMessageBytesIsNeverInvalidBatchSize(t *testing.T) {
	storeMax := broker.Options{}.MaxMessageBytes()
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = storeMax + 1<<20 })
	mem, err := broker.NewMemory(pol, broker.MemoryOptions{})
	if err != nil {
		require.ErrorIs(t, err, broker.QueueMisconfigured)
		return // refused as the store refuses it
	}
	defer mem.Close()
	payload := make([]byte, storeMax+1<<19) // within MaxMessageBytes
	_, err = mem.Publish(ctx(t), payload)
	if errors.Is(err, broker.InvalidBatchSize) {
		t.Fatalf("NewMemory took MaxMessageBytes %d, which a store refuses (it takes at most %d), and then a single Publish of %d bytes, within it, fails: %v",
			pol.MaxMessageBytes, storeMax, len(payload), err)
	}
}

// TestMemoryTakesTheLargestMaxMessageBytesAStoreTakes shows the refusal
// above stops exactly where a store's with the default options does: a
// policy at Options.MaxMessageBytes is taken, one byte more is not.
func TestMemoryTakesTheLargestMaxMessageBytesAStoreTakes(t *testing.T) {
	limit := broker.Options{}.MaxMessageBytes()
	mem, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = limit }), broker.MemoryOptions{})
	require.NoError(t, err)
	require.NoError(t, mem.Close())
	_, err = broker.NewMemory(policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = limit + 1 }), broker.MemoryOptions{})
	require.ErrorIs(t, err, broker.QueueMisconfigured)
}

// TestALapseAfterANackRecordsTheNacksCauseNotLeaseExpired holds both
// brokers to the seed's DeadLetterValue.Reason: "... or LEASE_EXPIRED
// when the message died by exhausting its deliveries without any
// consumer ever reporting anything", with Code and Cause "of the last
// failure". Delivery 1 of 2 is nacked with a classified cause; delivery
// 2's lease lapses. A consumer did report, so the dead letter records
// that report (reason, code, public text; not the private detail), where
// both brokers used to record LEASE_EXPIRED with no code and no cause.
func TestALapseAfterANackRecordsTheNacksCauseNotLeaseExpired(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 2
		p.RetryDelay = 0
		p.VisibilityTimeout = 10 * time.Second
	})
	for name, q := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			m, err := q.Publish(ctx(t), []byte("a"))
			require.NoError(t, err)
			ds, err := q.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			cause := broker.NewError("DOWNSTREAM_DOWN", 0x2A000042, "the downstream is down", "private detail")
			nv, err := q.Nack(ctx(t), ds[0].Lease.Receipt, cause)
			require.NoError(t, err)
			require.False(t, nv.DeadLettered)

			ds, err = q.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			require.Equal(t, 2, ds[0].Deliveries, "the last delivery")
			e.clock.Advance(10 * time.Second) // its consumer died: the lease lapses

			dls, err := q.DeadLetters(ctx(t), 10)
			require.NoError(t, err)
			require.Len(t, dls, 1)
			dl := dls[0]
			require.Equal(t, m.ID, dl.Message.ID)
			require.Equal(t, "DOWNSTREAM_DOWN", dl.Reason)
			require.Equal(t, uint32(0x2A000042), dl.Code)
			require.Equal(t, "the downstream is down", dl.Cause)
			require.Equal(t, 2, dl.Deliveries)
			require.Equal(t, ds[0].Lease.ExpiresAt.UnixNano(), dl.FailedAt.UnixNano(), "failed at the lapse")
		})
	}
}

// TestANacksCauseSurvivesAReopenUntilTheLapse shows the store keeps the
// report in its log (the nack event carries the classified cause), not
// only in memory: nacked, closed and reopened, the message lapsing on its
// last delivery still records the nack's reason, code and public cause.
// A nil cause is a report too (UNEXPLAINED).
func TestANacksCauseSurvivesAReopenUntilTheLapse(t *testing.T) {
	for _, c := range []struct {
		cause          error
		reason, public string
		code           uint32
	}{
		{broker.NewError("DOWNSTREAM_DOWN", 0x2A000042, "the downstream is down", "private detail"), "DOWNSTREAM_DOWN", "the downstream is down", 0x2A000042},
		{nil, broker.ReasonUnexplained, "", 0},
	} {
		e := newEnv(t)
		pol := policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 2
			p.RetryDelay = 0
			p.VisibilityTimeout = 10 * time.Second
		})
		q := e.queue("jobs", pol)
		reopen := func() *broker.Queue { e.reopen(); return e.queue("jobs", pol) }
		mustPublish(t, q, "a")
		mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, c.cause)
		q = reopen()
		d := mustReceiveOne(t, q)
		require.Equal(t, 2, d.Deliveries)
		q = reopen()
		e.clock.Advance(10 * time.Second)
		dls, err := q.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, [3]any{c.reason, c.code, c.public}, [3]any{dls[0].Reason, dls[0].Code, dls[0].Cause})
		q = reopen() // and the dead letter as logged
		dls, err = q.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Equal(t, c.reason, dls[0].Reason)
	}
}

// TestALapseWithNoReportIsLeaseExpired: the other half of the promise. A
// message every lease of which lapsed, no consumer reporting anything,
// dies LEASE_EXPIRED with no code and no cause, in both brokers.
func TestALapseWithNoReportIsLeaseExpired(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 2
		p.RetryDelay = 0
		p.VisibilityTimeout = 10 * time.Second
	})
	for name, q := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			_, err := q.Publish(ctx(t), []byte("a"))
			require.NoError(t, err)
			for range 2 {
				ds, err := q.Receive(ctx(t), 1)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				e.clock.Advance(10 * time.Second)
			}
			dls, err := q.DeadLetters(ctx(t), 10)
			require.NoError(t, err)
			require.Len(t, dls, 1)
			require.Equal(t, [3]any{broker.ReasonLeaseExpired, uint32(0), ""}, [3]any{dls[0].Reason, dls[0].Code, dls[0].Cause})
		})
	}
}

// TestALoweredMaxDeliveriesEndsTheMessagesThatHaveNoDeliveryLeft holds
// the store to PolicyValue.MaxDeliveries ("how many times one message may
// be handed to a consumer before the broker gives up and dead-letters
// it") and DeliveryValue.Deliveries ("a delivery whose count already
// equals the maximum is the last one this message gets") across a policy
// change. A message delivered and nacked twice under MaxDeliveries 3 has
// no delivery left once MaxDeliveries is 1: the store used to hand it a
// third delivery. Now the declaration dead-letters it (its last nack's
// cause, its count of 2, failed at the declaration), so Receive hands out
// nothing; a reopen agrees.
func TestALoweredMaxDeliveriesEndsTheMessagesThatHaveNoDeliveryLeft(t *testing.T) {
	e := newEnv(t)
	three := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3; p.RetryDelay = 0 })
	one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.RetryDelay = 0 })
	q := e.queue("jobs", three)
	m := mustPublish(t, q, "a")
	for i := 1; i <= 2; i++ {
		d := mustReceiveOne(t, q)
		require.Equal(t, i, d.Deliveries)
		mustNack(t, q, d.Lease.Receipt, nil)
	}
	e.clock.Advance(time.Second)
	declared := e.clock.Now()
	q = e.queue("jobs", one) // from then on: one attempt, and two were made
	for _, d := range mustReceive(t, q, 1) {
		require.LessOrEqualf(t, d.Deliveries, one.MaxDeliveries,
			"delivery %d handed out under MaxDeliveries %d: the broker did not give up", d.Deliveries, one.MaxDeliveries)
	}
	check := func() {
		dls, err := q.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, m.ID, dls[0].Message.ID)
		require.Equal(t, broker.ReasonUnexplained, dls[0].Reason, "its last nack's (nil) cause")
		require.Equal(t, 2, dls[0].Deliveries, "the count it had")
		require.Equal(t, declared.UnixNano(), dls[0].FailedAt.UnixNano(), "failed at the declaration")
	}
	check()
	e.reopen()
	q = e.queue("jobs", one)
	require.Empty(t, mustReceive(t, q, 1))
	check()
}

// TestALoweredMaxDeliveriesLetsALeasedMessageKeepItsLease: the message
// leased at the change is not cut off; the delivery it is on is its last,
// and its nack dead-letters it ("when it has now been delivered
// MaxDeliveries times", read as at least).
func TestALoweredMaxDeliveriesLetsALeasedMessageKeepItsLease(t *testing.T) {
	e := newEnv(t)
	three := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3; p.RetryDelay = 0 })
	one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.RetryDelay = 0 })
	q := e.queue("jobs", three)
	mustPublish(t, q, "a")
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	d := mustReceiveOne(t, q)
	require.Equal(t, 2, d.Deliveries)
	q = e.queue("jobs", one)
	require.Zero(t, q.Stats().DeadLetters, "the leased message keeps its lease")
	nv := mustNack(t, q, d.Lease.Receipt, broker.NewError("LAST_TRY", 7, "gave up", ""))
	require.True(t, nv.DeadLettered)
	dls, err := q.DeadLetters(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, "LAST_TRY", dls[0].Reason)
	require.Equal(t, 2, dls[0].Deliveries)
}
