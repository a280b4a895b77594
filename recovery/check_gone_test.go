package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAnAckInFlightSeenDoneMustStayGone: the converse of
// TestAckInFlightSeenUndoneMustStay. A message whose ack was under way at
// a kill, and which the store opened after that kill no longer holds, was
// acked: its process is gone and nothing else removes a message from the
// work queue. A later store that shows it again has resurrected an acked
// message (a consumer would process it twice); the checker must see it.
func TestAnAckInFlightSeenDoneMustStayGone(t *testing.T) {
	ctx := context.Background()
	c, dir, m := storeOfOnePublish(t)

	// Cycle 2: a consumer receives the message, journals the delivery
	// with an ack intent, and acks it; the kill lands before the ack's
	// result is journaled.
	s, q := openQueueOf(t, dir, QueueWork)
	d, del := receiveTimed(t, q, IntentAck)
	// What a store that lost the ack would hold: the message, leased.
	resurrected := copyOfStore(t, dir)
	require.NoError(t, q.Ack(ctx, d.Lease.Receipt))
	require.NoError(t, s.Close())
	c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}, del})
	// The store after the kill of cycle 2 no longer holds the message:
	// the ack happened.
	require.NoError(t, c.CheckDrain(copyOfStore(t, dir)), "the ack in flight at the kill happened")

	// Cycle 3 does nothing, yet its store holds the message again.
	c.AddCycle(3, []Entry{{Op: OpStart, Cycle: 3, Sync: "all"}})
	err := c.CheckDrain(resurrected)
	if err == nil {
		t.Fatalf("message %s was absent from the store after the kill that left its ack in flight (the ack happened), "+
			"and a later store delivers it again: want a violation (an acked message resurrected), got none", m.ID)
	}
}

// TestAPublishInFlightAbsentAfterItsKillMustNotAppearLater: a
// publish in flight at the kill of cycle 1 that the store after that kill
// does not hold never happened (the next child opens that very store); a
// message of it shown by a later store came from nowhere.
func TestAPublishInFlightAbsentAfterItsKillMustNotAppearLater(t *testing.T) {
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}})
	require.NoError(t, c.CheckDrain(storeWithQueues(t, QueueWork)), "the publish in flight did not happen")
	c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}})
	require.NoError(t, c.CheckDrain(storeWithQueues(t, QueueWork)))
	c.AddCycle(3, []Entry{{Op: OpStart, Cycle: 3, Sync: "all"}})
	dir, ms := storeHolding(t, ref)
	if err := c.CheckDrain(dir); err == nil {
		t.Fatalf("message %s (%s), the publish cycle 1 had in flight, was in neither store checked after cycles 1 and 2, "+
			"and appears after cycle 3: want a violation (a message from nowhere), got none", ms[0].ID, ref)
	}
}

// TestARefusedSettleOfAnEarlierDeliveryKeepsTheLatestAckInFlight: con0's
// Ack of delivery 1 is refused as LeaseExpired after con1 received
// delivery 2 (intent ack). con1's Ack was in flight at the kill and
// happened: the store after the kill no longer holds the message, a legal
// history. The refusal of the stale delivery says nothing of it.
func TestARefusedSettleOfAnEarlierDeliveryKeepsTheLatestAckInFlight(t *testing.T) {
	id := "00000000000000b3"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	vt := int64(time.Second)
	ms := int64(time.Millisecond)
	d1 := base + ms
	d2 := d1 + vt + 100*ms
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
		{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 1, Exp: d1 + vt, Intent: IntentAck, T0: d1, T1: d1},
		{Op: OpDelivered, Who: "con1", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 2, Exp: d2 + vt, Intent: IntentAck, T0: d2, T1: d2},
		{Op: OpSettleFailed, Who: "con0", Queue: QueueWork, ID: id, Del: 1, Exp: d1 + vt, T0: d2 + 100*ms, T1: d2 + 100*ms,
			Err: "Ack: broker: lease expired", Expired: true},
	})
	require.NoError(t, c.Err(), "the journal is sound")
	require.NoError(t, c.CheckDrain(storeWithQueues(t, QueueNames...)),
		"con1's Ack of delivery 2 was in flight at the kill and may have happened; con0's refused Ack of the stale delivery 1 says nothing about it")
}
