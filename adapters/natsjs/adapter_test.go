package natsjs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// The focused tests of the adapter: what the conformance suite cannot see
// (the records on the server, several Stores on one queue, messages of
// other clients, the server's limits) and the mapping's own rules.

const secretText = "SECRET-4111-1111"

func policy(mods ...func(*broker.PolicyValue)) broker.PolicyValue {
	p := broker.PolicyValue{VisibilityTimeout: 10 * time.Minute, MaxDeliveries: 5}
	for _, m := range mods {
		m(&p)
	}
	return p
}

// twoStores opens two Stores with one prefix on the shared server, on two
// connections: two processes serving the same queues.
func twoStores(t *testing.T) (*natsjs.Store, *natsjs.Store, *nats.Conn) {
	t.Helper()
	a := openBackend(t)
	nc := connect(t, sharedServer(t).ClientURL())
	b, err := natsjs.Open(nc, natsjs.Options{Prefix: a.prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return a.Store, b, nc
}

func mustQueue(t *testing.T, s *natsjs.Store, name string, p broker.PolicyValue) *natsjs.Queue {
	t.Helper()
	q, err := s.Queue(name, p)
	if err != nil {
		t.Fatalf("Queue(%q): %v", name, err)
	}
	return q
}

func receiveN(t *testing.T, q *natsjs.Queue, n int) []broker.DeliveryValue {
	t.Helper()
	ds, err := q.Receive(context.Background(), n+5)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(ds) != n {
		t.Fatalf("Receive returned %d deliveries, want %d", len(ds), n)
	}
	return ds
}

// receiveForeign receives the n messages another client published to q's
// subject without the Store: the Store learns of them only when the
// server's consumer offers them, a moment after their publish returned
// (longer on a loaded machine), so it polls Receive until something comes
// and requires that to be the n messages.
func receiveForeign(t *testing.T, q *natsjs.Queue, n int) []broker.DeliveryValue {
	t.Helper()
	var ds []broker.DeliveryValue
	until(t, 10*time.Second, "a message another client published is received", func() bool {
		var err error
		if ds, err = q.Receive(context.Background(), n+5); err != nil {
			t.Fatalf("Receive: %v", err)
		}
		return len(ds) > 0
	})
	if len(ds) != n {
		t.Fatalf("Receive returned %d deliveries, want %d", len(ds), n)
	}
	return ds
}

// until polls cond every 10 ms until it holds or the deadline passes.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not by %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCausesMatchFileStore rejects one message per cause shape on the
// adapter and on the file-backed store and requires the same dead letter
// fields: the classified-cause rule is one rule.
func TestCausesMatchFileStore(t *testing.T) {
	ctx := context.Background()
	fs, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone})
	if err != nil {
		t.Fatalf("broker.Open: %v", err)
	}
	defer fs.Close()
	fq, err := fs.Queue("causes", policy())
	if err != nil {
		t.Fatal(err)
	}
	nq := mustQueue(t, openBackend(t).Store, "causes", policy())
	card := broker.NewError("CARD_DECLINED", 0x05020001, "declined", secretText)
	causes := []error{
		nil,
		errors.New(secretText),
		card,
		fmt.Errorf("wrapped %s: %w", secretText, card),
		card.Wrap(errors.New(secretText)),
		broker.DoNotRetry(nil),
		broker.DoNotRetry(errors.New(secretText)),
		broker.DoNotRetry(card),
		broker.DoNotRetry(broker.DoNotRetry(errors.New(secretText))),
		broker.NewError("", 7, "pub", secretText),
		broker.NewError("NEWLINE", 1, "line one\nline two \"quoted\" \x00 ünïcode", secretText),
	}
	for i, cause := range causes {
		for _, q := range []broker.Broker{fq, nq} {
			if _, err := q.Publish(ctx, []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
			ds, err := q.Receive(ctx, 1)
			if err != nil || len(ds) != 1 {
				t.Fatalf("Receive: %d, %v", len(ds), err)
			}
			if err := q.(broker.Rejecter).Reject(ctx, ds[0].Lease.Receipt, cause); err != nil {
				t.Fatalf("Reject: %v", err)
			}
		}
	}
	want, err := fq.DeadLetters(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	got, err := nq.DeadLetters(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(causes) || len(want) != len(causes) {
		t.Fatalf("%d and %d dead letters, want %d each", len(got), len(want), len(causes))
	}
	for i := range causes {
		w, g := want[i], got[i]
		if g.Reason != w.Reason || g.Code != w.Code || g.Cause != w.Cause || g.Deliveries != w.Deliveries || !bytes.Equal(g.Message.Payload, w.Message.Payload) {
			t.Errorf("cause %d (%v): natsjs records %q %s %q #%d, the file store %q %s %q #%d", i, causes[i],
				g.Reason, broker.FormatCode(g.Code), g.Cause, g.Deliveries, w.Reason, broker.FormatCode(w.Code), w.Cause, w.Deliveries)
		}
	}
}

// TestDeadLetterRecordHoldsNoPrivateText reads the dead-letter stream's
// raw records and the adapter's log: the private detail and the Error text
// of an unclassified cause are in the log, keyed by message ID, and
// nowhere on the server.
func TestDeadLetterRecordHoldsNoPrivateText(t *testing.T) {
	ctx := context.Background()
	var logged bytes.Buffer
	var logMu sync.Mutex
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "SECRECY", Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, nc, "SECRECY") })
	q := mustQueue(t, st, "s", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	var ids []string
	for _, cause := range []error{errors.New("plain " + secretText), broker.NewError("R", 1, "public", secretText)} {
		m, err := q.Publish(ctx, []byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
		d := receiveN(t, q, 1)[0]
		if nv, err := q.Nack(ctx, d.Lease.Receipt, cause); err != nil || !nv.DeadLettered {
			t.Fatalf("Nack: %+v, %v", nv, err)
		}
	}
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(ctx, "SECRECY_D_s")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		raw, err := stream.GetLastMsgForSubject(ctx, "SECRECY.d.s."+id)
		if err != nil {
			t.Fatalf("dead-letter record of %s: %v", id, err)
		}
		var all strings.Builder
		for k, vs := range raw.Header {
			all.WriteString(k + "=" + strings.Join(vs, ",") + "\n")
		}
		all.Write(raw.Data)
		if strings.Contains(all.String(), secretText) {
			t.Fatalf("the dead-letter record of %s holds the private text:\n%s", id, all.String())
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logged.String(), "plain "+secretText) || !strings.Contains(logged.String(), ids[0]) {
		t.Fatalf("the unclassified cause's text and its message ID are not in the log:\n%s", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestTwoStoresShareAQueue runs two Stores (two processes) on one queue:
// each refuses the other's receipts, a publication through one wakes the
// other's idle consumer, and both see the same dead letters.
func TestTwoStoresShareAQueue(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "shared", policy())
	qb := mustQueue(t, b, "shared", policy())

	w := qb.Wake() // subscribes b to the queue's publications
	if w.Scheduled {
		t.Fatalf("Wake of an empty queue is Scheduled: %+v", w)
	}
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Signal:
	case <-time.After(10 * time.Second):
		t.Fatalf("a publish through another Store did not close the wake signal")
	}
	if w := qb.Wake(); !w.Scheduled || w.In > 0 {
		t.Fatalf("after another Store's publish: Wake %+v, want Scheduled now", w)
	}
	d := receiveN(t, qb, 1)[0]
	if d.Message.ID != m.ID {
		t.Fatalf("b received %q, a published %q", d.Message.ID, m.ID)
	}
	if err := qa.Ack(ctx, d.Lease.Receipt); !errors.Is(err, broker.UnknownReceipt) {
		t.Fatalf("a acked b's receipt: %v, want UnknownReceipt", err)
	}
	if err := qb.Reject(ctx, d.Lease.Receipt, broker.NewError("R", 0, "p", "")); err != nil {
		t.Fatal(err)
	}
	dls, err := qa.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || dls[0].Message.ID != m.ID {
		t.Fatalf("a sees dead letters %+v, %v; want b's reject", dls, err)
	}
	if err := qa.ReplayDeadLetter(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	r := receiveN(t, qb, 1)[0]
	if r.Message.ID != m.ID || r.Deliveries != 1 || !r.Message.EnqueuedAt.Equal(m.EnqueuedAt) {
		t.Fatalf("replayed %q #%d at %v, want %q #1 at %v", r.Message.ID, r.Deliveries, r.Message.EnqueuedAt, m.ID, m.EnqueuedAt)
	}
}

// TestLapseDeathBuriedByAnotherStore lets the last lease of a message
// taken through one Store lapse, and requires the other Store to find the
// dead letter without receiving anything: the server's advisory is kept
// in the deaths stream until some Store buries the message.
func TestLapseDeathBuriedByAnotherStore(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.VisibilityTimeout = 300 * time.Millisecond
		p.Capacity = 1
	})
	qa := mustQueue(t, a, "lapse", p)
	qb := mustQueue(t, b, "lapse", p)
	m, err := qa.Publish(ctx, []byte("doomed"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, qa, 1)[0]
	var dls []broker.DeadLetterValue
	until(t, 10*time.Second, "the lapsed message is a dead letter seen by the other Store", func() bool {
		var err error
		if dls, err = qb.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) == 1
	})
	dl := dls[0]
	if dl.Message.ID != m.ID || dl.Reason != broker.ReasonLeaseExpired || dl.Deliveries != 1 || string(dl.Message.Payload) != "doomed" {
		t.Fatalf("dead letter %+v", dl)
	}
	if dl.FailedAt.Before(d.Lease.ExpiresAt.Add(-time.Second)) || dl.FailedAt.After(d.Lease.ExpiresAt.Add(2*time.Second)) {
		t.Fatalf("FailedAt %v, the lease lapsed at %v", dl.FailedAt, d.Lease.ExpiresAt)
	}
	if err := qa.Ack(ctx, d.Lease.Receipt); !errors.Is(err, broker.LeaseExpired) {
		t.Fatalf("Ack of the lapsed lease: %v", err)
	}
	// The buried message no longer holds the queue's one place.
	if _, err := qa.Publish(ctx, []byte("next")); err != nil {
		t.Fatalf("Publish after the death: %v", err)
	}
}

// TestMessageOfAnotherClient publishes to the queue's subject without the
// adapter: the message is delivered with its stream sequence as ID and
// the server's store instant as EnqueuedAt.
func TestMessageOfAnotherClient(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "foreign", policy())
	nc := connect(t, sharedServer(t).ClientURL())
	js, _ := jetstream.New(nc)
	before := time.Now()
	ack, err := js.Publish(ctx, b.prefix+".q.foreign", []byte("raw"))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	d := receiveForeign(t, q, 1)[0]
	if want := fmt.Sprintf("%016x", ack.Sequence); d.Message.ID != want || string(d.Message.Payload) != "raw" {
		t.Fatalf("delivered %q %q, want %q %q", d.Message.ID, d.Message.Payload, want, "raw")
	}
	if d.Message.EnqueuedAt.Before(before.Add(-time.Second)) || d.Message.EnqueuedAt.After(after.Add(time.Second)) {
		t.Fatalf("EnqueuedAt %v is not the store instant (published between %v and %v)", d.Message.EnqueuedAt, before, after)
	}
	stream, err := js.Stream(ctx, b.prefix+"_Q_foreign")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stream.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Message.EnqueuedAt.Equal(raw.Time) {
		t.Fatalf("EnqueuedAt %v, want the server's store instant %v", d.Message.EnqueuedAt, raw.Time)
	}
}

// TestAMessageOfAnotherClientWithAForeignIDHeaderGetsItsSequence: another
// client's message whose Walbroker-Id header is not an ID of the adapter's
// shape (16 lower-case hex digits: each foreign ID here misses it by one
// character, just outside a range of the alphabet) is delivered, and
// dead-lettered, under its stream sequence.
func TestAMessageOfAnotherClientWithAForeignIDHeaderGetsItsSequence(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	js, _ := jetstream.New(connect(t, sharedServer(t).ClientURL()))
	for i, foreign := range []string{"order-42", "000000000000002a0", "0000000000002a", "000000000000000g", "000000000000000`", "000000000000000/", "000000000000000:", "000000000000000A"} {
		name := "foreign-id-" + strconv.Itoa(i)
		q := mustQueue(t, b.Store, name, policy())
		msg := nats.NewMsg(b.prefix + ".q." + name)
		msg.Data = []byte("raw")
		msg.Header.Set("Walbroker-Id", foreign)
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%016x", ack.Sequence)
		d := receiveForeign(t, q, 1)[0]
		if d.Message.ID != want {
			t.Fatalf("Walbroker-Id %q: delivered as %q, want its sequence %q", foreign, d.Message.ID, want)
		}
		if err := q.Reject(ctx, d.Lease.Receipt, nil); err != nil {
			t.Fatal(err)
		}
		dls, err := q.DeadLetters(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != 1 || dls[0].Message.ID != want {
			t.Fatalf("Walbroker-Id %q: dead letters %+v, want one of ID %s", foreign, dls, want)
		}
	}
}

// TestPolicyChangeReachesServer reopens a queue with another policy and
// requires the consumer and stream to follow it.
func TestPolicyChangeReachesServer(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q1 := mustQueue(t, b.Store, "p", policy())
	q2 := mustQueue(t, b.Store, "p", policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = 7 * time.Second
		p.MaxDeliveries = 3
		p.Capacity = 9
		p.DedupWindow = time.Hour
	}))
	if q1 != q2 {
		t.Fatalf("Queue returned a second *Queue for one name")
	}
	js, _ := jetstream.New(b.nc)
	c, err := js.Consumer(ctx, b.prefix+"_Q_p", "walbroker")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.AckWait != 7*time.Second || cfg.MaxDeliver != 3 {
		t.Fatalf("consumer AckWait %v MaxDeliver %d, want 7s 3", cfg.AckWait, cfg.MaxDeliver)
	}
	s, err := js.Stream(ctx, b.prefix+"_Q_p")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxMsgs != 9 || cfg.Duplicates != time.Hour {
		t.Fatalf("stream MaxMsgs %d Duplicates %v, want 9 1h", cfg.MaxMsgs, cfg.Duplicates)
	}
	// A key's record outlives the server's memory of the key by a minute,
	// so that a duplicate the server still catches finds its record.
	if cfg := b.stream(t, "_K_p").CachedInfo().Config; cfg.MaxAge != time.Hour+time.Minute || cfg.Duplicates != time.Hour {
		t.Fatalf("keys stream MaxAge %v Duplicates %v, want 1h1m 1h", cfg.MaxAge, cfg.Duplicates)
	}
}

