package brokertest

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// leaseCases: leases lapsing, and what a lapsed receipt may still do.
var leaseCases = []testCase{
	{name: "LeaseExpiresVisibilityTimeoutAfterReceive", run: func(e *env) {
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		e.publish(q, "a")
		before := e.now()
		d := e.receiveOne(q)
		after := e.now()
		if e.clock != nil {
			e.sameInstant(before.Add(vt), d.Lease.ExpiresAt, "ExpiresAt is the receive instant plus VisibilityTimeout")
		} else if d.Lease.ExpiresAt.Before(before.Add(vt-e.tol())) || d.Lease.ExpiresAt.After(after.Add(vt+e.tol())) {
			e.Fatalf("ExpiresAt %v is not VisibilityTimeout %v after the Receive (%v..%v, tolerance %v)", d.Lease.ExpiresAt, vt, before, after, e.tol())
		}
	}},
	{name: "ARedeliveryIsLeasedForVisibilityTimeoutFromItsReceive", run: func(e *env) {
		// VisibilityTimeout "is how long a Broker.Receive hides a message":
		// from the Receive that takes it, a redelivery's too, however long
		// after a Nack or a lapse made it receivable again. The other
		// cases receive a redelivery at the instant it turns visible,
		// where a lease measured from that instant and one measured from
		// the Receive are the same.
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		m := e.publish(q, "a")
		redeliver := func(visible time.Time, how string, deliveries int) broker.DeliveryValue {
			e.Helper()
			e.after(visible.Add(vt / 2))
			before := e.now()
			d := e.receiveOne(q)
			after := e.now()
			if d.Message.ID != m.ID || d.Deliveries != deliveries {
				e.Fatalf("after %s: delivered %q #%d, want %q #%d", how, d.Message.ID, d.Deliveries, m.ID, deliveries)
			}
			e.checkInstant(d.Lease.ExpiresAt, before.Add(vt), after.Add(vt), "ExpiresAt of a redelivery received half a VisibilityTimeout after "+how+" made it receivable")
			return d
		}
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		d := redeliver(nv.VisibleAt, "a Nack", 2)
		e.lapse(d.Lease)
		d = redeliver(d.Lease.ExpiresAt, "a lapse", 3)
		e.hiddenUntil(q, d.Lease.ExpiresAt, "a redelivery, before its lease lapses")
		if d4 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the redelivery whose consumer died"); d4.Deliveries != 4 {
			e.Fatalf("delivery %d, want 4", d4.Deliveries)
		}
	}},
	{name: "LapsedLeaseRedeliversWithoutRetryDelay", run: func(e *env) {
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.VisibilityTimeout = vt
			p.RetryDelay = 20 * vt // a lapse must not be charged the retry delay
		}))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.hiddenUntil(q, d.Lease.ExpiresAt, "before the lease lapses")
		d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message of a consumer that died")
		if d2.Message.ID != m.ID || d2.Deliveries != 2 || string(d2.Message.Payload) != "a" {
			e.Fatalf("redelivered %q #%d %q, want %q #2 %q", d2.Message.ID, d2.Deliveries, d2.Message.Payload, m.ID, "a")
		}
		if d2.Lease.Receipt == d.Lease.Receipt {
			e.Fatalf("the redelivery reuses the lapsed lease's receipt")
		}
	}},
	{name: "LapsedLeaseOfRedeliveryRedeliversWithoutRetryDelay", run: func(e *env) {
		// A message nacked once and then left by a consumer that died is
		// not charged a retry delay for the lapse either: the retry delay
		// belongs to the nack, which its redelivery already served.
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.VisibilityTimeout = vt
			p.RetryDelay = vt
		}))
		m := e.publish(q, "a")
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		d := e.appearsAt(q, nv.VisibleAt, true, "the nacked message")
		if d.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d.Deliveries)
		}
		e.hiddenUntil(q, d.Lease.ExpiresAt, "before the redelivery's lease lapses")
		d3 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the redelivered message of a consumer that died")
		if d3.Message.ID != m.ID || d3.Deliveries != 3 {
			e.Fatalf("redelivered %q #%d, want %q #3", d3.Message.ID, d3.Deliveries, m.ID)
		}
	}},
	{name: "LeaseLapsesExactlyAtExpiresAt", needs: []string{"Clock", "ExactExpiry"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		e.publish(q, "b")
		ds := e.receive(q, 2)
		e.set(ds[0].Lease.ExpiresAt.Add(-time.Nanosecond))
		e.none(q, "one nanosecond before ExpiresAt")
		e.ack(q, ds[0].Lease.Receipt) // still held
		e.set(ds[1].Lease.ExpiresAt)
		e.isErr(q.Ack(e.ctx(), ds[1].Lease.Receipt), broker.LeaseExpired, "Ack AT ExpiresAt")
		if d := e.receiveOne(q); d.Message.ID != ds[1].Message.ID {
			e.Fatalf("at ExpiresAt, delivered %q, want %q", d.Message.ID, ds[1].Message.ID)
		}
	}},
	{name: "AckOfLapsedLeaseRemovesNothing", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		e.isErr(q.Ack(e.ctx(), d.Lease.Receipt), broker.LeaseExpired, "Ack of a lapsed lease")
		d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message the refused Ack did not remove")
		if d2.Message.ID != m.ID {
			e.Fatalf("redelivered %q, want %q", d2.Message.ID, m.ID)
		}
		e.isErr(q.Ack(e.ctx(), d.Lease.Receipt), broker.LeaseExpired, "Ack of a lapsed lease whose message another consumer holds")
		e.ack(q, d2.Lease.Receipt) // the new holder's turn was not ended
	}},
	{name: "NackOfLapsedLeaseMovesNothing", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		_, err := q.Nack(e.ctx(), d.Lease.Receipt, errors.New("late"))
		e.isErr(err, broker.LeaseExpired, "Nack of a lapsed lease")
		d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message after a refused Nack")
		if d2.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d2.Deliveries)
		}
	}},
	{name: "LapsedLeaseStaysLapsedWhenClockGoesBack", needs: []string{"Clock"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.set(d.Lease.ExpiresAt.Add(time.Second))
		e.isErr(q.Ack(e.ctx(), d.Lease.Receipt), broker.LeaseExpired, "Ack after the lease lapsed") // the broker saw the lapse
		e.set(d.Lease.ExpiresAt.Add(-time.Second))
		e.isErr(q.Ack(e.ctx(), d.Lease.Receipt), broker.LeaseExpired, "Ack after the broker saw the lapse and the clock stepped back")
		e.set(d.Lease.ExpiresAt.Add(time.Second))
		if d2 := e.receiveOne(q); d2.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2: the refused Ack removed nothing", d2.Deliveries)
		}
	}},
	{name: "AClockNoBrokerCanRecordIsRefused", needs: []string{"Clock"}, run: func(e *env) {
		// Instants are recorded as Unix nanoseconds (1677 to 2262): a
		// clock outside them (a zero time.Time, a clock nobody set) would
		// be recorded as some other instant. Every call that reads it
		// fails with QueueMisconfigured and changes nothing.
		q := e.queue(e.policy())
		e.publish(q, "held")
		d := e.receiveOne(q)
		good := e.now()
		for _, bad := range []time.Time{{}, time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
			e.set(bad)
			what := func(call string) string { return fmt.Sprintf("%s on a clock reading %v", call, bad) }
			_, err := q.Publish(e.ctx(), []byte("x"))
			e.isErr(err, broker.QueueMisconfigured, what("Publish"))
			_, err = q.Receive(e.ctx(), 10)
			e.isErr(err, broker.QueueMisconfigured, what("Receive"))
			e.isErr(q.Ack(e.ctx(), d.Lease.Receipt), broker.QueueMisconfigured, what("Ack"))
			_, err = q.Nack(e.ctx(), d.Lease.Receipt, nil)
			e.isErr(err, broker.QueueMisconfigured, what("Nack"))
			if x, ok := q.(broker.Rejecter); ok {
				e.isErr(x.Reject(e.ctx(), d.Lease.Receipt, nil), broker.QueueMisconfigured, what("Reject"))
			}
			if x, ok := q.(broker.LeaseExtender); ok {
				_, err := x.Extend(e.ctx(), d.Lease.Receipt, time.Minute)
				e.isErr(err, broker.QueueMisconfigured, what("Extend"))
			}
			if x, ok := q.(KeyedPublisher); ok && e.caps.Keyed {
				_, err := x.PublishKeyed(e.ctx(), "k", []byte("x"))
				e.isErr(err, broker.QueueMisconfigured, what("PublishKeyed"))
			}
			if x, ok := q.(BatchPublisher); ok && e.caps.Batch {
				_, err := x.PublishBatch(e.ctx(), [][]byte{[]byte("x")})
				e.isErr(err, broker.QueueMisconfigured, what("PublishBatch"))
			}
			if x, ok := q.(broker.DeadLetterReader); ok {
				_, err := x.DeadLetters(e.ctx(), 10)
				e.isErr(err, broker.QueueMisconfigured, what("DeadLetters"))
			}
			if x, ok := q.(broker.DeadLetterManager); ok {
				e.isErr(x.ReplayDeadLetter(e.ctx(), d.Message.ID), broker.QueueMisconfigured, what("ReplayDeadLetter"))
				e.isErr(x.DeleteDeadLetter(e.ctx(), d.Message.ID), broker.QueueMisconfigured, what("DeleteDeadLetter"))
			}
		}
		e.set(good)
		e.none(q, "the refused calls published, leased and handed back nothing")
		e.ack(q, d.Lease.Receipt) // the lease is still the one taken before
		e.none(q, "the acked message is gone")
	}},
	{name: "ReceiptOfAnotherQueueIsUnknown", run: func(e *env) {
		a, b := e.queue(e.policy()), e.queue(e.policy())
		e.publish(a, "x")
		e.publish(b, "y")
		da, db := e.receiveOne(a), e.receiveOne(b)
		e.isErr(b.Ack(e.ctx(), da.Lease.Receipt), broker.UnknownReceipt, "Ack of another queue's receipt")
		_, err := b.Nack(e.ctx(), da.Lease.Receipt, nil)
		e.isErr(err, broker.UnknownReceipt, "Nack of another queue's receipt")
		if x, ok := b.(broker.Rejecter); ok {
			e.isErr(x.Reject(e.ctx(), da.Lease.Receipt, nil), broker.UnknownReceipt, "Reject of another queue's receipt")
		}
		if x, ok := b.(broker.LeaseExtender); ok {
			_, err := x.Extend(e.ctx(), da.Lease.Receipt, time.Minute)
			e.isErr(err, broker.UnknownReceipt, "Extend of another queue's receipt")
		}
		e.ack(a, da.Lease.Receipt) // nothing moved
		e.ack(b, db.Lease.Receipt)
	}},
	{name: "ReceiptOfAnotherBackendIsUnknown", run: func(e *env) {
		other := newEnv(e.T, e.f)
		q1, q2 := e.queue(e.policy()), other.queue(e.policy())
		e.publish(q1, "a")
		other.publish(q2, "a")
		d1, d2 := e.receiveOne(q1), other.receiveOne(q2)
		e.isErr(q2.Ack(e.ctx(), d1.Lease.Receipt), broker.UnknownReceipt, "Ack of another backend's receipt")
		e.ack(q1, d1.Lease.Receipt)
		e.ack(q2, d2.Lease.Receipt)
	}},
	{name: "GarbledOrForgedReceiptIsUnknown", run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		for name, r := range garble(d.Lease.Receipt) {
			e.isErr(q.Ack(e.ctx(), r), broker.UnknownReceipt, "Ack of a receipt "+name)
			_, err := q.Nack(e.ctx(), r, nil)
			e.isErr(err, broker.UnknownReceipt, "Nack of a receipt "+name)
			if x, ok := q.(broker.Rejecter); ok {
				e.isErr(x.Reject(e.ctx(), r, nil), broker.UnknownReceipt, "Reject of a receipt "+name)
			}
			if x, ok := q.(broker.LeaseExtender); ok {
				_, err := x.Extend(e.ctx(), r, time.Minute)
				e.isErr(err, broker.UnknownReceipt, "Extend of a receipt "+name)
			}
		}
		e.ack(q, d.Lease.Receipt) // nothing moved
	}},
	{name: "EveryOneCharacterChangeIsUnknown", run: func(e *env) {
		// A string the broker never issued is UnknownReceipt, even one
		// that decodes to the same bytes as a receipt it did issue: a
		// receipt has one spelling.
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		var accepted []string
		for _, r := range everyChange(d.Lease.Receipt) {
			if err := q.Ack(e.ctx(), r); !errors.Is(err, broker.UnknownReceipt) {
				if err == nil {
					accepted = append(accepted, string(r))
					break // the lease is gone now
				}
				e.Fatalf("Ack of %q, one character away from the receipt %q: %v, want UnknownReceipt", r, d.Lease.Receipt, err)
			}
		}
		if len(accepted) > 0 {
			e.Fatalf("Ack accepted %q, a receipt never issued (the one issued was %q)", accepted[0], d.Lease.Receipt)
		}
		e.ack(q, d.Lease.Receipt) // nothing moved
	}},
}

