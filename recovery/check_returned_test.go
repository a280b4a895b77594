package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// returnedEntry is the entry a child whose results a power loss may take
// journals as a settle returns (OpReturned): settle of message id's
// delivery del, the call running from t0 to t1; exp is a nack's VisibleAt
// or an Extend's ExpiresAt.
func returnedEntry(who, queue, id string, settle Op, del int, t0, t1, exp int64) Entry {
	return Entry{Op: OpReturned, Settle: settle, Who: who, Queue: queue, ID: id, Del: del, Exp: exp, T0: t0, T1: t1}
}

// nextProcess is the journal of the child after a power loss: it starts,
// and hands out the deliveries given.
func nextProcess(cycle int, deliveries ...Entry) []Entry {
	return append([]Entry{{Op: OpStart, Cycle: cycle, Sync: broker.SyncPublish.String()}}, deliveries...)
}

// TestAnAckThatReturnedHoldsInItsOwnProcess: under SyncPublish an Ack
// returns before its record is durable, so the child journals it at once
// only as returned (OpReturned) and as acked once a later publish made it
// certain. If the power fails first, the next process may hand the
// message out again: the ack was lost with its record. But in the process
// where the Ack returned nil the index had applied it, and only the power
// loss undoes that, after which no call returns there: a delivery of the
// message later in that process is a double delivery of an acked message.
func TestAnAckThatReturnedHoldsInItsOwnProcess(t *testing.T) {
	id := "00000000000000d1"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	lapsed := base + ms + vt + 10*ms // after delivery 1's lease lapsed
	acked := returnedEntry("con0", QueueWork, id, OpAcked, 1, base+2*ms, base+3*ms, 0)
	journal := func(later ...Entry) []Entry {
		return maybeJournal(id, ref, base, append([]Entry{maybeAt("con0", id, ref, base, 1, base+ms, IntentAck), acked}, later...)...)
	}

	t.Run("handed out again in the same process", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal(maybeAt("con1", id, ref, base, 2, lapsed, IntentHold)))
		require.ErrorContains(t, c.Err(), "in the process where the ack of delivery 1 returned nil",
			"message %s: the Ack of delivery 1 returned nil, then the same process handed it out as delivery 2 once the lease had lapsed", id)
		require.Equal(t, 1, c.Figures.SettlesReturned, "the returned ack was checked")
	})

	t.Run("control: back in the next process after the power loss", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal())
		require.NoError(t, c.Err())
		c.AddCycle(2, nextProcess(2, maybeAt("con0", id, ref, base, 1, lapsed, IntentHold)))
		require.NoError(t, c.Err(), "the power loss took the ack's record (and delivery 1's): the next child hands the message out as delivery 1 again")
		require.Equal(t, 1, c.Figures.SettlesReturned)
	})

	t.Run("control: made certain, it holds across the power loss", func(t *testing.T) {
		d1 := maybeAt("con0", id, ref, base, 1, base+ms, IntentAck)
		d1.Op = OpDelivered
		ack := acked
		ack.Op, ack.Settle = OpAcked, ""
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal(d1, ack))
		require.NoError(t, c.Err())
		c.AddCycle(2, nextProcess(2, maybeAt("con0", id, ref, base, 2, lapsed, IntentHold)))
		require.ErrorContains(t, c.Err(), "after it was acked", "a later publish made the ack certain: no process hands the message out again")
	})
}

