package brokertest

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// promiseCases: promises of the port's doc comments that the groups above
// reach only in their common case — the retry curve where every delivery
// was nacked, a replay on a policy without a retry delay, a key whose
// message is still in the queue, an Extend refused for its duration.
var promiseCases = []testCase{
	{name: "RetryBackoffIsKeyedOnTheDeliveryThatFailedNotOnTheNacks", run: func(e *env) {
		// "a message nacked on its n-th delivery waits RetryDelay ×
		// 2^(n−1)": a delivery whose consumer died counts towards n though
		// nobody nacked it, so the first nack, on the second delivery,
		// waits twice RetryDelay.
		base := e.short() / 4
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.VisibilityTimeout = e.short()
			p.RetryDelay = base
			p.MaxRetryDelay = 8 * base
			p.MaxDeliveries = 10
		}))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		d = e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message of a consumer that died")
		if d.Message.ID != m.ID || d.Deliveries != 2 {
			e.Fatalf("redelivered %q #%d, want %q #2", d.Message.ID, d.Deliveries, m.ID)
		}
		before := e.now()
		nv := e.nack(q, d.Lease.Receipt, nil)
		after := e.now()
		if nv.Deliveries != 2 || nv.DeadLettered {
			e.Fatalf("Nack of the second delivery reported %+v, want Deliveries 2", nv)
		}
		e.checkInstant(nv.VisibleAt, before.Add(2*base), after.Add(2*base), "VisibleAt after the first nack, of the second delivery (the first lapsed)")
		if d = e.appearsAt(q, nv.VisibleAt, true, "the message nacked on its second delivery"); d.Deliveries != 3 {
			e.Fatalf("delivery %d, want 3", d.Deliveries)
		}
	}},
	{name: "ReplayIsVisibleAtOnceWhateverTheRetryDelayAndItsBackoffStartsOver", needs: []string{"Rejecter", "DeadLetterManager"}, run: func(e *env) {
		// A replayed message is "visible at once, with its delivery count
		// reset": the policy's retry delay is not charged to it, and its
		// next failure is a first delivery's, which waits RetryDelay, not
		// the grown delay of the delivery it died on.
		base := e.short() / 4
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.RetryDelay = base
			p.MaxRetryDelay = 8 * base
			p.MaxDeliveries = 10
		}))
		m := e.publish(q, "a")
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		d := e.appearsAt(q, nv.VisibleAt, true, "the nacked message")
		if d.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d.Deliveries)
		}
		if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		r := e.receive(q, 10) // at once: no clock moved, no wait
		if len(r) != 1 || r[0].Message.ID != m.ID || r[0].Deliveries != 1 {
			e.Fatalf("right after the replay, with RetryDelay %v: received %v, want %q as delivery 1", base, ids(r), m.ID)
		}
		before := e.now()
		nv = e.nack(q, r[0].Lease.Receipt, nil)
		after := e.now()
		if nv.Deliveries != 1 || nv.DeadLettered {
			e.Fatalf("Nack of the first delivery after the replay reported %+v, want Deliveries 1", nv)
		}
		e.checkInstant(nv.VisibleAt, before.Add(base), after.Add(base), "VisibleAt after the first delivery of a replayed message")
	}},
	{name: "DuplicateKeyReturnsOriginalAfterItsDeadLetterWasDeleted", needs: []string{"Keyed", "Rejecter", "DeadLetterManager"}, run: func(e *env) {
		// The seen-set lives as long as the queue (bounded by the window
		// only): a key is recognised after its message was consumed,
		// however it left — acknowledged, or dead-lettered and then
		// deleted. The side effect ran (or was judged) once.
		q := e.queue(e.policy())
		orig := e.publishKeyed(q, "order-1", "first")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.sameMessage(orig, e.publishKeyed(q, "order-1", "again"), "a key whose message is a dead letter")
		e.none(q, "a duplicate of a dead-lettered message enqueues nothing")
		if err := e.manager(q).DeleteDeadLetter(e.ctx(), orig.ID); err != nil {
			e.Fatalf("DeleteDeadLetter: %v", err)
		}
		e.sameMessage(orig, e.publishKeyed(q, "order-1", "once more"), "a key whose dead letter was deleted")
		e.none(q, "a duplicate of a deleted dead letter enqueues nothing")
	}},
	{name: "ExtendIsBoundedByItsInstantNotItsDuration", needs: []string{"Clock", "LeaseExtender"}, run: func(e *env) {
		// "Validate never sees this duration, so MaxDeadlineOffset cannot
		// bound it; the instant itself is checked": on a clock an hour
		// short of the last instant a broker can record, an Extend by two
		// hours (far below MaxDeadlineOffset) is refused and the lease
		// held stays valid, while one that ends exactly at that last
		// instant is renewed.
		end := time.Unix(0, math.MaxInt64)
		e.set(end.Add(-time.Hour))
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		_, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, 2*time.Hour)
		e.isErr(err, broker.QueueMisconfigured, "Extend by 2h an hour before the last recordable instant")
		_, err = e.extender(q).Extend(e.ctx(), d.Lease.Receipt, time.Hour+time.Nanosecond)
		e.isErr(err, broker.QueueMisconfigured, "Extend one nanosecond past the last recordable instant")
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, time.Hour)
		if err != nil {
			e.Fatalf("Extend to exactly the last recordable instant, after refused ones: %v", err)
		}
		e.sameInstant(end, l.ExpiresAt, "the lease extended to the last recordable instant")
		e.set(end.Add(-time.Nanosecond))
		e.ack(q, l.Receipt)
	}},
	{name: "ARefusedExtendLeavesTheLeaseToLapseAtItsOwnExpiresAt", needs: []string{"LeaseExtender"}, run: func(e *env) {
		// A non-positive by, or one whose deadline passes 2262, "is
		// refused before anything moves, and the lease the caller holds
		// stays valid". ExtendNonPositiveIsMisconfigured and
		// ExtendPast2262IsMisconfiguredAndKeepsLease show the receipt
		// still acks; here the lease keeps its deadline too: the message
		// stays hidden until the ExpiresAt Receive gave it and comes back
		// then, not at once (zero read as "lapse now") and not later (a
		// deadline moved, or held, by a call that reported failure).
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		for _, by := range []time.Duration{0, -time.Nanosecond, -time.Hour, math.MinInt64, math.MaxInt64} {
			_, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, by)
			e.isErr(err, broker.QueueMisconfigured, "Extend by "+by.String())
		}
		e.hiddenUntil(q, d.Lease.ExpiresAt, "a lease after refused Extends, before its own ExpiresAt")
		d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message whose lease refused Extends left alone")
		if d2.Message.ID != m.ID || d2.Deliveries != 2 {
			e.Fatalf("redelivered %q #%d, want %q #2", d2.Message.ID, d2.Deliveries, m.ID)
		}
		e.ack(q, d2.Lease.Receipt)
	}},
	{name: "ALapsedReceiptCannotSettleTheLeaseThatFollowsIt", run: func(e *env) {
		// "A receipt whose lease has already lapsed is LeaseExpired and
		// removes NOTHING: ... another consumer may already hold it", and
		// Nack, Reject and Extend refuse it "exactly as Ack refuses it".
		// AckOfLapsedLeaseRemovesNothing hands a lapsed receipt to Ack once
		// the message is held again, the other cases hand it to the other
		// calls only before it is: here each call gets it while another
		// consumer holds the message, and must neither hand the message
		// back, nor dead-letter it, nor renew or replace the new holder's
		// lease.
		late := broker.NewError("LATE", 0x2A000007, "late", secret)
		ack := leaseCall{"Ack", func(q broker.Broker, r broker.ReceiptValue) error { return q.Ack(e.ctx(), r) }}
		calls := append([]leaseCall{ack}, e.settleCalls(late, time.Hour)...)
		for _, c := range calls {
			q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
			m := e.publish(q, "a")
			d := e.receiveOne(q)
			e.lapse(d.Lease)
			d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, c.name+": the message whose lease lapsed")
			if d2.Message.ID != m.ID || d2.Deliveries != 2 {
				e.Fatalf("%s: redelivered %q #%d, want %q #2", c.name, d2.Message.ID, d2.Deliveries, m.ID)
			}
			e.isErr(c.do(q, d.Lease.Receipt), broker.LeaseExpired, c.name+" of a lapsed receipt whose message another consumer holds")
			e.none(q, c.name+" of a lapsed receipt: the message another consumer holds")
			if e.caps.DeadLetterReader {
				if dls := e.deadLetters(q); len(dls) != 0 {
					e.Fatalf("%s of a lapsed receipt dead-lettered the message another consumer holds: %d dead letters", c.name, len(dls))
				}
			}
			if err := q.Ack(e.ctx(), d2.Lease.Receipt); err != nil {
				e.Fatalf("%s of a lapsed receipt ended the new holder's lease: its Ack: %v", c.name, err)
			}
			e.none(q, c.name+": the message its new holder acknowledged")
		}
	}},
	{name: "PayloadsKeyedAndBatchPublishesReturnBelongToThePublisher", needs: []string{"Keyed", "Batch"}, run: func(e *env) {
		// "The slice belongs to the receiver", and a publisher receives
		// the MessageValue its call returns: writing into its Payload must
		// not reach the message the queue holds, whichever publish minted
		// it (PayloadBelongsToReceiver covers Publish).
		q := e.queue(e.policy())
		k, err := e.keyed(q).PublishKeyed(e.ctx(), "k", []byte("keyed"))
		if err != nil {
			e.Fatalf("PublishKeyed: %v", err)
		}
		ms, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{[]byte("batch-1"), []byte("batch-2")})
		if err != nil {
			e.Fatalf("PublishBatch: %v", err)
		}
		for _, m := range append(ms, k) {
			for i := range m.Payload {
				m.Payload[i] = 'X'
			}
		}
		got := payloads(e.receive(q, 10))
		if want := []string{"keyed", "batch-1", "batch-2"}; !sameSet(got, want) {
			e.Fatalf("delivered %q after the publisher wrote into the returned payloads, want %q", got, want)
		}
	}},
	{name: "EveryLeaseCallIsRefusedAtExpiresAtAndHonouredANanosecondBefore", needs: []string{"Clock", "ExactExpiry"}, run: func(e *env) {
		// "A lease lapses AT ExpiresAt" (API.md §5.8) for every call that
		// names it, not only Ack: one nanosecond before, the receipt still
		// acts; at the instant, Nack, Reject and Extend are LeaseExpired
		// and move nothing.
		calls := e.settleCalls(nil, time.Minute)
		for _, c := range calls {
			q := e.queue(e.policy())
			e.publish(q, "early")
			e.publish(q, "at")
			ds := e.receive(q, 2)
			if len(ds) != 2 {
				e.Fatalf("%s: received %d, want 2", c.name, len(ds))
			}
			e.set(ds[0].Lease.ExpiresAt.Add(-time.Nanosecond))
			if err := c.do(q, ds[0].Lease.Receipt); err != nil {
				e.Fatalf("%s one nanosecond before ExpiresAt: %v", c.name, err)
			}
			e.set(ds[1].Lease.ExpiresAt)
			e.isErr(c.do(q, ds[1].Lease.Receipt), broker.LeaseExpired, c.name+" AT ExpiresAt")
			var got []broker.DeliveryValue
			for _, d := range e.receive(q, 10) {
				if d.Message.ID == ds[1].Message.ID {
					got = append(got, d)
				}
			}
			if len(got) != 1 || got[0].Deliveries != 2 {
				e.Fatalf("%s AT ExpiresAt: the lapsed message came back as %v, want once as delivery 2: the refused call moved nothing", c.name, ids(got))
			}
		}
	}},
	{name: "AReplayedMessageThatDiesAgainRecordsOnlyItsNewDeath", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// "the dead-letter record, its cause included, is gone once the
		// message is queued again": when the replayed message dies again,
		// its dead letter says how it died the second time — a lapse with
		// no report, or a Reject with no cause — and carries nothing of
		// the first death's reason, code or public text.
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 1
			p.VisibilityTimeout = e.short()
		}))
		m := e.publish(q, "a")
		first := broker.NewError("FIRST_DEATH", 0x2A000005, "the first death", secret)
		die := func() {
			if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, first); err != nil {
				e.Fatalf("Reject: %v", err)
			}
			if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
				e.Fatalf("ReplayDeadLetter: %v", err)
			}
		}
		die()
		d := e.receiveOne(q)
		e.lapse(d.Lease) // the consumer of its second life dies
		var dls []broker.DeadLetterValue
		e.eventually("the replayed message whose last lease lapsed is a dead letter", func() bool {
			dls = e.deadLetters(q)
			return len(dls) == 1
		})
		e.checkDeadLetter(dls[0], causeCase{name: "a lapse after a replay", reason: broker.ReasonLeaseExpired}, m, "a", 1)
		e.checkInstant(dls[0].FailedAt, d.Lease.ExpiresAt, d.Lease.ExpiresAt, "FailedAt is the second death's")

		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		die()
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		dls = e.deadLetters(q)
		if len(dls) != 1 {
			e.Fatalf("%d dead letters, want 1", len(dls))
		}
		e.checkDeadLetter(dls[0], causeCase{name: "a Reject without cause after a replay", reason: broker.ReasonUnexplained}, m, "a", 1)
	}},
	{name: "ReceiveSortsOnEnqueuedAtEvenWhenTheClockStepsBack", needs: []string{"Clock", "OldestFirst"}, run: func(e *env) {
		// EnqueuedAt "is the ordering key a FIFO implementation sorts on":
		// the key, not the order the publishes came in. With the clock
		// stepped back between two publishes, the later one is the older.
		q := e.queue(e.policy())
		e.set(t0.Add(time.Hour))
		late := e.publish(q, "published first, an hour later on the clock")
		e.set(t0)
		early := e.publish(q, "published second, an hour earlier on the clock")
		var got []string
		for range 2 {
			got = append(got, ids(e.receive(q, 1))...)
		}
		if want := []string{early.ID, late.ID}; !equalStrings(got, want) {
			e.Fatalf("received %v, want %v: oldest EnqueuedAt first, not first published", got, want)
		}
	}},
	{name: "DeadLettersSortOnFailedAtEvenWhenTheClockStepsBack", needs: []string{"Clock", "Rejecter", "DeadLetterReader"}, run: func(e *env) {
		// "Oldest first" is by FailedAt (API.md §5.1): the key, not the
		// order the messages died in.
		q := e.queue(e.policy())
		a, b := e.publish(q, "a"), e.publish(q, "b")
		byID := map[string]broker.ReceiptValue{}
		for _, d := range e.receive(q, 2) {
			byID[d.Message.ID] = d.Lease.Receipt
		}
		e.set(t0.Add(2 * time.Minute))
		if err := e.rejecter(q).Reject(e.ctx(), byID[a.ID], nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.set(t0.Add(time.Minute)) // the clock steps back
		if err := e.rejecter(q).Reject(e.ctx(), byID[b.ID], nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		dls := e.deadLetters(q)
		if got, want := deadIDs(dls), []string{b.ID, a.ID}; !equalStrings(got, want) {
			e.Fatalf("dead letters %v, want %v: oldest FailedAt first, not first to die", got, want)
		}
		e.sameInstant(t0.Add(time.Minute), dls[0].FailedAt, "FailedAt of the second Reject")
	}},
	{name: "AnyKeyOfOneTo256BytesIsAcceptedAndDeduplicated", needs: []string{"Keyed"}, run: func(e *env) {
		// "Empty key or key longer than 256 bytes is an error": nothing
		// else is. A key is bytes, and keys that are not text (a NUL, bytes
		// that are not UTF-8, whitespace) are keys like any other, each
		// its own and each recognised again.
		q := e.queue(e.policy())
		keys := []string{"\x00", "a\x00b", "\xff\xfe", " ", "\n", "é", strings.Repeat("\x00", 256), strings.Repeat("\xff", 255) + "k"}
		first := map[string]broker.MessageValue{}
		for _, k := range keys {
			first[k] = e.publishKeyed(q, k, "x")
		}
		for _, k := range keys {
			e.sameMessage(first[k], e.publishKeyed(q, k, "again"), fmt.Sprintf("the key %q published again", k))
		}
		if n := len(e.receive(q, 2*len(keys))); n != len(keys) {
			e.Fatalf("received %d messages, want one per key (%d)", n, len(keys))
		}
	}},
}

// leaseCall is a call that names a lease by its receipt, for a case that
// hands one receipt to each.
type leaseCall struct {
	name string
	do   func(q broker.Broker, r broker.ReceiptValue) error
}

// settleCalls returns the calls besides Ack that take a receipt and the
// broker has: Nack and Reject with cause, Extend by by.
func (e *env) settleCalls(cause error, by time.Duration) []leaseCall {
	calls := []leaseCall{{"Nack", func(q broker.Broker, r broker.ReceiptValue) error {
		_, err := q.Nack(e.ctx(), r, cause)
		return err
	}}}
	if e.caps.Rejecter {
		calls = append(calls, leaseCall{"Reject", func(q broker.Broker, r broker.ReceiptValue) error {
			return e.rejecter(q).Reject(e.ctx(), r, cause)
		}})
	}
	if e.caps.LeaseExtender {
		calls = append(calls, leaseCall{"Extend", func(q broker.Broker, r broker.ReceiptValue) error {
			_, err := e.extender(q).Extend(e.ctx(), r, by)
			return err
		}})
	}
	return calls
}
