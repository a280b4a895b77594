package natsjs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
)

// deadlineAtCall is a context whose deadline passes at the n-th call of
// its Err, as a real deadline passing at that moment would: Err turns
// DeadlineExceeded and Done closes. pause is slept at that call, so that
// what the server sent meanwhile has arrived.
type deadlineAtCall struct {
	context.Context
	calls atomic.Int64
	n     int64
	pause time.Duration
	done  chan struct{}
}

func (c *deadlineAtCall) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c *deadlineAtCall) Done() <-chan struct{}       { return c.done }
func (c *deadlineAtCall) Err() error {
	switch k := c.calls.Add(1); {
	case k == c.n:
		time.Sleep(c.pause)
		close(c.done)
		return context.DeadlineExceeded
	case k > c.n:
		return context.DeadlineExceeded
	}
	return nil
}

// TestAReceiveCutShortByItsDeadlineLeavesNoMessageLeasedToNobody: every
// message the server sent in answer to a pull is delivered and counted by
// it, so a Receive whose deadline passes partway through the batch
// returns what the server sent: dropped, a message would be leased to
// nobody, invisible to every consumer for the whole VisibilityTimeout,
// and would have spent one of its MaxDeliveries. (The client checks
// ctx.Err() before it looks at the messages it already holds.) The
// deadline is made to pass before the pull is sent, at the first read or
// at the second, deterministically: the Err calls of a Receive are
// begin's, the pull's before it sends its request, then one per read.
func TestAReceiveCutShortByItsDeadlineLeavesNoMessageLeasedToNobody(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int64 // the Err call at which the deadline passes
	}{{"before the pull", 2}, {"at the first read", 3}, {"at the second read", 4}} {
		t.Run(tc.name, func(t *testing.T) { testReceiveCutShort(t, tc.n) })
	}
}

func testReceiveCutShort(t *testing.T, n int64) {
	ctx := context.Background()
	bk := openBackend(t)
	qa := mustQueue(t, bk.Store, "cutshort", policy())
	qb := mustQueue(t, storeOn(t, bk.prefix, natsjs.Options{}), "cutshort", policy())
	if _, err := qa.Receive(ctx, 1); err != nil { // the first sweep, done
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := qa.Publish(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the consumer heard of all three
	cctx := &deadlineAtCall{Context: ctx, n: n, pause: 200 * time.Millisecond, done: make(chan struct{})}
	ds, rerr := qa.Receive(cctx, 3) // an error is allowed when nothing was sent
	if rerr != nil && len(ds) > 0 {
		t.Fatalf("Receive returned %d deliveries and error %v", len(ds), rerr)
	}
	other, err := qb.Receive(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := bk.stream(t, "_Q_cutshort").Consumer(ctx, "walbroker")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds)+len(other) < 3 {
		t.Fatalf("Receive whose deadline passed during its batch returned %d deliveries (error %v); another Store then receives %d; the server counts %d leases out: %d message(s) were delivered to nobody and stay leased for the 10 min VisibilityTimeout; want every delivery returned or handed back",
			len(ds), rerr, len(other), info.NumAckPending, 3-len(ds)-len(other))
	}
}
