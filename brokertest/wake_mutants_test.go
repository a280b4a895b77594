package brokertest

// Mutants for the Waker cases, in the manner of mutants_test.go: each
// breaks one promise, is shown in-process to break it, and the suite must
// fail it in the case written for that promise.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

func init() {
	mutants["wakeMissesAShorterExtend"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &ownSignal{Memory: m}
	}
}

// ownSignal hands out a wake signal of its own, closed by the calls made
// through it that make a message receivable (a publish of a new message,
// a Nack that hands back, a replay) but not by an Extend, even one that
// brings a lapse closer (In and Scheduled are the Memory's): a broker
// that keeps its wake-ups apart from its state can forget one so.
type ownSignal struct {
	*broker.Memory

	mu     sync.Mutex
	signal chan struct{} // nil until a Wake hands one out
}

func (q *ownSignal) fire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.signal != nil {
		close(q.signal)
		q.signal = nil
	}
}

func (q *ownSignal) Wake() broker.WakeValue {
	w := q.Memory.Wake()
	if closed(w.Signal) {
		return w // the Memory is closed: look again and be told so
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.signal == nil {
		q.signal = make(chan struct{})
	}
	w.Signal = q.signal
	return w
}

func (q *ownSignal) Publish(ctx context.Context, p []byte) (broker.MessageValue, error) {
	m, err := q.Memory.Publish(ctx, p)
	if err == nil {
		q.fire()
	}
	return m, err
}

func (q *ownSignal) PublishKeyed(ctx context.Context, key string, p []byte) (broker.MessageValue, error) {
	m, err := q.Memory.PublishKeyed(ctx, key, p)
	if err == nil && m.Payload != nil { // a duplicate carries none, and enqueued nothing
		q.fire()
	}
	return m, err
}

func (q *ownSignal) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	ms, err := q.Memory.PublishBatch(ctx, ps)
	if err == nil {
		q.fire()
	}
	return ms, err
}

func (q *ownSignal) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil && !v.DeadLettered {
		q.fire()
	}
	return v, err
}

func (q *ownSignal) ReplayDeadLetter(ctx context.Context, id string) error {
	err := q.Memory.ReplayDeadLetter(ctx, id)
	if err == nil {
		q.fire()
	}
	return err
}

// ownSignal's Extend is the Memory's, and closes nothing: THE BUG.

// The Waker's signal "is closed by the next event that may make a message
// receivable"; API.md §3: Consume "never sleeps past a Wake.In"; DESIGN
// "What closes the wake signal": an Extend that brings a lease's lapse
// closer than a waiting consumer was told is such an event. The suite
// checked the In that Wake names after an Extend (WakeFollowsExtendAndAck),
// never the signal a consumer already waits on: a broker that left it
// open, the consumer sleeping to the old lapse past the new one, passed.
func TestTheSuiteFailsABrokerWhoseWakeMissesAnExtendThatBringsALapseCloser(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "wakeMissesAShorterExtend", c, broker.PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 5})
	ctx := context.Background()
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v %v", ds, err)
	}
	w := q.(broker.Waker).Wake()
	if _, err := q.(broker.LeaseExtender).Extend(ctx, ds[0].Lease.Receipt, time.Minute); err != nil {
		t.Fatal(err)
	}
	if closed(w.Signal) {
		t.Fatalf("harness: the mutant's Extend closed the signal; it is not broken")
	}
	requireSuiteFails(t, "wakeMissesAShorterExtend", "leaves open the wake signal across an Extend that brings a lapse closer", "WakeClosedByAnExtendThatBringsALapseCloser")
}
