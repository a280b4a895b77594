package natsjs_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/leakcheck"
)

// Promises of the port checked on the adapter beyond the conformance
// suite: those the suite checks only with an injected clock, and limits
// where the server's own bounds meet the port's.

// TestAnIdleConsumeEndsWhenTheStoreCloses: broker.Consume idle on an empty queue
// returns (Closed) when the Store is closed, as it does on the file store,
// instead of waiting forever on a wake signal nothing will close.
func TestAnIdleConsumeEndsWhenTheStoreCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "idle", policy())
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{})
	}()
	time.Sleep(500 * time.Millisecond) // idle by now
	if err := b.Store.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, broker.Closed) {
			t.Fatalf("Consume after Close: %v, want Closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Consume still running 5 s after the Store was closed")
	}
}

// TestDeadLettersAreOldestFailedAtFirstWhenALapseIsRecordedLate: a lease on the last allowed
// delivery lapses (FailedAt T1); before any call that sweeps, another
// message is rejected (FailedAt T2 > T1). DeadLetters must list the one
// that died first first (API §5.1: oldest first = ordered by FailedAt).
func TestDeadLettersAreOldestFailedAtFirstWhenALapseIsRecordedLate(t *testing.T) {
	ctx := context.Background()
	// The lease must outlast the Receive and the Extend that follows it
	// on a loaded machine, or b's renewal comes too late.
	q := mustQueue(t, openBackend(t).Store, "order", policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.VisibilityTimeout = 2 * time.Second
	}))
	a, err := q.Publish(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Publish(ctx, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	ds := receiveN(t, q, 2)
	var da, db broker.DeliveryValue
	for _, d := range ds {
		if d.Message.ID == a.ID {
			da = d
		} else {
			db = d
		}
	}
	// a's lease lapses; b's is renewed so that it is still held.
	l, err := q.Extend(ctx, db.Lease.Receipt, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(da.Lease.ExpiresAt.Add(700 * time.Millisecond)))
	if err := q.Reject(ctx, l.Receipt, broker.NewError("BAD", 1, "bad", "")); err != nil {
		t.Fatal(err)
	}
	var dls []broker.DeadLetterValue
	until(t, 10*time.Second, "both dead letters", func() bool {
		if dls, err = q.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) == 2
	})
	if dls[1].FailedAt.Before(dls[0].FailedAt) {
		t.Fatalf("DeadLetters lists %s (FailedAt %v) before %s (FailedAt %v): not oldest FailedAt first",
			dls[0].Message.ID, dls[0].FailedAt, dls[1].Message.ID, dls[1].FailedAt)
	}
}

// TestReceiveOfAnyMaxLeasesWhatThereIs: Receive with a very large max on an empty
// queue returns an empty slice and no error.
func TestReceiveOfAnyMaxLeasesWhatThereIs(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "huge", policy())
	for _, n := range []int{math.MaxInt32, math.MaxInt} {
		ds, err := q.Receive(ctx, n)
		if err != nil || len(ds) != 0 {
			t.Errorf("Receive(%d) on an empty queue: %d, %v", n, len(ds), err)
		}
	}
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, math.MaxInt)
	if err != nil || len(ds) != 1 {
		t.Errorf("Receive(MaxInt) with one message: %d, %v", len(ds), err)
	}
}

// TestAPolicyAtTheLongestDurationsWorks: a policy Validate accepts (every duration
// at MaxDeadlineOffset) is a working queue.
func TestAPolicyAtTheLongestDurationsWorks(t *testing.T) {
	ctx := context.Background()
	p := policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = broker.MaxDeadlineOffset
		p.RetryDelay = broker.MaxDeadlineOffset
		p.DedupWindow = broker.MaxDeadlineOffset
	})
	q := mustQueue(t, openBackend(t).Store, "extreme", p)
	if _, err := q.PublishKeyed(ctx, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	nv, err := q.Nack(ctx, d.Lease.Receipt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("after a nack visible at %v: Receive %d, %v", nv.VisibleAt, len(ds), err)
	}
}

