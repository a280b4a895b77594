package brokertest

import (
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// publishKeyed publishes payload under key and fails the test on an error.
func (e *env) publishKeyed(q broker.Broker, key, payload string) broker.MessageValue {
	e.Helper()
	m, err := e.keyed(q).PublishKeyed(e.ctx(), key, []byte(payload))
	if err != nil {
		e.Fatalf("PublishKeyed(%q, %q): %v", key, payload, err)
	}
	return m
}

// sameMessage requires a duplicate's answer to name the original.
func (e *env) sameMessage(orig, dup broker.MessageValue, what string) {
	e.Helper()
	if dup.ID != orig.ID {
		e.Fatalf("%s: got ID %q, want the original %q", what, dup.ID, orig.ID)
	}
	e.sameInstant(orig.EnqueuedAt, dup.EnqueuedAt, what+": the original's EnqueuedAt")
}

// keyedCases: PublishKeyed and the dedup rules of API.md §4.
var keyedCases = []testCase{
	{name: "DuplicateKeyReturnsOriginal", needs: []string{"Keyed"}, run: func(e *env) {
		q := e.queue(e.policy())
		orig := e.publishKeyed(q, "order-1", "first")
		if e.clock != nil {
			e.clock.Advance(time.Minute)
		}
		e.sameMessage(orig, e.publishKeyed(q, "order-1", "second"), "a duplicate key")
		d := e.receiveOne(q) // nothing was enqueued for the duplicate
		if string(d.Message.Payload) != "first" || d.Message.ID != orig.ID {
			e.Fatalf("delivered %q %q, want the original %q %q", d.Message.ID, d.Message.Payload, orig.ID, "first")
		}
	}},
	{name: "DuplicateKeyReturnsOriginalAfterAck", needs: []string{"Keyed"}, run: func(e *env) {
		q := e.queue(e.policy())
		orig := e.publishKeyed(q, "order-1", "first")
		e.ack(q, e.receiveOne(q).Lease.Receipt)
		e.sameMessage(orig, e.publishKeyed(q, "order-1", "again"), "a key whose message was acknowledged")
		e.none(q, "the side effect already ran once")
	}},
	{name: "KeysArePerQueue", needs: []string{"Keyed"}, run: func(e *env) {
		a, b := e.queue(e.policy()), e.queue(e.policy())
		ma := e.publishKeyed(a, "k", "a")
		e.publishKeyed(b, "k", "b")
		if d := e.receiveOne(b); string(d.Message.Payload) != "b" {
			e.Fatalf("queue b delivered %q, want its own %q: a key of queue a is not b's duplicate", d.Message.Payload, "b")
		}
		if d := e.receiveOne(a); d.Message.ID != ma.ID {
			e.Fatalf("queue a delivered %q, want %q", d.Message.ID, ma.ID)
		}
	}},
	{name: "DedupKeyLengthRules", needs: []string{"Keyed"}, run: func(e *env) {
		q := e.queue(e.policy())
		for _, key := range []string{"", strings.Repeat("k", 257)} {
			_, err := e.keyed(q).PublishKeyed(e.ctx(), key, []byte("x"))
			e.isErr(err, broker.InvalidDedupKey, "a key of "+itoa(len(key))+" bytes")
		}
		e.publishKeyed(q, strings.Repeat("k", 256), "x")
		e.receiveOne(q) // only the 256-byte key's message
	}},
	{name: "KeyedPayloadAboveMaxMessageBytesIsRefusedAndNotRemembered", needs: []string{"Keyed"}, run: func(e *env) {
		// PublishKeyed is Publish made idempotent: a payload above
		// MaxMessageBytes is MessageTooLarge there too, enqueues nothing,
		// and leaves the key unseen, so the sender's corrected retry is
		// not taken for a duplicate of a message that never existed.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 16 }))
		_, err := e.keyed(q).PublishKeyed(e.ctx(), "k", make([]byte, 17))
		e.isErr(err, broker.MessageTooLarge, "a keyed publish of 17 bytes with MaxMessageBytes 16")
		e.none(q, "a refused keyed publish enqueues nothing")
		m := e.publishKeyed(q, "k", "fits")
		d := e.receiveOne(q)
		if d.Message.ID != m.ID || string(d.Message.Payload) != "fits" {
			e.Fatalf("delivered %q %q, want the retry %q %q: the refused publish's key was remembered", d.Message.ID, d.Message.Payload, m.ID, "fits")
		}
	}},
	{name: "DedupKeyForgottenAfterWindow", needs: []string{"Keyed"}, run: func(e *env) {
		window := e.short()
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
		orig := e.publishKeyed(q, "k", "a")
		e.after(orig.EnqueuedAt.Add(window + time.Nanosecond))
		var fresh broker.MessageValue
		e.eventually("the key is forgotten after the window", func() bool {
			fresh = e.publishKeyed(q, "k", "b")
			return fresh.ID != orig.ID
		})
		if len(e.receive(q, 10)) != 2 {
			e.Fatalf("the publish after the window did not enqueue a second message")
		}
		// The key is remembered again, now with the new message.
		e.sameMessage(fresh, e.publishKeyed(q, "k", "c"), "the key, published again within the window of its new message")
		e.none(q, "a duplicate of the key published after the window")
	}},
	{name: "DedupKeyEvictedOnlyWhenStrictlyOlderThanWindow", needs: []string{"Keyed", "Clock"}, run: func(e *env) {
		const window = time.Hour
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
		orig := e.publishKeyed(q, "k", "a")
		e.set(t0.Add(window)) // exactly the window old: still remembered
		e.sameMessage(orig, e.publishKeyed(q, "k", "b"), "a key exactly DedupWindow old")
		e.set(t0.Add(window + time.Nanosecond)) // strictly older: forgotten
		fresh := e.publishKeyed(q, "k", "c")
		if fresh.ID == orig.ID {
			e.Fatalf("a key strictly older than the window was still remembered")
		}
		e.sameInstant(t0.Add(window+time.Nanosecond), fresh.EnqueuedAt, "the new message's EnqueuedAt")
		if n := len(e.receive(q, 10)); n != 2 {
			e.Fatalf("received %d messages, want 2", n)
		}
	}},
	{name: "EachDedupKeyIsEvictedByItsOwnAge", needs: []string{"Keyed", "Clock"}, run: func(e *env) {
		// "each key remembers when it was enqueued; before admitting, keys
		// older than the window are evicted" (API.md §4): those keys only.
		// A key 10 minutes into a 1 h window is still a duplicate when
		// another key, enqueued 50 minutes before it, has just left the
		// window; a seen-set reset whenever its oldest key expires would
		// hand the young key's side effect to a consumer a second time.
		const window = time.Hour
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
		old := e.publishKeyed(q, "old", "a")
		e.set(t0.Add(50 * time.Minute))
		young := e.publishKeyed(q, "young", "b")
		e.set(t0.Add(window + time.Nanosecond)) // "old" is strictly older than the window, "young" 10 min old
		e.sameMessage(young, e.publishKeyed(q, "young", "b again"), "a key 10 minutes old, just after an older key left the window")
		if fresh := e.publishKeyed(q, "old", "a again"); fresh.ID == old.ID {
			e.Fatalf("a key strictly older than the window was still remembered beside a younger one")
		}
		e.sameMessage(young, e.publishKeyed(q, "young", "b once more"), "the young key, after the old one was published again")
		if n := len(e.receive(q, 10)); n != 3 {
			e.Fatalf("received %d messages, want 3: old, young, and old again after its window", n)
		}
	}},
	{name: "DefaultDedupWindowIsSixHours", needs: []string{"Keyed", "Clock"}, run: func(e *env) {
		// 6 h written out, not broker.DefaultDedupWindow: the promise is
		// the number, and a wrong constant must fail here.
		const sixHours = 6 * time.Hour
		q := e.queue(e.policy())
		orig := e.publishKeyed(q, "k", "")
		e.set(t0.Add(sixHours))
		e.sameMessage(orig, e.publishKeyed(q, "k", ""), "a key 6 h old")
		e.set(t0.Add(sixHours + time.Nanosecond))
		if e.publishKeyed(q, "k", "").ID == orig.ID {
			e.Fatalf("a key older than 6 h was still remembered with DedupWindow zero")
		}
	}},
	{name: "ClockGoingBackwardsEvictsNothing", needs: []string{"Keyed", "Clock"}, run: func(e *env) {
		const window = time.Hour
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
		e.set(t0.Add(10 * time.Hour))
		late := e.publishKeyed(q, "late", "x") // the broker has seen t0+10h
		e.set(t0)                              // the clock jumps back
		early := e.publishKeyed(q, "early", "a")
		e.set(t0.Add(2 * time.Hour)) // "early" is 2 h old, but the clock is still behind t0+10h
		e.sameMessage(early, e.publishKeyed(q, "early", "b"), "nothing is evicted while the clock is behind what it was")
		e.sameMessage(late, e.publishKeyed(q, "late", "y"), "a key enqueued 'in the future' is not evicted either")
	}},
	{name: "ClockGoingBackwardsBehindAnUnkeyedPublishEvictsNothing", needs: []string{"Keyed", "Clock"}, run: func(e *env) {
		// An enqueue instant is a reading of the broker clock like any
		// other, though no key was looked up: a clock behind it went
		// backwards.
		const window = time.Hour
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
		orig := e.publishKeyed(q, "k", "a")
		e.set(t0.Add(10 * time.Hour))
		e.publish(q, "unkeyed") // the broker has seen t0+10h
		e.set(t0.Add(2 * time.Hour))
		e.sameMessage(orig, e.publishKeyed(q, "k", "b"), "nothing is evicted while the clock is behind an enqueue instant")
	}},
	{name: "AClockAtItsLatestReadingEvicts", needs: []string{"Keyed", "Clock"}, run: func(e *env) {
		// Going backwards is a reading BEHIND the latest; a reading equal
		// to it is not, and evicts what the window says.
		const window = time.Hour
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
		orig := e.publishKeyed(q, "k", "a")
		e.set(t0.Add(window + time.Nanosecond))
		e.publish(q, "unkeyed")              // the latest reading is now this instant
		fresh := e.publishKeyed(q, "k", "b") // at that same instant
		if fresh.ID == orig.ID {
			e.Fatalf("a key strictly older than the window was still remembered when the clock stood at its latest reading")
		}
	}},
	{name: "DuplicateKeyAdmittedWhenFull", needs: []string{"Keyed", "Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
		orig := e.publishKeyed(q, "k", "a")
		_, err := q.Publish(e.ctx(), []byte("b"))
		e.isErr(err, broker.QueueFull, "a publish beyond Capacity 1")
		e.sameMessage(orig, e.publishKeyed(q, "k", "a"), "a duplicate when the queue is full")
	}},
	{name: "ShedPublishDoesNotEnterSeenSet", needs: []string{"Keyed", "Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
		e.publish(q, "filler")
		_, err := e.keyed(q).PublishKeyed(e.ctx(), "k", []byte("shed"))
		e.isErr(err, broker.QueueFull, "a keyed publish beyond Capacity")
		e.ack(q, e.receiveOne(q).Lease.Receipt)
		m := e.publishKeyed(q, "k", "retry")
		d := e.receiveOne(q)
		if d.Message.ID != m.ID || string(d.Message.Payload) != "retry" {
			e.Fatalf("delivered %q %q, want the retry %q %q: a shed publish is not remembered", d.Message.ID, d.Message.Payload, m.ID, "retry")
		}
	}},
	{name: "DuplicateCarriesNoPayloadAndAnEnqueuedOneDoes", needs: []string{"Keyed"}, run: func(e *env) {
		// A duplicate carries no Payload (nil), while a message the call
		// enqueued has a non-nil one, an empty payload included: that is
		// how a caller tells the two apart.
		q := e.queue(e.policy())
		for _, p := range [][]byte{[]byte("x"), {}} {
			key := "k" + itoa(len(p))
			m, err := e.keyed(q).PublishKeyed(e.ctx(), key, p)
			if err != nil {
				e.Fatalf("PublishKeyed: %v", err)
			}
			if m.Payload == nil {
				e.Fatalf("a keyed publish of %q that enqueued returned a nil Payload", p)
			}
			dup, err := e.keyed(q).PublishKeyed(e.ctx(), key, []byte("again"))
			if err != nil {
				e.Fatalf("PublishKeyed (duplicate): %v", err)
			}
			if dup.Payload != nil {
				e.Fatalf("a duplicate returned Payload %q, want nil", dup.Payload)
			}
			e.sameMessage(m, dup, "the duplicate")
		}
	}},
	{name: "DuplicateKeyDoesNotCloseTheWakeSignal", needs: []string{"Keyed", "Waker"}, run: func(e *env) {
		// Dedup comes before side effects (API.md §4): a duplicate key
		// enqueues nothing, so it makes nothing receivable, and must not
		// wake an idle consumer, which would Receive for nothing.
		q := e.queue(e.policy())
		e.publishKeyed(q, "k", "a")
		e.ack(q, e.receiveOne(q).Lease.Receipt)
		w := e.waker(q).Wake()
		e.publishKeyed(q, "k", "again")
		if e.clock == nil {
			time.Sleep(50 * time.Millisecond) // a signal closed by another goroutine
		}
		if closed(w.Signal) {
			e.Fatalf("a duplicate key, which enqueued nothing, closed the wake signal")
		}
	}},
}

// batchCases: PublishBatch.
var batchCases = []testCase{
	{name: "PublishBatchReturnsEveryMessage", needs: []string{"Batch"}, run: func(e *env) {
		q := e.queue(e.policy())
		ms, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{[]byte("a"), {}, []byte("c")})
		if err != nil || len(ms) != 3 {
			e.Fatalf("PublishBatch of 3: %d messages, %v", len(ms), err)
		}
		want := map[string]string{ms[0].ID: "a", ms[1].ID: "", ms[2].ID: "c"}
		if len(want) != 3 {
			e.Fatalf("PublishBatch minted IDs %q, %q, %q: not distinct", ms[0].ID, ms[1].ID, ms[2].ID)
		}
		ds := e.receive(q, 10)
		if len(ds) != 3 {
			e.Fatalf("received %d of the batch's 3 messages", len(ds))
		}
		for _, d := range ds {
			if p, ok := want[d.Message.ID]; !ok || p != string(d.Message.Payload) {
				e.Fatalf("delivered %q %q, not a message of the batch %v", d.Message.ID, d.Message.Payload, want)
			}
		}
		if e.caps.OldestFirst && !equalStrings(ids(ds), []string{ms[0].ID, ms[1].ID, ms[2].ID}) {
			e.Fatalf("received %v, want the batch's order", ids(ds))
		}
	}},
	{name: "PublishBatchMintsEnqueuedAtOnBrokerClock", needs: []string{"Batch"}, run: func(e *env) {
		// Each message PublishBatch returns carries EnqueuedAt, "when the
		// broker accepted the message ... the broker's clock", as the one
		// Publish returns does (PublishMintsIDAndEnqueuedAtOnBrokerClock),
		// and its deliveries carry that same instant.
		q := e.queue(e.policy())
		before := e.now()
		ms, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{[]byte("a"), []byte("b")})
		after := e.now()
		if err != nil || len(ms) != 2 {
			e.Fatalf("PublishBatch of 2: %d messages, %v", len(ms), err)
		}
		byID := map[string]broker.MessageValue{}
		for i, m := range ms {
			e.checkInstant(m.EnqueuedAt, before, after, "EnqueuedAt of the batch's message "+itoa(i)+" is the broker clock's reading")
			byID[m.ID] = m
		}
		e.after(e.now().Add(e.short())) // so that a delivery stamped at its receive shows
		ds := e.receive(q, 10)
		if len(ds) != 2 {
			e.Fatalf("received %d of the batch's 2 messages", len(ds))
		}
		for _, d := range ds {
			m, ok := byID[d.Message.ID]
			if !ok {
				e.Fatalf("delivered %q, not a message of the batch", d.Message.ID)
			}
			e.sameInstant(m.EnqueuedAt, d.Message.EnqueuedAt, "the delivery carries the EnqueuedAt PublishBatch returned")
		}
	}},
	{name: "EmptyBatchIsInvalidBatchSize", needs: []string{"Batch"}, run: func(e *env) {
		q := e.queue(e.policy())
		for _, b := range [][][]byte{nil, {}} {
			_, err := e.batch(q).PublishBatch(e.ctx(), b)
			e.isErr(err, broker.InvalidBatchSize, "an empty batch")
		}
	}},
	{name: "BatchWithOversizedPayloadIsRefusedWhole", needs: []string{"Batch"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 }))
		_, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{[]byte("ok"), []byte("too long")})
		e.isErr(err, broker.MessageTooLarge, "a batch with a payload above MaxMessageBytes")
		e.none(q, "a refused batch enqueues nothing")
	}},
	{name: "PublishBatchDoesNotRetainPayloads", needs: []string{"Batch"}, run: func(e *env) {
		q := e.queue(e.policy())
		a, b := []byte("aaaa"), []byte("bbbb")
		if _, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{a, b}); err != nil {
			e.Fatalf("PublishBatch: %v", err)
		}
		copy(a, "XXXX")
		copy(b, "YYYY")
		got := payloads(e.receive(q, 10))
		if len(got) != 2 || got[0]+got[1] != "aaaabbbb" && got[0]+got[1] != "bbbbaaaa" {
			e.Fatalf("delivered %q after the caller reused its slices", got)
		}
	}},
	{name: "PublishBatchRefusedWholeWhenItDoesNotFit", needs: []string{"Batch", "Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 3 }))
		e.publish(q, "one")
		_, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{[]byte("a"), []byte("b"), []byte("c")})
		e.isErr(err, broker.QueueFull, "a batch of 3 into a queue of capacity 3 holding 1")
		if n := len(e.receive(q, 10)); n != 1 {
			e.Fatalf("received %d messages, want 1: a batch that does not fit is refused whole", n)
		}
	}},
	{name: "PublishBatchThatFitsExactlyIsAdmitted", needs: []string{"Batch", "Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 3 }))
		e.publish(q, "one")
		if ms, err := e.batch(q).PublishBatch(e.ctx(), [][]byte{[]byte("a"), []byte("b")}); err != nil || len(ms) != 2 {
			e.Fatalf("a batch that fits exactly: %d messages, %v", len(ms), err)
		}
		_, err := q.Publish(e.ctx(), []byte("x"))
		e.isErr(err, broker.QueueFull, "a publish into the full queue")
	}},
}