// receiptAlphabet is what a one-character change of a receipt tries at
// each place: the base64url alphabet, which holds the characters of most
// text encodings, and a few that are in none of them.
const receiptAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=. "

// garble returns receipts made from r that no broker issued: empty,
// garbage, cut, grown, and r with one character changed near its start
// and in its middle (a forgery of whatever the receipt encodes). Every
// other one-character change is the business of
// EveryOneCharacterChangeIsUnknown.
func garble(r broker.ReceiptValue) map[string]broker.ReceiptValue {
	s := string(r)
	out := map[string]broker.ReceiptValue{
		"empty":     "",
		"garbage":   "not a receipt",
		"truncated": broker.ReceiptValue(s[:len(s)/2]),
		"extended":  r + "AA",
	}
	flip := func(i int) broker.ReceiptValue {
		b := []byte(s)
		// Stay in the alphabet of the usual text encodings, so that the
		// forgery parses and only its content is wrong.
		switch {
		case b[i] == 'A':
			b[i] = 'B'
		default:
			b[i] = 'A'
		}
		return broker.ReceiptValue(b)
	}
	if len(s) > 0 {
		out["forged at start"] = flip(0)
		out["forged in middle"] = flip(len(s) / 2)
	}
	for k, v := range out {
		if v == r {
			delete(out, k)
		}
	}
	return out
}

