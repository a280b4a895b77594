package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestASettleReturnedThenMadeCertainIsReportedOnce: under SyncPublish a
// settle is journaled as it returns (OpReturned) and again once a later
// publish made it certain, with the same fields. Its answer (a Nack's
// VisibleAt, an Extend's ExpiresAt) and that it settled the current lease
// are checked at the first entry; the second is the same call, and a
// fault in it is one fault: reported once, not once per entry.
func TestASettleReturnedThenMadeCertainIsReportedOnce(t *testing.T) {
	id := "00000000000000e1"
	ref := MakeRef(Ref{Queue: QueueLapse, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	lapse := func(op Op, del int, at int64, intent Intent) Entry {
		return Entry{Op: op, Who: "lapse", Queue: QueueLapse, ID: id, Ref: ref, Enq: base, Del: del,
			Exp: at + int64(LapseLease), Intent: intent, T0: at, T1: at}
	}
	cycle := func(intent Intent, settle Entry) []Entry {
		certain := settle
		certain.Op, certain.Settle = settle.Settle, ""
		return []Entry{
			{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()},
			{Op: OpPublished, Who: "pub0", Queue: QueueLapse, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
			lapse(OpMaybe, 1, base+ms, intent), lapse(OpDelivered, 1, base+ms, intent), settle, certain,
		}
	}
	for _, tc := range []struct {
		name   string
		intent Intent
		settle Entry
		want   string
	}{
		{"a nack's VisibleAt without the retry delay", IntentNack,
			returnedEntry("lapse", QueueLapse, id, OpNacked, 1, base+10*ms, base+11*ms, base+11*ms), "VisibleAt"},
		{"an extend's ExpiresAt short of what it asked", IntentExtendAck,
			withBy(returnedEntry("lapse", QueueLapse, id, OpExtended, 1, base+10*ms, base+11*ms, base+11*ms+int64(time.Second)), 2*time.Second), "Extend by"},
		{"a nack of a lease that had lapsed", IntentNack,
			returnedEntry("lapse", QueueLapse, id, OpNacked, 1, base+ms+int64(LapseLease), base+ms+int64(LapseLease)+ms,
				base+ms+int64(LapseLease)+ms+int64(retryDelay(QueueLapse, 1))), "a lapsed lease is refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkerWithoutStores(t)
			c.AddCycle(1, cycle(tc.intent, tc.settle))
			require.ErrorContains(t, c.Err(), tc.want)
			require.Len(t, c.violations, 1, "one faulty call, journaled as returned and then as certain: %v", c.violations)
		})
	}

	t.Run("control: a certain settle that no returned entry announced is checked", func(t *testing.T) {
		settle := returnedEntry("lapse", QueueLapse, id, OpNacked, 1, base+10*ms, base+11*ms, base+11*ms)
		settle.Op, settle.Settle = OpNacked, ""
		c := checkerWithoutStores(t)
		c.AddCycle(1, []Entry{
			{Op: OpStart, Cycle: 1, Sync: broker.SyncAll.String()},
			{Op: OpPublished, Who: "pub0", Queue: QueueLapse, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
			lapse(OpDelivered, 1, base+ms, IntentNack), settle,
		})
		require.ErrorContains(t, c.Err(), "VisibleAt")
		require.Len(t, c.violations, 1)
	})
}

// withBy sets an Extend entry's By.
func withBy(e Entry, by time.Duration) Entry {
	e.By = int64(by)
	return e
}
