package natsjs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// The dedup promise across a server restart (API.md §2 PublishKeyed, §4):
// the server rebuilds its Nats-Msg-Id memory at restart only from the
// messages it still stores, and the work stream drops a message once it is
// acknowledged, so the key must be remembered elsewhere.

// restartable is one embedded server over a store directory that can be
// shut down and started again over the same files.
type restartable struct {
	t   *testing.T
	dir string
	srv *server.Server
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	dir := storeDir(t)
	return &restartable{t: t, dir: dir, srv: runServer(t, dir)}
}

// open connects to the server and opens a Store (default prefix) and the
// queue name on it.
func (r *restartable) open(name string, p broker.PolicyValue) (*natsjs.Store, *natsjs.Queue) {
	r.t.Helper()
	st, err := natsjs.Open(connect(r.t, r.srv.ClientURL()), natsjs.Options{})
	if err != nil {
		r.t.Fatalf("Open: %v", err)
	}
	r.t.Cleanup(func() { st.Close() })
	return st, mustQueue(r.t, st, name, p)
}

// restart shuts the server down and starts a new one over the same store
// directory. Stores and connections on the old one are left to fail.
func (r *restartable) restart() {
	r.t.Helper()
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	r.srv = runServer(r.t, r.dir)
}

func publishKeyed(t *testing.T, q *natsjs.Queue, key, payload string) broker.MessageValue {
	t.Helper()
	m, err := q.PublishKeyed(context.Background(), key, []byte(payload))
	if err != nil {
		t.Fatalf("PublishKeyed(%q, %q): %v", key, payload, err)
	}
	return m
}

// sameOriginal requires dup to be the duplicate's answer for orig: the
// original's ID and EnqueuedAt, and no payload.
func sameOriginal(t *testing.T, orig, dup broker.MessageValue, what string) {
	t.Helper()
	if dup.ID != orig.ID || !dup.EnqueuedAt.Equal(orig.EnqueuedAt) {
		t.Fatalf("%s: got ID %s EnqueuedAt %v, want the original's %s %v", what, dup.ID, dup.EnqueuedAt, orig.ID, orig.EnqueuedAt)
	}
	if dup.Payload != nil {
		t.Fatalf("%s: a duplicate carried payload %q", what, dup.Payload)
	}
}