// everyChange returns every receipt that differs from r in exactly one
// character drawn from receiptAlphabet.
func everyChange(r broker.ReceiptValue) []broker.ReceiptValue {
	var out []broker.ReceiptValue
	for i := range len(r) {
		for _, c := range []byte(receiptAlphabet) {
			if c != r[i] {
				b := []byte(r)
				b[i] = c
				out = append(out, broker.ReceiptValue(b))
			}
		}
	}
	return out
}

// lapse lets the broker's clock pass the lease l, so that l has lapsed:
// it sets the suite's clock exactly to ExpiresAt (ExactExpiry) or to
// ExpiresAt plus the tolerance, or waits in real time until ExpiresAt
// plus the tolerance.
func (e *env) lapse(l broker.LeaseValue) {
	e.Helper()
	if e.clock != nil {
		at := l.ExpiresAt
		if !e.caps.ExactExpiry {
			at = at.Add(e.caps.tolerance())
		}
		e.clock.Set(at)
		return
	}
	if d := time.Until(l.ExpiresAt.Add(e.tol())); d > 0 {
		time.Sleep(d)
	}
}

// nackCases: Broker.Nack, the retry curve, MaxDeliveries.
var nackCases = []testCase{
	{name: "NackedMessageVisibleAtVisibleAt", run: func(e *env) {
		delay := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		before := e.now()
		nv := e.nack(q, d.Lease.Receipt, nil)
		after := e.now()
		if nv.DeadLettered || nv.Deliveries != 1 {
			e.Fatalf("Nack reported %+v, want Deliveries 1, not dead-lettered", nv)
		}
		e.checkInstant(nv.VisibleAt, before.Add(delay), after.Add(delay), "VisibleAt is RetryDelay after the nack")
		e.hiddenUntil(q, nv.VisibleAt, "during the retry delay")
		d2 := e.appearsAt(q, nv.VisibleAt, true, "the nacked message")
		if d2.Message.ID != m.ID || d2.Deliveries != 2 {
			e.Fatalf("redelivered %q #%d, want %q #2", d2.Message.ID, d2.Deliveries, m.ID)
		}
	}},
	{name: "RetryDelayIsMeasuredFromTheNack", run: func(e *env) {
		// A consumer that worked a while before failing waits RetryDelay
		// from its Nack, not from its Receive.
		delay := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.after(e.now().Add(delay))
		before := e.now()
		nv := e.nack(q, d.Lease.Receipt, nil)
		after := e.now()
		e.checkInstant(nv.VisibleAt, before.Add(delay), after.Add(delay), "VisibleAt is RetryDelay after the nack, not after the receive")
		e.hiddenUntil(q, nv.VisibleAt, "during the retry delay that began at the nack")
		if d2 := e.appearsAt(q, nv.VisibleAt, true, "the message nacked a while after its receive"); d2.Message.ID != m.ID || d2.Deliveries != 2 {
			e.Fatalf("redelivered %q #%d, want %q #2", d2.Message.ID, d2.Deliveries, m.ID)
		}
	}},
	{name: "NackWithZeroOrNegativeRetryDelayIsVisibleAtOnce", run: func(e *env) {
		for _, delay := range []time.Duration{0, -time.Minute} { // negative is read as zero
			q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
			e.publish(q, "a")
			before := e.now()
			nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
			e.checkInstant(nv.VisibleAt, before, e.now(), "VisibleAt with RetryDelay "+delay.String())
			if d := e.appearsAt(q, nv.VisibleAt, true, "the nacked message"); d.Deliveries != 2 {
				e.Fatalf("RetryDelay %v: delivery %d, want 2", delay, d.Deliveries)
			}
		}
	}},
	// The seed (PolicyValue.RetryDelay): "Zero is a working value and
	// means 'eligible as soon as the nack returns'. Negative is read as
	// zero." As soon as the nack returns, not when the clock next reads the
	// nack's instant: a clock stepped back after the nack must not hide the
	// message from a consumer told it is eligible.
	{name: "NackWithZeroRetryDelayIsVisibleWhateverTheClockReadsNext", needs: []string{"Clock"}, run: func(e *env) {
		for _, delay := range []time.Duration{0, -time.Minute} {
			q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
			e.set(t0.Add(time.Hour))
			m := e.publish(q, "a")
			e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
			e.set(t0) // the clock steps back an hour after the nack returned
			ds := e.receive(q, 1)
			if len(ds) != 1 || ds[0].Message.ID != m.ID || ds[0].Deliveries != 2 {
				e.Fatalf("RetryDelay %v: Receive after the nack, with the clock stepped back an hour: %d deliveries, want %s's second: eligible as soon as the nack returns", delay, len(ds), m.ID)
			}
		}
	}},
	{name: "RetryDelayConstantWithoutMax", run: func(e *env) {
		delay := e.short() / 2
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = delay }))
		e.publish(q, "a")
		e.checkRetryCurve(q, []time.Duration{delay, delay, delay})
	}},
	{name: "RetryDelayGrowsAndHoldsAtMax", run: func(e *env) {
		base := e.short() / 4
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.RetryDelay = base
			p.MaxRetryDelay = 3 * base
			p.MaxDeliveries = 10
		}))
		e.publish(q, "a")
		// RetryDelay × 2^(n−1) for the n-th delivery, held at MaxRetryDelay.
		e.checkRetryCurve(q, []time.Duration{base, 2 * base, 3 * base, 3 * base})
	}},
	{name: "MaxDeliveriesOneMeansOneAttempt", needs: []string{"DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		nv := e.nack(q, d.Lease.Receipt, nil)
		if !nv.DeadLettered || nv.Deliveries != 1 || !nv.VisibleAt.IsZero() {
			e.Fatalf("Nack of the only attempt reported %+v, want {Deliveries 1, DeadLettered, zero VisibleAt}", nv)
		}
		e.none(q, "a dead-lettered message")
		if dls := e.deadLetters(q); len(dls) != 1 || dls[0].Message.ID != m.ID {
			e.Fatalf("dead letters %+v, want the one message %q", dls, m.ID)
		}
	}},
	{name: "NackOnLastDeliveryDeadLetters", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
		e.publish(q, "a")
		if nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil); nv.DeadLettered {
			e.Fatalf("the first of two deliveries dead-lettered: %+v", nv)
		}
		d := e.appearsAt(q, e.now(), true, "the nacked message")
		if d.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d.Deliveries)
		}
		nv := e.nack(q, d.Lease.Receipt, nil)
		if !nv.DeadLettered || nv.Deliveries != 2 || !nv.VisibleAt.IsZero() {
			e.Fatalf("Nack of the last delivery reported %+v, want {Deliveries 2, DeadLettered, zero VisibleAt}", nv)
		}
		e.none(q, "a dead-lettered message")
		e.after(e.now().Add(e.short()))
		e.none(q, "a dead-lettered message, later")
	}},
	{name: "NackAfterALapseOnTheLastDeliveryDeadLetters", run: func(e *env) {
		// MaxDeliveries counts deliveries, a delivery whose consumer died
		// among them (seed DeliveryValue.Deliveries: "failed, timed out,
		// or died"): after a lapse, the second of two deliveries is the
		// last, and its Nack dead-letters the message at once.
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 2
			p.VisibilityTimeout = e.short()
		}))
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		d = e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message whose consumer died")
		if d.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d.Deliveries)
		}
		nv := e.nack(q, d.Lease.Receipt, nil)
		if !nv.DeadLettered || nv.Deliveries != 2 || !nv.VisibleAt.IsZero() {
			e.Fatalf("Nack of the last delivery, after a lapse, reported %+v, want {Deliveries 2, DeadLettered, zero VisibleAt}", nv)
		}
		e.none(q, "a dead-lettered message")
	}},
	{name: "ReceiptAfterNackIsRefused", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = e.short() }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		nv := e.nack(q, d.Lease.Receipt, nil)
		e.gone(q.Ack(e.ctx(), d.Lease.Receipt), "Ack after Nack")
		_, err := q.Nack(e.ctx(), d.Lease.Receipt, nil)
		e.gone(err, "Nack after Nack")
		if d2 := e.appearsAt(q, nv.VisibleAt, true, "the nacked message"); d2.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2: the refused calls moved nothing", d2.Deliveries)
		}
	}},
	{name: "AReceiptEndedByAckNackOrRejectIsRefusedByEveryCall", run: func(e *env) {
		// A receipt that no longer names a live lease is LeaseExpired or
		// UnknownReceipt (API.md §5.7) whichever call it is handed to, and
		// nothing moves: an acknowledged message stays gone, a nacked one
		// stays in the queue with its count, a rejected one stays the dead
		// letter its Reject made.
		first := broker.NewError("FIRST", 0x2A000003, "first", secret)
		late := broker.NewError("LATE", 0x2A000004, "late", secret)
		type ending struct {
			name string
			end  func(q broker.Broker, r broker.ReceiptValue)
		}
		endings := []ending{
			{"Ack", func(q broker.Broker, r broker.ReceiptValue) { e.ack(q, r) }},
			{"Nack", func(q broker.Broker, r broker.ReceiptValue) { e.nack(q, r, first) }},
		}
		if e.caps.Rejecter {
			endings = append(endings, ending{"Reject", func(q broker.Broker, r broker.ReceiptValue) {
				if err := e.rejecter(q).Reject(e.ctx(), r, first); err != nil {
					e.Fatalf("Reject: %v", err)
				}
			}})
		}
		for _, end := range endings {
			q := e.queue(e.policy()) // no retry delay: a nacked message is receivable at once
			m := e.publish(q, "a")
			d := e.receiveOne(q)
			end.end(q, d.Lease.Receipt)
			e.settlesNothing(q, d.Lease.Receipt, late, func(call string) string { return call + " after " + end.name })
			switch end.name {
			case "Ack":
				e.none(q, "an acknowledged message, after the refused calls")
			case "Nack":
				d2 := e.appearsAt(q, e.now(), true, "the nacked message, after the refused calls")
				if d2.Message.ID != m.ID || d2.Deliveries != 2 {
					e.Fatalf("after Nack and refused calls: delivered %q #%d, want %q #2", d2.Message.ID, d2.Deliveries, m.ID)
				}
			case "Reject":
				e.none(q, "a rejected message, after the refused calls")
			}
			if !e.caps.DeadLetterReader {
				continue
			}
			dls := e.deadLetters(q)
			if end.name != "Reject" {
				if len(dls) != 0 {
					e.Fatalf("after %s and refused calls: %d dead letters, want none", end.name, len(dls))
				}
				continue
			}
			if len(dls) != 1 {
				e.Fatalf("after Reject and refused calls: %d dead letters, want 1", len(dls))
			}
			e.checkDeadLetter(dls[0], causeCase{name: "the Reject's cause", cause: first, reason: "FIRST", code: 0x2A000003, public: "first"}, m, "a", 1)
		}
	}},
	{name: "AReceiptEndedByNackRejectOrExtendCannotEndTheNextLease", run: func(e *env) {
		// "a holder that lost its claim must not be able to end somebody
		// else's turn": a receipt ended by a Nack, by a Reject whose dead
		// letter was then replayed, or replaced by Extend stays ended once
		// its message is leased again — LeaseExpired or UnknownReceipt
		// (API.md §5.7) whichever call it is handed to, moving nothing —
		// and the new holder's lease is untouched. The message is received
		// again at the instant it was handed back (no retry delay, a clock
		// that stands still), when a receipt that named the message and
		// its deadline would name the new lease too.
		late := broker.NewError("LATE", 0x2A000006, "late", secret)
		type ending struct {
			name string
			// end ends the lease of d and returns every receipt it ended.
			end func(q broker.Broker, d broker.DeliveryValue) []broker.ReceiptValue
		}
		endings := []ending{{"Nack", func(q broker.Broker, d broker.DeliveryValue) []broker.ReceiptValue {
			e.nack(q, d.Lease.Receipt, nil)
			return []broker.ReceiptValue{d.Lease.Receipt}
		}}}
		if e.caps.Rejecter && e.caps.DeadLetterManager {
			endings = append(endings, ending{"Reject and ReplayDeadLetter", func(q broker.Broker, d broker.DeliveryValue) []broker.ReceiptValue {
				if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, nil); err != nil {
					e.Fatalf("Reject: %v", err)
				}
				if err := e.manager(q).ReplayDeadLetter(e.ctx(), d.Message.ID); err != nil {
					e.Fatalf("ReplayDeadLetter: %v", err)
				}
				return []broker.ReceiptValue{d.Lease.Receipt}
			}})
		}
		if e.caps.LeaseExtender {
			endings = append(endings, ending{"Extend, then Nack", func(q broker.Broker, d broker.DeliveryValue) []broker.ReceiptValue {
				l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, time.Hour)
				if err != nil {
					e.Fatalf("Extend: %v", err)
				}
				e.nack(q, l.Receipt, nil)
				return []broker.ReceiptValue{d.Lease.Receipt, l.Receipt}
			}})
		}
		for _, end := range endings {
			q := e.queue(e.policy()) // no retry delay: a nacked message is receivable at once
			m := e.publish(q, "a")
			d := e.receiveOne(q)
			ended := end.end(q, d)
			d2 := e.appearsAt(q, e.now(), true, "the message after "+end.name)
			if d2.Message.ID != m.ID {
				e.Fatalf("after %s: delivered %q, want %q", end.name, d2.Message.ID, m.ID)
			}
			for _, r := range ended {
				what := func(call string) string {
					return fmt.Sprintf("%s of a receipt ended by %s, once its message is leased again", call, end.name)
				}
				if r == d2.Lease.Receipt {
					e.Fatalf("%s: the new lease has the receipt %q that %s ended", end.name, r, end.name)
				}
				e.settlesNothing(q, r, late, what)
			}
			e.none(q, "the message another consumer holds, after the refused calls")
			if err := q.Ack(e.ctx(), d2.Lease.Receipt); err != nil {
				e.Fatalf("after %s and refused calls with the ended receipt: the new holder's Ack: %v", end.name, err)
			}
			e.none(q, "the message its new holder acknowledged")
			if e.caps.DeadLetterReader {
				if dls := e.deadLetters(q); len(dls) != 0 {
					e.Fatalf("after %s and refused calls: %d dead letters, want none", end.name, len(dls))
				}
			}
		}
	}},
}

