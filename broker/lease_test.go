package broker_test

import (
	"encoding/base64"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

func TestReceiveDoesNotBlockOnEmptyQueue(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	ds, err := q.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Empty(t, ds)
}

func TestReceiveMaxMustBePositive(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	for _, max := range []int{0, -1} {
		ds, err := q.Receive(ctx(t), max)
		requireErrorIs(t, err, broker.InvalidBatchSize, "max")
		require.Empty(t, ds)
	}
	require.Equal(t, 1, q.Stats().Ready, "a refused Receive leases nothing")
}

func TestReceiveLeasesUpToMax(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for range 5 {
		mustPublish(t, q, "m")
	}
	require.Len(t, mustReceive(t, q, 3), 3)
	require.Len(t, mustReceive(t, q, 3), 2)
	require.Empty(t, mustReceive(t, q, 3))
}

// TestReceiveOfAnyMaxLeasesWhatThereIs: max bounds what Receive leases,
// not what it reserves: a caller's "everything" (math.MaxInt) leases the
// messages there are, and so does Consume with such a batch.
func TestReceiveOfAnyMaxLeasesWhatThereIs(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for range 3 {
		mustPublish(t, q, "m")
	}
	require.Len(t, mustReceive(t, q, math.MaxInt), 3)
	require.Empty(t, mustReceive(t, q, math.MaxInt))
	require.Equal(t, 3, q.Stats().Leased)
}

func TestReceiveOldestEnqueuedFirst(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 }))
	e.clock.Set(t0.Add(time.Hour))
	late := mustPublish(t, q, "late")
	e.clock.Set(t0) // the clock went back: EnqueuedAt, not arrival, orders delivery
	early := mustPublish(t, q, "early")
	same1 := mustPublish(t, q, "same1")
	same2 := mustPublish(t, q, "same2")
	e.clock.Set(t0.Add(2 * time.Hour))
	require.Equal(t, []string{early.ID, same1.ID, same2.ID, late.ID}, ids(mustReceive(t, q, 10)))
	e.clock.Advance(time.Minute) // every lease lapses

	// A redelivered message keeps its place: it is older than a new one.
	fresh := mustPublish(t, q, "fresh")
	require.Equal(t, []string{early.ID, same1.ID, same2.ID, late.ID, fresh.ID}, ids(mustReceive(t, q, 10)))
}

func TestDeliveriesCountsFromOne(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5; p.RetryDelay = 0 }))
	m := mustPublish(t, q, "a")
	for want := 1; want <= 3; want++ {
		d := mustReceiveOne(t, q)
		require.Equal(t, m.ID, d.Message.ID)
		require.Equal(t, want, d.Deliveries)
		requireSameInstant(t, m.EnqueuedAt, d.Message.EnqueuedAt)
		mustNack(t, q, d.Lease.Receipt, nil)
	}
}

func TestReceivedMessageInvisibleUntilLeaseExpires(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	requireSameInstant(t, t0.Add(30*time.Second), d.Lease.ExpiresAt, "ExpiresAt is now + VisibilityTimeout on the broker clock")
	e.clock.Advance(29 * time.Second)
	requireNoneReceivable(t, q)
}

func TestLeaseLapsesExactlyAtExpiresAt(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	mustPublish(t, q, "b")
	ds := mustReceive(t, q, 2)

	e.clock.Set(ds[0].Lease.ExpiresAt.Add(-time.Nanosecond))
	requireNoneReceivable(t, q, "one nanosecond before ExpiresAt the lease holds")
	require.NoError(t, q.Ack(ctx(t), ds[1].Lease.Receipt), "and its receipt still works")

	e.clock.Set(ds[0].Lease.ExpiresAt)
	requireErrorIs(t, q.Ack(ctx(t), ds[0].Lease.Receipt), broker.LeaseExpired)
	d := mustReceiveOne(t, q)
	require.Equal(t, ds[0].Message.ID, d.Message.ID, "at ExpiresAt the message is receivable again")
	require.Equal(t, 2, d.Deliveries)
}

func TestLapsedLeaseRedeliversWithoutRetryDelay(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Hour }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt)
	require.Equal(t, d.Message.ID, mustReceiveOne(t, q).Message.ID, "RetryDelay does not apply to a lapsed lease")
}

