package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// workDelivery is what a Receive on the work queue that ran from t0 to t1
// returned: message id (reference ref, enqueued at enq) on its del-th
// delivery, leased for the visibility timeout from t1, with payload (the
// one ref makes if nil).
func workDelivery(id, ref string, enq int64, del int, t0, t1 int64, payload []byte) broker.DeliveryValue {
	p, _ := Policy(QueueWork)
	if payload == nil {
		payload = Payload(ref)
	}
	return broker.DeliveryValue{
		Lease:      broker.LeaseValue{ExpiresAt: time.Unix(0, t1+int64(p.VisibilityTimeout)), Receipt: "r"},
		Message:    broker.MessageValue{ID: id, EnqueuedAt: time.Unix(0, enq), Payload: payload},
		Deliveries: del,
	}
}

// maybeEntry is the entry a child whose results a power loss may take
// journals at once for a delivery (OpMaybe), before a publish's
// fdatasync makes it certain.
func maybeEntry(d broker.DeliveryValue, intent Intent, t0, t1 int64) Entry {
	e := deliveredEntry("con0", QueueWork, d, intent, t0, t1)
	e.Op = OpMaybe
	return e
}

// TestAMaybeDeliveryKeepsTheDeliveryPromises: under SyncPublish with a
// power loss, a child journals each delivery at once as OpMaybe and as
// OpDelivered only once a later publish's fdatasync made it certain; when
// the power fails first, only the OpMaybe is in the journal. Its lease may
// be lost, but Receive did return it in a live process, so it keeps the
// promises about what is handed out: its payload is the one published, a
// message whose Ack returned nil is not handed out again, and its count is
// above every earlier certain delivery's.
func TestAMaybeDeliveryKeepsTheDeliveryPromises(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	id := "00000000000000aa"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	published := Entry{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref},
		Enq: base, T0: base, T1: base}
	start := Entry{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()}
	check := func(t *testing.T, entries ...Entry) error {
		t.Helper()
		c := checkerWithoutStores(t)
		c.AddCycle(1, append([]Entry{start, published}, entries...))
		return c.Err()
	}

	t.Run("its payload is the one published", func(t *testing.T) {
		bad := Payload(ref)
		bad[len(bad)-1] ^= 0x40 // one filler byte flipped; the reference still parses
		maybe := maybeEntry(workDelivery(id, ref, base, 1, base+ms, base+2*ms, bad), IntentHold, base+ms, base+2*ms)
		require.NotEmpty(t, maybe.Err, "the child notes the bad payload in the entry")
		require.ErrorContains(t, check(t, maybe), "payload that is not what was published",
			"Receive returned message %s with a payload that is not the one published (%s)", id, maybe.Err)
	})

	t.Run("an acked message is not handed out again", func(t *testing.T) {
		d1 := workDelivery(id, ref, base, 1, base+ms, base+2*ms, nil)
		d2 := workDelivery(id, ref, base, 2, base+5*ms, base+6*ms, nil)
		err := check(t,
			deliveredEntry("con0", QueueWork, d1, IntentAck, base+ms, base+2*ms),
			Entry{Op: OpAcked, Who: "con0", Queue: QueueWork, ID: id, Del: 1, T0: base + 3*ms, T1: base + 4*ms},
			maybeEntry(d2, IntentHold, base+5*ms, base+6*ms))
		require.ErrorContains(t, err, "after it was acked",
			"message %s: the Ack of delivery 1 returned nil, then a Receive that started after it handed the message out again", id)
	})

	t.Run("its count is above every earlier certain one", func(t *testing.T) {
		t2 := base + 2*ms + vt + 10*ms // after the first lease lapsed
		t3 := t2 + ms + vt + 10*ms     // after the second lease lapsed
		err := check(t,
			deliveredEntry("con0", QueueWork, workDelivery(id, ref, base, 1, base+ms, base+2*ms, nil), IntentHold, base+ms, base+2*ms),
			deliveredEntry("con0", QueueWork, workDelivery(id, ref, base, 2, t2, t2+ms, nil), IntentHold, t2, t2+ms),
			maybeEntry(workDelivery(id, ref, base, 1, t3, t3+ms, nil), IntentHold, t3, t3+ms))
		require.ErrorContains(t, err, "an earlier delivery already counted 2",
			"message %s: certain deliveries 1 and 2, then Receive handed it out counting 1", id)
	})
}

// TestAMaybeDeliveryLostWithThePowerMayCountAgain: a maybe delivery raises
// no count for the deliveries after it. Its lease record may be lost with
// the power, and the store after the power loss then holds the message as
// the last certain delivery left it: the next child hands it out again
// with the same count. A maybe confirmed by its OpDelivered is checked
// once more, with the same count, and holds from then on.
func TestAMaybeDeliveryLostWithThePowerMayCountAgain(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	id := "00000000000000aa"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	d1 := workDelivery(id, ref, base, 1, base+ms, base+2*ms, nil)
	t2 := base + 2*ms + vt + 10*ms // after the first lease lapsed
	d2 := workDelivery(id, ref, base, 2, t2, t2+ms, nil)
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
		maybeEntry(d1, IntentHold, base+ms, base+2*ms),
		deliveredEntry("con0", QueueWork, d1, IntentHold, base+ms, base+2*ms),
		maybeEntry(d2, IntentHold, t2, t2+ms), // the power failed before it was certain
	})
	require.NoError(t, c.Err(), "a maybe delivery followed by its certain one, then one the power loss took")

	t3 := t2 + ms + vt + 10*ms
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: broker.SyncPublish.String()},
		deliveredEntry("con0", QueueWork, workDelivery(id, ref, base, 2, t3, t3+ms, nil), IntentHold, t3, t3+ms),
	})
	require.NoError(t, c.Err(), "the power loss took delivery 2's lease record: the next child hands it out as delivery 2 again")

	t4 := t3 + ms + vt + 10*ms
	c.AddCycle(3, []Entry{
		{Op: OpStart, Cycle: 3, Sync: broker.SyncPublish.String()},
		deliveredEntry("con0", QueueWork, workDelivery(id, ref, base, 2, t4, t4+ms, nil), IntentHold, t4, t4+ms),
	})
	require.ErrorContains(t, c.Err(), "an earlier delivery already counted 2", "a certain delivery 2 holds: the next may not count 2 again")
}

// TestAMaybeDeliveryConfirmedIsNotHeldToItsOwnIntent: a delivery
// journaled as a maybe and then as certain is one delivery. Its nack
// intent, noted with the maybe, sets a floor for the deliveries after
// it, not for its own confirmation.
func TestAMaybeDeliveryConfirmedIsNotHeldToItsOwnIntent(t *testing.T) {
	id := "00000000000000b8"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	vt := int64(time.Second)
	d1 := base + int64(time.Millisecond)
	d2 := d1 + int64(retryDelay(QueueWork, 1)) + int64(time.Millisecond)
	del := func(op Op, d int, at int64) Entry {
		return Entry{Op: op, Who: "con0", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: d, Exp: at + vt, Intent: IntentNack, T0: at, T1: at}
	}
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "publish"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
		del(OpMaybe, 1, d1), del(OpDelivered, 1, d1),
		del(OpMaybe, 2, d2), del(OpDelivered, 2, d2),
	})
	require.NoError(t, c.Err(), "delivery 2 came once delivery 1's nack could have made it visible; its confirmation is no later delivery")
}
