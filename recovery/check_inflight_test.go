package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// rejectedStores publishes one work message, receives it and rejects it,
// then replays the dead letter. It returns copies of the store with the
// message leased (before the reject), dead (after it) and replayed (back
// in the queue), and the journal entries of the publish and of the
// delivery (with a reject intent), and the dead letter as the janitor
// read it.
func rejectedStores(t *testing.T) (leased, dead, replayed string, pub, del Entry, dl broker.DeadLetterValue) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	s, q := openQueueOf(t, dir, QueueWork)
	m, pub := publishTimed(t, q)
	d, del := receiveTimed(t, q, IntentReject)
	leased = copyOfStore(t, dir)
	require.NoError(t, q.Reject(ctx, d.Lease.Receipt, causeFor(QueueWork, IntentReject)))
	dead = copyOfStore(t, dir)
	dls, err := q.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	dl = dls[0]
	require.NoError(t, q.ReplayDeadLetter(ctx, m.ID))
	replayed = copyOfStore(t, dir)
	require.NoError(t, s.Close())
	return leased, dead, replayed, pub, del, dl
}

// publishJournaled publishes one work message on q, a SyncAll store, and
// returns it with the journal of cycle 1 so far: its start and the
// publish, journaled at the message's EnqueuedAt.
func publishJournaled(t *testing.T, q *broker.Queue) (broker.MessageValue, []Entry) {
	t.Helper()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	m, err := q.Publish(context.Background(), Payload(ref))
	require.NoError(t, err)
	enq := m.EnqueuedAt.UnixNano()
	return m, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{m.ID}, Refs: []string{ref}, Enq: enq, T0: enq, T1: enq},
	}
}

// replayingEntry is the janitor's entry before it replays dead letter dl
// of the message pub published, read at the instant at.
func replayingEntry(pub Entry, dl broker.DeadLetterValue, at int64) Entry {
	return Entry{Op: OpReplaying, Who: "janitor", Queue: QueueWork, ID: pub.IDs[0], Ref: pub.Refs[0], Enq: pub.Enq, Del: dl.Deliveries,
		Reason: dl.Reason, Code: dl.Code, Cause: dl.Cause, Failed: dl.FailedAt.UnixNano(), T0: at, T1: at}
}

// replayInFlight is the journal of cycle 1 of rejectedStores's message,
// given its publish pub, delivery del and dead letter dl: published,
// delivered, rejected, and the janitor's replay of the dead letter in
// flight at the kill (OpReplaying, no OpReplayed), both journaled now.
func replayInFlight(pub, del Entry, dl broker.DeadLetterValue) []Entry {
	now := time.Now().UnixNano()
	return []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		pub, del,
		{Op: OpRejected, Who: "con0", Queue: QueueWork, ID: pub.IDs[0], Del: 1, T0: del.T1, T1: now},
		replayingEntry(pub, dl, now),
	}
}

// TestAReplayInFlightSeenUndoneMustStayDead: a replay in flight at a kill
// (OpReplaying, no OpReplayed) may or may not have happened; once the
// store after that kill shows the dead letter as it was, it did not, and
// its process is gone. A dead letter leaves the dead-letter store only by
// a replay or a delete, so a later store that has the message back in the
// queue, with no replay journaled since, broke that.
func TestAReplayInFlightSeenUndoneMustStayDead(t *testing.T) {
	_, dead, replayed, pub, del, dl := rejectedStores(t)
	id := pub.IDs[0]
	requireSettledByFirstLook(t, replayInFlight(pub, del, dl), dead, "a replay in flight at the kill may not have happened", replayed, "after it was dead-lettered",
		"dead letter %s was still there after the kill that left its replay in flight, and a later store, with no replay journaled, delivers it", id)
}

// TestAReplayInFlightSeenDoneMustNotBringTheDeadLetterBack: the converse.
// A replay in flight at a kill whose dead letter the store after the kill
// no longer shows happened; a later store that shows that dead letter
// again brought back what the replay took out.
func TestAReplayInFlightSeenDoneMustNotBringTheDeadLetterBack(t *testing.T) {
	_, dead, replayed, pub, del, dl := rejectedStores(t)
	id := pub.IDs[0]
	requireSettledByFirstLook(t, replayInFlight(pub, del, dl), replayed, "a replay in flight at the kill may have happened", dead, "the replay was lost",
		"dead letter %s was gone after the kill that left its replay in flight, and a later store shows it again", id)
}

// TestARejectInFlightSeenUndoneMustNotDeadLetterLater: a reject in flight
// at a kill (a delivery journaled with the reject intent, no result) that
// the store after the kill shows undone (the message in the queue) never
// happens; a later store that holds the message as a rejected dead letter
// of that delivery, with nothing journaled since, has a dead letter the
// journal does not explain.
func TestARejectInFlightSeenUndoneMustNotDeadLetterLater(t *testing.T) {
	leased, dead, _, pub, del, _ := rejectedStores(t)
	id := pub.IDs[0]
	requireSettledByFirstLook(t, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}, pub, del},
		leased, "the reject in flight at the kill may not have happened", dead, "the journal has a reject meant for delivery 0",
		"message %s was in the queue after the kill that left its reject in flight, and a later store, with nothing journaled, holds it as a rejected dead letter", id)
}