func TestAckRemovesMessage(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	e.clock.Advance(time.Hour)
	requireNoneReceivable(t, q)
	require.Empty(t, mustDeadLetters(t, q))
	requireErrorIs(t, q.Ack(ctx(t), d.Lease.Receipt), broker.LeaseExpired) // §5.7: no live lease
}

func TestAckOfLapsedLeaseRemovesNothing(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	first := mustReceiveOne(t, q)
	e.clock.Set(first.Lease.ExpiresAt)
	// Nobody has taken the message yet: the receipt is refused all the same.
	requireErrorIs(t, q.Ack(ctx(t), first.Lease.Receipt), broker.LeaseExpired, first.Message.ID)
	second := mustReceiveOne(t, q)
	require.Equal(t, first.Message.ID, second.Message.ID, "the refused Ack removed nothing")

	// Another consumer holds it now: the old receipt cannot end its turn.
	requireErrorIs(t, q.Ack(ctx(t), first.Lease.Receipt), broker.LeaseExpired)
	_, err := q.Nack(ctx(t), first.Lease.Receipt, nil)
	requireErrorIs(t, err, broker.LeaseExpired)
	requireErrorIs(t, q.Reject(ctx(t), first.Lease.Receipt, nil), broker.LeaseExpired)
	require.Equal(t, 1, q.Stats().Leased)
	require.NoError(t, q.Ack(ctx(t), second.Lease.Receipt))
}

func TestNackedMessageVisibleAtVisibleAt(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 5 * time.Second }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Advance(2 * time.Second)
	nv := mustNack(t, q, d.Lease.Receipt, nil)
	require.False(t, nv.DeadLettered)
	require.Equal(t, 1, nv.Deliveries)
	requireSameInstant(t, t0.Add(7*time.Second), nv.VisibleAt, "RetryDelay is measured from the nack")

	e.clock.Set(nv.VisibleAt.Add(-time.Nanosecond))
	requireNoneReceivable(t, q)
	require.Equal(t, 1, q.Stats().Delayed)
	e.clock.Set(nv.VisibleAt)
	d2 := mustReceiveOne(t, q)
	require.Equal(t, d.Message.ID, d2.Message.ID)
	require.Equal(t, 2, d2.Deliveries)
}

// A nacked message is visible AT its VisibleAt (API.md §5.8), not before,
// whatever instant that is: the Unix epoch (a nack at 1969-12-31T23:59:59Z
// with a RetryDelay of 1 s) is one like any other. The store's index took
// the instant 0 for "receivable at once", and delivered the message a
// second early. The store keeps it delayed across a clean reopen (from its
// checkpoint) and a rebuild from its log alone.
func TestANackVisibleAtTheUnixEpochIsNotVisibleBefore(t *testing.T) {
	e := newEnv(t)
	e.clock.Set(time.Unix(-1, 0))
	for name, b := range e.storeAndMemory(policy()) { // RetryDelay 1 s
		t.Run(name, func(t *testing.T) {
			m, err := b.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
			ds, err := b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			nv, err := b.Nack(ctx(t), ds[0].Lease.Receipt, nil)
			require.NoError(t, err)
			require.Zero(t, nv.VisibleAt.UnixNano())
			delayed := func(b fullBroker, when string) {
				t.Helper()
				again, err := b.Receive(ctx(t), 1)
				require.NoError(t, err)
				require.Empty(t, again, "%s: received at %v, before its VisibleAt %v", when, e.clock.Now().UTC(), nv.VisibleAt.UTC())
				require.Equal(t, 1, b.Stats().Delayed, when)
			}
			delayed(b, "nacked")
			if name == "store" {
				e.reopen()
				b = e.queue("jobs", policy())
				delayed(b, "after a reopen")
				e.s = rebuildFromLog(t, e.s, e.dir, e.opts)
				b = e.queue("jobs", policy())
				delayed(b, "after a rebuild from the log")
			}
			e.clock.Set(nv.VisibleAt)
			again, err := b.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, again, 1, "at its VisibleAt")
			require.Equal(t, m.ID, again[0].Message.ID)
			e.clock.Set(time.Unix(-1, 0))
		})
	}
}

func TestNackWithZeroRetryDelayIsVisibleAtOnce(t *testing.T) {
	for name, delay := range map[string]time.Duration{"zero": 0, "negative read as zero": -time.Hour} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
			mustPublish(t, q, "a")
			nv := mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
			requireSameInstant(t, t0, nv.VisibleAt)
			require.Equal(t, 2, mustReceiveOne(t, q).Deliveries)
		})
	}
}