// TestAStoreRefusalOtherThanCapacityIsNotQueueFull: the server refuses a
// message for its stream's MaxMsgs and for other limits with one error
// code; only MaxMsgs is the queue's Capacity. With a byte limit set on the
// work stream by hand (the adapter sets none), a publish beyond it is an
// error, but not QueueFull.
func TestAStoreRefusalOtherThanCapacityIsNotQueueFull(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "bytes", policy(func(p *broker.PolicyValue) { p.Capacity = 100 }))
	js, _ := jetstream.New(b.nc)
	work := b.stream(t, "_Q_bytes")
	cfg := work.CachedInfo().Config
	cfg.MaxBytes = 64
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("set the work stream's MaxBytes: %v", err)
	}
	_, err := q.Publish(ctx, make([]byte, 128))
	if err == nil || errors.Is(err, broker.QueueFull) {
		t.Fatalf("Publish beyond the work stream's MaxBytes: %v, want an error that is not QueueFull", err)
	}
}

// TestServerLimits: a batch beyond the server's atomic-batch bound is
// InvalidBatchSize, and a payload the policy allows but the server's
// max_payload does not is MessageTooLarge; neither enqueues anything.
func TestServerLimits(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "limits", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2 * testMaxPayload }))
	if _, err := q.PublishBatch(ctx, make([][]byte, 1001)); !errors.Is(err, broker.InvalidBatchSize) {
		t.Fatalf("a batch of 1001: %v, want InvalidBatchSize", err)
	}
	if _, err := q.Publish(ctx, make([]byte, testMaxPayload)); !errors.Is(err, broker.MessageTooLarge) {
		t.Fatalf("a payload of the server's max_payload: %v, want MessageTooLarge", err)
	}
	if ms, err := q.PublishBatch(ctx, make([][]byte, 1000)); err != nil || len(ms) != 1000 {
		t.Fatalf("a batch of 1000: %d, %v", len(ms), err)
	}
	got := 0
	until(t, 10*time.Second, "the batch's 1000 messages received", func() bool {
		ds, err := q.Receive(ctx, 2000)
		if err != nil {
			t.Fatal(err)
		}
		got += len(ds)
		return got >= 1000
	})
	if got != 1000 {
		t.Fatalf("received %d messages, want the batch's 1000", got)
	}
}

// TestAPayloadOverTheServersBoundSaysSo: a payload the policy allows but
// the server's max_payload does not is MessageTooLarge whose text names
// that bound, its value and where it comes from, and not the policy's
// MaxMessageBytes, which it does not exceed; the public half (what a cause
// records) says the same. A payload over MaxMessageBytes still names it.
func TestAPayloadOverTheServersBoundSaysSo(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "bound", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2 * testMaxPayload }))
	_, err := q.Publish(ctx, make([]byte, testMaxPayload-8<<10+1))
	if !errors.Is(err, broker.MessageTooLarge) {
		t.Fatalf("a payload one byte over the server's max_payload less 8 KiB: %v, want MessageTooLarge", err)
	}
	text := err.Error()
	for _, want := range []string{"payload is", "max_payload", strconv.Itoa(testMaxPayload), strconv.Itoa(testMaxPayload - 8<<10), "server"} {
		if !strings.Contains(text, want) {
			t.Errorf("error %q does not name %q", text, want)
		}
	}
	var be *broker.Error
	if strings.Contains(text, "MaxMessageBytes") || !errors.As(err, &be) || !strings.Contains(be.Public(), "max_payload") {
		t.Errorf("error %q (public %q) blames MaxMessageBytes or does not say max_payload", text, be.Public())
	}
	small := mustQueue(t, openBackend(t).Store, "bound", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 16 }))
	if _, err := small.Publish(ctx, make([]byte, 17)); !errors.Is(err, broker.MessageTooLarge) || !strings.Contains(err.Error(), "MaxMessageBytes is 16") {
		t.Errorf("a payload over MaxMessageBytes 16: %v, want MessageTooLarge naming MaxMessageBytes", err)
	}
}

// TestAnExtendRacingAnAckOfOneLeaseNeverBothSucceed: an Extend and an Ack
// of one receipt, started together, never both succeed: the Ack ends the
// lease, the Extend replaces it, and whichever comes second finds it gone
// (LeaseExpired), also when the Ack ends it while the Extend waits for
// the server.
func TestAnExtendRacingAnAckOfOneLeaseNeverBothSucceed(t *testing.T) {
	const n = 128
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "race", policy())
	ds := publishAndLease(t, q, n)
	both := 0
	for i, d := range ds {
		var extendErr, ackErr error
		// Some Acks come while the Extend waits for the server.
		race(i,
			func() { _, extendErr = q.Extend(ctx, d.Lease.Receipt, time.Minute) },
			func() { ackErr = q.Ack(ctx, d.Lease.Receipt) })
		for _, err := range []error{extendErr, ackErr} {
			if err != nil && !errors.Is(err, broker.LeaseExpired) {
				t.Fatalf("Extend or Ack racing on one receipt: %v, want success or LeaseExpired", err)
			}
		}
		if extendErr == nil && ackErr == nil {
			both++
		}
		if extendErr != nil && ackErr != nil {
			t.Fatalf("both the Extend and the Ack of %s failed: %v; %v", d.Message.ID, extendErr, ackErr)
		}
	}
	if both > 0 {
		t.Fatalf("%d of %d leases were both extended and acknowledged", both, n)
	}
}