// TestARejectInFlightSeenDoneMustStayDead: the converse. A reject in
// flight at a kill whose dead letter the store after the kill shows
// happened, as if it had returned nil: a later store that has the message
// back in the queue, with no replay journaled, broke the dead letter.
func TestARejectInFlightSeenDoneMustStayDead(t *testing.T) {
	leased, dead, _, pub, del, _ := rejectedStores(t)
	id := pub.IDs[0]
	requireSettledByFirstLook(t, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}, pub, del},
		dead, "the reject in flight at the kill may have happened", leased, "after it was dead-lettered",
		"message %s was a rejected dead letter after the kill that left its reject in flight, and a later store delivers it", id)
}

// TestANackInFlightSeenUndoneMustNotDeadLetterLater: as for a reject, a
// nack of the last delivery allowed, in flight at a kill, that the store
// after the kill shows undone (not a dead letter of the nack) never
// happens; a later store that holds the message as the nack's dead letter
// of that delivery, with nothing journaled since, has a dead letter the
// journal does not explain. (The drain of the first store, an hour ahead,
// finds the last lease lapsed: a LEASE_EXPIRED dead letter, which the
// next child would make too.)
func TestANackInFlightSeenUndoneMustNotDeadLetterLater(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := &stepClock{now: time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueWork, clk.Now)
	m, entries := publishJournaled(t, q)
	max := maxDeliveries(QueueWork)
	var last broker.DeliveryValue
	for i := 1; i <= max; i++ {
		clk.Set(clk.Now().Add(time.Second))
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, i, ds[0].Deliveries)
		at := clk.Now().UnixNano()
		entries = append(entries, deliveredEntry("con0", QueueWork, ds[0], IntentNack, at, at))
		last = ds[0]
		if i == max {
			break
		}
		nv, err := q.Nack(ctx, ds[0].Lease.Receipt, causeFor(QueueWork, IntentNack))
		require.NoError(t, err)
		entries = append(entries, Entry{Op: OpNacked, Who: "con0", Queue: QueueWork, ID: m.ID, Del: nv.Deliveries,
			Exp: nv.VisibleAt.UnixNano(), Dead: nv.DeadLettered, T0: at, T1: at})
	}
	leased := copyOfStore(t, dir)
	nv, err := q.Nack(ctx, last.Lease.Receipt, causeFor(QueueWork, IntentNack))
	require.NoError(t, err)
	require.True(t, nv.DeadLettered)
	require.NoError(t, s.Close())

	requireSettledByFirstLook(t, entries,
		leased, "the nack in flight at the kill may not have happened", dir, "the journal has a nack meant for delivery 0",
		"message %s was not the nack's dead letter after the kill that left the nack of delivery %d in flight, and a later store, with nothing journaled, holds it as one", m.ID, max)
}

