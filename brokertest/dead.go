package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// secret is the private text of every cause the suite reports, and the
// payload of the message it fails: it must reach no dead letter.
const secret = "SECRET-4111-1111"

// The cause types a user may write without importing package broker.
type (
	userClassified struct{ reason, public string }
	codeOnly       struct{ code uint32 }
	publicOnly     struct{ public string }
)

func (e userClassified) Error() string  { return e.reason + ": " + secret }
func (e userClassified) Reason() string { return e.reason }
func (e userClassified) Code() uint32   { return 0x2A000001 }
func (e userClassified) Public() string { return e.public }
func (e codeOnly) Error() string        { return "code only: " + secret }
func (e codeOnly) Code() uint32         { return e.code }
func (e publicOnly) Error() string      { return "public only: " + secret }
func (e publicOnly) Public() string     { return e.public }

// causeCase is a cause of one shape and what a dead letter records of it
// (API.md "Classified causes" and §5.9).
type causeCase struct {
	name   string
	cause  error
	reason string
	code   uint32
	public string
}

func causeCases() []causeCase {
	card := broker.NewError("CARD_DECLINED", 0x05020001, "the card was declined", secret)
	return []causeCase{
		{"nil", nil, broker.ReasonUnexplained, 0, ""},
		{"plain error", errors.New("boom " + secret), broker.ReasonUnclassified, 0, ""},
		{"broker.Error", card, "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"wrapped broker.Error", fmt.Errorf("charging %s: %w", secret, card), "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"broker.Error wrapping a plain error", card.Wrap(errors.New(secret)), "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"user type", userClassified{reason: "USER_REASON", public: "user public"}, "USER_REASON", 0x2A000001, "user public"},
		{"code only", codeOnly{code: 0x01020304}, broker.ReasonUnclassified, 0x01020304, ""},
		{"public only", publicOnly{public: "shown"}, broker.ReasonUnclassified, 0, "shown"},
		{"DoNotRetry plain", broker.DoNotRetry(errors.New(secret)), broker.ReasonNotRetryable, 0, ""},
		{"DoNotRetry nil", broker.DoNotRetry(nil), broker.ReasonNotRetryable, 0, ""},
		{"DoNotRetry classified", broker.DoNotRetry(card), "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"empty reason", broker.NewError("", 7, "pub", secret), broker.ReasonUnclassified, 7, "pub"},
		{"reason that is not SCREAMING_SNAKE", broker.NewError("declined: "+secret, 7, "pub", ""), broker.ReasonUnclassified, 7, "pub"},
		{"malformed reason wrapping a classified error", broker.NewError("Card_Declined", 0, "", "").Wrap(card), "CARD_DECLINED", 0x05020001, "the card was declined"},
	}
}

// checkDeadLetter requires dl to record c, and the message m with
// deliveries, and nothing private.
func (e *env) checkDeadLetter(dl broker.DeadLetterValue, c causeCase, m broker.MessageValue, payload string, deliveries int) {
	e.Helper()
	if dl.Reason != c.reason || dl.Code != c.code || dl.Cause != c.public {
		e.Fatalf("cause %s: dead letter records reason %q code %s cause %q, want %q %s %q",
			c.name, dl.Reason, broker.FormatCode(dl.Code), dl.Cause, c.reason, broker.FormatCode(c.code), c.public)
	}
	if strings.Contains(dl.Reason+dl.Cause, secret) || (c.cause != nil && dl.Cause == c.cause.Error()) {
		e.Fatalf("cause %s: dead letter carries the error text or private detail: reason %q cause %q", c.name, dl.Reason, dl.Cause)
	}
	if dl.Message.ID != m.ID || string(dl.Message.Payload) != payload || dl.Deliveries != deliveries {
		e.Fatalf("cause %s: dead letter of %q %q #%d, want %q %q #%d", c.name, dl.Message.ID, dl.Message.Payload, dl.Deliveries, m.ID, payload, deliveries)
	}
	e.sameInstant(m.EnqueuedAt, dl.Message.EnqueuedAt, "dead letter's EnqueuedAt")
}

// deadCases: Rejecter, DeadLetterReader, DeadLetterManager, and the
// classified-cause rule.
var deadCases = []testCase{
	{name: "RejectRecordsClassifiedCause", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		for _, c := range causeCases() {
			q := e.queue(e.policy())
			m := e.publish(q, secret)
			d := e.receiveOne(q)
			if e.clock != nil {
				e.clock.Advance(time.Second)
			}
			before := e.now()
			if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, c.cause); err != nil {
				e.Fatalf("cause %s: Reject: %v", c.name, err)
			}
			after := e.now()
			e.none(q, "a rejected message")
			dls := e.deadLetters(q)
			if len(dls) != 1 {
				e.Fatalf("cause %s: %d dead letters, want 1", c.name, len(dls))
			}
			e.checkDeadLetter(dls[0], c, m, secret, 1)
			e.checkInstant(dls[0].FailedAt, before, after, "FailedAt is when Reject ran")
		}
	}},
	{name: "NackOnLastDeliveryRecordsClassifiedCause", needs: []string{"DeadLetterReader"}, run: func(e *env) {
		for _, c := range causeCases() {
			q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
			m := e.publish(q, secret)
			e.nack(q, e.receiveOne(q).Lease.Receipt, broker.NewError("FIRST_FAILURE", 9, "first", secret))
			d := e.appearsAt(q, e.now(), true, "the nacked message")
			if e.clock != nil {
				e.clock.Advance(time.Minute)
			}
			before := e.now()
			if nv := e.nack(q, d.Lease.Receipt, c.cause); !nv.DeadLettered {
				e.Fatalf("cause %s: Nack of the last delivery reported %+v", c.name, nv)
			}
			after := e.now()
			dls := e.deadLetters(q)
			if len(dls) != 1 {
				e.Fatalf("cause %s: %d dead letters, want 1", c.name, len(dls))
			}
			e.checkDeadLetter(dls[0], c, m, secret, 2) // the LAST failure's cause; Deliveries = MaxDeliveries
			e.checkInstant(dls[0].FailedAt, before, after, "FailedAt is when the last Nack ran")
		}
	}},
	{name: "RejectKeepsDeliveriesBelowMax", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		d := e.appearsAt(q, e.now(), true, "the nacked message")
		if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, broker.DoNotRetry(nil)); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.none(q, "a rejected message")
		if dls := e.deadLetters(q); len(dls) != 1 || dls[0].Deliveries != 2 {
			e.Fatalf("dead letters %+v, want one with Deliveries 2 (MaxDeliveries is 5)", dls)
		}
	}},
	{name: "RejectAfterALapseCountsTheLapsedDelivery", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		// The dead letter of a Reject records "the count the message
		// had": its deliveries, a delivery whose consumer died without a
		// word among them (RejectKeepsDeliveriesBelowMax counts a nacked
		// one).
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		d = e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message whose consumer died")
		if d.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d.Deliveries)
		}
		card := broker.NewError("CARD_DECLINED", 0x05020001, "the card was declined", secret)
		if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, card); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		dls := e.deadLetters(q)
		if len(dls) != 1 {
			e.Fatalf("%d dead letters, want 1", len(dls))
		}
		e.checkDeadLetter(dls[0], causeCase{name: "a Reject after a lapse", cause: card, reason: "CARD_DECLINED", code: 0x05020001, public: "the card was declined"}, m, "a", 2)
	}},
	{name: "RejectOfLapsedOrEndedLeaseMovesNothing", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		e.isErr(e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, nil), broker.LeaseExpired, "Reject of a lapsed lease")
		d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message after a refused Reject")
		if err := e.rejecter(q).Reject(e.ctx(), d2.Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.gone(e.rejecter(q).Reject(e.ctx(), d2.Lease.Receipt, nil), "a second Reject of one receipt")
		e.gone(q.Ack(e.ctx(), d2.Lease.Receipt), "Ack after Reject")
		if dls := e.deadLetters(q); len(dls) != 1 {
			e.Fatalf("%d dead letters, want 1", len(dls))
		}
	}},
	{name: "LeaseExhaustionDeadLettersWithLeaseExpired", needs: []string{"DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 2
			p.VisibilityTimeout = e.short()
		}))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		d = e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "after the first consumer died")
		if d.Deliveries != 2 {
			e.Fatalf("delivery %d, want 2", d.Deliveries)
		}
		e.lapse(d.Lease) // the last consumer dies too
		var dls []broker.DeadLetterValue
		e.eventually("the message whose last lease lapsed is a dead letter", func() bool {
			e.none(q, "a message whose last lease lapsed")
			dls = e.deadLetters(q)
			return len(dls) == 1
		})
		e.checkDeadLetter(dls[0], causeCase{name: "lease exhaustion", reason: broker.ReasonLeaseExpired}, m, "a", 2)
		e.checkInstant(dls[0].FailedAt, d.Lease.ExpiresAt, d.Lease.ExpiresAt, "FailedAt is when the last lease lapsed")
	}},
	{name: "LapsedReceiptOfTheLastDeliveryLeavesTheDeadLetter", needs: []string{"DeadLetterReader"}, run: func(e *env) {
		// A receipt whose lease lapsed on the message's last delivery is
		// LeaseExpired and removes nothing: the message is in the
		// dead-letter store, and stays there as the lapse left it, whatever
		// the consumer that lost its claim then reports.
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 1
			p.VisibilityTimeout = e.short()
		}))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		r, late := d.Lease.Receipt, broker.NewError("TOO_LATE", 0x2A000002, "too late", secret)
		e.isErr(q.Ack(e.ctx(), r), broker.LeaseExpired, "Ack of the last delivery's lapsed lease")
		_, err := q.Nack(e.ctx(), r, late)
		e.isErr(err, broker.LeaseExpired, "Nack of the last delivery's lapsed lease")
		if e.caps.Rejecter {
			e.isErr(e.rejecter(q).Reject(e.ctx(), r, late), broker.LeaseExpired, "Reject of the last delivery's lapsed lease")
		}
		if e.caps.LeaseExtender {
			_, err := e.extender(q).Extend(e.ctx(), r, time.Hour)
			e.isErr(err, broker.LeaseExpired, "Extend of the last delivery's lapsed lease")
		}
		var dls []broker.DeadLetterValue
		e.eventually("the message whose last lease lapsed is a dead letter", func() bool {
			dls = e.deadLetters(q)
			return len(dls) == 1
		})
		e.checkDeadLetter(dls[0], causeCase{name: "lease exhaustion, then refused calls", reason: broker.ReasonLeaseExpired}, m, "a", 1)
		e.checkInstant(dls[0].FailedAt, d.Lease.ExpiresAt, d.Lease.ExpiresAt, "FailedAt is when the last lease lapsed")
		e.none(q, "a dead letter, after the refused calls")
	}},
	{name: "DeadLettersOldestFailedAtFirst", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy())
		a, b, c := e.publish(q, "a"), e.publish(q, "b"), e.publish(q, "c")
		ds := e.receive(q, 3)
		byID := map[string]broker.ReceiptValue{}
		for _, d := range ds {
			byID[d.Message.ID] = d.Lease.Receipt
		}
		for _, id := range []string{b.ID, a.ID, c.ID} {
			if e.clock != nil {
				e.clock.Advance(time.Second)
			} else {
				time.Sleep(20 * time.Millisecond) // distinct FailedAt instants on a coarse server clock
			}
			if err := e.rejecter(q).Reject(e.ctx(), byID[id], nil); err != nil {
				e.Fatalf("Reject: %v", err)
			}
		}
		var got []string
		for _, dl := range e.deadLetters(q) {
			got = append(got, dl.Message.ID)
		}
		if want := []string{b.ID, a.ID, c.ID}; !equalStrings(got, want) {
			e.Fatalf("dead letters %v, want by FailedAt %v", got, want)
		}
	}},
	{name: "DeadLettersOrderIncludesLapsesNobodyLookedAt", needs: []string{"Clock", "Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.VisibilityTimeout = 30 * time.Second }))
		x1, x2, x3 := e.publish(q, "x1"), e.publish(q, "x2"), e.publish(q, "x3")
		ds := e.receive(q, 2) // x1 and x2, leased until t0+30s
		e.set(t0.Add(20 * time.Second))
		d3 := e.receiveOne(q) // x3, leased until t0+50s
		e.set(t0.Add(25 * time.Second))
		if err := e.rejecter(q).Reject(e.ctx(), ds[1].Lease.Receipt, nil); err != nil { // x2 dies at 25 s
			e.Fatalf("Reject: %v", err)
		}
		e.set(t0.Add(40 * time.Second))
		if err := e.rejecter(q).Reject(e.ctx(), d3.Lease.Receipt, nil); err != nil { // x3 dies at 40 s; x1 died at 30 s
			e.Fatalf("Reject: %v", err)
		}
		e.set(t0.Add(time.Minute))
		dls := e.deadLetters(q)
		var got []string
		for _, dl := range dls {
			got = append(got, dl.Message.ID)
		}
		if want := []string{x2.ID, x1.ID, x3.ID}; !equalStrings(got, want) {
			e.Fatalf("dead letters %v, want by FailedAt %v (x1's last lease lapsed at 30 s)", got, want)
		}
		e.sameInstant(t0.Add(30*time.Second), dls[1].FailedAt, "FailedAt of the lapse")
	}},
	{name: "DeadLettersDoesNotRemoveAndReturnsUpToMax", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy())
		for range 4 {
			e.publish(q, "a")
		}
		for _, d := range e.receive(q, 4) {
			if e.clock != nil {
				e.clock.Advance(time.Second)
			}
			if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, nil); err != nil {
				e.Fatalf("Reject: %v", err)
			}
		}
		first, second := e.deadLetters(q), e.deadLetters(q)
		if len(first) != 4 || len(second) != 4 {
			e.Fatalf("read %d then %d dead letters, want 4 both times: a read removes nothing", len(first), len(second))
		}
		two, err := e.reader(q).DeadLetters(e.ctx(), 2)
		if err != nil || len(two) != 2 || two[0].Message.ID != first[0].Message.ID || two[1].Message.ID != first[1].Message.ID {
			e.Fatalf("DeadLetters(2): %v, %v; want the oldest two of %d", two, err, len(first))
		}
		for _, max := range []int{0, -3} {
			_, err := e.reader(q).DeadLetters(e.ctx(), max)
			e.isErr(err, broker.InvalidBatchSize, "DeadLetters max "+itoa(max))
		}
		e.none(q, "dead letters are not receivable")
	}},
	{name: "DeadLetterPayloadBelongsToReceiver", needs: []string{"Rejecter", "DeadLetterReader"}, run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "payload")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		dl := e.deadLetters(q)[0]
		copy(dl.Message.Payload, "MUTATED")
		if got := string(e.deadLetters(q)[0].Message.Payload); got != "payload" {
			e.Fatalf("dead letter payload %q after a reader mutated its copy, want %q", got, "payload")
		}
	}},
	{name: "ReplayResetsDeliveriesKeepsIDPayloadAndEnqueuedAt", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
		m := e.publish(q, "work")
		d := e.receiveOne(q)
		if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, broker.NewError("BAD", 1, "bad", "")); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.after(e.now().Add(e.short())) // so that a replay stamping a new EnqueuedAt shows
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		if dls := e.deadLetters(q); len(dls) != 0 {
			e.Fatalf("%d dead letters after the replay, want none: the record is gone", len(dls))
		}
		r := e.appearsAt(q, e.now(), true, "the replayed message, visible at once")
		if r.Message.ID != m.ID || r.Deliveries != 1 || string(r.Message.Payload) != "work" {
			e.Fatalf("replayed %q #%d %q, want %q #1 %q", r.Message.ID, r.Deliveries, r.Message.Payload, m.ID, "work")
		}
		e.sameInstant(m.EnqueuedAt, r.Message.EnqueuedAt, "a replayed message keeps its EnqueuedAt")
		if nv := e.nack(q, r.Lease.Receipt, nil); nv.DeadLettered {
			e.Fatalf("the first delivery after a replay dead-lettered: it gets MaxDeliveries attempts again")
		}
		r = e.appearsAt(q, e.now(), true, "the nacked message")
		if nv := e.nack(q, r.Lease.Receipt, nil); !nv.DeadLettered {
			e.Fatalf("the second delivery after a replay (MaxDeliveries 2) was not the last: %+v", nv)
		}
	}},
	{name: "ReplayMovesOnlyTheNamedDeadLetter", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		q := e.queue(e.policy())
		first, m, last := e.rejectAll(q)
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		if got := deadIDs(e.deadLetters(q)); !sameSet(got, []string{first.ID, last.ID}) {
			e.Fatalf("dead letters after the replay of %q: %v, want only %q and %q", m.ID, got, first.ID, last.ID)
		}
		r := e.appearsAt(q, e.now(), true, "the replayed message")
		if r.Message.ID != m.ID || string(r.Message.Payload) != "b" {
			e.Fatalf("replayed %q %q, want %q %q: the one named, neither the oldest nor the newest", r.Message.ID, r.Message.Payload, m.ID, "b")
		}
	}},
	{name: "ReplayIntoAFullQueueIsQueueFullAndMovesNothing", needs: []string{"Capacity", "Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// Capacity bounds the live messages whichever way they come in; a
		// refused replay leaves its dead letter where it was, to be
		// replayed once there is room.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
		m := e.publish(q, "dead")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, broker.NewError("BAD", 1, "bad", "")); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.publish(q, "filler")
		e.isErr(e.manager(q).ReplayDeadLetter(e.ctx(), m.ID), broker.QueueFull, "a replay into a queue at its Capacity of 1")
		if got := deadIDs(e.deadLetters(q)); !sameSet(got, []string{m.ID}) {
			e.Fatalf("dead letters after the refused replay: %v, want %q still there", got, m.ID)
		}
		e.ack(q, e.receiveOne(q).Lease.Receipt)
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter once the filler was acked: %v", err)
		}
		if r := e.appearsAt(q, e.now(), true, "the replayed message"); r.Message.ID != m.ID || string(r.Message.Payload) != "dead" {
			e.Fatalf("replayed %q %q, want %q %q", r.Message.ID, r.Message.Payload, m.ID, "dead")
		}
	}},
	{name: "ReplayedMessageIsReceivedInItsEnqueueOrder", needs: []string{"OldestFirst", "Rejecter", "DeadLetterManager"}, run: func(e *env) {
		// A replayed message keeps its EnqueuedAt, the key a FIFO
		// implementation sorts on: it comes before the messages published
		// after it, whether they came before or after the replay.
		q := e.queue(e.policy())
		tick := func() {
			if e.clock != nil {
				e.clock.Advance(time.Second)
			}
		}
		a := e.publish(q, "a")
		tick()
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		b := e.publish(q, "b")
		tick()
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), a.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		c := e.publish(q, "c")
		var got []string
		for range 3 {
			got = append(got, ids(e.receive(q, 1))...)
		}
		if want := []string{a.ID, b.ID, c.ID}; !equalStrings(got, want) {
			e.Fatalf("received %v, want %v: a replayed message sorts by its EnqueuedAt", got, want)
		}
	}},
	{name: "ReplayOfLeaseExhaustedMessage", needs: []string{"DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.VisibilityTimeout = e.short() }))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		e.eventually("the replay of a message whose last lease lapsed", func() bool {
			err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID)
			if err != nil && !errors.Is(err, broker.DeadLetterNotFound) {
				e.Fatalf("ReplayDeadLetter: %v", err)
			}
			return err == nil
		})
		r := e.appearsAt(q, e.now(), true, "the replayed message")
		if r.Message.ID != m.ID || r.Deliveries != 1 {
			e.Fatalf("replayed %q #%d, want %q #1", r.Message.ID, r.Deliveries, m.ID)
		}
	}},
	{name: "ReplayOrDeleteOfUnknownIsDeadLetterNotFound", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		q, other := e.queue(e.policy()), e.queue(e.policy())
		live := e.publish(q, "live")
		od := e.publish(other, "dead elsewhere")
		if err := e.rejecter(other).Reject(e.ctx(), e.receiveOne(other).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		for _, id := range []string{"", "nope", live.ID, od.ID + "0", strings.Repeat("f", len(od.ID))} {
			e.isErr(e.manager(q).ReplayDeadLetter(e.ctx(), id), broker.DeadLetterNotFound, "ReplayDeadLetter("+id+")")
			e.isErr(e.manager(q).DeleteDeadLetter(e.ctx(), id), broker.DeadLetterNotFound, "DeleteDeadLetter("+id+")")
		}
		if d := e.receiveOne(q); d.Message.ID != live.ID || d.Deliveries != 1 {
			e.Fatalf("delivered %q #%d, want %q #1: nothing was queued or reset", d.Message.ID, d.Deliveries, live.ID)
		}
		e.none(q, "nothing was queued by a refused replay")
		if dls := e.deadLetters(other); len(dls) != 1 {
			e.Fatalf("the other queue has %d dead letters, want its 1", len(dls))
		}
	}},
	{name: "DeleteDeadLetterRemovesForGood", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		q := e.queue(e.policy())
		// The one deleted is the one named, neither the oldest nor the
		// newest dead letter.
		first, m, last := e.rejectAll(q)
		if err := e.manager(q).DeleteDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("DeleteDeadLetter: %v", err)
		}
		if got := deadIDs(e.deadLetters(q)); !sameSet(got, []string{first.ID, last.ID}) {
			e.Fatalf("dead letters after the delete: %v, want only %q and %q", got, first.ID, last.ID)
		}
		e.isErr(e.manager(q).DeleteDeadLetter(e.ctx(), m.ID), broker.DeadLetterNotFound, "a second delete")
		e.isErr(e.manager(q).ReplayDeadLetter(e.ctx(), m.ID), broker.DeadLetterNotFound, "a replay of a deleted dead letter")
		e.none(q, "a deleted dead letter")
	}},
	{name: "ConcurrentDeletesOfOneDeadLetterRemoveItOnce", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// Of deletes racing on one dead letter, one removes it and every
		// other finds it gone: DeadLetterNotFound, never another error.
		q, _ := e.raceOnOneDeadLetter("delete", func(q broker.Broker, id string) error {
			return e.manager(q).DeleteDeadLetter(e.ctx(), id)
		})
		if dls := e.deadLetters(q); len(dls) != 0 {
			e.Fatalf("dead letters %v after the deletes, want none", deadIDs(dls))
		}
	}},
	{name: "ReplayOrDeleteOfALeasedOrDelayedMessageMovesNothing", needs: []string{"DeadLetterManager"}, run: func(e *env) {
		// Only a dead letter may be replayed or deleted: a message a
		// consumer holds, or one waiting out its retry delay, was delivered
		// already, and a replay or delete that took it would reset its
		// count, or destroy it without its consumer's acknowledgement.
		vt := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = vt }))
		delayed := e.publish(q, "delayed")
		leased := e.publish(q, "leased")
		first := e.receive(q, 1)
		if len(first) != 1 || first[0].Message.ID != delayed.ID {
			e.Fatalf("delivered %v, want %q", ids(first), delayed.ID)
		}
		nv := e.nack(q, first[0].Lease.Receipt, nil)
		d := e.receiveOne(q)
		if d.Message.ID != leased.ID {
			e.Fatalf("delivered %q, want %q", d.Message.ID, leased.ID)
		}
		for _, m := range []broker.MessageValue{delayed, leased} {
			e.isErr(e.manager(q).ReplayDeadLetter(e.ctx(), m.ID), broker.DeadLetterNotFound, "ReplayDeadLetter("+m.ID+")")
			e.isErr(e.manager(q).DeleteDeadLetter(e.ctx(), m.ID), broker.DeadLetterNotFound, "DeleteDeadLetter("+m.ID+")")
		}
		e.hiddenUntil(q, nv.VisibleAt, "the delayed message, before its retry delay ends")
		// The lease is still held, so its receipt still ends it.
		e.ack(q, d.Lease.Receipt)
		d2 := e.appearsAt(q, nv.VisibleAt, true, "the delayed message")
		if d2.Message.ID != delayed.ID || d2.Deliveries != 2 {
			e.Fatalf("delivered %q #%d, want %q #2: its count was not reset", d2.Message.ID, d2.Deliveries, delayed.ID)
		}
	}},
	{name: "ALapseOnTheLastDeliveryRecordsTheLastNacksCause", needs: []string{"DeadLetterReader"}, run: func(e *env) {
		// DeadLetterValue.Reason is LEASE_EXPIRED only "when the message
		// died by exhausting its deliveries without any consumer ever
		// reporting anything", and Code and Cause are those of the last
		// failure: a message nacked with a classified cause on an earlier
		// delivery that then lapses on its last one records that nack's
		// reason, code and public cause (never its private detail). A nack
		// with a nil cause is a report too: it records UNEXPLAINED.
		for _, c := range []causeCase{
			{"a classified nack", broker.NewError("EARLIER", 0x2A000009, "earlier failure", secret), "EARLIER", 0x2A000009, "earlier failure"},
			{"a nil-cause nack", nil, broker.ReasonUnexplained, 0, ""},
			{"an unclassified nack", errors.New("boom " + secret), broker.ReasonUnclassified, 0, ""},
		} {
			q := e.queue(e.policy(func(p *broker.PolicyValue) {
				p.MaxDeliveries = 2
				p.VisibilityTimeout = e.short()
			}))
			m := e.publish(q, "a")
			e.nack(q, e.receiveOne(q).Lease.Receipt, c.cause)
			d := e.appearsAt(q, e.now(), true, "the nacked message")
			if d.Deliveries != 2 {
				e.Fatalf("%s: delivery %d, want 2", c.name, d.Deliveries)
			}
			e.lapse(d.Lease)
			var dls []broker.DeadLetterValue
			e.eventually("the message whose last lease lapsed is a dead letter", func() bool {
				e.none(q, "a message whose last lease lapsed")
				dls = e.deadLetters(q)
				return len(dls) == 1
			})
			e.checkDeadLetter(dls[0], causeCase{name: "a lapse after " + c.name, cause: c.cause, reason: c.reason, code: c.code, public: c.public}, m, "a", 2)
		}
	}},
	{name: "ALapseAfterAReplayRecordsNoNackOfTheEarlierLife", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// A replay starts a new life, with no failure reported: a message
		// nacked and rejected, replayed, then lapsing on every delivery of
		// its new life died "without any consumer ever reporting
		// anything" in it: LEASE_EXPIRED, no code, no cause.
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.MaxDeliveries = 1
			p.VisibilityTimeout = e.short()
		}))
		m := e.publish(q, "a")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, broker.NewError("EARLIER", 0x2A000009, "earlier failure", secret)); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		d := e.appearsAt(q, e.now(), true, "the replayed message")
		e.lapse(d.Lease)
		var dls []broker.DeadLetterValue
		e.eventually("the replayed message whose last lease lapsed is a dead letter", func() bool {
			e.none(q, "a message whose last lease lapsed")
			dls = e.deadLetters(q)
			return len(dls) == 1
		})
		e.checkDeadLetter(dls[0], causeCase{name: "a lapse in a new life", reason: broker.ReasonLeaseExpired}, m, "a", 1)
	}},
	{name: "ConcurrentReplaysOfOneDeadLetterQueueItOnce", needs: []string{"ReplayOnce", "Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// The port lets racing replays both queue a dead letter on a broker
		// that cannot tell them apart, and "the brokers say which they
		// are": one that declares ReplayOnce can, so one replay queues it
		// and the others find it gone.
		q, m := e.raceOnOneDeadLetter("replay", func(q broker.Broker, id string) error {
			return e.manager(q).ReplayDeadLetter(e.ctx(), id)
		})
		d := e.appearsAt(q, e.now(), true, "the replayed message")
		if d.Message.ID != m.ID || d.Deliveries != 1 {
			e.Fatalf("received %q #%d, want %q #1", d.Message.ID, d.Deliveries, m.ID)
		}
		e.none(q, "a second copy of the replayed message")
	}},
	{name: "ConcurrentReplaysOfOneDeadLetterQueueItAtLeastOnce", needs: []string{"Rejecter", "DeadLetterReader", "DeadLetterManager"}, run: func(e *env) {
		// What every broker keeps, ReplayOnce or not: of replays racing on
		// one dead letter, each succeeds or finds it gone
		// (DeadLetterNotFound, never another error), at least one
		// succeeds, the message is queued at least once and at most once
		// per replay that succeeded, each copy as a first delivery, and
		// the dead letter is gone.
		q, m, won := e.raceDeadLetter("replay", func(q broker.Broker, id string) error {
			return e.manager(q).ReplayDeadLetter(e.ctx(), id)
		})
		if won == 0 {
			e.Fatalf("none of %d concurrent replays of one dead letter succeeded", racers)
		}
		copies := []broker.DeliveryValue{e.appearsAt(q, e.now(), true, "the replayed message")}
		copies = append(copies, e.receive(q, racers)...)
		if len(copies) > won {
			e.Fatalf("%d replays succeeded and the message was queued %d times", won, len(copies))
		}
		for _, d := range copies {
			if d.Message.ID != m.ID || d.Deliveries != 1 || string(d.Message.Payload) != "a" {
				e.Fatalf("received %q #%d %q, want %q #1 %q", d.Message.ID, d.Deliveries, d.Message.Payload, m.ID, "a")
			}
		}
		if dls := e.deadLetters(q); len(dls) != 0 {
			e.Fatalf("dead letters %v after the replays, want none", deadIDs(dls))
		}
	}},
}