// TestAReplayRacingADeleteOfOneDeadLetterOneSucceeds: of a
// ReplayDeadLetter and a DeleteDeadLetter of one dead letter, started
// together, exactly one succeeds and the other finds it gone
// (DeadLetterNotFound), also when the delete comes while the replay
// publishes the message; and a message is queued again exactly when its
// replay won, never after a delete that succeeded (which removes it for
// good).
func TestAReplayRacingADeleteOfOneDeadLetterOneSucceeds(t *testing.T) {
	const n = 128
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "replay-race", policy())
	ds := publishAndLease(t, q, n)
	for _, d := range ds {
		if err := q.Reject(ctx, d.Lease.Receipt, nil); err != nil {
			t.Fatal(err)
		}
	}
	replayed := map[string]bool{}
	for i, d := range ds {
		id := d.Message.ID
		var replayErr, deleteErr error
		// Some deletes come while the replay publishes.
		race(i,
			func() { replayErr = q.ReplayDeadLetter(ctx, id) },
			func() { deleteErr = q.DeleteDeadLetter(ctx, id) })
		for _, err := range []error{replayErr, deleteErr} {
			if err != nil && !errors.Is(err, broker.DeadLetterNotFound) {
				t.Fatalf("replay and delete of %s racing: %v; want success or DeadLetterNotFound", id, err)
			}
		}
		if (replayErr == nil) == (deleteErr == nil) {
			t.Fatalf("replay and delete of %s racing: %v and %v; want exactly one to succeed", id, replayErr, deleteErr)
		}
		replayed[id] = replayErr == nil
	}
	if dls, err := q.DeadLetters(ctx, n); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters after the races: %d, %v; want none", len(dls), err)
	}
	want := 0
	for _, ok := range replayed {
		if ok {
			want++
		}
	}
	var got []broker.DeliveryValue
	until(t, 10*time.Second, "the replayed messages", func() bool {
		ds, err := q.Receive(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
		return len(got) >= want
	})
	time.Sleep(100 * time.Millisecond)
	more, err := q.Receive(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(got, more...) {
		if !replayed[d.Message.ID] {
			t.Errorf("message %s queued again, though the delete of its dead letter succeeded", d.Message.ID)
		}
	}
	if len(got)+len(more) != want {
		t.Errorf("%d messages queued again, want the %d whose replay won", len(got)+len(more), want)
	}
}

// publishAndLease publishes n one-byte messages to q in one batch and
// leases them all, over as many Receives as the server takes to offer
// them.
func publishAndLease(t *testing.T, q *natsjs.Queue, n int) []broker.DeliveryValue {
	t.Helper()
	ctx := context.Background()
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte("x")
	}
	if _, err := q.PublishBatch(ctx, payloads); err != nil {
		t.Fatal(err)
	}
	var ds []broker.DeliveryValue
	until(t, 10*time.Second, "the batch received", func() bool {
		got, err := q.Receive(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
		return len(ds) >= n
	})
	return ds
}

// race runs first and second together and waits for both. second starts
// a little later in each round i (0 to 750 µs, over 16 rounds), so that
// some rounds have it land while first waits for the server.
func race(i int, first, second func()) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); <-start; first() }()
	go func() {
		defer wg.Done()
		<-start
		for begun := time.Now(); time.Since(begun) < time.Duration(i%16)*50*time.Microsecond; {
		}
		second()
	}()
	close(start)
	wg.Wait()
}

// TestExtendByVisibilityTimeout renews with the server's "in progress",
// the path Extend takes when by equals the policy's VisibilityTimeout: the
// message stays hidden past its first deadline and the new receipt acks.
func TestExtendByVisibilityTimeout(t *testing.T) {
	ctx := context.Background()
	const vt = 1500 * time.Millisecond
	q := mustQueue(t, openBackend(t).Store, "wpi", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = vt }))
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	time.Sleep(time.Until(d.Lease.ExpiresAt.Add(-vt / 2)))
	l, err := q.Extend(ctx, d.Lease.Receipt, vt)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(d.Lease.ExpiresAt.Add(200 * time.Millisecond)))
	start := time.Now()
	ds, err := q.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 && start.Before(l.ExpiresAt.Add(-300*time.Millisecond)) {
		t.Fatalf("redelivered at %v, after its first deadline %v but within the renewed one %v", start, d.Lease.ExpiresAt, l.ExpiresAt)
	}
	if len(ds) == 0 {
		if err := q.Ack(ctx, l.Receipt); err != nil && start.Before(l.ExpiresAt.Add(-300*time.Millisecond)) {
			t.Fatalf("Ack with the renewed receipt: %v", err)
		}
	}
}

// TestClosedConnection: a Store whose connection was closed answers
// Closed, and Store.Close makes Queue refuse too.
func TestClosedConnection(t *testing.T) {
	ctx := context.Background()
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "CLOSING"})
	if err != nil {
		t.Fatal(err)
	}
	q := mustQueue(t, st, "c", policy())
	t.Cleanup(func() { deleteStreams(t, connect(t, sharedServer(t).ClientURL()), "CLOSING") })
	nc.Close()
	if _, err := q.Publish(ctx, []byte("x")); !errors.Is(err, broker.Closed) {
		t.Fatalf("Publish on a closed connection: %v, want Closed", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := st.Queue("c", policy()); !errors.Is(err, broker.Closed) {
		t.Fatalf("Queue after Close: %v, want Closed", err)
	}
}

// TestEveryCallOnAClosedConnectionIsClosed: once the connection is
// closed, every call is Closed, also one whose arguments alone would
// answer otherwise (the receipt of a lease already ended, an ID that is no
// dead letter's), as after Store.Close.
func TestEveryCallOnAClosedConnectionIsClosed(t *testing.T) {
	ctx := context.Background()
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "CLOSEDALL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, connect(t, sharedServer(t).ClientURL()), "CLOSEDALL") })
	q := mustQueue(t, st, "c", policy())
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	is := func(err error, what string) {
		t.Helper()
		if !errors.Is(err, broker.Closed) {
			t.Errorf("%s on a closed connection: %v, want Closed", what, err)
		}
	}
	_, err = q.Publish(ctx, []byte("y"))
	is(err, "Publish")
	_, err = q.PublishKeyed(ctx, "k", []byte("y"))
	is(err, "PublishKeyed")
	_, err = q.PublishBatch(ctx, [][]byte{[]byte("y")})
	is(err, "PublishBatch")
	_, err = q.Receive(ctx, 1)
	is(err, "Receive")
	is(q.Ack(ctx, d.Lease.Receipt), "Ack of an ended lease")
	_, err = q.Nack(ctx, d.Lease.Receipt, nil)
	is(err, "Nack of an ended lease")
	is(q.Reject(ctx, d.Lease.Receipt, nil), "Reject of an ended lease")
	_, err = q.Extend(ctx, d.Lease.Receipt, time.Minute)
	is(err, "Extend of an ended lease")
	_, err = q.DeadLetters(ctx, 1)
	is(err, "DeadLetters")
	is(q.ReplayDeadLetter(ctx, "no-such-id"), "ReplayDeadLetter of no dead letter")
	is(q.DeleteDeadLetter(ctx, "no-such-id"), "DeleteDeadLetter of no dead letter")
}

// TestADeclarationOnAClosedConnectionIsClosed: once the connection is
// closed, Store.Queue is Closed too, as every queue call is (and as the
// file store's Queue is once the store is closed): for a queue the Store
// serves already and for a new one alike, not the client's "connection
// closed" passed on without broker.Closed.
func TestADeclarationOnAClosedConnectionIsClosed(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "DECLCLOSED"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, connect(t, sharedServer(t).ClientURL()), "DECLCLOSED") })
	mustQueue(t, st, "c", policy())
	nc.Close()
	for _, name := range []string{"c", "d"} {
		if _, err := st.Queue(name, policy()); !errors.Is(err, broker.Closed) {
			t.Errorf("Store.Queue(%q) on a closed connection: %v, want an error wrapping broker.Closed", name, err)
		}
	}
}

// TestOpenRefuses: bad options and names are refused before the server is
// asked.
func TestOpenRefuses(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	for _, o := range []natsjs.Options{{Prefix: "a_b"}, {Prefix: "a.b"}, {Prefix: strings.Repeat("P", 33)}, {Replicas: 6}, {Replicas: -1}, {Timeout: -1}} {
		if _, err := natsjs.Open(nc, o); err == nil {
			t.Errorf("Open(%+v) accepted it", o)
		}
	}
	if _, err := natsjs.Open(nil, natsjs.Options{}); err == nil {
		t.Errorf("Open(nil) accepted it")
	}
	st := openBackend(t).Store
	for _, name := range []string{"", ".x", "a b", "a*", "a>"} {
		if _, err := st.Queue(name, policy()); err == nil {
			t.Errorf("Queue(%q) accepted it", name)
		}
	}
	_, err := st.Queue("ok", broker.PolicyValue{})
	if !errors.Is(err, broker.QueueMisconfigured) {
		t.Errorf("Queue with the zero policy: %v, want QueueMisconfigured", err)
	}
	// Each violation is a line of its own, and each names the queue.
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 2 {
		t.Errorf("Queue with the zero policy: %d lines, want one per violation (2):\n%v", len(lines), err)
	} else {
		for _, l := range lines {
			if !strings.HasPrefix(l, "natsjs: queue ok: broker: policy: ") {
				t.Errorf("a line of the refusal does not name the queue: %q", l)
			}
		}
	}
}