func TestRetryDelayConstantWithoutMax(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5; p.RetryDelay = 3 * time.Second }))
	mustPublish(t, q, "a")
	for range 4 {
		d := mustReceiveOne(t, q)
		now := e.clock.Now()
		nv := mustNack(t, q, d.Lease.Receipt, nil)
		requireSameInstant(t, now.Add(3*time.Second), nv.VisibleAt)
		e.clock.Set(nv.VisibleAt)
	}
}

func TestRetryDelayGrowsAndHoldsAtMax(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 7
		p.RetryDelay = time.Second
		p.MaxRetryDelay = 10 * time.Second
	}))
	mustPublish(t, q, "a")
	// Nacked on delivery n: RetryDelay × 2^(n−1), held at MaxRetryDelay.
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for n, w := range want {
		d := mustReceiveOne(t, q)
		require.Equal(t, n+1, d.Deliveries)
		now := e.clock.Now()
		nv := mustNack(t, q, d.Lease.Receipt, nil)
		requireSameInstant(t, now.Add(w*time.Second), nv.VisibleAt, "delivery %d", n+1)
		e.clock.Set(nv.VisibleAt)
	}
}

func TestMaxDeliveriesOneMeansOneAttempt(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	nacked := mustPublish(t, q, "nacked")
	lapsed := mustPublish(t, q, "lapsed")
	ds := mustReceive(t, q, 2)
	require.Equal(t, []int{1, 1}, []int{ds[0].Deliveries, ds[1].Deliveries})

	nv := mustNack(t, q, ds[0].Lease.Receipt, nil)
	require.True(t, nv.DeadLettered, "one attempt, then the dead-letter store")
	require.True(t, nv.VisibleAt.IsZero(), "VisibleAt is zero when DeadLettered")
	require.Equal(t, 1, nv.Deliveries)

	e.clock.Set(ds[1].Lease.ExpiresAt)
	requireNoneReceivable(t, q, "a lapsed last lease is not redelivered")
	dls := mustDeadLetters(t, q)
	require.Equal(t, []string{nacked.ID, lapsed.ID}, deadIDs(dls))
	require.Equal(t, broker.ReasonLeaseExpired, dls[1].Reason)
	require.Equal(t, 1, dls[1].Deliveries)
}

func TestNackOnLastDeliveryDeadLetters(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = 0 }))
	mustPublish(t, q, "a")
	nv := mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	require.False(t, nv.DeadLettered)
	d := mustReceiveOne(t, q)
	require.Equal(t, 2, d.Deliveries, "a delivery whose count equals the maximum is the last one")
	nv = mustNack(t, q, d.Lease.Receipt, nil)
	require.Equal(t, broker.NackValue{Deliveries: 2, DeadLettered: true}, nv)
	requireNoneReceivable(t, q)
	require.Len(t, mustDeadLetters(t, q), 1)
}

func TestReceiptAfterNackIsRefused(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	mustNack(t, q, d.Lease.Receipt, nil)
	requireErrorIs(t, q.Ack(ctx(t), d.Lease.Receipt), broker.LeaseExpired)
	_, err := q.Nack(ctx(t), d.Lease.Receipt, nil)
	requireErrorIs(t, err, broker.LeaseExpired)
	require.Equal(t, 2, mustReceiveOne(t, q).Deliveries, "the refused calls moved nothing")
}

func TestExtendReturnsNewReceiptAndVoidsOld(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Advance(10 * time.Second)
	l, err := q.Extend(ctx(t), d.Lease.Receipt, time.Minute)
	require.NoError(t, err)
	require.NotEqual(t, d.Lease.Receipt, l.Receipt)
	requireSameInstant(t, t0.Add(70*time.Second), l.ExpiresAt, "by is measured from now")

	requireErrorIs(t, q.Ack(ctx(t), d.Lease.Receipt), broker.LeaseExpired)
	_, err = q.Extend(ctx(t), d.Lease.Receipt, time.Minute)
	requireErrorIs(t, err, broker.LeaseExpired)

	e.clock.Set(d.Lease.ExpiresAt) // the old deadline is gone
	requireNoneReceivable(t, q)
	e.clock.Set(l.ExpiresAt.Add(-time.Nanosecond))
	require.NoError(t, q.Ack(ctx(t), l.Receipt))
}

