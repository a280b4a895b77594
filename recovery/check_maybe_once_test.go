package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestAMaybeDeliveryThenMadeCertainIsReportedOnce: under SyncPublish a
// delivery is journaled as Receive returns it (OpMaybe) and again once a
// later publish made it certain, with the same fields. What Receive
// returned (the payload, the lease's ExpiresAt, the count) is checked at
// the first entry; the second is the same delivery, and a fault in it is
// one fault: reported once, not once per entry. What only the certain
// entry can see is still reported.
func TestAMaybeDeliveryThenMadeCertainIsReportedOnce(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	id := "00000000000000ab"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	published := Entry{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref},
		Enq: base, T0: base, T1: base}
	start := Entry{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()}
	t0, t1 := base+ms, base+2*ms
	certainOf := func(maybe Entry) Entry {
		maybe.Op = OpDelivered
		return maybe
	}
	check := func(t *testing.T, entries ...Entry) *Checker {
		t.Helper()
		c := checkerWithoutStores(t)
		c.AddCycle(1, append([]Entry{start, published}, entries...))
		return c
	}

	for _, tc := range []struct {
		name  string
		maybe Entry
		want  string
	}{
		{"a payload that is not the one published",
			maybeEntry(workDelivery(id, ref, base, 1, t0, t1, []byte("garbage")), IntentHold, t0, t1), "payload"},
		{"a lease ExpiresAt that is not the clock plus the visibility timeout",
			maybeEntry(workDelivery(id, ref, base, 1, t0, t1-vt/2, nil), IntentHold, t0, t1), "lease ExpiresAt"},
		{"a count the queue does not allow",
			maybeEntry(workDelivery(id, ref, base, p.MaxDeliveries+1, t0, t1, nil), IntentHold, t0, t1), "the queue allows"},
		{"an EnqueuedAt that is not the publish's",
			maybeEntry(workDelivery(id, ref, base+ms/2, 1, t0, t1, nil), IntentHold, t0, t1), "EnqueuedAt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alone := check(t, tc.maybe)
			require.ErrorContains(t, alone.Err(), tc.want)
			c := check(t, tc.maybe, certainOf(tc.maybe))
			require.Equal(t, alone.violations, c.violations, "one faulty delivery, journaled as a maybe and then as certain")
		})
	}

	t.Run("an ack between them that only the certain entry comes after", func(t *testing.T) {
		// Receive ended at t1 and the ack of the message's certain first
		// delivery started at the same instant: the ack is placed between
		// the maybe of the second delivery and its certain entry. The
		// maybe saw no ack; the certain entry does, and that is reported.
		first := certainOf(maybeEntry(workDelivery(id, ref, base, 1, t0-ms/2, t0, nil), IntentAck, t0-ms/2, t0))
		ack := Entry{Op: OpAcked, Who: "con1", Queue: QueueWork, ID: id, Del: 1, T0: t1, T1: t1 + ms}
		second := maybeEntry(workDelivery(id, ref, base, 2, t0, t1, nil), IntentHold, t0, t1)
		c := check(t, first, second, ack, certainOf(second))
		require.ErrorContains(t, c.Err(), "after it was acked")
	})

	t.Run("control: a certain delivery no maybe announced is checked", func(t *testing.T) {
		maybe := maybeEntry(workDelivery(id, ref, base, 1, t0, t1, []byte("garbage")), IntentHold, t0, t1)
		c := check(t, certainOf(maybe))
		require.ErrorContains(t, c.Err(), "delivered with a payload that is not what was published")
		require.Len(t, c.violations, len(check(t, maybe).violations))
	})
}