// TestOpenAcceptsTheBoundsOfItsOptions: the largest values the options
// allow are accepted, not only refused beyond them: a Prefix of 32 of
// [A-Za-z0-9-] and Replicas 5 (Open asks the server nothing about them).
func TestOpenAcceptsTheBoundsOfItsOptions(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	longest := strings.Repeat("Az9-", 8)
	for _, o := range []natsjs.Options{{Prefix: longest}, {Replicas: 5}} {
		st, err := natsjs.Open(nc, o)
		if err != nil {
			t.Errorf("Open(%+v): %v", o, err)
			continue
		}
		st.Close()
	}
}

// TestConsumeDrainsBursts runs broker.Consume while batches are published
// and requires every message handled: a Receive that stops short (the
// server may tell its consumer about a batch's messages a moment after it
// acknowledged the batch) must not leave messages behind while the Waker
// says there is nothing to do.
func TestConsumeDrainsBursts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := mustQueue(t, openBackend(t).Store, "bursts", policy())
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, q, func(_ context.Context, d broker.DeliveryValue) error {
			mu.Lock()
			handled[d.Message.ID] = true
			mu.Unlock()
			return nil
		}, broker.ConsumeOptions{Batch: 64, Concurrency: 8})
	}()
	want := 0
	for range rounds {
		ms, err := q.PublishBatch(ctx, make([][]byte, 500))
		if err != nil {
			t.Fatal(err)
		}
		want += len(ms)
		until(t, 30*time.Second, "the burst handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == want
		})
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume: %v", err)
	}
}

// TestIdleConsumerPicksUpAnotherProcessLapse: a message leased through one
// Store whose consumer then dies is handled by broker.Consume running on
// another Store, which learns of the lapse only by looking again (the
// Recheck of Options).
func TestIdleConsumerPicksUpAnotherProcessLapse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Second })
	qa := mustQueue(t, a, "orphan", p)
	qb := mustQueue(t, b, "orphan", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, qa, 1)[0] // and the consumer of a dies
	got := make(chan broker.DeliveryValue, 1)
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, qb, func(_ context.Context, d broker.DeliveryValue) error {
			select {
			case got <- d:
			default:
			}
			return nil
		}, broker.ConsumeOptions{})
	}()
	select {
	case r := <-got:
		if r.Message.ID != m.ID || r.Deliveries != 2 {
			t.Fatalf("handled %q #%d, want %q #2", r.Message.ID, r.Deliveries, m.ID)
		}
		if time.Now().Before(d.Lease.ExpiresAt) {
			t.Fatalf("handled before the first lease lapsed at %v", d.Lease.ExpiresAt)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the idle consumer of another Store never picked up the lapsed message")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume: %v", err)
	}
}

// TestASweepNeverBuriesAnAcknowledgedMessage: the server forgets an
// acknowledged message's lease a moment before it deletes the message, so
// a sweep that looks for messages the consumer gave up on (see
// TestALapseWhoseAdvisoryNobodyHeardStillMakesADeadLetter) can see one in
// between. Another Store sweeping without pause while every message is
// received and acknowledged must make none of them a dead letter.
func TestASweepNeverBuriesAnAcknowledgedMessage(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy()
	qa := mustQueue(t, a, "acked", p)
	qb := mustQueue(t, b, "acked", p)
	const n = 400
	for i := 0; i < n; i += 100 {
		batch := make([][]byte, 100)
		for j := range batch {
			batch[j] = []byte(fmt.Sprint("m", i+j))
		}
		if _, err := qa.PublishBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	sweeps := make(chan int)
	go func() {
		k := 0
		for {
			select {
			case <-done:
				sweeps <- k
				return
			default:
			}
			if err := qb.SweepNow(ctx); err != nil {
				t.Error(err)
			}
			k++
		}
	}()
	acked := 0
	for deadline := time.Now().Add(time.Minute); acked < n && time.Now().Before(deadline); {
		ds, err := qa.Receive(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := qa.Ack(ctx, d.Lease.Receipt); err != nil {
				t.Fatalf("Ack of %s: %v", d.Message.ID, err)
			}
			acked++
		}
	}
	close(done)
	k := <-sweeps
	if acked != n {
		t.Fatalf("acknowledged %d of %d messages", acked, n)
	}
	dls, err := qb.DeadLetters(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 0 {
		t.Fatalf("%d acknowledged messages became dead letters during %d sweeps, the first %+v", len(dls), k, dls[0])
	}
	t.Logf("%d sweeps", k)
}

// TestAReceiveAfterAPublishWaitsForTheServersConsumer: the server's
// consumer offers a stored message a moment after the publish returned,
// and on a loaded machine that moment can outlast the first pull's wait.
// Here the consumer is paused for longer than that wait: a Receive right
// after a Publish returned must still lease the message, once the
// consumer offers it, instead of coming back empty.
func TestAReceiveAfterAPublishWaitsForTheServersConsumer(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "slow", policy())
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Second)
	if _, err := js.PauseConsumer(ctx, b.prefix+"_Q_slow", "walbroker", until); err != nil {
		t.Fatal(err)
	}
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(ds) != 1 || ds[0].Message.ID != m.ID {
		t.Fatalf("Receive right after the Publish of %s (the consumer paused until %v) returned %d deliveries at %v, want the message",
			m.ID, until, len(ds), time.Now())
	}
}

// TestAPublishIntoAPlaceHeldByALapsedLastDeliveryIsAdmitted: a message
// whose last allowed lease lapsed is a dead letter, and dead letters do
// not count toward Capacity, even before any call looked at the queue:
// the first call of another Store, a Publish into the full queue, is
// admitted and finds the lapsed message a dead letter.
func TestAPublishIntoAPlaceHeldByALapsedLastDeliveryIsAdmitted(t *testing.T) {
	ctx := context.Background()
	a := openBackend(t)
	p := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.VisibilityTimeout = 300 * time.Millisecond
		p.Capacity = 1
	})
	qa := mustQueue(t, a.Store, "lapsed", p)
	m, err := qa.Publish(ctx, []byte("doomed"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, qa, 1)
	js, _ := jetstream.New(a.nc)
	until(t, 10*time.Second, "the server records the lapse of the last delivery", func() bool {
		s, err := js.Stream(ctx, a.prefix+"_A_lapsed")
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs == 1
	})
	qb := mustQueue(t, storeOn(t, a.prefix, natsjs.Options{}), "lapsed", p)
	next, err := qb.Publish(ctx, []byte("next"))
	if err != nil {
		t.Fatalf("Publish into the place of the lapsed message: %v", err)
	}
	dls, err := qb.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != broker.ReasonLeaseExpired {
		t.Fatalf("dead letters %+v, want %s LEASE_EXPIRED", dls, m.ID)
	}
	// The deaths stream keeps an advisory only until its message is a
	// dead letter.
	deaths, err := js.Stream(ctx, a.prefix+"_A_lapsed")
	if err != nil {
		t.Fatal(err)
	}
	if n := deaths.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("the deaths stream holds %d advisories after the burial, want none", n)
	}
	if d := receiveN(t, qb, 1)[0]; d.Message.ID != next.ID {
		t.Fatalf("received %s, want %s", d.Message.ID, next.ID)
	}
}

// TestADeliveryBeyondThePolicysMaxDeliveriesIsADeadLetter: a Store whose
// policy allows one delivery receives a message that another Store,
// declaring three, delivered once already. The message has run out of
// attempts under this policy: it is not handed out but becomes a dead
// letter, whose Deliveries is the one delivery it had
// (broker.DeadLetterValue).
func TestADeliveryBeyondThePolicysMaxDeliveriesIsADeadLetter(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "lowered", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	qb := mustQueue(t, b, "lowered", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 }))
	m, err := qb.Publish(ctx, []byte("twice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qb.Nack(ctx, receiveN(t, qb, 1)[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	var dls []broker.DeadLetterValue
	until(t, 10*time.Second, "the message is a dead letter", func() bool {
		ds, err := qa.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			t.Fatalf("delivered %s as delivery %d under MaxDeliveries 1", ds[0].Message.ID, ds[0].Deliveries)
		}
		if dls, err = qa.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) > 0
	})
	// The nack of the first delivery reported a failure (a nil cause):
	// the dead letter records it, UNEXPLAINED, not LEASE_EXPIRED.
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Reason != broker.ReasonUnexplained || dls[0].Deliveries != 1 {
		t.Fatalf("dead letters %+v, want %s UNEXPLAINED (its last nack's nil cause) after 1 delivery", dls, m.ID)
	}
}

// TestADeliveryBeyondAStoresMaxDeliveriesCountsTheDeliveriesItHad: a
// message delivered (and nacked) three times through a Store whose policy
// allows five, then pulled by a Store whose policy allows one, is a dead
// letter of that Store's. DeadLetterValue.Deliveries is "how many times
// the message was delivered before it was abandoned": three, not the
// policy's MaxDeliveries, as the file store counts a message that a
// lowered MaxDeliveries cut off.
func TestADeliveryBeyondAStoresMaxDeliveriesCountsTheDeliveriesItHad(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "beyond", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	qb := mustQueue(t, b, "beyond", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5 }))
	m, err := qb.Publish(ctx, []byte("thrice"))
	if err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 3; want++ {
		d := receiveOneWithin(t, qb, "a delivery through the Store of MaxDeliveries 5")
		if d.Deliveries != want {
			t.Fatalf("delivery %d, want %d", d.Deliveries, want)
		}
		if _, err := qb.Nack(ctx, d.Lease.Receipt, nil); err != nil {
			t.Fatal(err)
		}
	}
	var dls []broker.DeadLetterValue
	until(t, 10*time.Second, "the message is a dead letter", func() bool {
		ds, err := qa.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			t.Fatalf("delivered %s as delivery %d under MaxDeliveries 1", ds[0].Message.ID, ds[0].Deliveries)
		}
		if dls, err = qa.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) > 0
	})
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Deliveries != 3 {
		t.Fatalf("dead letters %s; want %s with Deliveries 3 (it was delivered three times before it was abandoned)", dlText(dls), m.ID)
	}
}