func TestExtendKeepsDeliveries(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 }))
	mustPublish(t, q, "a")
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	d := mustReceiveOne(t, q)
	l, err := q.Extend(ctx(t), d.Lease.Receipt, time.Minute)
	require.NoError(t, err)
	nv := mustNack(t, q, l.Receipt, nil)
	require.Equal(t, 2, nv.Deliveries, "an extension is not a delivery")
}

func TestExtendOfLapsedLeaseRefused(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt)
	_, err := q.Extend(ctx(t), d.Lease.Receipt, time.Hour)
	requireErrorIs(t, err, broker.LeaseExpired)
	require.Equal(t, 2, mustReceiveOne(t, q).Deliveries, "the lapsed lease was not renewed")
}

func TestExtendNonPositiveByIsMisconfigured(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	for _, by := range []time.Duration{0, -time.Second} {
		_, err := q.Extend(ctx(t), d.Lease.Receipt, by)
		requireErrorIs(t, err, broker.QueueMisconfigured, by.String())
	}
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt), "the lease held is still valid")
}

func TestExtendPast2262RefusedAndLeaseKept(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	for _, by := range []time.Duration{math.MaxInt64, 2*broker.MaxDeadlineOffset + broker.MaxDeadlineOffset/2} {
		_, err := q.Extend(ctx(t), d.Lease.Receipt, by)
		requireErrorIs(t, err, broker.QueueMisconfigured, "2262")
	}
	l, err := q.Extend(ctx(t), d.Lease.Receipt, broker.MaxDeadlineOffset)
	require.NoError(t, err, "the old receipt still names the lease, and 100 years fit")
	requireSameInstant(t, t0.Add(broker.MaxDeadlineOffset), l.ExpiresAt)
	require.NoError(t, q.Ack(ctx(t), l.Receipt))
}

// The last instant Unix nanoseconds can record is a deadline Extend grants;
// one nanosecond more is refused before anything moves.
func TestExtendToTheLastRecordableInstantAndNotOneNanosecondMore(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	last := time.Duration(math.MaxInt64 - t0.UnixNano()) // now + last is the largest instant recordable
	_, err := q.Extend(ctx(t), d.Lease.Receipt, last+1)
	requireErrorIs(t, err, broker.QueueMisconfigured, "2262")
	l, err := q.Extend(ctx(t), d.Lease.Receipt, last)
	require.NoError(t, err, "the refused Extend left the lease held; the deadline at the very end fits")
	require.Equal(t, int64(math.MaxInt64), l.ExpiresAt.UnixNano())
	e.clock.Advance(time.Hour)
	require.NoError(t, q.Ack(ctx(t), l.Receipt), "the lease reaches to the end of time")
}

func TestReceiptOfAnotherQueueIsUnknown(t *testing.T) {
	e := newEnv(t)
	a := e.queue("a", policy())
	b := e.queue("b", policy())
	mustPublish(t, a, "x")
	mustPublish(t, b, "y")
	da := mustReceiveOne(t, a)
	requireErrorIs(t, b.Ack(ctx(t), da.Lease.Receipt), broker.UnknownReceipt)
	_, err := b.Nack(ctx(t), da.Lease.Receipt, nil)
	requireErrorIs(t, err, broker.UnknownReceipt)
	requireErrorIs(t, b.Reject(ctx(t), da.Lease.Receipt, nil), broker.UnknownReceipt)
	_, err = b.Extend(ctx(t), da.Lease.Receipt, time.Second)
	requireErrorIs(t, err, broker.UnknownReceipt)
	require.Equal(t, 1, b.Stats().Ready)
	require.NoError(t, a.Ack(ctx(t), da.Lease.Receipt))
}

func TestReceiptOfAnotherStoreIsUnknown(t *testing.T) {
	e1, e2 := newEnv(t), newEnv(t)
	q1, q2 := e1.queue("jobs", policy()), e2.queue("jobs", policy())
	mustPublish(t, q1, "a")
	mustPublish(t, q2, "a")
	d1 := mustReceiveOne(t, q1)
	mustReceiveOne(t, q2)
	requireErrorIs(t, q2.Ack(ctx(t), d1.Lease.Receipt), broker.UnknownReceipt)
}

