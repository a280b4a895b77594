package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/walbroker/walbroker/adapters/natsjs"
)

// A batch that sent its first messages and then stopped short of its
// commit (its context ended, or the connection failed, in between) is
// open on the server until the server's batch timeout, holding one of the
// server's open-batch places. The Queue must not hand its token for that
// place to another batch while the server may still hold it.

// roomServer starts a server of its own that keeps room open places for
// atomic batches per stream and drops an open batch only after an hour
// (so that none ends by the server's timeout while a test runs), and
// opens a Store on it. It returns the Store and its connection's count of
// subscriptions once the Store was opened (the connection's own, for the
// answers to its requests).
func roomServer(t *testing.T, room int) (*natsjs.Store, backend, int) {
	t.Helper()
	srv := runServer(t, storeDir(t), func(o *server.Options) {
		o.JetStreamLimits.MaxBatchInflightPerStream = room
		o.JetStreamLimits.MaxBatchTimeout = time.Hour
	})
	nc := connect(t, srv.ClientURL())
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: "R"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	subs := nc.NumSubscriptions()
	t.Cleanup(func() { st.Close() })
	return st, backend{st, nc, "R"}, subs
}

// cutBeforeCommit publishes a batch of two on q whose context ends after
// its first message was sent, before its commit is, and requires the
// context's error.
func cutBeforeCommit(t *testing.T, q *natsjs.Queue, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restore := natsjs.HoldBatchCommit(cancel)
	_, err := q.PublishBatch(ctx, [][]byte{[]byte(name + " 1"), []byte(name + " 2")})
	restore()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishBatch %s, cut before its commit: %v, want Canceled", name, err)
	}
}

// TestABatchCutBeforeItsCommitGivesTheServersPlaceBack: two batches cut
// before their commits, on a server with room for two open batches per
// stream, leave room for a third batch, which is stored; the cut ones
// are not. The Queue used to give its token back while the server kept
// the cut batches open, and the third was refused for want of room.
func TestABatchCutBeforeItsCommitGivesTheServersPlaceBack(t *testing.T) {
	st, b, subs := roomServer(t, 2)
	q := mustQueue(t, st, "cut", policy())
	cutBeforeCommit(t, q, "cut a")
	cutBeforeCommit(t, q, "cut b")
	ms, err := q.PublishBatch(context.Background(), [][]byte{[]byte("whole 1"), []byte("whole 2")})
	if err != nil {
		t.Fatalf("PublishBatch after two batches cut before their commits: %v", err)
	}
	info, err := b.stream(t, "_Q_cut").Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || fmt.Sprintf("%016x", info.State.LastSeq) != ms[1].ID {
		t.Fatalf("the work stream holds %d messages, the last at %d; want the whole batch's 2, the last at %s", info.State.Msgs, info.State.LastSeq, ms[1].ID)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.nc.NumSubscriptions(); got != subs {
		t.Fatalf("the connection has %d subscriptions after Close, %d once the Store was opened", got, subs)
	}
}

// frozenClock is a clock for SetClock that moves only when told to.
type frozenClock struct{ now atomic.Int64 }

func newFrozenClock() *frozenClock {
	c := &frozenClock{}
	c.now.Store(time.Now().UnixNano())
	return c
}

func (c *frozenClock) Now() time.Time   { return time.Unix(0, c.now.Load()) }
func (c *frozenClock) Set(at time.Time) { c.now.Store(at.UnixNano()) }

// TestAnAnsweredAbandonGivesTheTokenBack: the server's answer to the
// abandon of a batch cut before its commit gives the Queue's token back,
// without the Queue's clock moving: a Queue with one token publishes a
// batch after the cut one.
func TestAnAnsweredAbandonGivesTheTokenBack(t *testing.T) {
	t.Cleanup(natsjs.LiftBatchBound(1))
	st, _, _ := roomServer(t, 2)
	natsjs.SetClock(st, newFrozenClock().Now)
	q := mustQueue(t, st, "answered", policy())
	cutBeforeCommit(t, q, "cut")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := q.PublishBatch(ctx, [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatalf("PublishBatch after a batch cut before its commit, on a Queue with one token: %v", err)
	}
}

// TestAnAbandonWithoutAnswerKeepsTheTokenUntilTheServersTimeout: when the
// abandon of a batch cut before its commit is lost, the Queue keeps its
// token until the server must have dropped the batch by its own timeout,
// plus a margin, on the Queue's clock: a Queue with one token admits no
// batch before that (the one that waits says it sent nothing), and
// admits one from then on.
func TestAnAbandonWithoutAnswerKeepsTheTokenUntilTheServersTimeout(t *testing.T) {
	t.Cleanup(natsjs.LiftBatchBound(1))
	st, _, _ := roomServer(t, 2)
	clock := newFrozenClock()
	natsjs.SetClock(st, clock.Now)
	q := mustQueue(t, st, "unanswered", policy())
	restore := natsjs.SendBatchAbandonThrough(func(func() error) error { return nil })
	start := clock.Now()
	cutBeforeCommit(t, q, "cut")
	restore()
	refused := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := q.PublishBatch(ctx, [][]byte{[]byte("a"), []byte("b")})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "nothing was sent") {
			t.Fatalf("PublishBatch %s: %v, want DeadlineExceeded waiting for a token, nothing sent", when, err)
		}
	}
	refused("right after the batch whose abandon was lost")
	clock.Set(start.Add(natsjs.AbandonedBatchKept - time.Millisecond))
	refused("a moment before the server must have dropped the batch")
	clock.Set(start.Add(natsjs.AbandonedBatchKept))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := q.PublishBatch(ctx, [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatalf("PublishBatch once the server must have dropped the batch whose abandon was lost: %v", err)
	}
}

// TestABatchCutByCloseIsStillAbandoned: a batch cut before its commit by a
// Close (which ends its context too) is abandoned all the same, for the
// sake of the other clients of the queue: on a server with room for one
// open batch per stream, another Store's batch is then admitted.
func TestABatchCutByCloseIsStillAbandoned(t *testing.T) {
	st, b, subs := roomServer(t, 1)
	q := mustQueue(t, st, "closed", policy())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restore := natsjs.HoldBatchCommit(func() {
		cancel()
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	_, err := q.PublishBatch(ctx, [][]byte{[]byte("cut 1"), []byte("cut 2")})
	restore()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishBatch cut before its commit by Close: %v, want Canceled", err)
	}
	if got := b.nc.NumSubscriptions(); got != subs {
		t.Fatalf("the connection has %d subscriptions after Close and the abandon, %d once the Store was opened", got, subs)
	}
	other, err := natsjs.Open(b.nc, natsjs.Options{Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	oq := mustQueue(t, other, "closed", policy())
	if _, err := oq.PublishBatch(context.Background(), [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatalf("another Store's PublishBatch after a batch cut by Close: %v", err)
	}
}