// TestLeasesStayLiveWhenThousandsAreOut: the leases of a Store are
// trimmed only long after they lapsed; with more than a thousand out, a
// later Receive leaves every live one acknowledgeable.
func TestLeasesStayLiveWhenThousandsAreOut(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "many", policy())
	const n = 1200
	for range 2 {
		if _, err := q.PublishBatch(ctx, make([][]byte, n/2)); err != nil {
			t.Fatal(err)
		}
	}
	var ds []broker.DeliveryValue
	until(t, 10*time.Second, "every message is leased", func() bool {
		got, err := q.Receive(ctx, n-len(ds))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
		return len(ds) == n
	})
	if got, err := q.Receive(ctx, 1); err != nil || len(got) != 0 {
		t.Fatalf("Receive with every message leased: %d deliveries, %v", len(got), err)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if err := q.Ack(ctx, ds[i].Lease.Receipt); err != nil {
			t.Fatalf("Ack of lease %d of %d: %v", i, n, err)
		}
	}
}

// TestADeadLetterIDWithWildcardsNamesNoDeadLetter: IDs reach the server
// as subject tokens, where "*" and ">" are wildcards. Replaying or
// deleting such an ID must be DeadLetterNotFound and leave the queue's
// dead letters as they were.
func TestADeadLetterIDWithWildcardsNamesNoDeadLetter(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "wild", policy())
	m, err := q.Publish(ctx, []byte("dead"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Reject(ctx, receiveN(t, q, 1)[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"*", ">", m.ID[:15] + "*", "*." + m.ID} {
		if err := q.ReplayDeadLetter(ctx, id); !errors.Is(err, broker.DeadLetterNotFound) {
			t.Fatalf("ReplayDeadLetter(%q): %v, want DeadLetterNotFound", id, err)
		}
		if err := q.DeleteDeadLetter(ctx, id); !errors.Is(err, broker.DeadLetterNotFound) {
			t.Fatalf("DeleteDeadLetter(%q): %v, want DeadLetterNotFound", id, err)
		}
	}
	if dls, err := q.DeadLetters(ctx, 10); err != nil || len(dls) != 1 || dls[0].Message.ID != m.ID {
		t.Fatalf("dead letters %+v, %v; want %s alone", dls, err, m.ID)
	}
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("Receive: %d deliveries, %v; want none", len(ds), err)
	}
}

// TestARecheckIsAtMostTheVisibilityTimeout: while another Store holds a
// lease, Wake names a look again Options.Recheck away, or the queue's
// VisibilityTimeout when shorter, so that an idle consumer finds the
// message within that long of the lapse.
func TestARecheckIsAtMostTheVisibilityTimeout(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	p := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = 5 * time.Second })
	qc := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{Recheck: time.Minute}), "recheck", p)
	qb := mustQueue(t, b.Store, "recheck", p)
	if _, err := qb.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	receiveN(t, qb, 1)
	if ds, err := qc.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("Receive while the other Store holds the lease: %d deliveries, %v", len(ds), err)
	}
	if w := qc.Wake(); !w.Scheduled || w.In > p.VisibilityTimeout+time.Second {
		t.Fatalf("Wake %+v, want a look again within the VisibilityTimeout %v", w, p.VisibilityTimeout)
	}
}

// TestAReceiveLeasesWhatAnotherStorePublishedWhileTheConsumerLags: the
// server's consumer is paused past the first pull's wait, and a message
// another Store published is pending on it (the consumer counts it). A
// Receive must lease the message once the consumer offers it instead of
// coming back empty.
func TestAReceiveLeasesWhatAnotherStorePublishedWhileTheConsumerLags(t *testing.T) {
	ctx := context.Background()
	a := openBackend(t)
	qa := mustQueue(t, a.Store, "lag", policy())
	qb := mustQueue(t, storeOn(t, a.prefix, natsjs.Options{}), "lag", policy())
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	resume := time.Now().Add(2 * time.Second)
	if _, err := js.PauseConsumer(ctx, a.prefix+"_Q_lag", "walbroker", resume); err != nil {
		t.Fatal(err)
	}
	m, err := qb.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, a.prefix+"_Q_lag", "walbroker")
	if err != nil {
		t.Fatal(err)
	}
	until(t, 10*time.Second, "the consumer counts the message as pending", func() bool {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumPending == 1
	})
	ds, err := qa.Receive(ctx, 10)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(ds) != 1 || ds[0].Message.ID != m.ID {
		t.Fatalf("Receive of the message another Store published (the consumer paused until %v) returned %d deliveries at %v, want the message",
			resume, len(ds), time.Now())
	}
}

// storeOn opens a Store with prefix on the shared server, on a connection
// of its own: another process serving the same queues.
func storeOn(t *testing.T, prefix string, opts natsjs.Options) *natsjs.Store {
	t.Helper()
	opts.Prefix = prefix
	st, err := natsjs.Open(connect(t, sharedServer(t).ClientURL()), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestADuplicateOnlyTheServerRemembersAnswersTheOriginalsEnqueuedAt: a key
// whose record is gone (it expired, or the server's duplicate window, from
// its later store instant, outlasts the record's) while the server still
// remembers the message is a duplicate of that message: its ID and the
// EnqueuedAt it was stored with, not the instant of the claim written
// now; nothing is enqueued.
func TestADuplicateOnlyTheServerRemembersAnswersTheOriginalsEnqueuedAt(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "orders", policy())
	orig, err := q.PublishKeyed(ctx, "order-1", []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(b.nc)
	keys, err := js.Stream(ctx, b.prefix+"_K_orders")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("order-1"))
	if err := keys.Purge(ctx, jetstream.WithPurgeSubject(b.prefix+".k.orders."+hex.EncodeToString(sum[:]))); err != nil {
		t.Fatalf("purge the key's record: %v", err)
	}
	dup, err := q.PublishKeyed(ctx, "order-1", []byte("second"))
	if err != nil {
		t.Fatal(err)
	}
	sameOriginal(t, orig, dup, "a key only the server's duplicate window remembers")
	ds := receiveN(t, q, 1)
	if ds[0].Message.ID != orig.ID || string(ds[0].Message.Payload) != "first" {
		t.Fatalf("received %s %q, want the original %s %q", ds[0].Message.ID, ds[0].Message.Payload, orig.ID, "first")
	}
}

// TestAKeyWhoseRecordThisClockFindsStaleWhileTheServerHoldsItAnswersTheRecord:
// a Store whose clock runs ahead of the original publisher's finds the
// key's record past the window while the server's duplicate window still
// holds the key. The publish is a duplicate and answers the original as
// the record names it, its EnqueuedAt included, not this call's instant.
// The record's EnqueuedAt is set back by more than the window here, as
// such a clock would see it.
func TestAKeyWhoseRecordThisClockFindsStaleWhileTheServerHoldsItAnswersTheRecord(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	window := time.Hour
	q := mustQueue(t, b.Store, "orders", policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
	orig, err := q.PublishKeyed(ctx, "order-1", []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("order-1"))
	record := nats.NewMsg(b.prefix + ".k.orders." + hex.EncodeToString(sum[:]))
	seen := orig.EnqueuedAt.Add(-window - time.Minute)
	record.Header.Set("Walbroker-Enqueued", strconv.FormatInt(seen.UnixNano(), 10))
	record.Header.Set("Walbroker-Id", orig.ID)
	js, _ := jetstream.New(b.nc)
	if _, err := js.PublishMsg(ctx, record); err != nil {
		t.Fatalf("the key's record: %v", err)
	}
	dup, err := q.PublishKeyed(ctx, "order-1", []byte("second"))
	if err != nil {
		t.Fatal(err)
	}
	sameOriginal(t, broker.MessageValue{ID: orig.ID, EnqueuedAt: seen}, dup, "a key whose record is stale here but not on the server")
	receiveN(t, q, 1)
}

// TestAKeyRecordNamingNoMessageIDIsAnError: a key's record on the server
// is input like any other. One whose ID is not of the adapter's shape (a
// record some other writer left) makes PublishKeyed fail with an error
// TestAKeyWhoseRecordCannotNameItsMessageIsAnError: PublishKeyed returns
// nil only once the key's record names the message. When the server
// refuses that record (here a size limit set by hand on the keys stream
// admits the claim, not the record with the ID), the call is an error
// saying the message is enqueued.
func TestAKeyWhoseRecordCannotNameItsMessageIsAnError(t *testing.T) {
	ctx := context.Background()
	// A prefix of its own, so that the records' sizes are the same in
	// every run.
	b := backend{storeOn(t, "KEYSIZE", natsjs.Options{}), connect(t, sharedServer(t).ClientURL()), "KEYSIZE"}
	t.Cleanup(func() { deleteStreams(t, b.nc, b.prefix) })
	q := mustQueue(t, b.Store, "orders", policy())
	js, _ := jetstream.New(b.nc)
	keys := b.stream(t, "_K_orders")
	cfg := keys.CachedInfo().Config
	cfg.MaxMsgSize = 148 // a claim fits (about 132 bytes), a record with the ID (32 more) does not
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("limit the keys stream's message size: %v", err)
	}
	m, err := q.PublishKeyed(ctx, "order-1", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "is enqueued") {
		t.Fatalf("PublishKeyed whose record could not name its message: %+v, %v; want an error saying it is enqueued", m, err)
	}
	receiveN(t, q, 1)
}

// saying so, never answer that text as the original's ID.
func TestAKeyRecordNamingNoMessageIDIsAnError(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "orders", policy())
	sum := sha256.Sum256([]byte("order-1"))
	record := nats.NewMsg(b.prefix + ".k.orders." + hex.EncodeToString(sum[:]))
	record.Header.Set("Walbroker-Enqueued", strconv.FormatInt(time.Now().UnixNano(), 10))
	record.Header.Set("Walbroker-Id", "not-a-message-id")
	js, _ := jetstream.New(b.nc)
	if _, err := js.PublishMsg(ctx, record); err != nil {
		t.Fatalf("the key's record: %v", err)
	}
	m, err := q.PublishKeyed(ctx, "order-1", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "not a message ID") {
		t.Fatalf("PublishKeyed over a record naming no message ID: %+v, %v; want an error saying so", m, err)
	}
}