// TestANackThatReturnedHoldsItsVisibleAtInItsOwnProcess: a Nack that
// returned a VisibleAt under SyncPublish made the message invisible until
// then in the process where it returned, whatever the power loss later
// takes. The lapse queue's retry delay (1.5 s) outlasts its lease
// (150 ms), so a certain delivery's lease lapses long before the nack's
// VisibleAt: the next process, which may have lost the nack's record,
// may hand the message out in between; the process of the nack may not.
func TestANackThatReturnedHoldsItsVisibleAtInItsOwnProcess(t *testing.T) {
	id := "00000000000000d2"
	ref := MakeRef(Ref{Queue: QueueLapse, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	lapse := func(op Op, del int, at int64, intent Intent) Entry {
		return Entry{Op: op, Who: "lapse", Queue: QueueLapse, ID: id, Ref: ref, Enq: base, Del: del,
			Exp: at + int64(LapseLease), Intent: intent, T0: at, T1: at}
	}
	// Delivery 1 certain, its Nack returned (VisibleAt 1.5 s on) and not
	// made certain before the power failed.
	nack := returnedEntry("lapse", QueueLapse, id, OpNacked, 1, base+10*ms, base+11*ms, base+10*ms+int64(LapseRetryDelay))
	cycle1 := func(later ...Entry) []Entry {
		return append([]Entry{
			{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()},
			{Op: OpPublished, Who: "pub0", Queue: QueueLapse, N: 1, IDs: []string{id}, Refs: []string{ref}, Enq: base, T0: base, T1: base},
			lapse(OpMaybe, 1, base+ms, IntentNack), lapse(OpDelivered, 1, base+ms, IntentNack), nack,
		}, later...)
	}
	between := base + 500*ms // after delivery 1's lease lapsed, before the nack's VisibleAt

	t.Run("handed out before VisibleAt in the same process", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, cycle1(lapse(OpMaybe, 2, between, IntentHold)))
		require.ErrorContains(t, c.Err(), "in the process where the nack of delivery 1 returned nil (journaled as returned, maybe not durable), before the instant it returned",
			"message %s: its Nack returned VisibleAt %s, and the same process handed it out at %s", id, ns(nack.Exp), ns(between))
	})

	t.Run("control: at VisibleAt in the same process", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, cycle1(lapse(OpMaybe, 2, nack.Exp, IntentHold)))
		require.NoError(t, c.Err(), "a nacked message is visible AT VisibleAt")
	})

	t.Run("control: before VisibleAt in the next process after the power loss", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, cycle1())
		require.NoError(t, c.Err())
		c.AddCycle(2, nextProcess(2, lapse(OpMaybe, 2, between, IntentHold)))
		require.NoError(t, c.Err(), "the power loss took the nack's record: once delivery 1's lease lapsed, the next child may hand the message out")
	})
}

// TestAnExtendThatReturnedHoldsItsExpiresAtInItsOwnProcess: an Extend
// that returned an ExpiresAt under SyncPublish leased the message until
// then in the process where it returned: no other delivery there before
// it. Receive's own lease lapses earlier, and so does the lease of the
// next process, which may have lost the Extend's record. A nack meant for
// the delivery may follow the Extend and be in flight at the power loss;
// it ends the lease early, so it lowers the floor to its retry delay.
func TestAnExtendThatReturnedHoldsItsExpiresAtInItsOwnProcess(t *testing.T) {
	id := "00000000000000d3"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	by := int64(1500 * time.Millisecond)
	p, _ := Policy(QueueWork)
	vt := int64(p.VisibilityTimeout)
	cycle1 := func(intent Intent, later ...Entry) []Entry {
		d1 := maybeAt("con0", id, ref, base, 1, base+ms, intent)
		d1.By = by
		extended := returnedEntry("con0", QueueWork, id, OpExtended, 1, base+500*ms, base+501*ms, base+500*ms+by)
		extended.By = by
		return maybeJournal(id, ref, base, append([]Entry{d1, extended}, later...)...)
	}
	between := base + 1500*ms // after Receive's lease (1 s) lapsed, before the Extend's (2 s)

	for _, tc := range []struct {
		name   string
		intent Intent
		cycle  int // of the second delivery
		at     int64
		want   string // the violation reported; none if ""
	}{
		{"handed out before ExpiresAt in the same process", IntentExtendAck, 1, between,
			"in the process where the extend of delivery 1 returned nil (journaled as returned, maybe not durable), before the instant it returned"},
		{"control: at ExpiresAt in the same process", IntentExtendAck, 1, base + 500*ms + by, ""},
		{"control: before ExpiresAt in the next process after the power loss", IntentExtendAck, 2, between, ""},
		// After the Extend returned (had delivery 2 come before, the
		// Extend of delivery 1 would have had no lease to extend), before
		// its ExpiresAt: the nack that follows it may have ended the lease.
		{"control: before ExpiresAt, a nack meant for it in flight", IntentExtendNack, 1, base + 600*ms, ""},
		{"before the nack in flight could have made it visible", IntentExtendNack, 1, base + ms + int64(retryDelay(QueueWork, 1)) - ms,
			"or the nack meant for it could have made it visible"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			second := maybeAt("con1", id, ref, base, 2, tc.at, IntentHold)
			c := checkerWithoutStores(t)
			if tc.cycle == 1 {
				c.AddCycle(1, cycle1(tc.intent, second))
			} else {
				second.Del = 1 // the power loss took delivery 1's lease record too
				c.AddCycle(1, cycle1(tc.intent))
				require.NoError(t, c.Err())
				c.AddCycle(2, nextProcess(2, second))
			}
			if tc.want == "" {
				require.NoError(t, c.Err(), "delivery %d in cycle %d at %v after Receive (Receive's lease %v, the Extend's to %v)",
					second.Del, tc.cycle, time.Duration(tc.at-base-ms), time.Duration(vt), time.Duration(499*ms+by))
				return
			}
			require.ErrorContains(t, c.Err(), tc.want, "delivery %d in cycle %d at %v after Receive (Receive's lease %v, the Extend's to %v)",
				second.Del, tc.cycle, time.Duration(tc.at-base-ms), time.Duration(vt), time.Duration(499*ms+by))
		})
	}
}

