package brokertest

// Mutants for the cases of promise_port.go, in the manner of
// mutants_test.go: each breaks one promise, is shown in-process to break
// it, and the suite must fail it in the case written for that promise.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

func init() {
	mutants["refusedExtendHoldsTheLease"] = func(m *broker.Memory, _ broker.PolicyValue, now func() time.Time) broker.Broker {
		return &clampedExtend{Memory: m, now: now, alias: map[broker.ReceiptValue]broker.ReceiptValue{}}
	}
	mutants["lapsedReceiptFollowsItsMessage"] = func(m *broker.Memory, _ broker.PolicyValue, now func() time.Time) broker.Broker {
		return &followingReceipt{Memory: m, now: now, leases: map[broker.ReceiptValue]heldLease{}, holder: map[string]broker.ReceiptValue{}}
	}
}

// --- A refused Extend moves nothing ------------------------------------------

// clampedExtend, asked for an Extend whose deadline passes the last
// instant a broker can record, refuses it with QueueMisconfigured as the
// port says, but first renews the lease to that last instant. The
// receipt the caller holds keeps working (it is mapped to the renewed
// lease's), so every call on it succeeds as before; only the deadline has
// moved.
type clampedExtend struct {
	*broker.Memory
	now func() time.Time

	mu    sync.Mutex
	alias map[broker.ReceiptValue]broker.ReceiptValue // a receipt handed out → the lease's real one
}

// real returns the receipt of the Memory's lease that r names.
func (q *clampedExtend) real(r broker.ReceiptValue) broker.ReceiptValue {
	q.mu.Lock()
	defer q.mu.Unlock()
	if a, ok := q.alias[r]; ok {
		return a
	}
	return r
}

func (q *clampedExtend) Ack(ctx context.Context, r broker.ReceiptValue) error {
	return q.Memory.Ack(ctx, q.real(r))
}

func (q *clampedExtend) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	return q.Memory.Nack(ctx, q.real(r), cause)
}

func (q *clampedExtend) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	return q.Memory.Reject(ctx, q.real(r), cause)
}

func (q *clampedExtend) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	last := time.Unix(0, math.MaxInt64)
	if left := last.Sub(q.now()); by > 0 && by > left {
		l, err := q.Memory.Extend(ctx, q.real(r), left) // THE BUG: the refused call renews the lease
		if err != nil {
			return l, err
		}
		q.mu.Lock()
		q.alias[r] = l.Receipt
		q.mu.Unlock()
		return broker.LeaseValue{}, fmt.Errorf("mutant: Extend by %v passes year 2262: %w", by, broker.QueueMisconfigured)
	}
	return q.Memory.Extend(ctx, q.real(r), by)
}

// Seed LeaseExtender.Extend: a by whose deadline passes 2262 "is refused
// before anything moves, and the lease the caller holds stays valid".
// ExtendPast2262IsMisconfiguredAndKeepsLease checked the error and that
// the receipt still acks, which a broker that renewed the lease to the
// last recordable instant and then reported the refusal passed: the
// message stayed hidden long after the deadline its consumer was given.
func TestTheSuiteFailsABrokerWhoseRefusedExtendRenewsTheLease(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "refusedExtendHoldsTheLease", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a")
	if _, err := q.(broker.LeaseExtender).Extend(ctx, ds[0].Lease.Receipt, math.MaxInt64); !errors.Is(err, broker.QueueMisconfigured) {
		t.Fatalf("harness: the mutant's Extend past 2262: %v, want QueueMisconfigured", err)
	}
	c.Set(ds[0].Lease.ExpiresAt)
	if again, err := q.Receive(ctx, 1); err != nil || len(again) != 0 {
		t.Fatalf("harness: the mutant redelivers at the lease's own ExpiresAt (%v, %v); it is not broken", again, err)
	}
	requireSuiteFails(t, "refusedExtendHoldsTheLease", "renews the lease to the last recordable instant on an Extend it refuses", "ARefusedExtendLeavesTheLeaseToLapseAtItsOwnExpiresAt")
}