// TestAStaleKeyRecordThatExpiresWhileItIsClaimedOverIsClaimedAfresh: a
// publish that found the key's record stale claims over it, expecting
// that record; when the record expires in between (its MaxAge), the claim
// is refused and the record is gone. The publish then claims as for a new
// key and enqueues, instead of expecting the vanished record until it
// gives up.
func TestAStaleKeyRecordThatExpiresWhileItIsClaimedOverIsClaimedAfresh(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	window := time.Hour
	q := mustQueue(t, b.Store, "orders", policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
	sum := sha256.Sum256([]byte("order-1"))
	subject := b.prefix + ".k.orders." + hex.EncodeToString(sum[:])
	record := nats.NewMsg(subject)
	record.Header.Set("Walbroker-Enqueued", strconv.FormatInt(time.Now().Add(-2*window).UnixNano(), 10))
	js, _ := jetstream.New(b.nc)
	if _, err := js.PublishMsg(ctx, record); err != nil {
		t.Fatalf("the key's stale record: %v", err)
	}
	keys := b.stream(t, "_K_orders")
	expired := false
	restore := natsjs.HoldKeyClaim(func(round int) {
		if round == 1 { // the stale record was read: it expires now
			if err := keys.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
				t.Errorf("purge the key's record: %v", err)
			}
			expired = true
		}
	})
	defer restore()
	m, err := q.PublishKeyed(ctx, "order-1", []byte("x"))
	if err != nil {
		t.Fatalf("PublishKeyed over a stale record that expired meanwhile: %v", err)
	}
	if !expired || m.Payload == nil {
		t.Fatalf("PublishKeyed answered %+v (record expired: %v), want a new message", m, expired)
	}
	receiveN(t, q, 1)
}

// TestABatchBeyondTheServersConfiguredBoundIsInvalidBatchSize: a server
// configured with a smaller atomic-batch bound than the default refuses a
// batch the adapter lets through; that refusal is InvalidBatchSize (not
// an unclassified error), and nothing is enqueued.
func TestABatchBeyondTheServersConfiguredBoundIsInvalidBatchSize(t *testing.T) {
	ctx := context.Background()
	srv := runServer(t, storeDir(t), func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 10 })
	st, err := natsjs.Open(connect(t, srv.ClientURL()), natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := mustQueue(t, st, "bounded", policy())
	if _, err := q.PublishBatch(ctx, make([][]byte, 11)); !errors.Is(err, broker.InvalidBatchSize) {
		t.Fatalf("a batch of 11 on a server that takes 10: %v, want InvalidBatchSize", err)
	}
	if ms, err := q.PublishBatch(ctx, make([][]byte, 10)); err != nil || len(ms) != 10 {
		t.Fatalf("a batch of 10: %d, %v", len(ms), err)
	}
	got := 0
	until(t, 10*time.Second, "the batch of 10 received", func() bool {
		ds, err := q.Receive(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		got += len(ds)
		return got >= 10
	})
	if got != 10 {
		t.Fatalf("received %d messages, want the accepted batch's 10", got)
	}
}

// closingHandler is a slog.Handler that closes a connection at the first
// record it handles: a hook at a fixed point inside a call (the adapter
// logs an unclassified cause before it writes the dead letter).
type closingHandler struct {
	once *sync.Once
	nc   *nats.Conn
}

func (h closingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h closingHandler) Handle(context.Context, slog.Record) error {
	h.once.Do(h.nc.Close)
	return nil
}
func (h closingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h closingHandler) WithGroup(string) slog.Handler      { return h }

// TestAConnectionClosedMidCallIsClosed: a call whose connection closes
// after it began (here a Reject, between its check of the connection and
// its write of the dead letter) fails with an error wrapping Closed, as
// one that finds it closed at the start does.
func TestAConnectionClosedMidCallIsClosed(t *testing.T) {
	ctx := context.Background()
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "MIDCLOSE", Logger: slog.New(closingHandler{&sync.Once{}, nc})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, connect(t, sharedServer(t).ClientURL()), "MIDCLOSE") })
	q := mustQueue(t, st, "c", policy())
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	err = q.Reject(ctx, d.Lease.Receipt, errors.New("unclassified"))
	if !nc.IsClosed() {
		t.Fatalf("the Reject logged nothing before its dead letter (err %v); the test's hook did not run", err)
	}
	if !errors.Is(err, broker.Closed) {
		t.Fatalf("Reject whose connection closed midway: %v, want Closed", err)
	}
}

// TestANackThatHandsBackLogsItsUnclassifiedCause: a Nack that hands the
// message back records no dead letter, so the Error text of a cause with
// no reason goes only to the log, keyed by the message's ID; a classified
// cause's private detail is not logged.
func TestANackThatHandsBackLogsItsUnclassifiedCause(t *testing.T) {
	ctx := context.Background()
	var logged bytes.Buffer
	var logMu sync.Mutex
	nc := connect(t, sharedServer(t).ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "NACKLOG", Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, nc, "NACKLOG") })
	q := mustQueue(t, st, "n", policy())
	m, err := q.Publish(ctx, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	if nv, err := q.Nack(ctx, d.Lease.Receipt, broker.NewError("R", 1, "public", "detail "+secretText)); err != nil || nv.DeadLettered {
		t.Fatalf("Nack: %+v, %v", nv, err)
	}
	d = receiveN(t, q, 1)[0]
	if nv, err := q.Nack(ctx, d.Lease.Receipt, errors.New("plain "+secretText)); err != nil || nv.DeadLettered {
		t.Fatalf("Nack: %+v, %v", nv, err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logged.String(), "plain "+secretText) || !strings.Contains(logged.String(), m.ID) {
		t.Fatalf("the unclassified cause's text and its message ID are not in the log:\n%s", logged.String())
	}
	if strings.Contains(logged.String(), "detail "+secretText) {
		t.Fatalf("a classified cause's private detail was logged:\n%s", logged.String())
	}
}

// TestAReceiveThatLooksAgainSchedulesTheNextRecheck: while another Store
// holds a lease, the Receive that makes the look Wake asked for (at or
// after the recheck instant) finds the lease still held and names the
// next look a Recheck later, so an idle consumer sleeps that long again
// rather than being woken at once over and over.
func TestAReceiveThatLooksAgainSchedulesTheNextRecheck(t *testing.T) {
	ctx := context.Background()
	const recheck = time.Second
	b := openBackend(t)
	qc := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{Recheck: recheck}), "again", policy())
	qb := mustQueue(t, b.Store, "again", policy())
	if _, err := qb.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	receiveN(t, qb, 1) // held for the VisibilityTimeout, 10 minutes
	receiveN(t, qc, 0)
	w := qc.Wake()
	if !w.Scheduled || w.In > recheck+time.Second {
		t.Fatalf("Wake %+v while another Store holds a lease, want a look again within %v", w, recheck)
	}
	time.Sleep(w.In) // the consumer sleeps until the look
	receiveN(t, qc, 0)
	if w := qc.Wake(); !w.Scheduled || w.In < recheck/2 {
		t.Fatalf("Wake %+v after the look found the lease still held, want the next look about %v away", w, recheck)
	}
}

// TestADeathIsDatedByItsLastLeaseNotByAnEarlierOneOrTheSweep: a message
// whose first lease lapsed in one Store and whose last in another is
// buried, later, by the first Store: its FailedAt is when the last lease
// lapsed (the server's advisory), neither the first Store's own earlier
// lease nor the instant of the sweep that buried it.
func TestADeathIsDatedByItsLastLeaseNotByAnEarlierOneOrTheSweep(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 2
		p.VisibilityTimeout = 500 * time.Millisecond
	})
	qa := mustQueue(t, a, "dated", p)
	qb := mustQueue(t, b, "dated", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	first := receiveN(t, qa, 1)[0] // lapses in a
	last := receiveOneWithin(t, qb, "the other Store receives the second delivery")
	if last.Deliveries != 2 {
		t.Fatalf("the other Store received delivery %d, want 2", last.Deliveries)
	}
	// The server notices the lapse of a redelivered message's lease at the
	// consumer's next pull (see doc.go): make it, after the deadline.
	time.Sleep(time.Until(last.Lease.ExpiresAt.Add(200 * time.Millisecond)))
	receiveN(t, qb, 0)
	noticed := time.Now()
	time.Sleep(2 * time.Second) // before any Store sweeps again
	var dls []broker.DeadLetterValue
	until(t, 20*time.Second, "the first Store finds the dead letter", func() bool {
		if dls, err = qa.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) == 1
	})
	dl := dls[0]
	if dl.Message.ID != m.ID || dl.Reason != broker.ReasonLeaseExpired || dl.Deliveries != 2 {
		t.Fatalf("dead letter %+v, want %s as LEASE_EXPIRED after 2 deliveries", dl, m.ID)
	}
	if dl.FailedAt.Before(last.Lease.ExpiresAt) || dl.FailedAt.After(noticed.Add(time.Second)) {
		t.Fatalf("FailedAt %v, want the last lease's lapse: after its ExpiresAt %v, by the pull that noticed it at %v (the first lease lapsed at %v)",
			dl.FailedAt, last.Lease.ExpiresAt, noticed, first.Lease.ExpiresAt)
	}
}