// TestARejectThatReturnedHoldsInItsOwnProcess: a Reject that returned nil
// under SyncPublish made the message a dead letter in the process where
// it returned: it is not handed out again there, until a replay of the
// dead letter brings it back.
func TestARejectThatReturnedHoldsInItsOwnProcess(t *testing.T) {
	id := "00000000000000d4"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	lapsed := base + ms + int64(p.VisibilityTimeout) + 10*ms
	rejected := returnedEntry("con0", QueueWork, id, OpRejected, 1, base+2*ms, base+3*ms, 0)
	journal := func(later ...Entry) []Entry {
		return maybeJournal(id, ref, base, append([]Entry{maybeAt("con0", id, ref, base, 1, base+ms, IntentReject), rejected}, later...)...)
	}

	t.Run("handed out again in the same process", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal(maybeAt("con1", id, ref, base, 2, lapsed, IntentHold)))
		require.ErrorContains(t, c.Err(), "in the process where the reject of delivery 1 returned nil",
			"message %s: its Reject returned nil, then the same process handed it out again", id)
	})

	t.Run("control: replayed in the same process", func(t *testing.T) {
		reason := Reason(QueueWork, IntentReject)
		code, cause, _ := recordedCause(QueueWork, reason)
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal(
			Entry{Op: OpReplaying, Who: "janitor", Queue: QueueWork, ID: id, Ref: ref, Enq: base, Del: 1, Reason: reason, Code: code, Cause: cause,
				Failed: base + 2*ms, T0: base + 4*ms, T1: base + 5*ms},
			Entry{Op: OpReplayed, Who: "janitor", Queue: QueueWork, ID: id, T0: base + 6*ms, T1: base + 7*ms},
			maybeAt("con1", id, ref, base, 1, base+8*ms, IntentHold)))
		require.NoError(t, c.Err(), "the replay of its dead letter brought the message back, counting from 1")
	})

	t.Run("control: back in the next process after the power loss", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, journal())
		require.NoError(t, c.Err())
		c.AddCycle(2, nextProcess(2, maybeAt("con0", id, ref, base, 1, lapsed, IntentHold)))
		require.NoError(t, c.Err(), "the power loss took the reject's record: the next child hands the message out again")
	})
}