// TestEveryValidPolicyOpensOrIsMisconfigured: Validate accepts any positive
// VisibilityTimeout and DedupWindow; the adapter must open such a queue
// (or refuse it with QueueMisconfigured naming the field).
func TestEveryValidPolicyOpensOrIsMisconfigured(t *testing.T) {
	st := openBackend(t).Store
	for i, p := range []broker.PolicyValue{
		policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Microsecond }),
		policy(func(p *broker.PolicyValue) { p.DedupWindow = time.Millisecond }),
		policy(func(p *broker.PolicyValue) { p.MaxDeliveries = math.MaxInt32 + 1 }),
		policy(func(p *broker.PolicyValue) { p.Capacity = math.MaxInt }),
	} {
		if err := p.Validate(); err != nil {
			t.Fatalf("policy %d: %v", i, err)
		}
		if _, err := st.Queue("tiny"+itoa(i), p); err != nil && !errors.Is(err, broker.QueueMisconfigured) {
			t.Errorf("policy %d (%+v) that Validate accepts: %v", i, p, err)
		}
	}
}

// TestAckAndRejectFreeCapacityAtOnce: at Capacity, the place an
// Ack or Reject frees is free when the call returns.
func TestAckAndRejectFreeCapacityAtOnce(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "cap", policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
	for i := range 30 {
		if _, err := q.Publish(ctx, []byte("x")); err != nil {
			t.Fatalf("round %d: Publish: %v", i, err)
		}
		d := receiveN(t, q, 1)[0]
		var err error
		if i%2 == 0 {
			err = q.Ack(ctx, d.Lease.Receipt)
		} else {
			err = q.Reject(ctx, d.Lease.Receipt, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseLeavesNoSubscriptionOrGoroutine: a Store whose queues were used (Wake
// subscribed them) leaves no subscription, and so no client goroutine,
// behind on the caller's connection after Close, nor a goroutine of its
// own (leakcheck): the one that watches the connection for its closing
// used to be left to no check, and would wait for as long as the
// connection lives.
func TestCloseLeavesNoSubscriptionOrGoroutine(t *testing.T) {
	ctx := context.Background()
	nc := connect(t, sharedServer(t).ClientURL())
	if _, err := nc.Request("$JS.API.INFO", nil, 5*time.Second); err != nil { // the connection's own reply subscription
		t.Fatal(err)
	}
	runtime.GC()
	subs, before, ours := nc.NumSubscriptions(), clientGoroutines(), leakcheck.Running()
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "LEAK"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStreams(t, nc, "LEAK") })
	for _, name := range []string{"a", "b", "c"} {
		q := mustQueue(t, st, name, policy())
		q.Wake()
		if _, err := q.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		q.Wake()
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	until(t, 5*time.Second, "client goroutines back to their count before Open", func() bool {
		return clientGoroutines() <= before
	})
	if n := nc.NumSubscriptions(); n != subs {
		t.Fatalf("%d subscriptions on the connection after Close, %d before Open", n, subs)
	}
	// The Store's own goroutine (its watch of the connection) ends
	// with Close too.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := leakcheck.Since(ours)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the Store left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
		}
	}
}

// clientGoroutines counts the goroutines running code of the NATS client.
func clientGoroutines() int {
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "nats.go@") {
			n++
		}
	}
	return n
}

