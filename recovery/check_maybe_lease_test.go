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

// TestALeaseExpiredDeadLetterLapsesNoEarlierThanAMaybeLastLease: the last
// delivery a queue allows (4 for the work queue) was journaled only as a
// maybe. Whatever the power loss took, no lease of delivery 4 can lapse
// before that maybe's ExpiresAt: either its lease survived and lapses at
// ExpiresAt, or the lease record was lost and a later delivery 4 (which
// starts later) lapses later still. A LEASE_EXPIRED dead letter that
// failed 500 ms before it is a lease cut short, as it is after a certain
// delivery 4 (the control). One that failed at the maybe's ExpiresAt is
// its lapse; and an intent to extend may shorten the lease, down to the
// clock after Receive plus the Extend.
func TestALeaseExpiredDeadLetterLapsesNoEarlierThanAMaybeLastLease(t *testing.T) {
	id := "00000000000000c2"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	max := p.MaxDeliveries

	// Deliveries 1 to max-1 certain and held, each after the previous
	// lapse; delivery max journaled as a maybe (or, for the control, as
	// certain) with intent last. It returns the entries and the last
	// delivery's Receive instant.
	journal := func(lastOp Op, last Intent, by time.Duration) ([]Entry, int64) {
		entries := []Entry{
			{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()},
			{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
		}
		at := base + int64(time.Millisecond)
		for d := 1; d <= max; d++ {
			if d < max {
				e := maybeAt("con0", id, ref, base, d, at, IntentHold)
				entries = append(entries, e) // a certain delivery is journaled as a maybe first
				e.Op = OpDelivered
				entries = append(entries, e)
				at += vt + int64(10*time.Millisecond)
				continue
			}
			e := maybeAt("con0", id, ref, base, d, at, last)
			e.By = int64(by)
			entries = append(entries, e)
			if lastOp == OpDelivered {
				e.Op = OpDelivered
				entries = append(entries, e)
			}
		}
		return entries, at
	}
	// lapsed is the next child's janitor reading the dead letter of a
	// lapse of delivery max that failed at failed.
	lapsed := func(failed int64) []Entry {
		at := failed + int64(2*time.Second)
		return []Entry{
			{Op: OpStart, Cycle: 2, Sync: broker.SyncAll.String()},
			{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: max, Reason: broker.ReasonLeaseExpired,
				Failed: failed, T0: at, T1: at},
		}
	}
	const early = "before its last lease's ExpiresAt"

	for _, tc := range []struct {
		name   string
		lastOp Op
		last   Intent
		by     time.Duration // the Extend the last delivery's intent asks for
		failed int64         // after the last Receive
		want   string        // the violation reported; none if ""
	}{
		{"control: 500 ms before a certain last lease lapsed", OpDelivered, IntentHold, 0, vt / 2, early},
		{"500 ms before a maybe last lease lapsed", OpMaybe, IntentHold, 0, vt / 2, early},
		{"500 ms before a maybe last lease lapsed, its intent an ack", OpMaybe, IntentAck, 0, vt / 2, early},
		{"control: when a maybe last lease lapsed", OpMaybe, IntentHold, 0, vt, ""},
		{"control: when an Extend the maybe's intent asked for shortened it", OpMaybe, IntentExtendAck, 300 * time.Millisecond,
			int64(300 * time.Millisecond), ""},
		{"before an Extend the maybe's intent asked for could end it", OpMaybe, IntentExtendAck, 300 * time.Millisecond,
			int64(200 * time.Millisecond), early},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, at := journal(tc.lastOp, tc.last, tc.by)
			c := checkerWithoutStores(t)
			c.AddCycle(1, entries)
			require.NoError(t, c.Err())
			c.AddCycle(2, lapsed(at+tc.failed))
			if tc.want == "" {
				require.NoError(t, c.Err(), "a LEASE_EXPIRED dead letter of delivery %d that failed %v after its Receive", max, time.Duration(tc.failed))
				return
			}
			require.ErrorContains(t, c.Err(), tc.want,
				"a LEASE_EXPIRED dead letter of delivery %d that failed %v after the Receive of delivery %d (%s, intent %s, leased for %v)",
				max, time.Duration(tc.failed), max, tc.lastOp, tc.last, time.Duration(vt))
		})
	}
}