// TestARedeliveryMustNotComeBeforeASettleInFlightCouldEndTheLease:
// delivery 1 was journaled with intent nack (or reject), and its call had
// not returned at the kill. Whether or not it happened, the message may
// not be handed out again before min(its lease's expiry, the earliest
// VisibleAt a Nack could give: the lease's start plus the retry delay);
// after a Reject, never, or (if the Reject did not happen) only after its
// lease expired. A redelivery once the nack's retry delay could have
// ended is sound.
func TestARedeliveryMustNotComeBeforeASettleInFlightCouldEndTheLease(t *testing.T) {
	for _, tc := range []struct {
		intent Intent
		after  time.Duration
		sound  bool
	}{
		{IntentNack, time.Millisecond, false},
		{IntentReject, 500 * time.Millisecond, false},
		{IntentNack, retryDelay(QueueWork, 1), true},
	} {
		id := "00000000000000b5"
		ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
		base := time.Now().Add(-time.Minute).UnixNano()
		vt := int64(time.Second)
		d1 := base + int64(time.Millisecond)
		d2 := d1 + int64(tc.after)
		c := checkerWithoutStores(t)
		c.AddCycle(1, []Entry{
			{Op: OpStart, Cycle: 1, Sync: "all"},
			{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
			{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 1, Exp: d1 + vt, Intent: tc.intent, T0: d1, T1: d1},
			{Op: OpDelivered, Who: "con1", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 2, Exp: d2 + vt, Intent: IntentAck, T0: d2, T1: d2},
		})
		if tc.sound {
			assert.NoError(t, c.Err(), "intent %s in flight: delivery 2 came %v after delivery 1, once a nack could have made it visible", tc.intent, tc.after)
			continue
		}
		assert.Error(t, c.Err(),
			"intent %s in flight: delivery 2 came %v after delivery 1, before its lease (%v) expired (and before any retry delay a Nack could set, %v, for a nack); the checker accepted it",
			tc.intent, tc.after, time.Duration(vt), retryDelay(QueueWork, 1))
	}
}

// TestARejectOfAMaybeDeliveryAfterTheLastCertainLeaseLapsed: under
// SyncPublish a delivery the power may take is journaled as a maybe, with
// its own lease; the last certain lease (delivery 1, held until it
// lapsed) ended before it. A reject meant for the maybe delivery fails
// within the maybe's lease, after delivery 1's lapsed: the store after
// the kill that shows that dead letter shows the reject done, and so does
// every later look at the same store. Settled by the first store's drain,
// the reject was once taken for a lapse (it failed after the last certain
// lease) and dropped, and the next look reported the dead letter as
// unexplained.
func TestARejectOfAMaybeDeliveryAfterTheLastCertainLeaseLapsed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// Behind the real clock, which the checks' stores read: everything
	// here happened before they look. The journal is timed on it too.
	clk := &stepClock{now: time.Now().Add(-time.Minute).Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueWork, clk.Now)
	_, pub := publishTimed(t, q)
	pub.T0, pub.T1 = clk.Now().UnixNano(), clk.Now().UnixNano()
	d1, first := receiveTimed(t, q, IntentHold)
	first.T0, first.T1 = clk.Now().UnixNano(), clk.Now().UnixNano()
	clk.Set(d1.Lease.ExpiresAt.Add(20 * time.Millisecond)) // held until it lapsed
	d2, maybe := receiveTimed(t, q, IntentReject)
	maybe.T0, maybe.T1 = clk.Now().UnixNano(), clk.Now().UnixNano()
	require.Equal(t, 2, d2.Deliveries)
	require.NoError(t, q.Reject(ctx, d2.Lease.Receipt, causeFor(QueueWork, IntentReject)))
	require.NoError(t, s.Close())

	c := checkerWithoutStores(t)
	maybe.Op = OpMaybe
	c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: "publish"}, pub, first, maybe})
	require.NoError(t, c.Err())
	require.NoError(t, c.CheckDrain(copyOfStore(t, dir)), "the reject of the maybe delivery happened")
	require.NoError(t, c.CheckInPlace(copyOfStore(t, dir)), "and the same store, looked at again, shows it still")
}

// TestANackInFlightAfterAnExtendThatShortenedTheLastLease: the last
// delivery's consumer extended its lease by less than was left (Extend
// measures from the call, so it may shorten a lease) and was killed with
// its nack in flight. The drain, an hour ahead, finds the last lease
// lapsed at the extended expiry: a dead letter with the reason of the
// last nack that returned (DeadLetterValue.Reason), failed at that
// expiry. Its FailedAt before the lease's expiry as Receive gave it does
// not make it the nack's: the extended expiry is the lease's. Taken for
// the nack's once, the message was dead for the checker, and the next
// look at the store, on a clock before that lapse, reported it as a dead
// letter the store did not hold.
func TestANackInFlightAfterAnExtendThatShortenedTheLastLease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// Ahead of the real clock, which the look in place reads: the
	// extended lease still holds there.
	clk := &stepClock{now: time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueWork, clk.Now)
	m, entries := publishJournaled(t, q)
	max := maxDeliveries(QueueWork)
	for i := 1; ; i++ {
		clk.Set(clk.Now().Add(time.Second))
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, i, ds[0].Deliveries)
		at := clk.Now().UnixNano()
		if i == max {
			const by = 300 * time.Millisecond // of the second left
			e := deliveredEntry("con0", QueueWork, ds[0], IntentExtendNack, at, at)
			e.By = int64(by)
			lv, err := q.Extend(ctx, ds[0].Lease.Receipt, by)
			require.NoError(t, err)
			require.True(t, lv.ExpiresAt.Before(ds[0].Lease.ExpiresAt), "the Extend shortened the lease")
			entries = append(entries, e, Entry{Op: OpExtended, Who: "con0", Queue: QueueWork, ID: m.ID, Del: i,
				Exp: lv.ExpiresAt.UnixNano(), By: int64(by), T0: at, T1: at})
			break // killed with the nack in flight
		}
		entries = append(entries, deliveredEntry("con0", QueueWork, ds[0], IntentNack, at, at))
		nv, err := q.Nack(ctx, ds[0].Lease.Receipt, causeFor(QueueWork, IntentNack))
		require.NoError(t, err)
		entries = append(entries, Entry{Op: OpNacked, Who: "con0", Queue: QueueWork, ID: m.ID, Del: nv.Deliveries,
			Exp: nv.VisibleAt.UnixNano(), Dead: nv.DeadLettered, T0: at, T1: at})
	}
	require.NoError(t, s.Close())

	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	require.NoError(t, c.Err())
	require.NoError(t, c.CheckDrain(copyOfStore(t, dir)), "the drain finds the shortened last lease lapsed")
	require.NoError(t, c.CheckInPlace(copyOfStore(t, dir)), "the nack in flight did not happen: the message is leased, not a dead letter")
}
