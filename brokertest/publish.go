package brokertest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// publishCases: Broker.Publish and the MessageValue it mints.
var publishCases = []testCase{
	{name: "PublishMintsIDAndEnqueuedAtOnBrokerClock", run: func(e *env) {
		q := e.queue(e.policy())
		before := e.now()
		m := e.publish(q, "a")
		after := e.now()
		if m.ID == "" {
			e.Fatalf("Publish minted an empty ID")
		}
		if e.clock != nil {
			e.sameInstant(before, m.EnqueuedAt, "EnqueuedAt is the broker clock's reading")
		} else if m.EnqueuedAt.Before(before.Add(-e.tol())) || m.EnqueuedAt.After(after.Add(e.tol())) {
			e.Fatalf("EnqueuedAt %v is not between %v and %v (tolerance %v)", m.EnqueuedAt, before, after, e.tol())
		}
		e.after(e.now().Add(e.short())) // so that a delivery stamped at its receive shows
		d := e.receiveOne(q)
		if d.Message.ID != m.ID {
			e.Fatalf("delivered ID %q, published %q", d.Message.ID, m.ID)
		}
		e.sameInstant(m.EnqueuedAt, d.Message.EnqueuedAt, "the delivery carries the EnqueuedAt Publish returned")
		e.nack(q, d.Lease.Receipt, nil)
		e.after(e.now().Add(e.short()))
		d = e.receiveOne(q)
		e.sameInstant(m.EnqueuedAt, d.Message.EnqueuedAt, "a redelivery carries the EnqueuedAt Publish returned")
	}},
	{name: "IDsAreUniqueWithinQueue", run: func(e *env) {
		q := e.queue(e.policy())
		seen := map[string]bool{}
		var published []string
		for range 50 {
			m := e.publish(q, "x")
			if seen[m.ID] {
				e.Fatalf("ID %q minted twice", m.ID)
			}
			seen[m.ID] = true
			published = append(published, m.ID)
		}
		var got []string
		for len(got) < len(published) {
			ds := e.receive(q, 20)
			if len(ds) == 0 {
				e.Fatalf("received %d of %d messages", len(got), len(published))
			}
			got = append(got, ids(ds)...)
		}
		for _, id := range got {
			if !seen[id] {
				e.Fatalf("delivered ID %q was never published", id)
			}
			delete(seen, id)
		}
		if len(seen) != 0 {
			e.Fatalf("%d published messages were not delivered (some delivered twice)", len(seen))
		}
	}},
	{name: "IDsAreNotReusedAfterAck", run: func(e *env) {
		// An ID names its message for the life of the queue: a message
		// published after others were acknowledged gets an ID none of them
		// had, so a log line about an acknowledged message never joins a
		// later one.
		q := e.queue(e.policy())
		minted := map[string]string{}
		mint := func(payload string) {
			m := e.publish(q, payload)
			if was, ok := minted[m.ID]; ok {
				e.Fatalf("ID %q of %q minted again for %q", m.ID, was, payload)
			}
			minted[m.ID] = payload
		}
		var held []broker.ReceiptValue
		for round := range 3 {
			for i := range 4 {
				mint(fmt.Sprintf("r%d-%d", round, i))
			}
			ds := e.receive(q, 10)
			if len(ds) == 0 {
				e.Fatalf("round %d: nothing received", round)
			}
			for _, d := range ds[:len(ds)-1] {
				e.ack(q, d.Lease.Receipt)
			}
			held = append(held, ds[len(ds)-1].Lease.Receipt) // one stays leased
		}
		for _, r := range held { // and with the queue empty
			e.ack(q, r)
		}
		mint("after every ack")
	}},
	{name: "PublishDoesNotRetainPayload", run: func(e *env) {
		q := e.queue(e.policy())
		buf := []byte("payload")
		if _, err := q.Publish(e.ctx(), buf); err != nil {
			e.Fatalf("Publish: %v", err)
		}
		copy(buf, "XXXXXXX") // the caller reuses its slice
		if got := string(e.receiveOne(q).Message.Payload); got != "payload" {
			e.Fatalf("delivered %q after the caller reused its slice, want %q", got, "payload")
		}
	}},
	{name: "PublishReturnsTheMessageWithItsPayload", run: func(e *env) {
		// Publish "returns the message the broker minted", whose Payload
		// "is the caller's bytes, unmodified": the same bytes, from
		// PublishBatch and from a PublishKeyed that enqueued too. Whether
		// an empty payload comes back nil or empty is promised only by
		// PublishKeyed, where nil marks a duplicate
		// (DuplicateCarriesNoPayloadAndAnEnqueuedOneDoes): Publish and
		// PublishBatch are held to the bytes alone.
		var binary []byte
		for i := range 256 {
			binary = append(binary, byte(255-i))
		}
		sent := [][]byte{[]byte("work"), binary, {}, nil}
		check := func(call string, p []byte, m broker.MessageValue) {
			e.Helper()
			if !bytes.Equal(m.Payload, p) {
				e.Fatalf("%s of %d bytes returned a message whose Payload is %d bytes %q, want the bytes published", call, len(p), len(m.Payload), m.Payload)
			}
		}
		q := e.queue(e.policy())
		for _, p := range sent {
			m, err := q.Publish(e.ctx(), p)
			if err != nil {
				e.Fatalf("Publish: %v", err)
			}
			check("Publish", p, m)
		}
		if e.caps.Batch {
			ms, err := e.batch(q).PublishBatch(e.ctx(), sent)
			if err != nil || len(ms) != len(sent) {
				e.Fatalf("PublishBatch of %d: %d messages, %v", len(sent), len(ms), err)
			}
			for i, p := range sent {
				check("PublishBatch (message "+itoa(i)+")", p, ms[i])
			}
		}
		if e.caps.Keyed {
			for i, p := range sent {
				m, err := e.keyed(q).PublishKeyed(e.ctx(), "k"+itoa(i), p)
				if err != nil {
					e.Fatalf("PublishKeyed: %v", err)
				}
				check("a PublishKeyed that enqueued", p, m)
			}
		}
	}},
	{name: "PayloadBelongsToReceiver", run: func(e *env) {
		q := e.queue(e.policy())
		// The publisher reuses its buffer once Publish has returned.
		buf := []byte("payload")
		m, err := q.Publish(e.ctx(), buf)
		if err != nil {
			e.Fatalf("Publish: %v", err)
		}
		copy(buf, "REUSED!")
		if got := string(m.Payload); got != "payload" {
			e.Fatalf("Publish returned a message whose payload became %q when the publisher reused its buffer, want %q", got, "payload")
		}
		copy(m.Payload, "PPPPPPP") // the publisher's value is its own
		d := e.receiveOne(q)
		if got := string(d.Message.Payload); got != "payload" {
			e.Fatalf("delivered %q after the publisher reused its buffer and changed the message Publish returned, want %q", got, "payload")
		}
		copy(d.Message.Payload, "MUTATED")
		d.Message.Payload = append(d.Message.Payload, "grown"...)
		e.nack(q, d.Lease.Receipt, nil)
		d2 := e.appearsAt(q, e.now(), true, "the nacked message (no retry delay)")
		if got := string(d2.Message.Payload); got != "payload" {
			e.Fatalf("redelivered %q after the first receiver mutated its copy, want %q", got, "payload")
		}
	}},
	{name: "PayloadBytesAreUnmodified", run: func(e *env) {
		q := e.queue(e.policy())
		var all []byte
		for i := range 256 {
			all = append(all, byte(i), byte(255-i))
		}
		if _, err := q.Publish(e.ctx(), all); err != nil {
			e.Fatalf("Publish: %v", err)
		}
		if got := e.receiveOne(q).Message.Payload; !bytes.Equal(got, all) {
			e.Fatalf("delivered %d bytes that differ from the %d published", len(got), len(all))
		}
	}},
	{name: "EmptyPayloadIsLegitimate", run: func(e *env) {
		q := e.queue(e.policy())
		for _, p := range [][]byte{nil, {}} {
			if _, err := q.Publish(e.ctx(), p); err != nil {
				e.Fatalf("Publish(%#v): %v", p, err)
			}
		}
		ds := e.receive(q, 10)
		if len(ds) != 2 {
			e.Fatalf("received %d messages, want the 2 empty ones", len(ds))
		}
		for _, d := range ds {
			if len(d.Message.Payload) != 0 {
				e.Fatalf("an empty payload came back as %q", d.Message.Payload)
			}
		}
	}},
	{name: "PayloadAboveMaxMessageBytesIsMessageTooLarge", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 16 }))
		_, err := q.Publish(e.ctx(), make([]byte, 17))
		e.isErr(err, broker.MessageTooLarge, "17 bytes with MaxMessageBytes 16")
		ok := e.publish(q, string(make([]byte, 16)))
		if d := e.receiveOne(q); d.Message.ID != ok.ID {
			e.Fatalf("delivered %q, want only the 16-byte message %q: the refused one was enqueued", d.Message.ID, ok.ID)
		}
	}},
	{name: "EveryPublishAcceptsAPayloadOfExactlyMaxMessageBytes", run: func(e *env) {
		// MaxMessageBytes "bounds one payload": a payload of exactly that
		// many bytes is accepted by every publish, and one byte more is
		// MessageTooLarge, whichever call carries it. (The cases above
		// hold Publish to the bound; PublishBatch and PublishKeyed were
		// tried only well below it.)
		const bound = 16
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = bound }))
		fits, over := make([]byte, bound), make([]byte, bound+1)
		want := 1
		if _, err := q.Publish(e.ctx(), fits); err != nil {
			e.Fatalf("Publish of exactly MaxMessageBytes (%d): %v", bound, err)
		}
		if e.caps.Batch {
			if _, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{fits, fits}); err != nil {
				e.Fatalf("PublishBatch of two payloads of exactly MaxMessageBytes (%d): %v", bound, err)
			}
			_, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{fits, over})
			e.isErr(err, broker.MessageTooLarge, "PublishBatch with a payload of MaxMessageBytes + 1")
			want += 2
		}
		if e.caps.Keyed {
			if _, err := e.keyed(q).PublishKeyed(e.ctx(), "fits", fits); err != nil {
				e.Fatalf("PublishKeyed of exactly MaxMessageBytes (%d): %v", bound, err)
			}
			_, err := e.keyed(q).PublishKeyed(e.ctx(), "over", over)
			e.isErr(err, broker.MessageTooLarge, "PublishKeyed of MaxMessageBytes + 1")
			want++
		}
		ds := e.receive(q, 10)
		if len(ds) != want {
			e.Fatalf("received %d messages, want the %d of exactly MaxMessageBytes", len(ds), want)
		}
		for _, d := range ds {
			if len(d.Message.Payload) != bound {
				e.Fatalf("delivered a payload of %d bytes, want %d", len(d.Message.Payload), bound)
			}
		}
	}},
	{name: "DefaultMaxMessageBytesIsOneMiB", run: func(e *env) {
		// 1 MiB written out, not broker.DefaultMaxMessageBytes: the
		// promise is the number, and a wrong constant must fail here.
		const oneMiB = 1 << 20
		q := e.queue(e.policy())
		_, err := q.Publish(e.ctx(), make([]byte, oneMiB+1))
		e.isErr(err, broker.MessageTooLarge, "1 MiB + 1 bytes")
		if _, err := q.Publish(e.ctx(), make([]byte, oneMiB)); err != nil {
			e.Fatalf("a payload of exactly 1 MiB: %v", err)
		}
		if d := e.receiveOne(q); len(d.Message.Payload) != oneMiB {
			e.Fatalf("delivered %d bytes, want %d", len(d.Message.Payload), oneMiB)
		}
	}},
	{name: "CancelledContextIsRefused", run: func(e *env) {
		q := e.queue(e.policy())
		ctx, cancel := contextWithCancel(e)
		cancel()
		if _, err := q.Publish(ctx, []byte("a")); !errors.Is(err, ctxCanceled) {
			// A call may take effect and still report an error
			// (at-least-once); what it must not do is report success
			// for a context that was over before the call began.
			e.Fatalf("Publish with a cancelled context: %v, want context.Canceled", err)
		}
		if _, err := q.Receive(ctx, 1); !errors.Is(err, ctxCanceled) {
			e.Fatalf("Receive with a cancelled context: %v, want context.Canceled", err)
		}
	}},
}

