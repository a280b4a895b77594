package brokertest

// Mutants for the cases of promise_audit.go, in the manner of
// mutants_test.go: each breaks one promise, is shown in-process to break
// it, and the suite must fail it in the case written for that promise.

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

func init() {
	mutants["deadLettersCutInDeathOrder"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &cutInDeathOrder{Memory: m}
	}
	mutants["wakeSignalStaysClosed"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &firedSignal{Memory: m}
	}
	mutants["rejectFallsBackOnANacksCause"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &nackCauseFallback{Memory: m, ids: map[broker.ReceiptValue]string{}, causes: map[string]error{}}
	}
	mutants["retryDelayWrapsPast63"] = func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker {
		return &wrappingRetry{Memory: m, policy: p, now: now}
	}
}

// --- DeadLetters(max) takes the oldest max, by FailedAt ---------------------

// cutInDeathOrder answers DeadLetters(max) with the first max dead
// letters in the order the broker learnt of their deaths (Rejects in
// call order, then the ones it finds at the read), sorted by FailedAt
// only after the cut.
type cutInDeathOrder struct {
	*broker.Memory
	mu   sync.Mutex
	died []string // message IDs, in the order their Rejects returned
}

func (q *cutInDeathOrder) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	// The message ID is not in the receipt: find it as the one dead
	// letter that is new after the Reject.
	before, _ := q.Memory.DeadLetters(ctx, math.MaxInt)
	err := q.Memory.Reject(ctx, r, cause)
	if err != nil {
		return err
	}
	after, _ := q.Memory.DeadLetters(ctx, math.MaxInt)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, dl := range after {
		if !slices.ContainsFunc(before, func(b broker.DeadLetterValue) bool { return b.Message.ID == dl.Message.ID }) &&
			!slices.Contains(q.died, dl.Message.ID) {
			q.died = append(q.died, dl.Message.ID)
		}
	}
	return nil
}

func (q *cutInDeathOrder) DeadLetters(ctx context.Context, max int) ([]broker.DeadLetterValue, error) {
	all, err := q.Memory.DeadLetters(ctx, math.MaxInt)
	if err != nil || max <= 0 {
		return q.Memory.DeadLetters(ctx, max)
	}
	q.mu.Lock()
	rank := func(id string) int {
		if i := slices.Index(q.died, id); i >= 0 {
			return i
		}
		return len(q.died) // found at the read: after every Reject
	}
	byDeath := slices.Clone(all)
	slices.SortStableFunc(byDeath, func(a, b broker.DeadLetterValue) int { return rank(a.Message.ID) - rank(b.Message.ID) })
	q.mu.Unlock()
	cut := byDeath[:min(max, len(byDeath))] // THE BUG: cut before sorting
	slices.SortStableFunc(cut, func(a, b broker.DeadLetterValue) int { return a.FailedAt.Compare(b.FailedAt) })
	return cut, nil
}

// Seed DeadLetterReader.DeadLetters "returns up to max dead letters,
// oldest first", oldest by FailedAt (API.md §5.1). Every case that read
// fewer dead letters than there were (DeadLettersDoesNotRemoveAndReturns-
// UpToMax) had them die in FailedAt order, and the cases where they did
// not read them all: a broker that cut the list in the order the deaths
// reached it and sorted only what it kept passed.
func TestTheSuiteFailsABrokerThatCutsDeadLettersBeforeSortingThem(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "deadLettersCutInDeathOrder", c, broker.PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 5})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a", "b")
	c.Set(t0.Add(2 * time.Minute))
	if err := q.(broker.Rejecter).Reject(ctx, ds[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	c.Set(t0.Add(time.Minute)) // the clock steps back: the second dies first
	if err := q.(broker.Rejecter).Reject(ctx, ds[1].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	dls, err := q.(broker.DeadLetterReader).DeadLetters(ctx, 1)
	if err != nil || len(dls) != 1 {
		t.Fatalf("DeadLetters(1): %v %v", dls, err)
	}
	if dls[0].Message.ID == ds[1].Message.ID {
		t.Fatalf("harness: the mutant's DeadLetters(1) is the oldest by FailedAt; it is not broken")
	}
	requireSuiteFails(t, "deadLettersCutInDeathOrder", "cuts DeadLetters(max) in the order the deaths reached it and sorts by FailedAt after",
		"DeadLettersUpToMaxAreTheOldestByFailedAt", "DeadLettersUpToMaxPutALapseBeforeALaterReject")
}

// --- A fired signal is not handed out again ---------------------------------

// firedSignal hands out, once a signal it handed out has closed, that
// closed signal from every later Wake (Scheduled and In are the
// Memory's).
type firedSignal struct {
	*broker.Memory
	mu   sync.Mutex
	last <-chan struct{}
}

func (q *firedSignal) Wake() broker.WakeValue {
	w := q.Memory.Wake()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last != nil && closed(q.last) {
		w.Signal = q.last // THE BUG: the event already seen wakes every later waiter
		return w
	}
	q.last = w.Signal
	return w
}

// Seed WakeValue.Signal "is closed by the next event that may make a
// message receivable". Every Waker case takes its signal before the first
// event its queue sees, or requires only that one closes
// (DuplicateKeyDoesNotCloseTheWakeSignal calls Wake for the first time
// after the publish): a broker whose signals stayed closed once one had
// fired — an idle consumer that never waits again — passed.
func TestTheSuiteFailsABrokerThatHandsOutAFiredSignalAgain(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "wakeSignalStaysClosed", c, broker.PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 5})
	ctx := context.Background()
	q.(broker.Waker).Wake()
	ds := publishAndReceive(t, q, "a")
	if err := q.Ack(ctx, ds[0].Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	if !closed(q.(broker.Waker).Wake().Signal) {
		t.Fatalf("harness: the mutant handed out an open signal on an idle queue; it is not broken")
	}
	requireSuiteFails(t, "wakeSignalStaysClosed", "hands out a signal that already fired from every later Wake", "WakeHandsOutAnOpenSignalAfterTheLastOneFired")
}

// --- The retry curve is held at MaxRetryDelay however many deliveries -------

// wrappingRetry reports from Nack the VisibleAt of a doubling that is a
// shift of a Duration, which wraps from the 64th delivery on.
type wrappingRetry struct {
	*broker.Memory
	policy broker.PolicyValue
	now    func() time.Time
}

func (q *wrappingRetry) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	at := q.now()
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil && !v.DeadLettered && q.policy.MaxRetryDelay > 0 && v.Deliveries >= 64 {
		delay := min(q.policy.RetryDelay<<uint(v.Deliveries-1), q.policy.MaxRetryDelay) // THE BUG: wraps to 0
		v.VisibleAt = at.Add(delay)
	}
	return v, err
}