// TestAMessageGivenUpWithoutAdvisoryIsBuriedOnlyASecondAfterItWasFirstSeen:
// a delivered message the consumer no longer holds, whose advisory the
// server dropped, may be one acknowledged a moment ago that the server has
// not deleted yet; so the sweep that first finds it leaves it, as does
// every sweep within a second, and a later one buries it, dated by that
// sweep. The lease is another Store's: a lapsed last lease this Store
// handed out is its own proof of the death, buried at once (see
// TestCapacityFreedWhenARedeliveredLastLeaseLapses).
func TestAMessageGivenUpWithoutAdvisoryIsBuriedOnlyASecondAfterItWasFirstSeen(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	pol := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.VisibilityTimeout = 500 * time.Millisecond
	})
	q := mustQueue(t, b.Store, "given-up", pol)
	other := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "given-up", pol)
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, other, 1)
	deaths := b.awaitDeath(t, "given-up")
	if err := deaths.Purge(ctx); err != nil { // as if the server had dropped the advisory
		t.Fatal(err)
	}
	seen := time.Now()
	if err := q.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 0 && time.Since(seen) < natsjs.AbandonGrace/2 {
		t.Fatalf("dead letters %+v within %v of the sweep that first found the message given up", dls, time.Since(seen))
	}
	until(t, 20*time.Second, "the given-up message is a dead letter", func() bool {
		if dls, err = q.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) == 1
	})
	if dl := dls[0]; dl.Message.ID != m.ID || dl.Reason != broker.ReasonLeaseExpired || dl.Deliveries != 1 || dl.FailedAt.Before(seen.Add(natsjs.AbandonGrace)) {
		t.Fatalf("dead letter %+v, want %s as LEASE_EXPIRED after 1 delivery, dated by the sweep that buried it (%v or later)", dl, m.ID, seen.Add(natsjs.AbandonGrace))
	}
}

// TestAGivenUpMessageCountsItsDeliveriesAtDeath: a dead letter's
// Deliveries is how many times the message had been delivered when it died
// (broker.DeadLetterValue), which a MaxDeliveries lowered during its last
// lease leaves above the policy's. The file store records the count of the
// lapsed lease; so does the adapter for a message the consumer gave up on
// without an advisory, when this Store handed that lease out: 2, not the
// policy's 1.
func TestAGivenUpMessageCountsItsDeliveriesAtDeath(t *testing.T) {
	ctx := context.Background()
	three := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 3
		p.VisibilityTimeout = 500 * time.Millisecond
	})
	one := three
	one.MaxDeliveries = 1

	// The file store: delivery 2 of 3 leased, MaxDeliveries lowered to 1,
	// the lease lapses.
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	fs, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone, Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}})
	if err != nil {
		t.Fatalf("broker.Open: %v", err)
	}
	defer fs.Close()
	advance := func() {
		mu.Lock()
		now = now.Add(time.Second)
		mu.Unlock()
	}
	fq, err := fs.Queue("lowered", three)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fq.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		ds, err := fq.Receive(ctx, 1)
		if err != nil || len(ds) != 1 || ds[0].Deliveries != want {
			t.Fatalf("file store Receive: %+v, %v; want delivery %d", ds, err, want)
		}
		if want == 2 {
			if _, err := fs.Queue("lowered", one); err != nil {
				t.Fatal(err)
			}
		}
		advance()
	}
	fdls, err := fq.DeadLetters(ctx, 10)
	if err != nil || len(fdls) != 1 || fdls[0].Deliveries != 2 {
		t.Fatalf("file store dead letters %+v, %v; want one of 2 deliveries", fdls, err)
	}

	// The adapter, the server's advisory of the death dropped.
	b := openBackend(t)
	q := mustQueue(t, b.Store, "lowered", three)
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, q, 1) // lapses
	d := receiveOneWithin(t, q, "the second delivery")
	if d.Deliveries != 2 {
		t.Fatalf("received delivery %d, want 2", d.Deliveries)
	}
	mustQueue(t, b.Store, "lowered", one)
	dropTheAdvisory(t, b, "lowered", d.Lease.ExpiresAt)
	dls := waitForDeadLetters(t, q, 1, "the given-up message is a dead letter")
	if dl := dls[0]; dl.Message.ID != m.ID || dl.Reason != broker.ReasonLeaseExpired || dl.Deliveries != fdls[0].Deliveries || !dl.FailedAt.Equal(d.Lease.ExpiresAt) {
		t.Fatalf("dead letter %+v, want %s as LEASE_EXPIRED after %d deliveries, as the file store records, at its last lease's ExpiresAt %v",
			dl, m.ID, fdls[0].Deliveries, d.Lease.ExpiresAt)
	}
}

// TestAGivenUpMessageIsNotDatedByAnEarlierLeaseOfThisStore: a Store that
// holds the lapsed lease of an earlier delivery, when another Store took
// the last one, does not date or count the death of a message the consumer
// gave up on without an advisory by that lease: the lease was not the
// last, so the dead letter has the policy's MaxDeliveries and a FailedAt
// after the last lease's lapse, not delivery 1 at the first lapse.
func TestAGivenUpMessageIsNotDatedByAnEarlierLeaseOfThisStore(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	p := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 2
		p.VisibilityTimeout = 500 * time.Millisecond
	})
	qa := mustQueue(t, b.Store, "stale", p)
	qb := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "stale", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	first := receiveN(t, qa, 1)[0] // lapses in a, which keeps its lease
	last := receiveOneWithin(t, qb, "the other Store receives the second delivery")
	if last.Deliveries != 2 {
		t.Fatalf("the other Store received delivery %d, want 2", last.Deliveries)
	}
	dropTheAdvisory(t, b, "stale", last.Lease.ExpiresAt)
	dls := waitForDeadLetters(t, qa, 1, "the Store that held the first lease buries the message")
	dl := dls[0]
	if dl.Message.ID != m.ID || dl.Reason != broker.ReasonLeaseExpired || dl.Deliveries != 2 || dl.FailedAt.Before(last.Lease.ExpiresAt) {
		t.Fatalf("dead letter %+v, want %s as LEASE_EXPIRED after 2 deliveries, failed after the last lease's ExpiresAt %v (the first lapsed at %v)",
			dl, m.ID, last.Lease.ExpiresAt, first.Lease.ExpiresAt)
	}
}

// TestANegativeRecheckNamesNoLookForAnotherStoresLease: with Recheck
// negative, Wake does not ask to look again for another Store's leases:
// an idle consumer waits for the next publication or its own next lease
// event (Options.Recheck).
func TestANegativeRecheckNamesNoLookForAnotherStoresLease(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	qc := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{Recheck: -1}), "norecheck", policy())
	qb := mustQueue(t, b.Store, "norecheck", policy())
	if _, err := qb.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	receiveN(t, qb, 1)
	receiveN(t, qc, 0)
	if w := qc.Wake(); w.Scheduled {
		t.Fatalf("Wake %+v with Recheck negative, want nothing scheduled for another Store's lease", w)
	}
	// The same with the default Recheck: a look again.
	qd := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "norecheck", policy())
	receiveN(t, qd, 0)
	if w := qd.Wake(); !w.Scheduled {
		t.Fatalf("Wake %+v with the default Recheck, want a look again for another Store's lease", w)
	}
}

// TestAStoreOpenedWhileAnotherHoldsALeaseNamesItsRecheck: a Store that
// opens a queue on which another Store holds a lease names a look again
// at once, before any Receive: Recheck away, or the VisibilityTimeout when
// shorter; nothing with Recheck negative.
func TestAStoreOpenedWhileAnotherHoldsALeaseNamesItsRecheck(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	p := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = 5 * time.Second })
	qb := mustQueue(t, b.Store, "opened", p)
	if _, err := qb.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	receiveN(t, qb, 1)
	if w := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{Recheck: -1}), "opened", p).Wake(); w.Scheduled {
		t.Fatalf("Wake %+v of a Store opened with Recheck negative, want nothing scheduled for another Store's lease", w)
	}
	if w := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{Recheck: time.Minute}), "opened", p).Wake(); !w.Scheduled || w.In > p.VisibilityTimeout+time.Second {
		t.Fatalf("Wake %+v of a Store opened with Recheck 1m, want a look again within the VisibilityTimeout %v", w, p.VisibilityTimeout)
	}
}

// TestAGivenUpMessageThatHasADeadLetterKeepsIt: a bury that stopped after
// it wrote the dead letter and before it removed the message (a Reject
// whose terminate failed, then the last lease lapsed, its advisory
// dropped) leaves both; the sweep that finds the message given up only
// removes it, and the dead letter keeps what it recorded.
func TestAGivenUpMessageThatHasADeadLetterKeepsIt(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "kept", policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.VisibilityTimeout = 500 * time.Millisecond
	}))
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, q, 1)
	js, _ := jetstream.New(b.nc)
	deaths, work := b.awaitDeath(t, "kept"), b.stream(t, "_Q_kept")
	if err := deaths.Purge(ctx); err != nil { // as if the server had dropped the advisory
		t.Fatal(err)
	}
	failed := time.Unix(0, m.EnqueuedAt.UnixNano()+1)
	record := nats.NewMsg(b.prefix + ".d.kept." + m.ID)
	record.Data = []byte("x")
	for k, v := range map[string]string{
		"Walbroker-Id":         m.ID,
		"Walbroker-Enqueued":   strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10),
		"Walbroker-Failed":     strconv.FormatInt(failed.UnixNano(), 10),
		"Walbroker-Reason":     strconv.Quote("BAD_INPUT"),
		"Walbroker-Code":       broker.FormatCode(0x07090001),
		"Walbroker-Cause":      strconv.Quote("bad input"),
		"Walbroker-Deliveries": "1",
	} {
		record.Header.Set(k, v)
	}
	if _, err := js.PublishMsg(ctx, record); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "the given-up message is removed from the queue", func() bool {
		if _, err := q.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
		info, err := work.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Reason != "BAD_INPUT" || dls[0].Cause != "bad input" || !dls[0].FailedAt.Equal(failed) {
		t.Fatalf("dead letters %+v, want the one recorded before: BAD_INPUT at %v", dls, failed)
	}
}

