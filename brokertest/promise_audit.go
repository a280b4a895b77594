package brokertest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// auditCases: promises of the port's doc comments that the groups above
// check only where a broker that broke them would still pass — a read of
// fewer dead letters than there are, only when they died in FailedAt
// order; a signal, only the first Wake of a queue hands out; a retry curve
// followed to its fourth delivery, not past the 64th; and Consume, never
// watched for what it must not call.
var auditCases = []testCase{
	{name: "DeadLettersUpToMaxAreTheOldestByFailedAt", needs: []string{"Clock", "Rejecter", "DeadLetterReader"}, run: func(e *env) {
		// "DeadLetters returns up to max dead letters, oldest first", and
		// oldest is by FailedAt (API.md §5.1): a read of max below the
		// count returns the max oldest, not the first max to die nor the
		// first the broker looked at. Here they die out of FailedAt order
		// (the clock steps back between two Rejects) and one dies by a
		// lapse nobody looked at until the read.
		vt := 10 * time.Minute
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.VisibilityTimeout = vt }))
		for _, p := range []string{"a", "b", "c", "d"} {
			e.publish(q, p)
		}
		first := e.receive(q, 1) // its lease lapses at t0+10m
		if len(first) != 1 {
			e.Fatalf("received %d, want 1", len(first))
		}
		e.set(t0.Add(time.Minute))
		rest := e.receive(q, 3) // leased until t0+11m
		if len(rest) != 3 {
			e.Fatalf("received %d of the 3 left", len(rest))
		}
		a, b, c, d := first[0], rest[0], rest[1], rest[2]
		reject := func(dv broker.DeliveryValue, at time.Duration) {
			e.Helper()
			e.set(t0.Add(at))
			if err := e.rejecter(q).Reject(e.ctx(), dv.Lease.Receipt, nil); err != nil {
				e.Fatalf("Reject of %s at t0+%v: %v", dv.Message.Payload, at, err)
			}
		}
		reject(c, 5*time.Minute)
		reject(d, 3*time.Minute) // the clock stepped back: d died before c
		reject(b, 10*time.Minute+30*time.Second)
		e.set(t0.Add(12 * time.Minute)) // a died at t0+10m, with nobody looking
		want := []string{d.Message.ID, c.Message.ID, a.Message.ID, b.Message.ID}
		failedAt := []time.Duration{3 * time.Minute, 5 * time.Minute, 10 * time.Minute, 10*time.Minute + 30*time.Second}
		for n := 1; n <= len(want); n++ {
			dls, err := e.reader(q).DeadLetters(e.ctx(), n)
			if err != nil {
				e.Fatalf("DeadLetters(%d): %v", n, err)
			}
			if got := deadIDs(dls); !equalStrings(got, want[:n]) {
				e.Fatalf("DeadLetters(%d) returned %v, want the %d oldest by FailedAt %v (d, c, a, b)", n, got, n, want[:n])
			}
			for i, dl := range dls {
				e.sameInstant(t0.Add(failedAt[i]), dl.FailedAt, "FailedAt of dead letter "+itoa(i+1))
			}
		}
	}},
	{name: "DeadLettersUpToMaxPutALapseBeforeALaterReject", needs: []string{"LeaseExtender", "Rejecter", "DeadLetterReader"}, run: func(e *env) {
		// As DeadLettersUpToMaxAreTheOldestByFailedAt, on any clock: a
		// message whose last lease lapsed died then, though the broker may
		// learn of it only at a later call, after another message was
		// rejected; DeadLetters(1) is the lapsed one.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.VisibilityTimeout = e.short() }))
		e.publish(q, "lapses")
		e.publish(q, "rejected")
		ds := e.receive(q, 2)
		if len(ds) != 2 {
			e.Fatalf("received %d, want 2", len(ds))
		}
		lapsed, rejected := ds[0], ds[1]
		l, err := e.extender(q).Extend(e.ctx(), rejected.Lease.Receipt, 10*e.short())
		if err != nil {
			e.Fatalf("Extend: %v", err)
		}
		e.lapse(lapsed.Lease)
		e.after(lapsed.Lease.ExpiresAt.Add(e.tol())) // past the lapse, whatever the tolerance
		if err := e.rejecter(q).Reject(e.ctx(), l.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.eventually("both messages are dead letters", func() bool {
			e.none(q, "two dead messages")
			return len(e.deadLetters(q)) == 2
		})
		want := []string{lapsed.Message.ID, rejected.Message.ID}
		for n := 1; n <= 2; n++ {
			dls, err := e.reader(q).DeadLetters(e.ctx(), n)
			if err != nil {
				e.Fatalf("DeadLetters(%d): %v", n, err)
			}
			if got := deadIDs(dls); !equalStrings(got, want[:n]) {
				e.Fatalf("DeadLetters(%d) returned %v, want %v: the lapse came first, the Reject after it", n, got, want[:n])
			}
		}
	}},
	{name: "RejectAfterANackRecordsItsOwnCause", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		// Reject records its cause "as Nack records the cause of a message
		// that ran out of attempts": the cause of the failure that ended
		// it, whatever an earlier Nack reported — a nil cause included,
		// which is UNEXPLAINED and not the earlier failure's reason.
		// (NackOnLastDeliveryRecordsClassifiedCause checks the same of a
		// last Nack; RejectRecordsClassifiedCause rejects first deliveries
		// only.)
		for _, c := range causeCases() {
			q := e.queue(e.policy())
			m := e.publish(q, secret)
			e.nack(q, e.receiveOne(q).Lease.Receipt, broker.NewError("FIRST_FAILURE", 9, "first", secret))
			d := e.appearsAt(q, e.now(), true, "the nacked message")
			if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, c.cause); err != nil {
				e.Fatalf("cause %s: Reject: %v", c.name, err)
			}
			dls := e.deadLetters(q)
			if len(dls) != 1 {
				e.Fatalf("cause %s: %d dead letters, want 1", c.name, len(dls))
			}
			e.checkDeadLetter(dls[0], c, m, secret, 2)
		}
	}},
	{name: "WakeHandsOutAnOpenSignalAfterTheLastOneFired", needs: []string{"Waker"}, run: func(e *env) {
		// The Signal "is closed by the NEXT event that may make a message
		// receivable": once one has fired, the signal Wake hands out after
		// it waits for another event, or an idle consumer would wake at
		// once for ever, which is polling. Neither a Receive nor an Ack
		// is such an event.
		q := e.queue(e.policy())
		open := func(w broker.WakeValue, what string) {
			e.Helper()
			if e.clock == nil {
				time.Sleep(50 * time.Millisecond) // room for an asynchronous wrong wake-up
			}
			if closed(w.Signal) {
				e.Fatalf("the signal Wake handed out %s is already closed: no event came after it", what)
			}
		}
		w := e.waker(q).Wake()
		e.publish(q, "a")
		e.signalled(w, "a Publish")
		d := e.receiveOne(q)
		w = e.waker(q).Wake()
		open(w, "after a Publish fired the last one and the message was leased")
		e.nack(q, d.Lease.Receipt, nil)
		e.signalled(w, "a Nack that hands the message back")
		d = e.appearsAt(q, e.now(), true, "the nacked message")
		e.ack(q, d.Lease.Receipt)
		open(e.waker(q).Wake(), "after a Nack fired the last one and the message was acknowledged")
	}},
	{name: "RetryDelayStaysAtMaxRetryDelayPastSixtyFourDeliveries", needs: []string{"Clock"}, run: func(e *env) {
		// "a message nacked on its n-th delivery waits RetryDelay ×
		// 2^(n−1), held at MaxRetryDelay": held, however large n grows. A
		// doubling that is a shift of a Duration wraps at n = 64 and
		// beyond, to zero or a negative wait, and the message would come
		// back at once.
		const base, ceiling = time.Second, time.Hour
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.RetryDelay = base
			p.MaxRetryDelay = ceiling
			p.MaxDeliveries = 80
		}))
		e.publish(q, "a")
		var delays []time.Duration
		for n := 1; n <= 70; n++ {
			delay := ceiling
			if n <= 12 && base<<(n-1) < ceiling { // 2^12 s is past an hour
				delay = base << (n - 1)
			}
			delays = append(delays, delay)
		}
		e.checkRetryCurve(q, delays)
	}},
	{name: "ConsumeNeverDeletesADeadLetter", needs: []string{"Rejecter", "Waker", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// DeleteDeadLetter "is the only call in the domain that destroys a
		// message without its consumer's acknowledgement, and it is never
		// made by the SDK itself": Consume, handed a broker that can
		// delete, dead-letters by a last Nack, by a Reject and after a
		// panic, and leaves every dead letter where it is.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
		want := map[string]bool{}
		for _, p := range []string{"fail", "reject", "panic"} {
			want[e.publish(q, p).ID] = true
		}
		deletes := &atomic.Int32{}
		spy := deleteSpy{Broker: q, Rejecter: e.rejecter(q), Waker: e.waker(q), DeadLetterReader: e.reader(q),
			DeadLetterManager: e.manager(q), deletes: deletes}
		var mu sync.Mutex
		handled := map[string]bool{}
		e.consumeWith(spy, func(_ context.Context, d broker.DeliveryValue) error {
			mu.Lock()
			handled[d.Message.ID] = true
			mu.Unlock()
			switch string(d.Message.Payload) {
			case "fail":
				return broker.NewError("FAILED", 0x2A00000B, "failed", secret)
			case "reject":
				return broker.DoNotRetry(broker.NewError("REFUSED", 0x2A00000C, "refused", secret))
			}
			panic("handler bug")
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == len(want) && (deletes.Load() > 0 || len(e.deadLetters(q)) == len(want))
		}, broker.ConsumeOptions{Batch: 4, Concurrency: 2, PollInterval: 10 * time.Millisecond})
		if n := deletes.Load(); n != 0 {
			e.Fatalf("Consume called DeleteDeadLetter %d times", n)
		}
		got := deadIDs(e.deadLetters(q))
		for _, id := range got {
			delete(want, id)
		}
		if len(got) != 3 || len(want) != 0 {
			e.Fatalf("dead letters %v after Consume, want the 3 messages it was handed", got)
		}
	}},
}

// deleteSpy is a broker with the optional interfaces Consume may use and
// a DeadLetterManager whose DeleteDeadLetter calls it counts before it
// passes them on.
type deleteSpy struct {
	broker.Broker
	broker.Rejecter
	broker.Waker
	broker.DeadLetterReader
	broker.DeadLetterManager
	deletes *atomic.Int32
}

func (s deleteSpy) DeleteDeadLetter(ctx context.Context, id string) error {
	s.deletes.Add(1)
	return s.DeadLetterManager.DeleteDeadLetter(ctx, id)
}