func ackAll(t *testing.T, q *natsjs.Queue, ds []broker.DeliveryValue) {
	t.Helper()
	for _, d := range ds {
		if err := q.Ack(context.Background(), d.Lease.Receipt); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}

// TestADedupKeyOutlivesAServerRestartAfterItsMessageWasAcked: a key whose
// message was consumed is still a duplicate after the server restarts over
// the same files — the original's ID and EnqueuedAt, nothing enqueued.
func TestADedupKeyOutlivesAServerRestartAfterItsMessageWasAcked(t *testing.T) {
	r := newRestartable(t)
	st, q := r.open("orders", policy())
	orig := publishKeyed(t, q, "order-1", "first")
	ds := receiveN(t, q, 1)
	if string(ds[0].Message.Payload) != "first" {
		t.Fatalf("received %q, want %q", ds[0].Message.Payload, "first")
	}
	ackAll(t, q, ds)
	st.Close()
	r.restart()

	_, q = r.open("orders", policy())
	sameOriginal(t, orig, publishKeyed(t, q, "order-1", "second"), "the key after a restart")
	receiveN(t, q, 0)
	// And again, now that the reopened Store has answered it once.
	sameOriginal(t, orig, publishKeyed(t, q, "order-1", "third"), "the key asked twice after a restart")
	receiveN(t, q, 0)
}

// TestADedupKeyWhoseMessageIsPendingOutlivesAServerRestart: the key of a
// message still in the queue is a duplicate after a restart, and the queue
// still holds the one original.
func TestADedupKeyWhoseMessageIsPendingOutlivesAServerRestart(t *testing.T) {
	r := newRestartable(t)
	st, q := r.open("orders", policy())
	orig := publishKeyed(t, q, "order-1", "first")
	st.Close()
	r.restart()

	_, q = r.open("orders", policy())
	sameOriginal(t, orig, publishKeyed(t, q, "order-1", "second"), "the key of a pending message after a restart")
	ds := receiveN(t, q, 1)
	if ds[0].Message.ID != orig.ID || string(ds[0].Message.Payload) != "first" {
		t.Fatalf("received %s %q, want the original %s %q", ds[0].Message.ID, ds[0].Message.Payload, orig.ID, "first")
	}
}

// TestADedupKeyIsForgottenOnceItsWindowPassed: after DedupWindow, measured
// from the original's EnqueuedAt, the key enqueues a new message — also
// when the key's record outlived a restart — and that message's key is a
// duplicate in turn.
func TestADedupKeyIsForgottenOnceItsWindowPassed(t *testing.T) {
	const window = 200 * time.Millisecond
	p := policy(func(p *broker.PolicyValue) { p.DedupWindow = window })
	r := newRestartable(t)
	st, q := r.open("orders", p)
	orig := publishKeyed(t, q, "order-1", "first")
	ackAll(t, q, receiveN(t, q, 1))
	st.Close()
	r.restart()

	_, q = r.open("orders", p)
	// A client clock is no tighter than the server's timers: allow the
	// window, then a little more for the server to drop its own entry.
	time.Sleep(time.Until(orig.EnqueuedAt.Add(window + 100*time.Millisecond)))
	fresh := publishKeyed(t, q, "order-1", "second")
	if fresh.ID == orig.ID {
		t.Fatalf("a key older than its window returned the original %s", orig.ID)
	}
	if !fresh.EnqueuedAt.After(orig.EnqueuedAt.Add(window)) {
		t.Fatalf("the new message's EnqueuedAt %v is within the window of the original's %v", fresh.EnqueuedAt, orig.EnqueuedAt)
	}
	if string(fresh.Payload) != "second" {
		t.Fatalf("the new message's Payload is %q, want %q", fresh.Payload, "second")
	}
	sameOriginal(t, fresh, publishKeyed(t, q, "order-1", "third"), "the key of the new message")
	ds := receiveN(t, q, 1)
	if ds[0].Message.ID != fresh.ID || string(ds[0].Message.Payload) != "second" {
		t.Fatalf("received %s %q, want %s %q", ds[0].Message.ID, ds[0].Message.Payload, fresh.ID, "second")
	}
}

// TestConcurrentPublishesOfOneKeyEnqueueOnce: publishes of one key racing
// on two Stores of one server all answer one message, exactly one of them
// with its payload; the key still holds after the message was acked and
// the server restarted.
func TestConcurrentPublishesOfOneKeyEnqueueOnce(t *testing.T) {
	const perStore = 8
	r := newRestartable(t)
	sa, qa := r.open("orders", policy())
	sb, qb := r.open("orders", policy())
	for round := range 3 {
		queues := make([]*natsjs.Queue, 2*perStore)
		for i := range queues {
			queues[i] = []*natsjs.Queue{qa, qb}[i%2]
		}
		raceKeyed(t, round, "order-"+itoa(round), queues)
		ackAll(t, qa, receiveN(t, qa, 1))
	}
	sa.Close()
	sb.Close()
	r.restart()

	_, q := r.open("orders", policy())
	for round := range 3 {
		m := publishKeyed(t, q, "order-"+itoa(round), "again")
		if m.Payload != nil {
			t.Fatalf("round %d: the key enqueued again after a restart (%s)", round, m.ID)
		}
	}
	receiveN(t, q, 0)
}

// TestAKeyLeftHalfWrittenIsCompletedByItsNextPublish: a publisher that
// died after its message was stored but before the key's record named it
// left a record without an ID. The key's next publish, while the server
// still knows the message, answers it and completes the record, so the
// key holds after the message was acked and the server restarted.
func TestAKeyLeftHalfWrittenIsCompletedByItsNextPublish(t *testing.T) {
	ctx := context.Background()
	r := newRestartable(t)
	st, q := r.open("orders", policy())
	// What PublishKeyed writes before its message, and the message, with
	// the layout of doc.go (default prefix WALBROKER).
	nc := connect(t, r.srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("order-1"))
	hash := hex.EncodeToString(sum[:])
	enqueued := time.Unix(0, time.Now().UnixNano())
	record := nats.NewMsg("WALBROKER.k.orders." + hash)
	record.Header.Set("Walbroker-Enqueued", strconv.FormatInt(enqueued.UnixNano(), 10))
	// With the key's Msg-Id, as a Store of an earlier version wrote it.
	if _, err := js.PublishMsg(ctx, record, jetstream.WithMsgID(hash)); err != nil {
		t.Fatalf("key record: %v", err)
	}
	msg := nats.NewMsg("WALBROKER.q.orders")
	msg.Data = []byte("first")
	msg.Header.Set("Walbroker-Enqueued", strconv.FormatInt(enqueued.UnixNano(), 10))
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(hash))
	if err != nil {
		t.Fatalf("message: %v", err)
	}
	orig := broker.MessageValue{ID: fmt.Sprintf("%016x", ack.Sequence), EnqueuedAt: enqueued}

	ds := receiveForeign(t, q, 1)
	if ds[0].Message.ID != orig.ID {
		t.Fatalf("received %s, want %s", ds[0].Message.ID, orig.ID)
	}
	ackAll(t, q, ds)
	// The server still remembers the Msg-Id in memory.
	sameOriginal(t, orig, publishKeyed(t, q, "order-1", "retry"), "the key of a half-written publish")
	st.Close()
	r.restart()

	_, q = r.open("orders", policy())
	sameOriginal(t, orig, publishKeyed(t, q, "order-1", "after restart"), "the completed key after a restart")
	receiveN(t, q, 0)
}

// raceKeyed publishes key once from each of queues at the same instant
// and fails t unless every call answered the one message, and exactly one
// answer (the one that enqueued) carried a payload.
func raceKeyed(t *testing.T, round int, key string, queues []*natsjs.Queue) {
	t.Helper()
	got := make([]broker.MessageValue, len(queues))
	errs := make([]error, len(queues))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = q.PublishKeyed(context.Background(), key, []byte(itoa(i)))
		}()
	}
	close(start)
	wg.Wait()
	withPayload := 0
	for i, m := range got {
		if errs[i] != nil {
			t.Fatalf("round %d: PublishKeyed %d: %v", round, i, errs[i])
		}
		if m.ID != got[0].ID || !m.EnqueuedAt.Equal(got[0].EnqueuedAt) {
			t.Fatalf("round %d: publish %d answered %s %v, publish 0 %s %v", round, i, m.ID, m.EnqueuedAt, got[0].ID, got[0].EnqueuedAt)
		}
		if m.Payload != nil {
			withPayload++
		}
	}
	if withPayload != 1 {
		t.Fatalf("round %d: %d answers carried a payload, want exactly 1 (the one that enqueued)", round, withPayload)
	}
}