// --- A lapsed receipt cannot settle the lease that follows it ----------------

// followingReceipt refuses a lapsed receipt as the Memory does while its
// message waits, but once another consumer holds the message, a Nack,
// Reject or Extend of the lapsed receipt acts on the new holder's lease
// (a receipt read as naming the message, checked only for having been
// issued and not ended by a call). Ack is the Memory's.
type followingReceipt struct {
	*broker.Memory
	now func() time.Time

	mu     sync.Mutex
	leases map[broker.ReceiptValue]heldLease // every receipt handed out
	holder map[string]broker.ReceiptValue    // message ID → its latest receipt
}

// heldLease is what followingReceipt remembers of a receipt.
type heldLease struct {
	id        string
	expiresAt time.Time
	ended     bool // by a call that succeeded
}

func (q *followingReceipt) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		q.leases[d.Lease.Receipt] = heldLease{id: d.Message.ID, expiresAt: d.Lease.ExpiresAt}
		q.holder[d.Message.ID] = d.Lease.Receipt
	}
	return ds, err
}

// target returns the receipt a call naming r acts on, and after marks r
// ended when the call succeeded.
func (q *followingReceipt) target(r broker.ReceiptValue) broker.ReceiptValue {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.leases[r]
	if !ok || l.ended || q.now().Before(l.expiresAt) {
		return r
	}
	if h := q.holder[l.id]; h != r && q.now().Before(q.leases[h].expiresAt) {
		return h // THE BUG: the lapsed receipt follows its message to the next lease
	}
	return r
}

func (q *followingReceipt) ended(r broker.ReceiptValue, err error) {
	if err != nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if l, ok := q.leases[r]; ok {
		l.ended = true
		q.leases[r] = l
	}
}

func (q *followingReceipt) Ack(ctx context.Context, r broker.ReceiptValue) error {
	err := q.Memory.Ack(ctx, r)
	q.ended(r, err)
	return err
}

func (q *followingReceipt) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	t := q.target(r)
	nv, err := q.Memory.Nack(ctx, t, cause)
	q.ended(t, err)
	return nv, err
}

func (q *followingReceipt) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	t := q.target(r)
	err := q.Memory.Reject(ctx, t, cause)
	q.ended(t, err)
	return err
}

func (q *followingReceipt) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	t := q.target(r)
	l, err := q.Memory.Extend(ctx, t, by)
	q.ended(t, err)
	if err == nil {
		q.mu.Lock()
		id := q.leases[t].id
		q.leases[l.Receipt] = heldLease{id: id, expiresAt: l.ExpiresAt}
		q.holder[id] = l.Receipt
		q.mu.Unlock()
	}
	return l, err
}

// Seed Broker.Ack: a lapsed receipt "removes NOTHING: the message is back
// in the queue, ... and another consumer may already hold it", and Nack,
// Reject and Extend refuse it "exactly as Ack refuses it". The suite
// handed a lapsed receipt to Ack once another consumer held its message,
// and to the other calls only while the message waited: a broker whose
// lapsed receipt, handed to Nack, Reject or Extend, settled the new
// holder's lease passed.
func TestTheSuiteFailsABrokerWhoseLapsedReceiptSettlesTheNextLease(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "lapsedReceiptFollowsItsMessage", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	first := publishAndReceive(t, q, "a")
	c.Set(first[0].Lease.ExpiresAt)
	if again, err := q.Receive(ctx, 1); err != nil || len(again) != 1 {
		t.Fatalf("Receive after the lapse: %v %v", again, err)
	}
	if _, err := q.Nack(ctx, first[0].Lease.Receipt, nil); err != nil {
		t.Fatalf("harness: the mutant refuses a Nack of the lapsed receipt (%v); it is not broken", err)
	}
	requireSuiteFails(t, "lapsedReceiptFollowsItsMessage", "lets a lapsed receipt's Nack, Reject or Extend settle the lease of the consumer that holds the message next", "ALapsedReceiptCannotSettleTheLeaseThatFollowsIt")
}