// capacityCases: PolicyValue.Capacity.
var capacityCases = []testCase{
	{name: "QueueFullRefusesPublish", needs: []string{"Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 2 }))
		e.publish(q, "a")
		e.publish(q, "b")
		_, err := q.Publish(e.ctx(), []byte("c"))
		e.isErr(err, broker.QueueFull, "a third publish with Capacity 2")
		if got := payloads(e.receive(q, 10)); len(got) != 2 {
			e.Fatalf("received %q, want the 2 admitted messages", got)
		}
	}},
	{name: "CapacityCountsReadyLeasedAndDelayed", needs: []string{"Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 3; p.RetryDelay = time.Hour }))
		e.publish(q, "leased")
		e.publish(q, "delayed")
		ds := e.receive(q, 2)
		if len(ds) != 2 {
			e.Fatalf("received %d, want 2", len(ds))
		}
		e.nack(q, ds[1].Lease.Receipt, nil)
		e.publish(q, "ready")
		_, err := q.Publish(e.ctx(), []byte("x"))
		e.isErr(err, broker.QueueFull, "a publish with one ready, one leased and one delayed message and Capacity 3")
		e.ack(q, ds[0].Lease.Receipt)
		e.publish(q, "fits after an ack")
	}},
	{name: "CapacityDoesNotCountDeadLetters", needs: []string{"Capacity", "Rejecter"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
		e.publish(q, "a")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.publish(q, "b")
	}},
	{name: "CapacityFreedByANackThatDeadLetters", needs: []string{"Capacity"}, run: func(e *env) {
		// The third way a message dies, a Nack on its last delivery, frees
		// its place as a Reject and a lapse do: dead letters do not count
		// (API.md §1), and the Nack has returned, so the message is one.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1; p.MaxDeliveries = 1 }))
		e.publish(q, "a")
		d := e.receiveOne(q)
		_, err := q.Publish(e.ctx(), []byte("b"))
		e.isErr(err, broker.QueueFull, "a publish while the only place is leased, with Capacity 1")
		if nv := e.nack(q, d.Lease.Receipt, nil); !nv.DeadLettered {
			e.Fatalf("Nack of the only allowed delivery reported %+v, want it dead-lettered", nv)
		}
		if _, err := q.Publish(e.ctx(), []byte("b")); err != nil {
			e.Fatalf("Publish after a Nack dead-lettered the only message, with Capacity 1: %v: dead letters do not count toward Capacity", err)
		}
	}},
	{name: "AReplayedMessageTakesAPlaceInCapacity", needs: []string{"Capacity", "Rejecter", "DeadLetterManager"}, run: func(e *env) {
		// A replay "moves the dead letter back into the queue": the
		// message is live again and holds a place until it leaves, as a
		// published one does, and its leaving gives back that one place
		// and no other. (ReplayIntoAFullQueueIsQueueFullAndMovesNothing
		// checks the refusal of a replay into a full queue.)
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
		m := e.publish(q, "a")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		if err := e.manager(q).ReplayDeadLetter(e.ctx(), m.ID); err != nil {
			e.Fatalf("ReplayDeadLetter: %v", err)
		}
		_, err := q.Publish(e.ctx(), []byte("b"))
		e.isErr(err, broker.QueueFull, "a publish while a replayed message holds the only place, with Capacity 1")
		d := e.appearsAt(q, e.now(), true, "the replayed message")
		if d.Message.ID != m.ID {
			e.Fatalf("delivered %q, want the replayed %q", d.Message.ID, m.ID)
		}
		e.ack(q, d.Lease.Receipt)
		e.publish(q, "b") // the place the replayed message held
		_, err = q.Publish(e.ctx(), []byte("c"))
		e.isErr(err, broker.QueueFull, "a publish with the only place held, after a replayed message was acknowledged")
	}},
	{name: "ALeaseThatLapsesWithDeliveriesLeftKeepsItsPlace", needs: []string{"Capacity"}, run: func(e *env) {
		// A message whose consumer died before its last delivery is back
		// in the queue, live, and holds its place as it did while leased:
		// only a lapse on the last delivery makes it a dead letter
		// (CapacityFreedWhenLastLeaseLapses). When it leaves, it gives
		// back that one place and no other.
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.Capacity = 1
			p.MaxDeliveries = 2
			p.VisibilityTimeout = e.short()
		}))
		m := e.publish(q, "a")
		d := e.receiveOne(q)
		e.lapse(d.Lease)
		_, err := q.Publish(e.ctx(), []byte("b"))
		e.isErr(err, broker.QueueFull, "a publish after the only message's lease lapsed with a delivery left, with Capacity 1")
		d2 := e.appearsAt(q, d.Lease.ExpiresAt, e.caps.ExactExpiry, "the message whose consumer died")
		if d2.Message.ID != m.ID || d2.Deliveries != 2 {
			e.Fatalf("redelivered %q #%d, want %q #2", d2.Message.ID, d2.Deliveries, m.ID)
		}
		e.ack(q, d2.Lease.Receipt)
		e.publish(q, "b") // the place the message held
		_, err = q.Publish(e.ctx(), []byte("c"))
		e.isErr(err, broker.QueueFull, "a publish with the only place held, after a message whose lease lapsed was acknowledged")
	}},
	{name: "DeletingADeadLetterFreesNoCapacity", needs: []string{"Capacity", "Rejecter", "DeadLetterManager"}, run: func(e *env) {
		// A dead letter holds no place in the queue, so deleting it gives
		// none back.
		q := e.queue(e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
		a := e.publish(q, "a")
		if err := e.rejecter(q).Reject(e.ctx(), e.receiveOne(q).Lease.Receipt, nil); err != nil {
			e.Fatalf("Reject: %v", err)
		}
		e.publish(q, "b") // the one place
		if err := e.manager(q).DeleteDeadLetter(e.ctx(), a.ID); err != nil {
			e.Fatalf("DeleteDeadLetter: %v", err)
		}
		_, err := q.Publish(e.ctx(), []byte("c"))
		e.isErr(err, broker.QueueFull, "a publish after a dead letter was deleted, with Capacity 1 held by a ready message")
	}},
	{name: "CapacityFreedWhenLastLeaseLapses", needs: []string{"Capacity"}, run: func(e *env) {
		q := e.queue(e.policy(func(p *broker.PolicyValue) {
			p.Capacity = 1
			p.MaxDeliveries = 1
			p.VisibilityTimeout = e.short()
		}))
		e.publish(q, "a")
		d := e.receiveOne(q)
		_, err := q.Publish(e.ctx(), []byte("b"))
		e.isErr(err, broker.QueueFull, "a publish while the lease of the last delivery is held, with Capacity 1")
		e.lapse(d.Lease) // the message is dead from this instant, whether or not anyone looked
		e.eventually("a publish after the last lease lapsed", func() bool {
			_, err := q.Publish(e.ctx(), []byte("b"))
			if err != nil && e.clock != nil {
				e.Fatalf("Publish after the last lease lapsed: %v: dead letters do not count toward Capacity", err)
			}
			return err == nil
		})
	}},
}