// receiveCases: Broker.Receive and the DeliveryValue it returns.
var receiveCases = []testCase{
	{name: "ReceiveDoesNotBlockOnEmptyQueue", run: func(e *env) {
		q := e.queue(e.policy())
		ds, err := q.Receive(e.ctx(), 10)
		if err != nil || len(ds) != 0 {
			e.Fatalf("Receive on an empty queue: %v, %v; want an empty slice and nil", ds, err)
		}
	}},
	{name: "ReceiveMaxMustBePositive", run: func(e *env) {
		q := e.queue(e.policy())
		m := e.publish(q, "a")
		for _, max := range []int{0, -1} {
			_, err := q.Receive(e.ctx(), max)
			e.isErr(err, broker.InvalidBatchSize, "Receive max "+itoa(max))
		}
		if d := e.receiveOne(q); d.Message.ID != m.ID || d.Deliveries != 1 {
			e.Fatalf("after refused Receives: got %q delivery %d, want %q delivery 1 (nothing leased)", d.Message.ID, d.Deliveries, m.ID)
		}
	}},
	{name: "ReceiveLeasesUpToMax", run: func(e *env) {
		q := e.queue(e.policy())
		for range 5 {
			e.publish(q, "x")
		}
		if n := len(e.receive(q, 2)); n != 2 {
			e.Fatalf("Receive(2) of 5: got %d", n)
		}
		if n := len(e.receive(q, 10)); n != 3 {
			e.Fatalf("Receive(10) of the 3 left: got %d", n)
		}
		e.none(q, "every message is leased")
	}},
	{name: "AReceiveHandsOutEachMessageOnceUnderTheShortestLease", run: func(e *env) {
		// Seed Broker.Receive "leases up to max messages and returns
		// them"; DeliveryValue.Deliveries is 1 on the first delivery and
		// "a value above 1 means a previous consumer failed, timed out,
		// or died". Under the shortest lease a policy allows (1 ns) a
		// lease can lapse while the Receive that handed it out still
		// runs: a broker that takes messages until it finds none, on a
		// clock that moves meanwhile, took the lapsed one again, and
		// returned one message several times, counted 1, 2, ..., each
		// receipt but the last void on arrival and the message's
		// deliveries spent, to its dead letter, before any consumer ran
		// it once. Each message a Receive returns is one of its
		// messages, once, never delivered before.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Nanosecond }))
		want := map[string]bool{}
		for range 3 {
			want[e.publish(q, "x").ID] = true
		}
		ds := e.receive(q, 10)
		if len(ds) == 0 {
			e.Fatalf("Receive(10) of 3 messages published under a 1 ns lease returned nothing")
		}
		seen := map[string]bool{}
		for _, d := range ds {
			if !want[d.Message.ID] || seen[d.Message.ID] || d.Deliveries != 1 {
				e.Fatalf("Receive(10) of 3 new messages under a 1 ns lease returned %v, counted %v: want each of them at most once, on its first delivery", ids(ds), deliveryCounts(ds))
			}
			seen[d.Message.ID] = true
		}
	}},
	{name: "DeliveryCarriesMessage", run: func(e *env) {
		q := e.queue(e.policy())
		m := e.publish(q, "work")
		d := e.receiveOne(q)
		if d.Message.ID != m.ID || string(d.Message.Payload) != "work" || d.Deliveries != 1 {
			e.Fatalf("delivery %q %q #%d, want %q %q #1", d.Message.ID, d.Message.Payload, d.Deliveries, m.ID, "work")
		}
		e.sameInstant(m.EnqueuedAt, d.Message.EnqueuedAt, "EnqueuedAt")
		if d.Lease.Receipt == "" {
			e.Fatalf("the delivery has an empty receipt")
		}
	}},
	{name: "ReceiptsAreDistinct", run: func(e *env) {
		q := e.queue(e.policy())
		for range 10 {
			e.publish(q, "x")
		}
		seen := map[broker.ReceiptValue]bool{}
		for _, d := range e.receive(q, 10) {
			if seen[d.Lease.Receipt] {
				e.Fatalf("two leases share receipt %q", d.Lease.Receipt)
			}
			seen[d.Lease.Receipt] = true
		}
	}},
	{name: "ReceiveOldestEnqueuedFirst", needs: []string{"OldestFirst"}, run: func(e *env) {
		q := e.queue(e.policy())
		var want []string
		for _, p := range []string{"a", "b", "c", "d"} {
			want = append(want, e.publish(q, p).ID)
			if e.clock != nil {
				e.clock.Advance(time.Second)
			}
		}
		var got []string
		for range 4 {
			got = append(got, ids(e.receive(q, 1))...)
		}
		if !equalStrings(got, want) {
			e.Fatalf("received %v, want oldest first %v", got, want)
		}
	}},
	{name: "RedeliveryKeepsEnqueueOrder", needs: []string{"OldestFirst"}, run: func(e *env) {
		q := e.queue(e.policy())
		a := e.publish(q, "a")
		if e.clock != nil {
			e.clock.Advance(time.Second)
		}
		da := e.receiveOne(q)
		b := e.publish(q, "b")
		if e.clock != nil {
			e.clock.Advance(time.Second)
		}
		c := e.publish(q, "c")
		e.nack(q, da.Lease.Receipt, nil) // a is receivable again, and older than b and c
		var got []string
		e.eventually("three messages receivable", func() bool {
			got = append(got, ids(e.receive(q, 3-len(got)))...)
			return len(got) == 3
		})
		if want := []string{a.ID, b.ID, c.ID}; !equalStrings(got, want) {
			e.Fatalf("received %v, want %v: a redelivery sorts by its EnqueuedAt", got, want)
		}
	}},
	{name: "DeliveriesCountsFromOne", run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		if d.Deliveries != 1 {
			e.Fatalf("first delivery counts %d, want 1", d.Deliveries)
		}
		if nv := e.nack(q, d.Lease.Receipt, nil); nv.Deliveries != 1 || nv.DeadLettered {
			e.Fatalf("Nack of the first delivery reported %+v, want Deliveries 1", nv)
		}
		d = e.appearsAt(q, e.now(), true, "the nacked message")
		if d.Deliveries != 2 {
			e.Fatalf("second delivery counts %d, want 2", d.Deliveries)
		}
	}},
	{name: "ReceivedMessageInvisibleToOthers", run: func(e *env) {
		q := e.queue(e.policy())
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.hiddenUntil(q, d.Lease.ExpiresAt, "a leased message")
		e.ack(q, d.Lease.Receipt)
	}},
	{name: "AckRemovesMessage", run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = e.short() }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		e.ack(q, d.Lease.Receipt)
		e.gone(q.Ack(e.ctx(), d.Lease.Receipt), "a second Ack of one receipt")
		e.after(d.Lease.ExpiresAt)
		e.none(q, "an acknowledged message, after its lease would have lapsed")
	}},
	{name: "AnyPositiveMaxIsValid", run: func(e *env) {
		// Receive leases "up to max", DeadLetters returns "up to max": the
		// largest int is a max like any other, and a broker that sized a
		// slice or a request by it would panic or fail.
		q := e.queue(e.policy())
		m := e.publish(q, "a")
		ds, err := q.Receive(e.ctx(), math.MaxInt)
		if err != nil || len(ds) != 1 || ds[0].Message.ID != m.ID {
			e.Fatalf("Receive(MaxInt) with one message: %v, %v; want it", ids(ds), err)
		}
		if !e.caps.Rejecter || !e.caps.DeadLetterReader {
			return
		}
		if err := e.rejecter(q).Reject(e.ctx(), ds[0].Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		dls, err := e.reader(q).DeadLetters(e.ctx(), math.MaxInt)
		if err != nil || len(dls) != 1 {
			e.Fatalf("DeadLetters(MaxInt) with one dead letter: %d, %v", len(dls), err)
		}
	}},
	{name: "LapsedRedeliveryKeepsEnqueueOrder", needs: []string{"OldestFirst", "Clock"}, run: func(e *env) {
		// Oldest EnqueuedAt first, redeliveries included: a message whose
		// lease lapsed (its consumer died) comes before the newer ones
		// published while it was leased.
		vt := time.Minute
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
		a := e.publish(q, "a")
		d := e.receiveOne(q)
		e.clock.Advance(time.Second)
		b := e.publish(q, "b")
		e.clock.Advance(time.Second)
		c := e.publish(q, "c")
		e.set(d.Lease.ExpiresAt)
		var got []string
		for range 3 {
			got = append(got, ids(e.receive(q, 1))...)
		}
		if want := []string{a.ID, b.ID, c.ID}; !equalStrings(got, want) {
			e.Fatalf("received %v, want %v: a lapsed redelivery sorts by its EnqueuedAt", got, want)
		}
	}},
	{name: "DelayedRedeliveryKeepsEnqueueOrder", needs: []string{"OldestFirst", "Clock"}, run: func(e *env) {
		// As LapsedRedeliveryKeepsEnqueueOrder, for a message that waited
		// out a retry delay.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.RetryDelay = 10 * time.Second }))
		a := e.publish(q, "a")
		nv := e.nack(q, e.receiveOne(q).Lease.Receipt, nil)
		e.clock.Advance(time.Second)
		b := e.publish(q, "b")
		e.clock.Advance(time.Second)
		c := e.publish(q, "c")
		e.set(nv.VisibleAt)
		var got []string
		for range 3 {
			got = append(got, ids(e.receive(q, 1))...)
		}
		if want := []string{a.ID, b.ID, c.ID}; !equalStrings(got, want) {
			e.Fatalf("received %v, want %v: a delayed redelivery sorts by its EnqueuedAt", got, want)
		}
	}},
}

// after lets the broker's clock pass at: it sets the suite's clock to at,
// or waits in real time until at plus the tolerance. It is only for
// checking that something does NOT happen, which needs the time to pass.
func (e *env) after(at time.Time) {
	e.Helper()
	if e.clock != nil {
		if e.clock.Now().Before(at) {
			e.clock.Set(at)
		}
		return
	}
	if d := time.Until(at.Add(e.tol())); d > 0 {
		time.Sleep(d)
	}
}