func TestGarbledReceiptIsUnknown(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	r := string(d.Lease.Receipt)
	raw, err := base64.RawURLEncoding.DecodeString(r)
	require.NoError(t, err, "this store's receipts happen to be base64url; the test uses that only to forge")
	flipped := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(b)
	}
	garbled := map[string]string{
		"empty":         "",
		"garbage":       "not a receipt",
		"truncated":     r[:len(r)-2],
		"extended":      r + "AA",
		"padded":        r + "=",
		"case-flipped":  strings.ToUpper(r[:4]) + strings.ToLower(r[4:]),
		"forged seq":    flipped(6),
		"forged nonce":  flipped(14),
		"forged mac":    flipped(len(raw) - 1),
		"forged header": flipped(0),
	}
	for name, g := range garbled {
		if g == r {
			continue
		}
		rv := broker.ReceiptValue(g)
		requireErrorIs(t, q.Ack(ctx(t), rv), broker.UnknownReceipt)
		_, err := q.Nack(ctx(t), rv, nil)
		requireErrorIs(t, err, broker.UnknownReceipt)
		requireErrorIs(t, q.Reject(ctx(t), rv, nil), broker.UnknownReceipt)
		_, err = q.Extend(ctx(t), rv, time.Second)
		require.ErrorIs(t, err, broker.UnknownReceipt, name)
	}
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt), "nothing moved")
}

func TestPayloadBelongsToReceiver(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 }))
	m := mustPublish(t, q, "payload")
	m.Payload[0] = 'X' // the publisher's copy
	d := mustReceiveOne(t, q)
	require.Equal(t, "payload", string(d.Message.Payload))
	copy(d.Message.Payload, "MUTATED")
	d.Message.Payload = append(d.Message.Payload, "grown"...)
	mustNack(t, q, d.Lease.Receipt, nil)
	d2 := mustReceiveOne(t, q)
	require.Equal(t, "payload", string(d2.Message.Payload), "mutating a delivery does not corrupt a redelivery")
	copy(d2.Message.Payload, "ZZZZZZZ")
	require.NoError(t, q.Reject(ctx(t), d2.Lease.Receipt, nil))
	dl := mustDeadLetters(t, q)[0]
	require.Equal(t, "payload", string(dl.Message.Payload))
	copy(dl.Message.Payload, "YYYYYYY")
	require.Equal(t, "payload", string(mustDeadLetters(t, q)[0].Message.Payload))
}

// Once the broker has handed a lapsed lease's message back to the queue
// (Stats counts it Ready, Receive would deliver it), the old receipt must
// stay refused even if the clock then steps back before ExpiresAt: "the
// message is back in the queue, ... and removes NOTHING".
func TestLapsedLeaseStaysLapsedWhenClockGoesBack(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt.Add(time.Second))
	require.Equal(t, 1, q.Stats().Ready, "the lease lapsed and the message is back in the queue")
	e.clock.Set(d.Lease.ExpiresAt.Add(-time.Second))
	requireErrorIs(t, q.Ack(ctx(t), d.Lease.Receipt), broker.LeaseExpired)
	st := q.Stats()
	require.Equal(t, 1, st.Ready+st.Leased, "the refused Ack removed nothing")
}

// Wake observes a lapse as Stats does: once it has told a consumer that
// the lapsed lease's message is receivable now, the old receipt stays
// refused even if the clock then steps back before ExpiresAt. File-backed
// and in memory alike.
func TestALapseWakeReportedStaysWhenTheClockGoesBack(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	m := newMemory(t, e.clock)
	for _, b := range []interface {
		broker.Broker
		broker.Waker
	}{q, m} {
		e.clock.Set(t0)
		_, err := b.Publish(ctx(t), []byte("a"))
		require.NoError(t, err)
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		e.clock.Set(ds[0].Lease.ExpiresAt.Add(time.Second))
		w := b.Wake()
		require.True(t, w.Scheduled, "%T", b)
		require.LessOrEqual(t, w.In, time.Duration(0), "%T: the lapsed lease's message is receivable now", b)
		e.clock.Set(ds[0].Lease.ExpiresAt.Add(-time.Second))
		requireErrorIs(t, b.Ack(ctx(t), ds[0].Lease.Receipt), broker.LeaseExpired)
	}
}