// TestTheLargestAdmittedPayloadDeadLettersWithTheLongestCause: a payload the queue
// accepted (the largest one: the server's max_payload less the room the
// adapter keeps for headers) can be dead-lettered with the longest cause
// the classified-cause rule keeps (Reason 128 bytes, Public 1024 bytes):
// Reject "moves the leased message to the dead-letter store with cause".
func TestTheLargestAdmittedPayloadDeadLettersWithTheLongestCause(t *testing.T) {
	ctx := context.Background()
	const maxPayload = 64 << 10
	srv := runServer(t, storeDir(t), func(o *server.Options) { o.MaxPayload = maxPayload })
	nc := connect(t, srv.ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := mustQueue(t, st, "big", policy())
	// The largest payload the adapter admits: max_payload less 8 KiB.
	payload := make([]byte, maxPayload-8<<10)
	if _, err := q.Publish(ctx, append(payload, 0)); !errors.Is(err, broker.MessageTooLarge) {
		t.Fatalf("Publish of max_payload less 8 KiB, plus one byte: %v, want MessageTooLarge", err)
	}
	if _, err := q.Publish(ctx, payload); err != nil {
		t.Fatalf("Publish of max_payload less 8 KiB: %v", err)
	}
	d := receiveN(t, q, 1)[0]
	// The longest texts the rule keeps: a reason of MaxReasonBytes (an
	// identifier, which quotes as itself) and a public text in the bytes
	// that quote longest.
	cause := broker.NewError(strings.Repeat("R", broker.MaxReasonBytes), 0xffffffff, strings.Repeat("\xff", broker.MaxPublicBytes), "")
	if err := q.Reject(ctx, d.Lease.Receipt, cause); err != nil {
		t.Fatalf("Reject with the longest cause: %v", err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || len(dls[0].Message.Payload) != len(payload) {
		t.Fatalf("dead letters %d, %v", len(dls), err)
	}
}

// TestAReplayOfAPayloadTheServerNoLongerTakesIsMessageTooLarge: a dead
// letter stored while the server took its payload, replayed after the
// server restarted with a smaller max_payload, is MessageTooLarge, as a
// publish of that payload is, and stays a dead letter.
func TestAReplayOfAPayloadTheServerNoLongerTakesIsMessageTooLarge(t *testing.T) {
	ctx := context.Background()
	dir := storeDir(t)
	srv := runServer(t, dir, func(o *server.Options) { o.MaxPayload = 64 << 10 })
	st, err := natsjs.Open(connect(t, srv.ClientURL()), natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := mustQueue(t, st, "big", policy())
	m, err := q.Publish(ctx, make([]byte, 48<<10))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Reject(ctx, receiveN(t, q, 1)[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	st.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	srv = runServer(t, dir, func(o *server.Options) { o.MaxPayload = 32 << 10 })
	st, err = natsjs.Open(connect(t, srv.ClientURL()), natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q = mustQueue(t, st, "big", policy())
	err = q.ReplayDeadLetter(ctx, m.ID)
	if !errors.Is(err, broker.MessageTooLarge) {
		t.Fatalf("replay of 48 KiB into a server of max_payload 32 KiB: %v, want MessageTooLarge", err)
	}
	if text := err.Error(); !strings.Contains(text, "max_payload") || !strings.Contains(text, strconv.Itoa(32<<10)) || strings.Contains(text, "MaxMessageBytes") {
		t.Errorf("replay refused with %q, want the text to name the server's max_payload of %d, not MaxMessageBytes", text, 32<<10)
	}
	if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 1 || dls[0].Message.ID != m.ID {
		t.Fatalf("dead letters after the refused replay: %d, %v; want %s still there", len(dls), err, m.ID)
	}
}

// TestANacksVisibleAtIsTheRetryDelayOfItsDelivery: Nack's VisibleAt is the
// policy's retry delay after the failed delivery (RetryDelay doubled per
// delivery after the first), measured from the call, and the message
// stays invisible meanwhile. Delays of seconds tell one delivery's delay
// from the next one's beyond the real-time suite's tolerance.
func TestANacksVisibleAtIsTheRetryDelayOfItsDelivery(t *testing.T) {
	ctx := context.Background()
	p := policy(func(p *broker.PolicyValue) {
		p.RetryDelay = 30 * time.Second
		p.MaxRetryDelay = time.Hour
	})
	q := mustQueue(t, openBackend(t).Store, "retry", p)
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	before := time.Now()
	nv, err := q.Nack(ctx, d.Lease.Receipt, nil)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	delay := p.RetryDelayAfter(1)
	if nv.Deliveries != 1 || nv.DeadLettered || nv.VisibleAt.Before(before.Add(delay)) || nv.VisibleAt.After(after.Add(delay)) {
		t.Fatalf("Nack of delivery 1 reported %+v, want VisibleAt %v after the call (between %v and %v)", nv, delay, before.Add(delay), after.Add(delay))
	}
	if w := q.Wake(); !w.Scheduled || w.In < delay-time.Since(before) || w.In > delay+time.Second {
		t.Fatalf("Wake %+v, want the end of the retry delay, %v from the Nack", w, delay)
	}
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("Receive during the retry delay: %d deliveries, %v", len(ds), err)
	}
}

// endingContext is a context whose first Err is nil and every later one
// DeadlineExceeded: a caller's deadline that passes after the call began,
// at its first request to the server.
type endingContext struct {
	context.Context
	checked atomic.Bool
}

func endsAfterItsFirstCheck() *endingContext {
	return &endingContext{Context: context.Background()}
}

func (c *endingContext) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c *endingContext) Err() error {
	if c.checked.Swap(true) {
		return context.DeadlineExceeded
	}
	return nil
}

// TestACallThatFailsMidwayLeavesTheLeaseToRetry: an Ack, Nack or Reject
// whose request fails (here its context ends after the call began)
// returns that error and leaves the lease as it was, so the caller may
// try again with the same receipt.
func TestACallThatFailsMidwayLeavesTheLeaseToRetry(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "retry", policy())
	for _, call := range []struct {
		name string
		do   func(context.Context, broker.ReceiptValue) error
	}{
		{"Ack", q.Ack},
		{"Nack", func(ctx context.Context, r broker.ReceiptValue) error { _, err := q.Nack(ctx, r, nil); return err }},
		{"Reject", func(ctx context.Context, r broker.ReceiptValue) error { return q.Reject(ctx, r, nil) }},
	} {
		if _, err := q.Publish(ctx, []byte(call.name)); err != nil {
			t.Fatal(err)
		}
		d := receiveN(t, q, 1)[0]
		if err := call.do(endsAfterItsFirstCheck(), d.Lease.Receipt); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s whose context ended midway: %v, want DeadlineExceeded", call.name, err)
		}
		if err := call.do(ctx, d.Lease.Receipt); err != nil {
			t.Fatalf("%s again with the same receipt after a failed one: %v", call.name, err)
		}
		if call.name == "Nack" {
			ackAll(t, q, receiveN(t, q, 1))
		}
	}
}

// hookContext is an endingContext that runs hook at its second Err, the
// first request to the server, before it says the deadline passed.
type hookContext struct {
	endingContext
	hook func()
	once sync.Once
}

func (c *hookContext) Err() error {
	if err := c.endingContext.Err(); err != nil {
		c.once.Do(c.hook)
		return err
	}
	return nil
}

// TestAFailedAckKeepsTheLeaseOfARedeliveryMadeMeanwhile: an Ack whose
// request fails puts its lease back for a retry, but not over a newer
// one: when the lease lapsed meanwhile and this Store leased the message
// again, the new receipt is the one that holds it.
func TestAFailedAckKeepsTheLeaseOfARedeliveryMadeMeanwhile(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "again", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Second }))
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	first := receiveN(t, q, 1)[0]
	var again []broker.DeliveryValue
	hc := &hookContext{endingContext: endingContext{Context: ctx}, hook: func() {
		until(t, 20*time.Second, "the message leased again after its lease lapsed", func() bool {
			var err error
			if again, err = q.Receive(ctx, 1); err != nil {
				t.Fatal(err)
			}
			return len(again) == 1
		})
	}}
	if err := q.Ack(hc, first.Lease.Receipt); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ack whose context ended midway: %v, want DeadlineExceeded", err)
	}
	if len(again) != 1 || again[0].Deliveries != 2 {
		t.Fatalf("redelivery while the Ack ran: %+v, want the second delivery", again)
	}
	if err := q.Ack(ctx, again[0].Lease.Receipt); err != nil {
		t.Fatalf("Ack of the redelivery made while a failed Ack ran: %v", err)
	}
}