// checkInstant requires got to be between lo and hi: exactly lo on the
// suite's clock (where lo and hi are the same reading), within the
// tolerance otherwise.
func (e *env) checkInstant(got, lo, hi time.Time, what string) {
	e.Helper()
	if got.Before(lo.Add(-e.tol())) || got.After(hi.Add(e.tol())) {
		e.Fatalf("%s: %v is not within %v..%v (tolerance %v)", what, got, lo, hi, e.tol())
	}
}

// checkRetryCurve nacks the only message of q once per delay and requires
// each nack's VisibleAt to be that delay after it, and the message to be
// redelivered then and not before.
func (e *env) checkRetryCurve(q broker.Broker, delays []time.Duration) {
	e.Helper()
	d := e.receiveOne(q)
	for i, delay := range delays {
		before := e.now()
		nv := e.nack(q, d.Lease.Receipt, nil)
		after := e.now()
		if nv.Deliveries != i+1 || nv.DeadLettered {
			e.Fatalf("nack %d reported %+v, want Deliveries %d", i+1, nv, i+1)
		}
		e.checkInstant(nv.VisibleAt, before.Add(delay), after.Add(delay), "VisibleAt after failed delivery "+itoa(i+1))
		d = e.appearsAt(q, nv.VisibleAt, true, "redelivery after failed delivery "+itoa(i+1))
		if d.Deliveries != i+2 {
			e.Fatalf("delivery %d, want %d", d.Deliveries, i+2)
		}
	}
	e.ack(q, d.Lease.Receipt)
}