// TestASettleThatReturnedIsHeldToItsAnswer: a settle journaled only as
// returned (under SyncPublish, not made certain before the power failed)
// is checked as it returned, as a certain one is: a power loss may take
// its record, not the answer the index gave in memory. A Nack's VisibleAt
// is the clock during the call plus the retry delay, and DeadLettered is
// true on the last delivery the queue allows and only there; an Extend's
// ExpiresAt is the clock during the call plus the Extend asked for. And a
// settle succeeds only on the message's current lease in its process: it
// settles the latest delivery handed out there before it started (a maybe
// one too), before that lease's ExpiresAt (the last Extend's, if one
// returned nil). The controls are the same calls as the store answers
// them.
func TestASettleThatReturnedIsHeldToItsAnswer(t *testing.T) {
	id := "00000000000000d5"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	by := int64(1500 * time.Millisecond)
	p, _ := Policy(QueueWork)
	vt, max := int64(p.VisibilityTimeout), p.MaxDeliveries
	delay := func(del int) int64 { return int64(retryDelay(QueueWork, del)) }
	d1 := maybeAt("con0", id, ref, base, 1, base+ms, IntentNack)
	lapsed := base + ms + vt + 10*ms // delivery 1's lease lapsed
	d2 := maybeAt("con1", id, ref, base, 2, lapsed, IntentAck)
	// The last delivery the queue allows, each before it held and lapsed.
	var toLast []Entry
	at := base + ms
	for d := 1; d <= max; d++ {
		toLast = append(toLast, maybeAt("con0", id, ref, base, d, at, IntentNack))
		at += vt + 10*ms
	}
	lastAt := toLast[max-1].T1
	nack := func(del int, t0 int64, visibleAt int64, dead bool) Entry {
		e := returnedEntry("con0", QueueWork, id, OpNacked, del, t0, t0+ms, visibleAt)
		e.Dead = dead
		return e
	}
	extend := func(t0, exp int64) Entry {
		e := returnedEntry("con0", QueueWork, id, OpExtended, 1, t0, t0+ms, exp)
		e.By = by
		return e
	}
	extended := d1
	extended.Intent, extended.By = IntentExtendAck, by

	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string // the violation reported; none if ""
	}{
		{"a nack's VisibleAt before the retry delay ended", []Entry{d1, nack(1, base+2*ms, base+2*ms+delay(1)-ms, false)},
			"VisibleAt"},
		{"a nack's VisibleAt after the call's end plus the retry delay", []Entry{d1, nack(1, base+2*ms, base+3*ms+delay(1)+ms, false)},
			"VisibleAt"},
		{"control: a nack's VisibleAt within the call plus the retry delay", []Entry{d1, nack(1, base+2*ms, base+2*ms+delay(1), false)},
			""},
		{"a nack dead-lettering a delivery with deliveries left", []Entry{d1, nack(1, base+2*ms, 0, true)},
			"reported DeadLettered true"},
		{"a nack of the last delivery not dead-lettering it", append(toLast, nack(max, lastAt+ms, lastAt+ms+delay(max), false)),
			"reported DeadLettered false"},
		{"control: a nack of the last delivery dead-lettering it", append(toLast, nack(max, lastAt+ms, 0, true)),
			""},
		{"an Extend's ExpiresAt not the clock plus the Extend", []Entry{extended, extend(base+2*ms, base+2*ms+by/2)},
			"Extend by 1.5s returned a lease expiring at"},
		{"control: an Extend's ExpiresAt the clock plus the Extend", []Entry{extended, extend(base+2*ms, base+2*ms+by)},
			""},
		{"a settle of a delivery superseded in its process", []Entry{d1, d2, returnedEntry("con0", QueueWork, id, OpAcked, 1, lapsed+ms, lapsed+2*ms, 0)},
			"ack of delivery 1 returned nil (journaled as returned, maybe not durable), but delivery 2 had been handed out in its process"},
		{"control: a settle of the latest delivery in its process", []Entry{d1, d2, returnedEntry("con1", QueueWork, id, OpAcked, 2, lapsed+ms, lapsed+2*ms, 0)},
			""},
		{"a settle that started once the lease had lapsed", []Entry{d1, returnedEntry("con0", QueueWork, id, OpAcked, 1, d1.Exp, d1.Exp+ms, 0)},
			"at or after the lease's ExpiresAt"},
		{"control: a settle within the lease an Extend that returned gave", []Entry{extended, extend(base+2*ms, base+2*ms+by),
			returnedEntry("con0", QueueWork, id, OpAcked, 1, d1.Exp, d1.Exp+ms, 0)},
			""},
		{"a settle once the lease an Extend gave had lapsed", []Entry{extended, extend(base+2*ms, base+2*ms+by),
			returnedEntry("con0", QueueWork, id, OpAcked, 1, base+2*ms+by, base+3*ms+by, 0)},
			"at or after the lease's ExpiresAt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkerWithoutStores(t)
			c.AddCycle(1, maybeJournal(id, ref, base, tc.entries...))
			if tc.want == "" {
				require.NoError(t, c.Err())
				return
			}
			require.ErrorContains(t, c.Err(), tc.want)
		})
	}
}

// TestASettleThatReturnedIsHeldToItsOwnProcessOnly: the latest delivery
// a settle journaled as returned is checked against is its own
// process's. A power loss may take the lease records of an earlier
// process's maybe deliveries, so the next child counts from the last
// certain one again, and settles that delivery.
func TestASettleThatReturnedIsHeldToItsOwnProcessOnly(t *testing.T) {
	id := "00000000000000d6"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	p, _ := Policy(QueueWork)
	later := base + ms + int64(p.VisibilityTimeout) + 10*ms
	c := checkerWithoutStores(t)
	c.AddCycle(1, maybeJournal(id, ref, base, maybeAt("con0", id, ref, base, 1, base+ms, IntentHold),
		maybeAt("con0", id, ref, base, 2, later, IntentHold)))
	require.NoError(t, c.Err())
	c.AddCycle(2, nextProcess(2, maybeAt("con0", id, ref, base, 1, later+time.Second.Nanoseconds(), IntentAck),
		returnedEntry("con0", QueueWork, id, OpAcked, 1, later+time.Second.Nanoseconds()+ms, later+time.Second.Nanoseconds()+2*ms, 0)))
	require.NoError(t, c.Err(), "the power loss took both maybe deliveries: the next child hands the message out as delivery 1 and acks it")
}