// TestAQueueDeclaredAgainAppliesItsNewPolicyToItsCalls: the new policy of
// a queue declared again governs this Store's own calls too, not only the
// server's consumer: a Nack of the now-last delivery dead-letters, and a
// lease lasts the new VisibilityTimeout.
func TestAQueueDeclaredAgainAppliesItsNewPolicyToItsCalls(t *testing.T) {
	ctx := context.Background()
	st := openBackend(t).Store
	q := mustQueue(t, st, "redeclared", policy())
	mustQueue(t, st, "redeclared", policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.VisibilityTimeout = time.Hour
	}))
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	d := receiveN(t, q, 1)[0]
	if d.Lease.ExpiresAt.Before(before.Add(time.Hour - time.Second)) {
		t.Fatalf("ExpiresAt %v, want the new VisibilityTimeout of an hour after %v", d.Lease.ExpiresAt, before)
	}
	if nv, err := q.Nack(ctx, d.Lease.Receipt, nil); err != nil || !nv.DeadLettered {
		t.Fatalf("Nack of delivery 1 under MaxDeliveries 1: %+v, %v; want it dead-lettered", nv, err)
	}
}

// TestAnotherStoresLeaseIsRecheckedBeforeThisStoresOwnLapses: when this
// Store holds a lease too, Wake still names the Recheck for the other
// Store's lease when that comes first, not only this Store's later lapse.
func TestAnotherStoresLeaseIsRecheckedBeforeThisStoresOwnLapses(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	qc := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "both", policy())
	qb := mustQueue(t, b.Store, "both", policy())
	for _, p := range []string{"a", "b"} {
		if _, err := qb.Publish(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if ds, err := qb.Receive(ctx, 1); err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
	}
	if ds, err := qc.Receive(ctx, 5); err != nil || len(ds) != 1 { // its own lease, for 10 minutes
		t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
	}
	if w := qc.Wake(); !w.Scheduled || w.In > 2*time.Second {
		t.Fatalf("Wake %+v while another Store holds a lease, want a look again within the 1s Recheck", w)
	}
}

// TestAStoreOpenedOnAQueueWithMessagesWakesAtOnce: a Store that opens a
// queue where messages wait schedules Wake now, before any Receive.
func TestAStoreOpenedOnAQueueWithMessagesWakesAtOnce(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	if _, err := mustQueue(t, b.Store, "waiting", policy()).Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(b.nc)
	until(t, 10*time.Second, "the server's consumer counts the message", func() bool {
		c, err := js.Consumer(ctx, b.prefix+"_Q_waiting", "walbroker")
		return err == nil && c.CachedInfo().NumPending > 0
	})
	q := mustQueue(t, storeOn(t, b.prefix, natsjs.Options{}), "waiting", policy())
	if w := q.Wake(); !w.Scheduled || w.In > 0 {
		t.Fatalf("Wake %+v of a freshly opened queue holding a message, want Scheduled now", w)
	}
}

// TestWakeNamesALeaseLapsingWithinASecond: a lease that lapses sooner
// than a second from now is named by Wake (its ExpiresAt, plus the
// slack for the server's later deadline), not skipped.
func TestWakeNamesALeaseLapsingWithinASecond(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "soon", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = 700 * time.Millisecond }))
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	w := q.Wake()
	after := time.Now()
	if !w.Scheduled || after.Add(w.In).Before(d.Lease.ExpiresAt) || w.In > time.Second {
		t.Fatalf("Wake %+v for a lease lapsing at %v (now %v), want its lapse", w, d.Lease.ExpiresAt, after)
	}
}

// TestWakeNamesTheEndOfARetryDelayPlusItsSlack: the instant Wake names is
// 50 ms after the adapter's end of a retry delay, since the server's own
// deadline comes a request's flight later: a consumer woken at the
// adapter's instant would find nothing and wait again.
func TestWakeNamesTheEndOfARetryDelayPlusItsSlack(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "slack", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute }))
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	nv, err := q.Nack(ctx, receiveN(t, q, 1)[0].Lease.Receipt, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := q.Wake()
	left := time.Until(nv.VisibleAt) // measured after Wake: no longer than Wake saw
	if !w.Scheduled || w.In < left+45*time.Millisecond || w.In > left+time.Second {
		t.Fatalf("Wake %+v with %v of the retry delay left, want that plus the 50 ms slack", w, left)
	}
}

// TestWakeForgetsALapseOnceItsMessageIsGone: a lease of this Store that
// lapsed, whose message another Store then received and acknowledged,
// is named by Wake for a moment after its lapse only, not for good: an
// idle consumer is not woken again and again for it.
func TestWakeForgetsALapseOnceItsMessageIsGone(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Second })
	qa, qb := mustQueue(t, a, "gone", p), mustQueue(t, b, "gone", p)
	if _, err := qa.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	receiveN(t, qa, 1)
	var ds []broker.DeliveryValue
	until(t, 20*time.Second, "the other Store receives the message once its lease lapsed", func() bool {
		var err error
		if ds, err = qb.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return len(ds) == 1
	})
	ackAll(t, qb, ds)
	until(t, 10*time.Second, "Wake no longer names the lapse", func() bool { return !qa.Wake().Scheduled })
}

// dropTheAdvisory waits for the server to give up queue's message once its
// last lease, ending at expires, has lapsed, and then purges the advisory,
// as if the server had dropped it. The server may notice the lapse of a
// redelivered message's lease only at the consumer's next pull (see
// doc.go): it pulls without a Store, which would sweep the advisory up
// first, and fails t if the server delivers the message again.
func dropTheAdvisory(t *testing.T, b backend, queue string, expires time.Time) {
	t.Helper()
	ctx := context.Background()
	cons, err := b.stream(t, "_Q_"+queue).Consumer(ctx, "walbroker")
	if err != nil {
		t.Fatal(err)
	}
	deaths := b.stream(t, "_A_"+queue)
	until(t, 20*time.Second, "the server records the death", func() bool {
		if info, err := deaths.Info(ctx); err == nil && info.State.Msgs > 0 {
			return true
		}
		if time.Now().After(expires) {
			batch, err := cons.FetchNoWait(1)
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				t.Fatalf("the server delivered %s past the policy's MaxDeliveries", m.Subject())
			}
		}
		return false
	})
	if err := deaths.Purge(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitForDeadLetters waits until q lists n dead letters, without
// receiving, and returns them.
func waitForDeadLetters(t *testing.T, q broker.DeadLetterReader, n int, what string) []broker.DeadLetterValue {
	t.Helper()
	var dls []broker.DeadLetterValue
	until(t, 20*time.Second, what, func() bool {
		var err error
		if dls, err = q.DeadLetters(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
		return len(dls) == n
	})
	return dls
}

// receiveOneWithin receives from q until a delivery comes (within 20 s),
// and returns it.
func receiveOneWithin(t *testing.T, q broker.Broker, what string) broker.DeliveryValue {
	t.Helper()
	var d broker.DeliveryValue
	until(t, 20*time.Second, what, func() bool {
		ds, err := q.Receive(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			d = ds[0]
		}
		return len(ds) == 1
	})
	return d
}

// dlText lists dead letters by ID, reason and count, for a failure's text.
func dlText(dls []broker.DeadLetterValue) string {
	s := "["
	for i, dl := range dls {
		if i > 0 {
			s += " "
		}
		s += dl.Message.ID + " " + dl.Reason + " deliveries=" + itoa(dl.Deliveries)
	}
	return s + "]"
}

// TestAKeyRetriedAfterQueueFullIsHeldOnlyForItsWindow: the window is
// measured from the message's EnqueuedAt (API.md §5.8 evicts a key
// strictly older than it), and the server's own duplicate window, from
// the instant it stores the message, may hold a key only a few
// milliseconds longer. A keyed publish refused as full leaves its claim;
// its retry, most of a window later, enqueues the message. Had it taken
// the claim's EnqueuedAt, the server, whose window runs from the retry,
// would answer a publish of the key after EnqueuedAt+window as a
// duplicate of the old message, holding the key for almost two windows.
func TestAKeyRetriedAfterQueueFullIsHeldOnlyForItsWindow(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	const window = 2 * time.Second
	q := mustQueue(t, b.Store, "dedupshed", policy(func(p *broker.PolicyValue) {
		p.Capacity = 1
		p.DedupWindow = window
	}))
	if _, err := q.Publish(ctx, []byte("filler")); err != nil {
		t.Fatalf("Publish filler: %v", err)
	}
	t0 := time.Now()
	if _, err := q.PublishKeyed(ctx, "k", []byte("first")); !errors.Is(err, broker.QueueFull) {
		t.Fatalf("PublishKeyed into a full queue: %v, want QueueFull", err)
	}
	ds := receiveN(t, q, 1)
	if err := q.Ack(ctx, ds[0].Lease.Receipt); err != nil {
		t.Fatalf("Ack filler: %v", err)
	}
	time.Sleep(time.Until(t0.Add(window * 6 / 10)))
	orig, err := q.PublishKeyed(ctx, "k", []byte("retry"))
	if err != nil || orig.Payload == nil {
		t.Fatalf("retry of the shed keyed publish: %+v, %v; want it enqueued", orig, err)
	}
	ds = receiveN(t, q, 1)
	if err := q.Ack(ctx, ds[0].Lease.Receipt); err != nil {
		t.Fatalf("Ack retry: %v", err)
	}
	// Strictly older than the window by its EnqueuedAt, with a margin.
	time.Sleep(time.Until(orig.EnqueuedAt.Add(window + window/5)))
	age := time.Since(orig.EnqueuedAt)
	again, err := q.PublishKeyed(ctx, "k", []byte("later"))
	if err != nil {
		t.Fatalf("PublishKeyed after the window: %v", err)
	}
	if again.ID == orig.ID || again.Payload == nil {
		t.Fatalf("PublishKeyed of a key whose message (EnqueuedAt %v) is %v old, past the %v DedupWindow: got the original %s back as a duplicate (nothing enqueued); want a new message",
			orig.EnqueuedAt.Format(time.RFC3339Nano), age.Round(time.Millisecond), window, again.ID)
	}
}