// Seed PolicyValue.MaxRetryDelay: "a message nacked on its n-th delivery
// waits RetryDelay × 2^(n−1), held at MaxRetryDelay". The suite followed
// the curve to the fourth delivery (RetryDelayGrowsAndHoldsAtMax); the
// shift that overflows is met only from the 64th, so a broker whose wait
// wrapped to nothing there passed.
func TestTheSuiteFailsABrokerWhoseRetryDelayWrapsPastTheSixtyThirdDelivery(t *testing.T) {
	c := NewClock(t0)
	p := broker.PolicyValue{VisibilityTimeout: time.Hour, RetryDelay: time.Second, MaxRetryDelay: time.Hour, MaxDeliveries: 80}
	q := mutantQueue(t, "retryDelayWrapsPast63", c, p)
	ctx := context.Background()
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	var v broker.NackValue
	var nacked time.Time
	for n := 1; n <= 64; n++ {
		if n > 1 {
			c.Set(v.VisibleAt.Add(time.Duration(n))) // after the retry delay, on a clock that moves
		}
		ds, err := q.Receive(ctx, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Receive %d: %v %v", n, ds, err)
		}
		nacked = c.Now()
		if v, err = q.Nack(ctx, ds[0].Lease.Receipt, nil); err != nil {
			t.Fatal(err)
		}
	}
	if v.VisibleAt.Sub(nacked) == time.Hour {
		t.Fatalf("harness: the mutant's 64th nack waits MaxRetryDelay; it is not broken")
	}
	requireSuiteFails(t, "retryDelayWrapsPast63", "reports a retry delay that wraps past the 63rd delivery", "RetryDelayStaysAtMaxRetryDelayPastSixtyFourDeliveries")
}

// --- Reject records its own cause ------------------------------------------

// nackCauseFallback rejects a message with no cause of its own with the
// cause its last Nack reported.
type nackCauseFallback struct {
	*broker.Memory
	mu     sync.Mutex
	ids    map[broker.ReceiptValue]string // receipt → message ID
	causes map[string]error               // message ID → its last Nack's cause
}

func (q *nackCauseFallback) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		q.ids[d.Lease.Receipt] = d.Message.ID
	}
	return ds, err
}

func (q *nackCauseFallback) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil && cause != nil {
		q.mu.Lock()
		q.causes[q.ids[r]] = cause
		q.mu.Unlock()
	}
	return v, err
}

func (q *nackCauseFallback) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	if cause == nil {
		q.mu.Lock()
		cause = q.causes[q.ids[r]] // THE BUG: an earlier failure stands in for this one
		q.mu.Unlock()
	}
	return q.Memory.Reject(ctx, r, cause)
}

// Seed Rejecter.Reject moves the message "with cause, recorded as
// Broker.Nack records the cause of a message that ran out of attempts",
// and a nil cause is "recorded as an unexplained failure". Every case
// that rejected with a nil cause rejected a message no Nack had reported
// on in its life: a broker that recorded an earlier Nack's cause in its
// place passed.
func TestTheSuiteFailsABrokerWhoseRejectRecordsAnEarlierNacksCause(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "rejectFallsBackOnANacksCause", c, broker.PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 5})
	ctx := context.Background()
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	for _, reject := range []bool{false, true} {
		ds, err := q.Receive(ctx, 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Receive: %v %v", ds, err)
		}
		if reject {
			err = q.(broker.Rejecter).Reject(ctx, ds[0].Lease.Receipt, nil)
		} else {
			_, err = q.Nack(ctx, ds[0].Lease.Receipt, broker.NewError("EARLIER", 1, "earlier", ""))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dls, err := q.(broker.DeadLetterReader).DeadLetters(ctx, 1)
	if err != nil || len(dls) != 1 {
		t.Fatalf("DeadLetters: %v %v", dls, err)
	}
	if dls[0].Reason == broker.ReasonUnexplained {
		t.Fatalf("harness: the mutant recorded a nil Reject as UNEXPLAINED; it is not broken")
	}
	requireSuiteFails(t, "rejectFallsBackOnANacksCause", "records for a Reject with no cause the cause of an earlier Nack", "RejectAfterANackRecordsItsOwnCause")
}