// rejectAll publishes the payloads "a", "b" and "c", receives and rejects
// them in publish order, and returns their messages: three dead letters,
// oldest first.
func (e *env) rejectAll(q broker.Broker) (broker.MessageValue, broker.MessageValue, broker.MessageValue) {
	e.Helper()
	ms := []broker.MessageValue{e.publish(q, "a"), e.publish(q, "b"), e.publish(q, "c")}
	byID := map[string]broker.DeliveryValue{}
	for _, d := range e.receive(q, 3) {
		byID[d.Message.ID] = d
	}
	for _, m := range ms {
		d, ok := byID[m.ID]
		if !ok {
			e.Fatalf("message %q was not received", m.ID)
		}
		if err := e.rejecter(q).Reject(e.ctx(), d.Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
	}
	return ms[0], ms[1], ms[2]
}

func deadIDs(dls []broker.DeadLetterValue) []string {
	out := make([]string, len(dls))
	for i, dl := range dls {
		out[i] = dl.Message.ID
	}
	return out
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return equalStrings(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// raceOnOneDeadLetter makes a dead letter and runs call on it from racers
// goroutines at once (what names the call, "delete" or "replay"): exactly
// one must succeed, and every other find it gone (DeadLetterNotFound).
func (e *env) raceOnOneDeadLetter(what string, call func(q broker.Broker, id string) error) (broker.Broker, broker.MessageValue) {
	q, m, won := e.raceDeadLetter(what, call)
	if won != 1 {
		e.Fatalf("%d of %d concurrent %ss of one dead letter succeeded, want exactly one", won, racers, what)
	}
	return q, m
}

// racers is how many goroutines race on one dead letter.
const racers = 8

// raceDeadLetter makes a dead letter and runs call on it from racers
// goroutines at once: every call that fails must find it gone
// (DeadLetterNotFound). It returns how many succeeded.
func (e *env) raceDeadLetter(what string, call func(q broker.Broker, id string) error) (broker.Broker, broker.MessageValue, int) {
	q := e.queue(e.policy())
	m := e.publish(q, "a")
	if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
		e.Fatalf("Reject: %v", err)
	}
	errs := make(chan error, racers)
	together(racers, func() { errs <- call(q, m.ID) })
	close(errs)
	won := 0
	for err := range errs {
		if err == nil {
			won++
			continue
		}
		e.isErr(err, broker.DeadLetterNotFound, "a "+what+" that lost the race for its dead letter")
	}
	return q, m, won
}