// TestASweepThatFailsLeavesTheDeathToTheNextCall: a call that looks fails
// when its sweep for deaths does (here its context ends after the call
// began); the death it did not bury is buried by the next call that looks,
// not a minute later.
func TestASweepThatFailsLeavesTheDeathToTheNextCall(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "sweep", policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = time.Second
		p.MaxDeliveries = 1
	}))
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, q, 1) // its only lease, which lapses
	b.awaitDeath(t, "sweep")
	// The server stores the death before its notice reaches the Store,
	// which sweeps at its next call that looks after the notice (or a
	// minute after its last sweep): wait for the notice, so that the
	// calls below are those next calls.
	until(t, 20*time.Second, "the Store hears of the death", q.Unburied)
	if _, err := q.DeadLetters(endsAfterItsFirstCheck(), 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DeadLetters whose context ended midway: %v, want DeadlineExceeded", err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != broker.ReasonLeaseExpired {
		t.Fatalf("dead letters %+v after a failed sweep, want %s as LEASE_EXPIRED", dls, m.ID)
	}
}

// TestTheShortestDedupWindowTheServerKeepsOpens: 100 ms is the shortest
// duplicate window a NATS server keeps: a queue with it opens and takes
// keyed publishes; only a shorter one is QueueMisconfigured.
func TestTheShortestDedupWindowTheServerKeepsOpens(t *testing.T) {
	ctx := context.Background()
	st := openBackend(t).Store
	if _, err := st.Queue("shorter", policy(func(p *broker.PolicyValue) { p.DedupWindow = 99 * time.Millisecond })); !errors.Is(err, broker.QueueMisconfigured) {
		t.Fatalf("DedupWindow 99ms: %v, want QueueMisconfigured", err)
	}
	q, err := st.Queue("shortest", policy(func(p *broker.PolicyValue) { p.DedupWindow = 100 * time.Millisecond }))
	if err != nil {
		t.Fatalf("DedupWindow 100ms: %v", err)
	}
	if _, err := q.PublishKeyed(ctx, "k", []byte("a")); err != nil {
		t.Fatalf("PublishKeyed with DedupWindow 100ms: %v", err)
	}
}