// extendCases: LeaseExtender.
var extendCases = []testCase{
	{name: "ExtendReturnsNewReceiptAndVoidsOld", needs: []string{"LeaseExtender"}, run: func(e *env) {
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		if e.clock != nil {
			e.clock.Advance(vt / 2)
		}
		before := e.now()
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, 3*vt)
		after := e.now()
		if err != nil {
			e.Fatalf("Extend: %v", err)
		}
		if l.Receipt == d.Lease.Receipt || l.Receipt == "" {
			e.Fatalf("Extend returned receipt %q, want a new one", l.Receipt)
		}
		e.checkInstant(l.ExpiresAt, before.Add(3*vt), after.Add(3*vt), "the extended ExpiresAt is measured from now")
		e.gone(q.Ack(e.ctx(), d.Lease.Receipt), "Ack with the receipt Extend replaced")
		_, err = e.extender(q).Extend(e.ctx(), d.Lease.Receipt, vt)
		e.gone(err, "Extend with the receipt Extend replaced")
		_, err = q.Nack(e.ctx(), d.Lease.Receipt, nil)
		e.gone(err, "Nack with the receipt Extend replaced")
		if e.caps.Rejecter {
			e.gone(e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, nil), "Reject with the receipt Extend replaced")
		}
		e.after(d.Lease.ExpiresAt)
		e.hiddenUntil(q, l.ExpiresAt, "past the old deadline, within the extended one")
		if e.clock != nil && e.caps.ExactExpiry {
			e.set(l.ExpiresAt.Add(-time.Nanosecond))
		}
		e.ack(q, l.Receipt)
	}},
	{name: "ExtendOnLastDeliveryRenewsItAndKeepsItTheLast", needs: []string{"LeaseExtender"}, run: func(e *env) {
		// The lease of a delivery that is the message's last is renewed
		// like any other, and the renewed lease is still the last one: when
		// it lapses the message is a dead letter, not a delivery beyond
		// MaxDeliveries.
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.VisibilityTimeout = vt
			p.MaxDeliveries = 1
		}))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, 3*vt)
		if err != nil {
			e.Fatalf("Extend of the last delivery's lease: %v", err)
		}
		e.after(d.Lease.ExpiresAt)
		e.hiddenUntil(q, l.ExpiresAt, "past the old deadline of the last delivery, within the extended one")
		l, err = e.extender(q).Extend(e.ctx(), l.Receipt, vt)
		if err != nil {
			e.Fatalf("Extend past the old deadline, within the extended one: %v: the last delivery's lease was not renewed", err)
		}
		e.lapse(l)
		e.none(q, "the message whose extended last lease lapsed")
		e.after(e.now().Add(e.short()))
		e.none(q, "the message whose extended last lease lapsed, later")
		if !e.caps.DeadLetterReader {
			return
		}
		var dls []broker.DeadLetterValue
		e.eventually("the message whose extended last lease lapsed is a dead letter", func() bool {
			dls = e.deadLetters(q)
			return len(dls) == 1
		})
		e.checkDeadLetter(dls[0], causeCase{name: "lease exhaustion", reason: broker.ReasonLeaseExpired}, m, "a", 1)
		e.checkInstant(dls[0].FailedAt, l.ExpiresAt, l.ExpiresAt, "FailedAt is when the extended last lease lapsed")
	}},
	{name: "ConcurrentExtendsOfOneReceiptRenewItOnce", needs: []string{"LeaseExtender"}, run: func(e *env) {
		// Extends racing on one receipt: one renews the lease, every other
		// finds the receipt replaced; no caller is handed a receipt that is
		// already void.
		const racers = 8
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		leases := make(chan broker.LeaseValue, racers)
		errs := make(chan error, racers)
		together(racers, func() {
			l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, time.Hour)
			if err != nil {
				errs <- err
				return
			}
			leases <- l
		})
		close(leases)
		close(errs)
		for err := range errs {
			e.gone(err, "an Extend that lost the race for its receipt")
		}
		var won []broker.LeaseValue
		for l := range leases {
			won = append(won, l)
		}
		if len(won) != 1 {
			e.Fatalf("%d of %d concurrent Extends of one receipt succeeded, want exactly one", len(won), racers)
		}
		e.ack(q, won[0].Receipt)
	}},
	{name: "ExtendKeepsDeliveries", needs: []string{"LeaseExtender"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		d := e.appearsAt(q, e.now(), true, "the nacked message")
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, time.Minute)
		if err != nil {
			e.Fatalf("Extend: %v", err)
		}
		if nv := e.nack(q, l.Receipt, nil); nv.Deliveries != 2 {
			e.Fatalf("Nack after Extend reported Deliveries %d, want 2: an extension is not a delivery", nv.Deliveries)
		}
	}},
	{name: "ExtendOfLapsedLeaseIsRefused", needs: []string{"LeaseExtender"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		_, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, time.Hour)
		e.isErr(err, broker.LeaseExpired, "Extend of a lapsed lease nobody else took")
		if d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message whose lease lapsed"); d2.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2: the lapsed lease was not renewed", d2.Deliveries)
		}
	}},
	{name: "ExtendNonPositiveIsMisconfigured", needs: []string{"LeaseExtender"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		for _, by := range []time.Duration{0, -time.Second} {
			_, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, by)
			e.isErr(err, broker.QueueMisconfigured, "Extend by "+by.String())
		}
		e.ack(q, d.Lease.Receipt) // the lease held is still valid
	}},
	{name: "ExtendPast2262IsMisconfiguredAndKeepsLease", needs: []string{"LeaseExtender"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		for _, by := range []time.Duration{math.MaxInt64, 2*broker.MaxDeadlineOffset + broker.MaxDeadlineOffset/2} {
			_, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, by)
			e.isErr(err, broker.QueueMisconfigured, "Extend by "+by.String())
		}
		e.ack(q, d.Lease.Receipt) // refused before anything moved
	}},
	{name: "ExtendByLessThanIsLeftShortensTheLease", needs: []string{"LeaseExtender"}, run: func(e *env) {
		// Extend renews the lease for a further by "measured from now":
		// a by shorter than what is left shortens it (a broker that kept
		// the later of the two deadlines would hold the message too long).
		vt := 4 * e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		by := e.short()
		before := e.now()
		l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, by)
		after := e.now()
		if err != nil {
			e.Fatalf("Extend: %v", err)
		}
		e.checkInstant(l.ExpiresAt, before.Add(by), after.Add(by), "ExpiresAt of a lease extended by less than was left")
		e.hiddenUntil(q, l.ExpiresAt, "before the shortened lease lapses")
		d2 := e.appearsAt(q, l.ExpiresAt, e.caps.ExactExpiry, "the message whose lease was shortened")
		if d2.Message.ID != m.ID || d2.Deliveries != 2 {
			e.Fatalf("redelivered %q #%d, want %q #2", d2.Message.ID, d2.Deliveries, m.ID)
		}
	}},
	{name: "CallsAfterAnExtendActOnTheRenewedLease", needs: []string{"LeaseExtender"}, run: func(e *env) {
		// An extended lease is a lease like any other: Ack removes its
		// message for good, Nack hands it back after RetryDelay from the
		// nack, Reject dead-letters it, and Extend renews it from now,
		// none of them bound to the deadline the first Extend set.
		vt := 4 * e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt; p.RetryDelay = vt }))
		for _, p := range []string{"acked", "nacked", "renewed", "rejected"} {
			e.publish(q, p)
		}
		ds := e.receive(q, 4)
		if len(ds) != 4 {
			e.Fatalf("received %d, want 4", len(ds))
		}
		var last time.Time
		for _, d := range ds {
			l, err := e.extender(q).Extend(e.ctx(), d.Lease.Receipt, e.short())
			if err != nil {
				e.Fatalf("Extend: %v", err)
			}
			last = l.ExpiresAt
			switch string(d.Message.Payload) {
			case "acked":
				err = q.Ack(e.ctx(), l.Receipt)
			case "nacked":
				_, err = q.Nack(e.ctx(), l.Receipt, nil)
			case "renewed":
				_, err = e.extender(q).Extend(e.ctx(), l.Receipt, vt)
			case "rejected":
				if e.caps.Rejecter {
					err = e.rejecter(q).Reject(e.ctx(), l.Receipt, nil)
				} else {
					err = q.Ack(e.ctx(), l.Receipt)
				}
			}
			if err != nil {
				e.Fatalf("%s: %v", d.Message.Payload, err)
			}
		}
		e.after(last.Add(e.short() / 2))
		if got := e.receive(q, 10); len(got) != 0 {
			e.Fatalf("delivered %q again after its extended lease was acked, nacked with a retry delay, renewed or rejected", payloads(got))
		}
	}},
}

// settlesNothing hands receipt r, whose lease ended, to every settling
// call the broker has (Nack, Reject, Extend, then Ack), and requires each
// to refuse it as gone (see gone); what names the call in a failure.
func (e *env) settlesNothing(q broker.Broker, r broker.ReceiptValue, cause error, what func(call string) string) {
	e.Helper()
	_, err := q.Nack(e.ctx(), r, cause)
	e.gone(err, what("Nack"))
	if e.caps.Rejecter {
		e.gone(e.rejecter(q).Reject(e.ctx(), r, cause), what("Reject"))
	}
	if e.caps.LeaseExtender {
		_, err := e.extender(q).Extend(e.ctx(), r, time.Hour)
		e.gone(err, what("Extend"))
	}
	e.gone(q.Ack(e.ctx(), r), what("Ack"))
}
