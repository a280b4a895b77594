package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// workloadCode and workloadCause are what a dead letter of the workload's
// nack or reject records (see causeFor).
const (
	workloadCode  = 0x07630001
	workloadCause = "the workload said so"
)

// holdToLastDelivery journals a work message published at base,
// delivered once with intent first (its settle given by settle1), then
// delivered up to MaxDeliveries with intent hold, each after the previous
// lease lapsed. It returns the entries and the expiry of the last lease.
func holdToLastDelivery(id, ref string, base int64, first Intent, settle1 func(del1Exp int64) []Entry) ([]Entry, int64) {
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	entries := []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
	}
	at := base + int64(time.Millisecond)
	entries = append(entries, Entry{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 1, Exp: at + vt,
		Intent: first, T0: at, T1: at})
	entries = append(entries, settle1(at+vt)...)
	exp := at + vt
	for d := 2; d <= p.MaxDeliveries; d++ {
		at = exp + int64(10*time.Millisecond)
		exp = at + vt
		entries = append(entries, Entry{Op: OpDelivered, Who: "con1", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: d, Exp: exp,
			Intent: IntentHold, T0: at, T1: at})
	}
	return entries, exp
}

// TestALapseAfterAConfirmedNackMustNotSayLeaseExpired: a Nack of delivery
// 1 returned nil, deliveries 2 to MaxDeliveries were held and lapsed, and
// the dead letter says LEASE_EXPIRED. DeadLetterValue.Reason keeps that
// for a message nobody reported on in its life, so the nack's record was
// lost: the checker must say so.
func TestALapseAfterAConfirmedNackMustNotSayLeaseExpired(t *testing.T) {
	id := "00000000000000b1"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	entries, exp := holdToLastDelivery(id, ref, base, IntentNack, func(del1Exp int64) []Entry {
		t0 := del1Exp - int64(900*time.Millisecond)
		return []Entry{{Op: OpNacked, Who: "con0", Queue: QueueWork, ID: id, Del: 1, Exp: t0 + int64(retryDelay(QueueWork, 1)), T0: t0, T1: t0}}
	})
	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	require.NoError(t, c.Err(), "the journal up to the lapse is sound")
	read := exp + int64(time.Second)
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: "all"},
		{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 4, Reason: broker.ReasonLeaseExpired,
			Failed: exp, T0: read, T1: read},
	})
	require.Error(t, c.Err(),
		"a Nack of delivery 1 returned nil in the message's only life; its last lease lapsed, so its dead letter must carry %s, yet the checker accepted a %s dead letter",
		Reason(QueueWork, IntentNack), broker.ReasonLeaseExpired)
}

// TestALapseAfterANackInFlightMaySayLeaseExpired: a Nack of delivery 1
// was in flight at a kill, and the message lapsed on its last delivery
// later. The nack may not have happened, and then nobody reported on this
// life: LEASE_EXPIRED is sound.
func TestALapseAfterANackInFlightMaySayLeaseExpired(t *testing.T) {
	id := "00000000000000b6"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	entries, exp := holdToLastDelivery(id, ref, base, IntentNack, func(int64) []Entry { return nil })
	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	read := exp + int64(time.Second)
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: "all"},
		{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 4, Reason: broker.ReasonLeaseExpired,
			Failed: exp, T0: read, T1: read},
	})
	require.NoError(t, c.Err(), "a nack in flight may not have happened: LEASE_EXPIRED is sound")
}

// TestARefusedNackReportsNothing: the only Nack meant for the message's
// life was refused as LeaseExpired, which changes nothing (API.md §5), so
// when its last lease lapses the dead letter must say LEASE_EXPIRED; one
// with the nack's reason records a report nobody gave. So for a refused
// Reject: no dead letter with its reason may follow.
func TestARefusedNackReportsNothing(t *testing.T) {
	id := "00000000000000b2"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	entries, exp := holdToLastDelivery(id, ref, base, IntentNack, func(del1Exp int64) []Entry {
		t0 := del1Exp + int64(time.Millisecond) // the consumer was slow: the lease had lapsed
		return []Entry{{Op: OpSettleFailed, Who: "con0", Queue: QueueWork, ID: id, Del: 1, Exp: del1Exp, T0: t0, T1: t0,
			Err: "Nack: broker: lease expired", Expired: true}}
	})
	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	require.NoError(t, c.Err(), "the journal up to the lapse is sound")
	read := exp + int64(time.Second)
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: "all"},
		{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 4, Reason: Reason(QueueWork, IntentNack),
			Code: workloadCode, Cause: workloadCause,
			Failed: exp, T0: read, T1: read},
	})
	require.Error(t, c.Err(),
		"the only Nack of this life was refused (LeaseExpired: nothing recorded), so the lapse must record %s; the checker accepted a %s dead letter",
		broker.ReasonLeaseExpired, Reason(QueueWork, IntentNack))

	vt := int64(time.Second)
	d1 := base + int64(time.Millisecond)
	c = checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
		{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 1, Exp: d1 + vt, Intent: IntentReject, T0: d1, T1: d1},
		{Op: OpSettleFailed, Who: "con0", Queue: QueueWork, ID: id, Del: 1, Exp: d1 + vt, T0: d1 + vt, T1: d1 + vt,
			Err: "Reject: broker: lease expired", Expired: true},
		{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 1, Reason: Reason(QueueWork, IntentReject),
			Code: workloadCode, Cause: workloadCause,
			Failed: d1 + vt/2, T0: d1 + 2*vt, T1: d1 + 2*vt},
	})
	require.Error(t, c.Err(), "the only Reject was refused, yet the checker accepted a %s dead letter", Reason(QueueWork, IntentReject))
}

// TestADeadLetterMustCarryTheCodeAndPublicCauseOfItsFailure: the workload
// rejects with a cause of code 0x07630001 and public text "the workload
// said so"; the dead letter must record exactly those
// (DeadLetterValue.Code, .Cause), and never the private detail. A store
// whose dead letter carries another code and the private text as its
// Cause is reported, by a drain and from the janitor's journal.
func TestADeadLetterMustCarryTheCodeAndPublicCauseOfItsFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, q := openQueueOf(t, dir, QueueWork)
	// The store records another code, and the private detail as public.
	wrong := broker.DoNotRetry(broker.NewError(Reason(QueueWork, IntentReject), 0xdeadbeef, "private detail of work", "x"))
	m, entries := rejectJournaled(t, q, wrong)
	ref := entries[1].Refs[0]
	dls, err := q.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.NoError(t, s.Close())

	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	require.NoError(t, c.Err())
	require.Error(t, c.CheckDrain(dir),
		"the journal's Reject gave code 0x07630001 and public text %q; the store's dead letter has code %#x and Cause %q (the private detail), and the checker accepted it",
		"the workload said so", dls[0].Code, dls[0].Cause)

	// So for the dead letter as the janitor read it and journaled it.
	dl := dls[0]
	read := time.Now().UnixNano()
	c = checkerWithoutStores(t)
	c.AddCycle(1, append(entries, Entry{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: m.ID, Ref: ref, Enq: m.EnqueuedAt.UnixNano(),
		Del: dl.Deliveries, Reason: dl.Reason, Code: dl.Code, Cause: dl.Cause, Failed: dl.FailedAt.UnixNano(), T0: read, T1: read}))
	require.Error(t, c.Err(), "the janitor read a dead letter with code %#x and Cause %q, and the checker accepted it", dl.Code, dl.Cause)
}
