package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// maybeJournal is the journal of a child whose results a power loss may
// take (SyncPublish): message id published, then the deliveries given,
// each journaled only as OpMaybe (the power failed before a publish made
// any of them certain).
func maybeJournal(id, ref string, base int64, maybes ...Entry) []Entry {
	return append([]Entry{
		{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
	}, maybes...)
}

// maybeAt is a maybe delivery of id on its del-th delivery by consumer
// who, Receive running from at to at, leased for the work queue's
// visibility timeout.
func maybeAt(who, id, ref string, base int64, del int, at int64, intent Intent) Entry {
	p, _ := Policy(QueueWork)
	return Entry{Op: OpMaybe, Who: who, Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: del,
		Exp: at + int64(p.VisibilityTimeout), Intent: intent, T0: at, T1: at}
}

// TestAMaybeDeliveryHoldsItsLeaseAndCountInItsOwnProcess: a maybe
// delivery may lose its lease record to the power loss, so the NEXT child
// may count it again; but within the process that handed it out, the
// lease was live in memory (no delivery returns after the power failed),
// and a second delivery of the same message in that process before the
// lease's ExpiresAt, or with a count that did not grow, is a double
// delivery the contract forbids under every sync mode. The controls: in
// that process a redelivery after the lease lapsed, counting more, or
// after the retry delay of the nack the maybe's consumer meant, is sound.
func TestAMaybeDeliveryHoldsItsLeaseAndCountInItsOwnProcess(t *testing.T) {
	id := "00000000000000c1"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	const early, again = "before that lease expired", "in the process that had handed it out as delivery"

	for _, tc := range []struct {
		name   string
		second Entry
		want   []string // the violations reported; none if empty
	}{
		{"the second inside the first's lease, same count",
			maybeAt("con1", id, ref, base, 1, base+ms+vt/2, IntentHold), // 500 ms into a 1 s lease
			[]string{early, again}},
		{"the second inside the first's lease, counting more",
			maybeAt("con1", id, ref, base, 2, base+ms+vt/2, IntentHold),
			[]string{early}},
		{"after the lapse, the count did not grow",
			maybeAt("con1", id, ref, base, 1, base+2*ms+vt+10*ms, IntentHold),
			[]string{again}},
		{"a certain delivery inside the first's lease",
			func() Entry {
				e := maybeAt("con1", id, ref, base, 2, base+ms+vt/2, IntentHold)
				e.Op = OpDelivered
				return e
			}(),
			[]string{early}},
		{"control: after the lapse, counting more",
			maybeAt("con1", id, ref, base, 2, base+2*ms+vt+10*ms, IntentHold),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkerWithoutStores(t)
			c.AddCycle(1, maybeJournal(id, ref, base, maybeAt("con0", id, ref, base, 1, base+ms, IntentHold), tc.second))
			if len(tc.want) == 0 {
				require.NoError(t, c.Err(), "delivery %d after delivery 1's lease lapsed, in the process that leased it", tc.second.Del)
				return
			}
			for _, want := range tc.want {
				require.ErrorContains(t, c.Err(), want,
					"one process handed message %s out as delivery 1 (a maybe, held), then as delivery %d at %s, %v after the first Receive",
					id, tc.second.Del, ns(tc.second.T1), time.Duration(tc.second.T1-base-ms))
			}
		})
	}

	t.Run("control: after the retry delay of the nack meant for it", func(t *testing.T) {
		c := checkerWithoutStores(t)
		at := base + ms + int64(retryDelay(QueueWork, 1)) + ms
		c.AddCycle(1, maybeJournal(id, ref, base,
			maybeAt("con0", id, ref, base, 1, base+ms, IntentNack),
			maybeAt("con1", id, ref, base, 2, at, IntentHold)))
		require.NoError(t, c.Err(), "the nack meant for delivery 1 may have made it visible again %v after Receive", retryDelay(QueueWork, 1))
	})

	t.Run("the next process may count it again", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, maybeJournal(id, ref, base, maybeAt("con0", id, ref, base, 1, base+ms, IntentHold)))
		require.NoError(t, c.Err())
		at := base + 2*ms + vt + 10*ms
		c.AddCycle(2, []Entry{
			{Op: OpStart, Cycle: 2, Sync: broker.SyncPublish.String()},
			maybeAt("con0", id, ref, base, 1, at, IntentHold),
		})
		require.NoError(t, c.Err(), "the power loss took delivery 1's lease record: the next child hands it out as delivery 1 again")
	})
}
