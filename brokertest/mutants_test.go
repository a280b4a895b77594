package brokertest

// The suite tested as a test of the port (DESIGN.md "### The conformance
// suite (`brokertest/`)": any implementation that passes keeps the port's
// promises). Each TestTheSuiteFailsABroker* test builds a broker that
// breaks ONE promise of the seed or API.md — broker.Memory behind a
// wrapper that alters one behaviour — shows in-process that it does break
// it, then runs the whole suite against it in a child process (so that
// the suite's failures do not fail this test directly) and requires the
// suite to fail it, in the case written for that promise. Each was a gap:
// the suite passed the mutant until its case was added.

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// mutantEnv names, in the child process, the mutant the suite runs on.
const mutantEnv = "WALBROKER_BROKERTEST_MUTANT"

// mutantWrap makes the queue the suite sees from a Memory opened with policy p
// on the clock now.
type mutantWrap func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker

// mutants are the broken brokers, by name. "none" is the Memory itself.
var mutants = map[string]mutantWrap{
	"none": func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker { return m },
	"ignoreCapacity": func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return m // opened without Capacity: see mutantBackend.Queue
	},
	"dedupWipesYoungKeys": func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker {
		w := p.DedupWindow
		if w == 0 {
			w = broker.DefaultDedupWindow
		}
		return &dedupWipe{Memory: m, now: now, window: w, seen: map[string]broker.MessageValue{}}
	},
	"receiptNamesMessageAndDeadline": func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		var queue [8]byte
		_, _ = crand.Read(queue[:]) // a name of this queue: another queue's receipts name nothing here
		return &receiptByDeadline{Memory: m, queue: queue, table: map[broker.ReceiptValue]deadlineLease{}}
	},
	"nackDeathKeepsItsPlace": func(m *broker.Memory, p broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &capacityLeak{Memory: m, capacity: p.Capacity}
	},
	"wakeInPrefersRetryOverLapse": func(m *broker.Memory, _ broker.PolicyValue, now func() time.Time) broker.Broker {
		return &wakeRetryFirst{Memory: m, now: now, delayed: map[string]time.Time{}, leased: map[broker.ReceiptValue]string{}}
	},
	"publishReturnsNoPayload": func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &noPayload{Memory: m}
	},
}

// mutantBackend opens one Memory per queue, on the suite's clock, behind the
// mutant's wrapper.
type mutantBackend struct {
	mutant string
	now    func() time.Time
	wrap   mutantWrap
	queues []*broker.Memory
}

func (b *mutantBackend) Queue(_ string, p broker.PolicyValue) (broker.Broker, error) {
	if err := p.Validate(); err != nil {
		if b.mutant == "retryDelayErrorNamesMaxRetryDelay" && p.RetryDelay > broker.MaxDeadlineOffset {
			return nil, misnamedRetryDelay(p)
		}
		return nil, err
	}
	opened := p
	switch b.mutant {
	case "ignoreCapacity":
		opened.Capacity = 0
	case "replayTakesNoPlace", "nonFinalLapseFreesPlace":
		opened.Capacity = 0 // they enforce their own: see miscount
	}
	now := b.now
	var moved *atomic.Int64
	if b.mutant == "receivesTillNone" {
		// Its clock moves on while a Receive runs, as a real one does:
		// see receivesTillNone.
		moved = new(atomic.Int64)
		now = func() time.Time { return b.now().Add(time.Duration(moved.Load())) }
	}
	m, err := broker.NewMemory(opened, broker.MemoryOptions{Now: now})
	if err != nil {
		return nil, err
	}
	b.queues = append(b.queues, m)
	if moved != nil {
		return &receivesTillNone{Memory: m, moved: moved}, nil
	}
	return b.wrap(m, p, b.now), nil
}

func (b *mutantBackend) Close() error {
	for _, q := range b.queues {
		_ = q.Close()
	}
	return nil
}

func mutantFactory(mutant string) Factory {
	wrap := mutants[mutant]
	return Factory{Name: "mutant-" + mutant, Caps: allCaps, Open: func(t *testing.T, now func() time.Time) Backend {
		b := &mutantBackend{mutant: mutant, now: now, wrap: wrap}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}}
}

// mutantQueue opens one queue of mutant on clock c, for the in-process
// demonstrations.
func mutantQueue(t *testing.T, mutant string, c *Clock, p broker.PolicyValue) broker.Broker {
	t.Helper()
	b := &mutantBackend{mutant: mutant, now: c.Now, wrap: mutants[mutant]}
	t.Cleanup(func() { _ = b.Close() })
	q, err := b.Queue("q", p)
	if err != nil {
		t.Fatalf("Queue: %v", err)
	}
	return q
}

// TestSuiteAgainstAMutant is the child process of suiteAgainst: it runs
// the whole suite against the mutant named in the environment.
func TestSuiteAgainstAMutant(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("runs only as the child process of a TestTheSuite test")
	}
	if _, ok := mutants[name]; !ok {
		t.Fatalf("no mutant %q", name)
	}
	Run(t, mutantFactory(name))
}

// suiteAgainst runs the suite against mutant in a child process and
// reports whether it failed, with the names of the failing cases.
func suiteAgainst(t *testing.T, mutant string) (failed bool, fails []string) {
	t.Helper()
	failed, fails, _, _ = suiteRun(t, mutant)
	return failed, fails
}

// suiteRun is suiteAgainst that also returns how many cases passed and
// the child's output.
func suiteRun(t *testing.T, mutant string) (failed bool, fails []string, passed int, out []byte) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteAgainstAMutant$", "-test.count=1", "-test.v", "-test.timeout=300s")
	cmd.Env = append(os.Environ(), mutantEnv+"="+mutant)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the suite against %s: %v", mutant, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "--- FAIL: TestSuiteAgainstAMutant/"):
			fails = append(fails, strings.TrimPrefix(strings.Fields(line)[2], "TestSuiteAgainstAMutant/"))
		case strings.HasPrefix(line, "--- PASS: TestSuiteAgainstAMutant/"):
			passed++
		}
	}
	if passed < 100 && err == nil {
		t.Fatalf("the suite ran only %d cases against %s:\n%s", passed, mutant, out)
	}
	if err != nil && len(fails) == 0 {
		t.Fatalf("the child process running the suite against %s failed outside any case: %v\n%s", mutant, err, out)
	}
	return err != nil, fails, passed, out
}

// requireSuiteFails fails t unless the suite fails mutant in each case
// named in wants, those written for the promise it breaks (broken says
// how).
func requireSuiteFails(t *testing.T, mutant, broken string, wants ...string) {
	t.Helper()
	failed, fails := suiteAgainst(t, mutant)
	if !failed {
		t.Fatalf("brokertest passes a broker that %s (mutant %q): the suite does not check this promise", broken, mutant)
	}
	for _, want := range wants {
		if !slices.Contains(fails, want) {
			t.Errorf("brokertest fails a broker that %s (mutant %q) in %q, but not in %s, a case for this promise", broken, mutant, fails, want)
		}
	}
}

// The harness itself: the suite passes the Memory as it is behind the
// backend, and fails a Memory that ignores Capacity (a promise it has
// long checked). It shows the other tests measure the suite, not the
// harness.
func TestTheSuitePassesTheMemoryAndFailsOneIgnoringCapacity(t *testing.T) {
	if failed, fails := suiteAgainst(t, "none"); failed {
		t.Fatalf("the suite fails the unmodified Memory: %v", fails)
	}
	if failed, _ := suiteAgainst(t, "ignoreCapacity"); !failed {
		t.Fatalf("the suite passes a Memory that ignores Capacity: the harness does not run the suite")
	}
}

// --- 1. Dedup eviction is per key -------------------------------------

// dedupWipe keeps its own seen-set, and when ANY key is older than the
// window it forgets EVERY key (a set reset once per window, instead of
// evicting each key by its own enqueue instant). Everything else is the
// Memory's.
type dedupWipe struct {
	*broker.Memory
	now    func() time.Time
	window time.Duration

	mu     sync.Mutex
	seen   map[string]broker.MessageValue // ID and EnqueuedAt of each key's message
	latest time.Time                      // the latest clock reading seen by a publish
}

func (q *dedupWipe) Publish(ctx context.Context, p []byte) (broker.MessageValue, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	m, err := q.Memory.Publish(ctx, p)
	if err == nil && m.EnqueuedAt.After(q.latest) {
		q.latest = m.EnqueuedAt
	}
	return m, err
}

func (q *dedupWipe) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ms, err := q.Memory.PublishBatch(ctx, ps)
	if err == nil && len(ms) > 0 && ms[0].EnqueuedAt.After(q.latest) {
		q.latest = ms[0].EnqueuedAt
	}
	return ms, err
}

func (q *dedupWipe) PublishKeyed(ctx context.Context, key string, p []byte) (broker.MessageValue, error) {
	if len(key) == 0 || len(key) > 256 {
		return broker.MessageValue{}, fmt.Errorf("mutant: key of %d bytes: %w", len(key), broker.InvalidDedupKey)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// The Memory's own refusals first: a nil or ended context, Close, a
	// clock no broker can record.
	if _, err := q.Memory.DeadLetters(ctx, 1); err != nil {
		return broker.MessageValue{}, err
	}
	now := q.now()
	if !now.Before(q.latest) { // the clock did not go backwards: evict
		for _, m := range q.seen {
			if now.Sub(m.EnqueuedAt) > q.window {
				clear(q.seen) // THE BUG: one old key takes every key with it
				break
			}
		}
		q.latest = now
	}
	if m, ok := q.seen[key]; ok {
		return broker.MessageValue{ID: m.ID, EnqueuedAt: m.EnqueuedAt}, nil
	}
	m, err := q.Memory.Publish(ctx, p)
	if err != nil {
		return m, err
	}
	q.seen[key] = broker.MessageValue{ID: m.ID, EnqueuedAt: m.EnqueuedAt}
	return m, nil
}

// API.md §4 (seed 000, "去重记忆按时间有界": `seen` 记下每个键的入队时刻 …
// 驱逐早于 IDEM_WINDOW_MS 的键): "each key remembers when it was enqueued;
// before admitting, keys older than the window are evicted" — only those.
// A key younger than the window is still a duplicate (API.md §2
// PublishKeyed: "A key seen within the window returns the ORIGINAL
// message"), whatever happened to older keys. The suite's other dedup
// cases use ONE key when the window passes, so a broker that wipes its
// whole seen-set when the oldest key expires — handing a 10-minute-old
// key's side effect to the consumer a second time — passed them all.
func TestTheSuiteFailsABrokerThatForgetsEveryKeyWhenOneLeavesTheWindow(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "dedupWipesYoungKeys", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, DedupWindow: time.Hour})
	k := q.(KeyedPublisher)
	ctx := context.Background()
	if _, err := k.PublishKeyed(ctx, "old", []byte("a")); err != nil {
		t.Fatal(err)
	}
	c.Set(t0.Add(50 * time.Minute))
	young, err := k.PublishKeyed(ctx, "young", []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	c.Set(t0.Add(time.Hour + time.Nanosecond)) // "old" is past the window; "young" is 10 min old
	again, err := k.PublishKeyed(ctx, "young", []byte("b again"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == young.ID {
		t.Fatalf("harness: the mutant kept the young key; it is not broken")
	}
	requireSuiteFails(t, "dedupWipesYoungKeys", "forgets a key 10 minutes into a 1 h dedup window because another key expired", "EachDedupKeyIsEvictedByItsOwnAge")
}

// --- 2. A receipt ended by Nack stays ended once its message is leased again

// deadlineLease is what a receiptByDeadline receipt names.
type deadlineLease struct {
	receipt broker.ReceiptValue // the Memory's
	id      string
}

// receiptByDeadline names each lease by its message and its deadline —
// the "durable name" of the seed's LeaseExtender comment — so two leases of
// one message with the same ExpiresAt share a receipt. Everything else is
// the Memory's.
type receiptByDeadline struct {
	*broker.Memory
	queue [8]byte
	mu    sync.Mutex
	table map[broker.ReceiptValue]deadlineLease
}

func (q *receiptByDeadline) name(id string, at time.Time) broker.ReceiptValue {
	r := broker.ReceiptValue(base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%x/%s@%d", q.queue, id, at.UnixNano())))
	return r
}

func (q *receiptByDeadline) issue(id string, l broker.LeaseValue) broker.LeaseValue {
	r := q.name(id, l.ExpiresAt)
	q.table[r] = deadlineLease{receipt: l.Receipt, id: id}
	l.Receipt = r
	return l
}

func (q *receiptByDeadline) resolve(r broker.ReceiptValue) (deadlineLease, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.table[r]
	if !ok {
		return deadlineLease{}, fmt.Errorf("mutant: receipt %q: %w", r, broker.UnknownReceipt)
	}
	return l, nil
}

func (q *receiptByDeadline) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range ds {
		ds[i].Lease = q.issue(ds[i].Message.ID, ds[i].Lease)
	}
	return ds, err
}

func (q *receiptByDeadline) Ack(ctx context.Context, r broker.ReceiptValue) error {
	l, err := q.resolve(r)
	if err != nil {
		return err
	}
	return q.Memory.Ack(ctx, l.receipt)
}

func (q *receiptByDeadline) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	l, err := q.resolve(r)
	if err != nil {
		return broker.NackValue{}, err
	}
	return q.Memory.Nack(ctx, l.receipt, cause)
}

func (q *receiptByDeadline) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	l, err := q.resolve(r)
	if err != nil {
		return err
	}
	return q.Memory.Reject(ctx, l.receipt, cause)
}

func (q *receiptByDeadline) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, err := q.resolve(r)
	if err != nil {
		return broker.LeaseValue{}, err
	}
	nl, err := q.Memory.Extend(ctx, l.receipt, by)
	if err != nil {
		return nl, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.issue(l.id, nl), nil
}

// Seed Broker.Ack: "A receipt whose lease has already lapsed ... removes
// NOTHING: ... another consumer may already hold it ... a holder that lost
// its claim must not be able to end somebody else's turn"; API.md §5.7: "A
// receipt that no longer names a live lease (after Nack, or replaced by
// Extend) is LeaseExpired or UnknownReceipt ... nothing moves". The suite
// tried a receipt ended by Nack, Ack or Reject only BEFORE its message was
// leased again (ReceiptAfterNackIsRefused, AReceiptEndedByAckNackOrReject-
// IsRefusedByEveryCall), and only a LAPSED receipt against the next holder
// (AckOfLapsedLeaseRemovesNothing). A broker whose receipt names (message,
// deadline) lets a consumer that nacked end the turn of the consumer that
// received the message after it in the same instant — the normal case on
// the suite's standing clock — and passed.
func TestTheSuiteFailsABrokerWhoseEndedReceiptEndsTheNextLease(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "receiptNamesMessageAndDeadline", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	d1 := publishAndReceive(t, q, "a")
	if _, err := q.Nack(ctx, d1[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	d2, err := q.Receive(ctx, 1) // another consumer's turn
	if err != nil || len(d2) != 1 {
		t.Fatalf("Receive: %v %v", d2, err)
	}
	if err := q.Ack(ctx, d1[0].Lease.Receipt); err != nil {
		t.Fatalf("harness: the mutant refused the nacked receipt (%v); it is not broken", err)
	}
	requireSuiteFails(t, "receiptNamesMessageAndDeadline", "lets the receipt a Nack ended acknowledge the message another consumer received after it", "AReceiptEndedByNackRejectOrExtendCannotEndTheNextLease")
}

// --- 3. A message nacked into the dead-letter store frees its place --------

// capacityLeak counts a message that a Nack dead-lettered as still
// holding its place in the queue (a live-count decremented by Ack, Reject
// and a lapse, but not by a Nack on the last delivery).
type capacityLeak struct {
	*broker.Memory
	capacity int
	mu       sync.Mutex
	leaked   int
}

func (q *capacityLeak) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil && v.DeadLettered {
		q.mu.Lock()
		q.leaked++
		q.mu.Unlock()
	}
	return v, err
}

func (q *capacityLeak) full(n int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.leaked == 0 || q.capacity == 0 {
		return nil
	}
	s := q.Memory.Stats()
	if live := s.Ready + s.Leased + s.Delayed + q.leaked; live+n > q.capacity {
		return fmt.Errorf("mutant: %d of %d places taken: %w", live, q.capacity, broker.QueueFull)
	}
	return nil
}

func (q *capacityLeak) Publish(ctx context.Context, p []byte) (broker.MessageValue, error) {
	if err := q.full(1); err != nil {
		return broker.MessageValue{}, err
	}
	return q.Memory.Publish(ctx, p)
}

func (q *capacityLeak) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	if err := q.full(len(ps)); err != nil && len(ps) > 0 {
		return nil, err
	}
	return q.Memory.PublishBatch(ctx, ps)
}

// API.md §1 Capacity: "A queue that holds Capacity live messages (ready +
// leased + delayed; dead letters do not count) refuses the next Publish
// with QueueFull". The suite freed a place by Reject (CapacityDoesNotCount-
// DeadLetters) and by a lapse (CapacityFreedWhenLastLeaseLapses), never by
// the third way a message dies, a Nack on its last delivery (seed
// Broker.Nack: "when it has now been delivered MaxDeliveries times, it is
// moved to the dead-letter store"). A broker that goes on counting such a
// message — a queue of Capacity 1 refusing every publish for good after
// one message failed — passed.
func TestTheSuiteFailsABrokerWhoseNackedDeadLetterHoldsItsPlace(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "nackDeathKeepsItsPlace", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1, Capacity: 1})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a")
	if v, err := q.Nack(ctx, ds[0].Lease.Receipt, nil); err != nil || !v.DeadLettered {
		t.Fatalf("Nack: %+v %v", v, err)
	}
	if _, err := q.Publish(ctx, []byte("b")); !errors.Is(err, broker.QueueFull) {
		t.Fatalf("harness: the mutant admitted a publish after the nacked dead letter (%v); it is not broken", err)
	}
	requireSuiteFails(t, "nackDeathKeepsItsPlace", "counts a message nacked into the dead-letter store against Capacity", "CapacityFreedByANackThatDeadLetters")
}

// --- 4. Publish returns the message it minted, payload included ------------

// noPayload returns from Publish and PublishBatch the message without
// its Payload.
type noPayload struct{ *broker.Memory }

func (q *noPayload) Publish(ctx context.Context, p []byte) (broker.MessageValue, error) {
	m, err := q.Memory.Publish(ctx, p)
	m.Payload = nil
	return m, err
}

func (q *noPayload) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	ms, err := q.Memory.PublishBatch(ctx, ps)
	for i := range ms {
		ms[i].Payload = nil
	}
	return ms, err
}

// Seed Broker.Publish "returns the message the broker minted for it", and
// MessageValue.Payload "is the caller's bytes, unmodified". The suite
// never read the Payload Publish or PublishBatch returns
// (PayloadBelongsToReceiver wrote into it only "if len(m.Payload) > 0";
// PayloadsKeyedAndBatchPublishesReturnBelongToThePublisher writes into it
// and never compares it), so a broker that returns it nil — or any bytes
// at all — passed.
func TestTheSuiteFailsABrokerWhosePublishReturnsNoPayload(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "publishReturnsNoPayload", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	m, err := q.Publish(context.Background(), []byte("work"))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload) == "work" {
		t.Fatalf("harness: the mutant returned the payload; it is not broken")
	}
	requireSuiteFails(t, "publishReturnsNoPayload", "returns from Publish a MessageValue without the payload published", "PublishReturnsTheMessageWithItsPayload")
}

// --- 5. Wake.In names the EARLIEST moment, a lapse before a retry too ------

// wakeRetryFirst answers Wake.In from the retry delays when any message
// waits out one, and from the leases only when none does (two timer lists,
// read in turn, instead of one ordered by instant).
type wakeRetryFirst struct {
	*broker.Memory
	now     func() time.Time
	mu      sync.Mutex
	delayed map[string]time.Time           // message ID → VisibleAt of a nacked message not yet received again
	leased  map[broker.ReceiptValue]string // receipt → message ID
}

func (q *wakeRetryFirst) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		delete(q.delayed, d.Message.ID)
		q.leased[d.Lease.Receipt] = d.Message.ID
	}
	return ds, err
}

func (q *wakeRetryFirst) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, err := q.Memory.Extend(ctx, r, by)
	if err == nil {
		q.mu.Lock()
		q.leased[l.Receipt] = q.leased[r]
		q.mu.Unlock()
	}
	return l, err
}

func (q *wakeRetryFirst) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil && !v.DeadLettered {
		q.mu.Lock()
		if id, ok := q.leased[r]; ok {
			q.delayed[id] = v.VisibleAt
		}
		q.mu.Unlock()
	}
	return v, err
}

func (q *wakeRetryFirst) Wake() broker.WakeValue {
	w := q.Memory.Wake()
	if !w.Scheduled || w.In <= 0 {
		return w
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	var first time.Time
	for _, at := range q.delayed {
		if at.After(now) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if !first.IsZero() && first.Sub(now) > w.In {
		w.In = first.Sub(now) // THE BUG: a retry delay ending outranks an earlier lapse
	}
	return w
}

// Seed WakeValue.In "is how long ... until a message the broker already
// holds becomes receivable with no further event: a retry delay ending, or
// a lease lapsing because its consumer died"; API.md §3: Consume "never
// sleeps past a Wake.In". The suite checked In with only a lease pending
// (WakeInNamesLeaseLapse, WakeFollowsExtendAndAck, WakeInNamesTheLeaseOf-
// ARedeliveredRetry), only a retry pending, or a retry ending BEFORE a
// lapse (WakeInNamesEarliestMoment, WakeInSkipsLeaseOnLastDelivery); never
// a lapse before a retry delay. A broker that names the retry there — an
// idle consumer sleeping 50 s past the moment a dead consumer's message
// came back — passed.
func TestTheSuiteFailsABrokerWhoseWakeSkipsALapseBeforeARetry(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "wakeInPrefersRetryOverLapse", c, broker.PolicyValue{VisibilityTimeout: 10 * time.Second, RetryDelay: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a", "b")
	if _, err := q.Nack(ctx, ds[0].Lease.Receipt, nil); err != nil { // back at t0+60s; the other lapses at t0+10s
		t.Fatal(err)
	}
	if w := q.(broker.Waker).Wake(); !w.Scheduled || w.In == 10*time.Second {
		t.Fatalf("harness: the mutant's Wake %+v names the lapse; it is not broken", w)
	}
	requireSuiteFails(t, "wakeInPrefersRetryOverLapse", "names in Wake.In a retry delay ending after a lease that lapses sooner", "WakeInNamesALeaseLapsingBeforeARetryDelayEnds")
}

// --- 6. A Consume that never delivers fails its case, not the binary -------

// shortByOne returns from Receive(max) at most max−1 deliveries, so
// Receive(1) returns nothing; the leases of the ones it holds back lapse
// unseen.
type shortByOne struct{ *broker.Memory }

func (q *shortByOne) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	if max == 1 {
		// The Memory's refusals still: a nil or ended context, Close.
		_, err := q.Memory.DeadLetters(ctx, 1)
		return nil, err
	}
	return q.Memory.Receive(ctx, max-1)
}

func init() {
	mutants["receiveShortByOne"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &shortByOne{Memory: m}
	}
}

// A broker over which Consume never hands a message to its handler (here
// a Receive that returns one delivery fewer than it may, nothing to
// Consume's Receive(1)) hung the suite: ConsumeReturnsOnlyAfterItsHandlers-
// Finish waited for its handler to start with no bound, until the test
// binary's -timeout killed it, naming no promise and running none of the
// cases after it. Every wait of the suite on Consume and on a Wake signal
// is now bounded (env.patience). The run takes about a minute (four cases
// wait out the bound), so -short leaves it out.
func TestTheSuiteFailsABrokerOverWhichConsumeNeverDelivers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out the suite's bound on Consume four times, about a minute; go test without -short runs it")
	}
	c := NewClock(t0)
	q := mutantQueue(t, "receiveShortByOne", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if ds, err := q.Receive(ctx, 1); err != nil || len(ds) != 0 {
		t.Fatalf("harness: the mutant's Receive(1) returned %v, %v; it is not broken", ds, err)
	}
	requireSuiteFails(t, "receiveShortByOne", "returns nothing from Receive(1), so that Consume never delivers", "ConsumeReturnsOnlyAfterItsHandlersFinish")
}

// --- 7. A call that panics fails its promise, and the suite goes on -------

// deletePanics panics in DeleteDeadLetter when it holds no dead letter
// of that ID, instead of returning DeadLetterNotFound.
type deletePanics struct{ *broker.Memory }

func (q *deletePanics) DeleteDeadLetter(ctx context.Context, id string) error {
	err := q.Memory.DeleteDeadLetter(ctx, id)
	if errors.Is(err, broker.DeadLetterNotFound) {
		panic("mutant: no dead letter " + id) // THE BUG
	}
	return err
}

func init() {
	mutants["deleteOfUnknownPanics"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &deletePanics{Memory: m}
	}
}

// An implementation under test that panics in a call ended the test
// binary: Go's testing names the case running, but every case after it
// went unchecked, and a panic in a goroutine the suite started (the
// racing calls of together) named none. The suite now recovers a panic in
// a case, and carries one from its own goroutines to the case's, and
// fails that case with the panic and its stack; the cases after it run.
// Here the panic comes once on the test's goroutine
// (ReplayOrDeleteOfUnknownIsDeadLetterNotFound) and once in the losers of
// a race (ConcurrentDeletesOfOneDeadLetterRemoveItOnce).
func TestTheSuiteFailsABrokerThatPanicsAndChecksTheRest(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "deleteOfUnknownPanics", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	requirePanics(t, "the mutant's DeleteDeadLetter of an unknown ID", func() {
		_ = q.(broker.DeadLetterManager).DeleteDeadLetter(context.Background(), "nothing")
	})
	failed, fails, passed, out := suiteRun(t, "deleteOfUnknownPanics")
	if !failed {
		t.Fatalf("brokertest passes a broker whose DeleteDeadLetter panics")
	}
	for _, want := range []string{"ReplayOrDeleteOfUnknownIsDeadLetterNotFound", "ConcurrentDeletesOfOneDeadLetterRemoveItOnce"} {
		if !slices.Contains(fails, want) {
			t.Errorf("the suite does not fail %s against a broker whose DeleteDeadLetter panics; it fails %q", want, fails)
		}
	}
	requireSuiteWentOn(t, "deleteOfUnknownPanics", "a call", "mutant: no dead letter", passed, out)
}

// firstQueuePanics is a broker whose first queue of the process panics as
// it is opened: the one the suite's Declaration subtest opens first.
var firstQueueOpened atomic.Bool

func init() {
	mutants["firstQueuePanics"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		if !firstQueueOpened.Swap(true) {
			panic("mutant: the first queue") // THE BUG
		}
		return m
	}
}

// The suite recovered a panic in each promise's case, but not in its
// Declaration subtest, which runs first: a broker that panicked there
// ended the test binary, every promise unchecked. A panic there now
// fails Declaration, saying so, and the cases after it run.
func TestTheSuiteFailsABrokerThatPanicsInItsDeclarationAndChecksTheRest(t *testing.T) {
	requirePanics(t, "the mutant's first queue", func() {
		mutantQueue(t, "firstQueuePanics", NewClock(t0), broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	})
	failed, fails, passed, out := suiteRun(t, "firstQueuePanics")
	if !failed || !slices.Contains(fails, "Declaration") {
		t.Fatalf("brokertest does not fail Declaration against a broker that panics there; it fails %q", fails)
	}
	if len(fails) != 1 {
		t.Errorf("a panic in Declaration failed other cases too: %q", fails)
	}
	requireSuiteWentOn(t, "firstQueuePanics", "Declaration", "mutant: the first queue", passed, out)
}

// --- 8. PublishBatch returns the instant each message was enqueued ---------

// batchNoEnqueuedAt returns from PublishBatch its messages without their
// EnqueuedAt (the zero Time), as a batch built from the payloads and the
// IDs alone would; the messages it enqueued carry the right instant.
type batchNoEnqueuedAt struct{ *broker.Memory }

func (q *batchNoEnqueuedAt) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	ms, err := q.Memory.PublishBatch(ctx, ps)
	for i := range ms {
		ms[i].EnqueuedAt = time.Time{} // THE BUG
	}
	return ms, err
}

func init() {
	mutants["batchReturnsNoEnqueuedAt"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &batchNoEnqueuedAt{Memory: m}
	}
}

// Seed MessageValue.EnqueuedAt "is when the broker accepted the message
// ... the broker's clock", and PublishBatch returns the messages it
// minted. The suite compared with the broker's clock the EnqueuedAt that
// Publish and PublishKeyed return (PublishMintsIDAndEnqueuedAtOnBroker-
// Clock, DedupKeyEvictedOnlyWhenStrictlyOlderThanWindow), and read only
// the IDs and payloads PublishBatch returns, so a broker whose batch
// answered with instants that are no reading of its clock, and that no
// delivery of those messages carries, passed.
func TestTheSuiteFailsABrokerWhoseBatchReturnsNoEnqueuedAt(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "batchReturnsNoEnqueuedAt", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ms, err := q.(BatchPublisher).PublishBatch(context.Background(), [][]byte{[]byte("a")})
	if err != nil || len(ms) != 1 {
		t.Fatalf("PublishBatch: %v %v", ms, err)
	}
	if ms[0].EnqueuedAt.Equal(t0) {
		t.Fatalf("harness: the mutant returned the enqueue instant; it is not broken")
	}
	requireSuiteFails(t, "batchReturnsNoEnqueuedAt", "returns from PublishBatch messages whose EnqueuedAt is not the instant they were enqueued", "PublishBatchMintsEnqueuedAtOnBrokerClock")
}

// --- 9. A replayed message takes a place in Capacity -----------------------

// miscount enforces Capacity itself (the Memory under it is opened
// without one: see mutantBackend.Queue), counting the live messages the
// Memory reports less the places its count forgot: a count of live
// messages that publishes raise and acknowledgements and deaths lower,
// which a replay forgets to raise (forgetReplays), or which a lapse
// lowers though the message is not dead but back in the queue
// (forgetLapses). A queue with a Capacity keeps its dedup keys here too,
// so that a duplicate is answered, as it must be, before the count is
// read; without a Capacity it is the Memory.
type miscount struct {
	*broker.Memory
	now                         func() time.Time
	capacity, maxDeliveries     int
	window                      time.Duration
	forgetReplays, forgetLapses bool

	mu     sync.Mutex
	forgot int                            // THE BUG: places the count forgot
	seen   map[string]broker.MessageValue // ID and EnqueuedAt of each key's message
	latest time.Time                      // the latest clock reading seen by a publish
	leases map[broker.ReceiptValue]*lease // with forgetLapses: every lease handed out
}

// lease is a lease a miscount handed out, until it ends or lapses.
type lease struct {
	expiresAt  time.Time
	deliveries int
	over       bool // acked, nacked, rejected, replaced by Extend, or lapsed
}

// fullLocked refuses n more messages when the count says the queue holds
// Capacity.
func (q *miscount) fullLocked(n int) error {
	s := q.Memory.Stats()
	if q.forgetLapses {
		now := q.now()
		for _, l := range q.leases {
			if !l.over && !now.Before(l.expiresAt) {
				l.over = true
				if l.deliveries < q.maxDeliveries {
					q.forgot++ // THE BUG: the message is back in the queue, not dead
				}
			}
		}
	}
	if live := s.Ready + s.Leased + s.Delayed - q.forgot; live+n > q.capacity {
		return fmt.Errorf("mutant: %d of %d places taken: %w", live, q.capacity, broker.QueueFull)
	}
	return nil
}

func (q *miscount) observeLocked(ms ...broker.MessageValue) {
	for _, m := range ms {
		if m.EnqueuedAt.After(q.latest) {
			q.latest = m.EnqueuedAt
		}
	}
}

func (q *miscount) Publish(ctx context.Context, p []byte) (broker.MessageValue, error) {
	if q.capacity == 0 {
		return q.Memory.Publish(ctx, p)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fullLocked(1); err != nil {
		return broker.MessageValue{}, err
	}
	m, err := q.Memory.Publish(ctx, p)
	if err == nil {
		q.observeLocked(m)
	}
	return m, err
}

func (q *miscount) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	if q.capacity == 0 || len(ps) == 0 {
		return q.Memory.PublishBatch(ctx, ps)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fullLocked(len(ps)); err != nil {
		return nil, err
	}
	ms, err := q.Memory.PublishBatch(ctx, ps)
	if err == nil {
		q.observeLocked(ms...)
	}
	return ms, err
}

func (q *miscount) PublishKeyed(ctx context.Context, key string, p []byte) (broker.MessageValue, error) {
	if q.capacity == 0 {
		return q.Memory.PublishKeyed(ctx, key, p)
	}
	if len(key) == 0 || len(key) > 256 {
		return broker.MessageValue{}, fmt.Errorf("mutant: key of %d bytes: %w", len(key), broker.InvalidDedupKey)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	// The Memory's own refusals first: a nil or ended context, Close, a
	// clock no broker can record.
	if _, err := q.Memory.DeadLetters(ctx, 1); err != nil {
		return broker.MessageValue{}, err
	}
	now := q.now()
	if !now.Before(q.latest) { // the clock did not go backwards: evict
		for k, m := range q.seen {
			if now.Sub(m.EnqueuedAt) > q.window {
				delete(q.seen, k)
			}
		}
		q.latest = now
	}
	if m, ok := q.seen[key]; ok {
		return broker.MessageValue{ID: m.ID, EnqueuedAt: m.EnqueuedAt}, nil
	}
	if err := q.fullLocked(1); err != nil {
		return broker.MessageValue{}, err
	}
	m, err := q.Memory.Publish(ctx, p)
	if err != nil {
		return m, err
	}
	if m.Payload == nil {
		m.Payload = []byte{} // enqueued, not a duplicate
	}
	q.seen[key] = broker.MessageValue{ID: m.ID, EnqueuedAt: m.EnqueuedAt}
	return m, nil
}

func (q *miscount) ReplayDeadLetter(ctx context.Context, id string) error {
	if q.capacity == 0 {
		return q.Memory.ReplayDeadLetter(ctx, id)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fullLocked(1); err != nil {
		dls, derr := q.Memory.DeadLetters(ctx, math.MaxInt)
		if derr != nil {
			return derr
		}
		for _, dl := range dls {
			if dl.Message.ID == id {
				return err
			}
		}
		return q.Memory.ReplayDeadLetter(ctx, id) // DeadLetterNotFound
	}
	err := q.Memory.ReplayDeadLetter(ctx, id)
	if err == nil && q.forgetReplays {
		q.forgot++ // THE BUG: the count forgets the message it just queued
	}
	return err
}

// The lease calls of a miscount that forgets lapses record which leases
// are live; with forgetReplays they are the Memory's.

func (q *miscount) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	if q.forgetLapses {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, d := range ds {
			q.leases[d.Lease.Receipt] = &lease{expiresAt: d.Lease.ExpiresAt, deliveries: d.Deliveries}
		}
	}
	return ds, err
}

// end records that the lease of receipt r ended, when the call that
// named it succeeded.
func (q *miscount) end(r broker.ReceiptValue, err error) {
	if err == nil && q.forgetLapses {
		q.mu.Lock()
		defer q.mu.Unlock()
		if l, ok := q.leases[r]; ok {
			l.over = true
		}
	}
}

func (q *miscount) Ack(ctx context.Context, r broker.ReceiptValue) error {
	err := q.Memory.Ack(ctx, r)
	q.end(r, err)
	return err
}

func (q *miscount) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	q.end(r, err)
	return v, err
}

func (q *miscount) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	err := q.Memory.Reject(ctx, r, cause)
	q.end(r, err)
	return err
}

func (q *miscount) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	nl, err := q.Memory.Extend(ctx, r, by)
	q.end(r, err)
	if err == nil && q.forgetLapses {
		q.mu.Lock()
		defer q.mu.Unlock()
		if l, ok := q.leases[r]; ok {
			q.leases[nl.Receipt] = &lease{expiresAt: nl.ExpiresAt, deliveries: l.deliveries}
		}
	}
	return nl, err
}

func init() {
	mutants["replayTakesNoPlace"] = func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker {
		return newMiscount(m, p, now, true, false)
	}
}

func newMiscount(m *broker.Memory, p broker.PolicyValue, now func() time.Time, forgetReplays, forgetLapses bool) *miscount {
	w := p.DedupWindow
	if w == 0 {
		w = broker.DefaultDedupWindow
	}
	return &miscount{Memory: m, now: now, capacity: p.Capacity, maxDeliveries: p.MaxDeliveries, window: w,
		forgetReplays: forgetReplays, forgetLapses: forgetLapses,
		seen: map[string]broker.MessageValue{}, leases: map[broker.ReceiptValue]*lease{}}
}

// API.md §1 Capacity: "A queue that holds Capacity live messages (ready
// + leased + delayed; dead letters do not count) refuses the next
// Publish"; seed DeadLetterManager.ReplayDeadLetter "moves the dead letter
// id back into the queue": a replayed message is live again and holds a
// place. The suite checked that a replay into a full queue is refused
// (ReplayIntoAFullQueueIsQueueFullAndMovesNothing), never that the
// message a replay queued counts once it is there, so a broker whose
// count of live messages a replay does not raise — a queue of Capacity 1
// holding a replayed message and admitting a second one, and for good a
// place more than its Capacity after the replayed message is acked —
// passed.
func TestTheSuiteFailsABrokerWhoseReplayedMessageTakesNoPlace(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "replayTakesNoPlace", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, Capacity: 1})
	ctx := context.Background()
	m, err := q.Publish(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v %v", ds, err)
	}
	if err := q.(broker.Rejecter).Reject(ctx, ds[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.(broker.DeadLetterManager).ReplayDeadLetter(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Publish(ctx, []byte("b")); err != nil {
		t.Fatalf("harness: the mutant refused a publish beside the replayed message (%v); it is not broken", err)
	}
	requireSuiteFails(t, "replayTakesNoPlace", "does not count a replayed message against Capacity", "AReplayedMessageTakesAPlaceInCapacity")
}

// --- 10. A redelivery is leased for VisibilityTimeout from its Receive ------

// leaseFromVisible leases a redelivered message until VisibilityTimeout
// after the instant it became receivable again (its Nack's VisibleAt, or
// the ExpiresAt of the lease that lapsed) instead of after the Receive
// that took it: a broker that keeps one deadline per message and moves it
// by VisibilityTimeout whenever the message turns visible. It is the
// Memory, with the lease of such a redelivery shortened by Extend.
type leaseFromVisible struct {
	*broker.Memory
	now func() time.Time
	vt  time.Duration

	mu      sync.Mutex
	visible map[string]time.Time           // message ID → when it was to be receivable again
	leases  map[broker.ReceiptValue]string // receipt → message ID
}

func (q *leaseFromVisible) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, d := range ds {
		id := d.Message.ID
		if from, ok := q.visible[id]; ok && d.Deliveries > 1 {
			by := from.Add(q.vt).Sub(q.now()) // THE BUG: from when it turned visible
			if by < q.vt {
				if by <= 0 {
					by = time.Nanosecond
				}
				if l, err := q.Memory.Extend(ctx, d.Lease.Receipt, by); err == nil {
					ds[i].Lease = l
				}
			}
		}
		q.visible[id] = ds[i].Lease.ExpiresAt
		q.leases[ds[i].Lease.Receipt] = id
	}
	return ds, err
}

func (q *leaseFromVisible) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil && !v.DeadLettered {
		q.mu.Lock()
		if id, ok := q.leases[r]; ok {
			q.visible[id] = v.VisibleAt
		}
		q.mu.Unlock()
	}
	return v, err
}

func (q *leaseFromVisible) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, err := q.Memory.Extend(ctx, r, by)
	if err == nil {
		q.mu.Lock()
		if id, ok := q.leases[r]; ok {
			q.leases[l.Receipt] = id
			q.visible[id] = l.ExpiresAt
		}
		q.mu.Unlock()
	}
	return l, err
}

func init() {
	mutants["leaseFromWhenVisible"] = func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker {
		return &leaseFromVisible{Memory: m, now: now, vt: p.VisibilityTimeout,
			visible: map[string]time.Time{}, leases: map[broker.ReceiptValue]string{}}
	}
}

// Seed PolicyValue.VisibilityTimeout "is how long a Broker.Receive hides
// a message from every other consumer"; a message held by a consumer that
// died "reappears exactly this long after it was leased". The suite
// compared ExpiresAt with the Receive only for a first delivery received
// at the instant of its publish (LeaseExpiresVisibilityTimeoutAfterReceive),
// and received every redelivery at the instant it turned visible, where a
// lease measured from that instant is the right one. A broker that leases
// a redelivery from when it turned visible — a message received half a
// VisibilityTimeout after its Nack lapses half a VisibilityTimeout later,
// and goes to a second consumer while the first still works — passed.
func TestTheSuiteFailsABrokerThatLeasesARedeliveryFromWhenItTurnedVisible(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "leaseFromWhenVisible", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a")
	if _, err := q.Nack(ctx, ds[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	at := c.Advance(30 * time.Second)
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v %v", ds, err)
	}
	if ds[0].Lease.ExpiresAt.Equal(at.Add(time.Minute)) {
		t.Fatalf("harness: the mutant leased the redelivery for VisibilityTimeout from its Receive; it is not broken")
	}
	requireSuiteFails(t, "leaseFromWhenVisible", "leases a redelivery until VisibilityTimeout after it turned visible, not after its Receive", "ARedeliveryIsLeasedForVisibilityTimeoutFromItsReceive")
}

// --- 11. A lease that lapses with deliveries left keeps its place ---------

func init() {
	mutants["nonFinalLapseFreesPlace"] = func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker {
		return newMiscount(m, p, now, false, true)
	}
}

// API.md §1 Capacity counts "ready + leased + delayed" messages; seed
// Broker.Receive: a consumer that dies leaves a lease whose lapse "is
// what makes the message reappear" — in the queue, live, not dead. The
// suite let a lease lapse under a Capacity only on the last delivery
// (CapacityFreedWhenLastLeaseLapses), where the lapse does free the
// place, so a broker whose count of live messages every lapse lowers —
// a queue of Capacity 1 admitting a second message beside the one that
// came back, and for good a place more than its Capacity — passed.
func TestTheSuiteFailsABrokerWhoseLapseWithDeliveriesLeftFreesAPlace(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "nonFinalLapseFreesPlace", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, Capacity: 1})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a")
	c.Set(ds[0].Lease.ExpiresAt)
	if _, err := q.Publish(ctx, []byte("b")); err != nil {
		t.Fatalf("harness: the mutant refused a publish beside the message whose lease lapsed (%v); it is not broken", err)
	}
	requireSuiteFails(t, "nonFinalLapseFreesPlace", "frees a place in Capacity when a lease lapses with deliveries left", "ALeaseThatLapsesWithDeliveriesLeftKeepsItsPlace")
}

// --- 12. A Reject records every delivery, a lapsed one too ---------------

// rejectCountsReports records in the dead letter of a Reject one delivery
// more than the Nacks of the message's life: the failures reported, not
// the deliveries made, so a delivery whose consumer died is not counted.
// Everything else is the Memory's.
type rejectCountsReports struct {
	*broker.Memory
	mu       sync.Mutex
	leases   map[broker.ReceiptValue]string // receipt → message ID
	nacks    map[string]int                 // message ID → Nacks of its life
	rejected map[string]bool                // message IDs dead by a Reject
}

func (q *rejectCountsReports) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		q.leases[d.Lease.Receipt] = d.Message.ID
	}
	return ds, err
}

func (q *rejectCountsReports) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, err := q.Memory.Extend(ctx, r, by)
	if err == nil {
		q.mu.Lock()
		q.leases[l.Receipt] = q.leases[r]
		q.mu.Unlock()
	}
	return l, err
}

func (q *rejectCountsReports) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil {
		q.mu.Lock()
		q.nacks[q.leases[r]]++
		q.mu.Unlock()
	}
	return v, err
}

func (q *rejectCountsReports) Reject(ctx context.Context, r broker.ReceiptValue, cause error) error {
	err := q.Memory.Reject(ctx, r, cause)
	if err == nil {
		q.mu.Lock()
		q.rejected[q.leases[r]] = true
		q.mu.Unlock()
	}
	return err
}

func (q *rejectCountsReports) ReplayDeadLetter(ctx context.Context, id string) error {
	err := q.Memory.ReplayDeadLetter(ctx, id)
	if err == nil {
		q.mu.Lock()
		delete(q.nacks, id)
		delete(q.rejected, id)
		q.mu.Unlock()
	}
	return err
}

func (q *rejectCountsReports) DeadLetters(ctx context.Context, max int) ([]broker.DeadLetterValue, error) {
	dls, err := q.Memory.DeadLetters(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, dl := range dls {
		if q.rejected[dl.Message.ID] {
			dls[i].Deliveries = q.nacks[dl.Message.ID] + 1 // THE BUG: reports, not deliveries
		}
	}
	return dls, err
}

func init() {
	mutants["rejectCountsReports"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return &rejectCountsReports{Memory: m, leases: map[broker.ReceiptValue]string{}, nacks: map[string]int{}, rejected: map[string]bool{}}
	}
}

// Seed Rejecter.Reject: "The dead letter's Deliveries is the count the
// message had"; DeliveryValue.Deliveries counts every delivery, one whose
// consumer "failed, timed out, or died" alike. The suite rejected first
// deliveries and deliveries after a Nack (RejectKeepsDeliveriesBelowMax,
// RejectAfterANackRecordsItsOwnCause), where one more than the Nacks is
// the count, never a delivery after a lapse, so a broker that records
// the failures reported instead of the deliveries made passed.
func TestTheSuiteFailsABrokerWhoseRejectCountsOnlyReportedFailures(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "rejectCountsReports", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a")
	c.Set(ds[0].Lease.ExpiresAt)
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Deliveries != 2 {
		t.Fatalf("Receive after the lapse: %v %v", ds, err)
	}
	if err := q.(broker.Rejecter).Reject(ctx, ds[0].Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	if dls, err := q.(broker.DeadLetterReader).DeadLetters(ctx, 1); err != nil || len(dls) != 1 || dls[0].Deliveries == 2 {
		t.Fatalf("harness: the mutant's dead letter %+v (%v) counts the lapsed delivery; it is not broken", dls, err)
	}
	requireSuiteFails(t, "rejectCountsReports", "records in a rejected message's dead letter the failures reported, not the deliveries made", "RejectAfterALapseCountsTheLapsedDelivery")
}

// --- 13. MaxMessageBytes is a payload every publish accepts --------------

// boundExclusive refuses in PublishBatch and PublishKeyed a payload of
// exactly the policy's MaxMessageBytes, as a size check written with >=
// would; Publish is the Memory's.
type boundExclusive struct {
	*broker.Memory
	max int
}

func (q *boundExclusive) tooLarge(ps ...[]byte) error {
	for _, p := range ps {
		if len(p) >= q.max { // THE BUG: the bound itself is refused
			return fmt.Errorf("mutant: a payload of %d bytes, limit %d: %w", len(p), q.max, broker.MessageTooLarge)
		}
	}
	return nil
}

func (q *boundExclusive) PublishBatch(ctx context.Context, ps [][]byte) ([]broker.MessageValue, error) {
	if err := q.tooLarge(ps...); err != nil {
		return nil, err
	}
	return q.Memory.PublishBatch(ctx, ps)
}

func (q *boundExclusive) PublishKeyed(ctx context.Context, key string, p []byte) (broker.MessageValue, error) {
	if err := q.tooLarge(p); err != nil {
		return broker.MessageValue{}, err
	}
	return q.Memory.PublishKeyed(ctx, key, p)
}

func init() {
	mutants["batchAndKeyedRefuseTheBound"] = func(m *broker.Memory, p broker.PolicyValue, _ func() time.Time) broker.Broker {
		max := p.MaxMessageBytes
		if max == 0 {
			max = broker.DefaultMaxMessageBytes
		}
		return &boundExclusive{Memory: m, max: max}
	}
}

// Seed PolicyValue.MaxMessageBytes "bounds one payload. A larger payload
// is refused": the bound itself is a payload like any other. The suite
// held Publish to it (PayloadAboveMaxMessageBytesIsMessageTooLarge,
// DefaultMaxMessageBytesIsOneMiB) and tried PublishBatch and PublishKeyed
// only with payloads well below or above it, so a broker whose batch and
// keyed publishes refuse a payload of exactly MaxMessageBytes passed.
func TestTheSuiteFailsABrokerWhoseBatchAndKeyedPublishRefuseTheBound(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "batchAndKeyedRefuseTheBound", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, MaxMessageBytes: 4})
	if _, err := q.(BatchPublisher).PublishBatch(context.Background(), [][]byte{[]byte("four")}); !errors.Is(err, broker.MessageTooLarge) {
		t.Fatalf("harness: the mutant's PublishBatch of exactly MaxMessageBytes returned %v; it is not broken", err)
	}
	requireSuiteFails(t, "batchAndKeyedRefuseTheBound", "refuses in PublishBatch and PublishKeyed a payload of exactly MaxMessageBytes", "EveryPublishAcceptsAPayloadOfExactlyMaxMessageBytes")
}

// --- 14. A refused policy names its own field --------------------------

// misnamedRetryDelay is the refusal of a RetryDelay above
// MaxDeadlineOffset by a broker whose Validate reports it as
// MaxRetryDelay's (mutant retryDelayErrorNamesMaxRetryDelay, see
// mutantBackend.Queue): the operator is sent to a field that is not set.
func misnamedRetryDelay(p broker.PolicyValue) error {
	return fmt.Errorf("mutant: policy: MaxRetryDelay: the retry delay %v exceeds MaxDeadlineOffset: %w", p.RetryDelay, broker.QueueMisconfigured) // THE BUG
}

func init() {
	mutants["retryDelayErrorNamesMaxRetryDelay"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker { return m }
}

// API.md §1: Validate's error "names the field". The suite looked for the
// field's name anywhere in the error's text, and "RetryDelay" is in
// "MaxRetryDelay": a broker that refused a RetryDelay above
// MaxDeadlineOffset with an error naming MaxRetryDelay, a field the
// operator never set, passed. MisconfiguredPolicyErrorNamesTheField now
// requires the name as a word of the text.
func TestTheSuiteFailsABrokerWhosePolicyErrorNamesAnotherField(t *testing.T) {
	b := &mutantBackend{mutant: "retryDelayErrorNamesMaxRetryDelay", now: NewClock(t0).Now, wrap: mutants["retryDelayErrorNamesMaxRetryDelay"]}
	_, err := b.Queue("q", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, RetryDelay: broker.MaxDeadlineOffset + 1})
	if !errors.Is(err, broker.QueueMisconfigured) || strings.Contains(err.Error(), " RetryDelay") {
		t.Fatalf("harness: the mutant's refusal %v names RetryDelay; it is not broken", err)
	}
	requireSuiteFails(t, "retryDelayErrorNamesMaxRetryDelay", "names MaxRetryDelay in its refusal of a bad RetryDelay", "MisconfiguredPolicyErrorNamesTheField")
}

// --- 15. MaxDeliveries counts the deliveries whose consumer died ---------

// nackCountsReports decides whether a Nack dead-letters by the failures
// reported, not the deliveries made: a Nack of the last delivery, after
// an earlier one lapsed, is taken for one with a delivery left. It then
// holds the message for the retry delay by extending its lease, and
// answers as a retry; the lease lapses on the last delivery and the
// message dies of that. Everything else is the Memory's.
type nackCountsReports struct {
	*broker.Memory
	max   int
	delay time.Duration
	now   func() time.Time
	mu    sync.Mutex
	lease map[broker.ReceiptValue]reportedDelivery
	nacks map[string]int // message ID → Nacks of its life
}

type reportedDelivery struct {
	id         string
	deliveries int
}

func (q *nackCountsReports) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	ds, err := q.Memory.Receive(ctx, max)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		q.lease[d.Lease.Receipt] = reportedDelivery{id: d.Message.ID, deliveries: d.Deliveries}
	}
	return ds, err
}

func (q *nackCountsReports) Extend(ctx context.Context, r broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	l, err := q.Memory.Extend(ctx, r, by)
	if err == nil {
		q.mu.Lock()
		q.lease[l.Receipt] = q.lease[r]
		q.mu.Unlock()
	}
	return l, err
}

func (q *nackCountsReports) Nack(ctx context.Context, r broker.ReceiptValue, cause error) (broker.NackValue, error) {
	q.mu.Lock()
	d, ok := q.lease[r]
	reported := q.nacks[d.id] + 1
	q.mu.Unlock()
	if ok && q.max > 0 && d.deliveries >= q.max && reported < q.max {
		// THE BUG: a delivery is thought left, the lapsed ones not counted.
		if _, err := q.Memory.Extend(ctx, r, q.delay); err != nil {
			return broker.NackValue{}, err
		}
		q.mu.Lock()
		q.nacks[d.id] = reported
		q.mu.Unlock()
		return broker.NackValue{Deliveries: d.deliveries, VisibleAt: q.now().Add(q.delay)}, nil
	}
	v, err := q.Memory.Nack(ctx, r, cause)
	if err == nil {
		q.mu.Lock()
		q.nacks[d.id] = reported
		q.mu.Unlock()
	}
	return v, err
}

func (q *nackCountsReports) ReplayDeadLetter(ctx context.Context, id string) error {
	err := q.Memory.ReplayDeadLetter(ctx, id)
	if err == nil {
		q.mu.Lock()
		delete(q.nacks, id)
		q.mu.Unlock()
	}
	return err
}

func init() {
	mutants["nackCountsReports"] = func(m *broker.Memory, p broker.PolicyValue, now func() time.Time) broker.Broker {
		delay := p.RetryDelay
		if delay <= 0 {
			delay = time.Second
		}
		return &nackCountsReports{Memory: m, max: p.MaxDeliveries, delay: delay, now: now,
			lease: map[broker.ReceiptValue]reportedDelivery{}, nacks: map[string]int{}}
	}
}

// Seed PolicyValue.MaxDeliveries bounds deliveries, and
// DeliveryValue.Deliveries counts one whose consumer "failed, timed out,
// or died" alike. The suite nacked the last delivery only after Nacks of
// every earlier one (NackOnLastDeliveryDeadLetters,
// NackOnLastDeliveryRecordsClassifiedCause) and let the last one lapse
// after a lapse (LeaseExhaustionDeadLettersWithLeaseExpired), so a
// broker whose Nack counts the failures reported, not the deliveries
// made, and retries a message on its last delivery after a lapse, passed.
func TestTheSuiteFailsABrokerWhoseNackCountsOnlyReportedFailures(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "nackCountsReports", c, broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2})
	ctx := context.Background()
	ds := publishAndReceive(t, q, "a")
	c.Set(ds[0].Lease.ExpiresAt)
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Deliveries != 2 {
		t.Fatalf("Receive after the lapse: %v %v", ds, err)
	}
	if nv, err := q.Nack(ctx, ds[0].Lease.Receipt, nil); err != nil || nv.DeadLettered {
		t.Fatalf("harness: the mutant's Nack of the last delivery after a lapse answered %+v (%v); it is not broken", nv, err)
	}
	requireSuiteFails(t, "nackCountsReports", "retries a message Nacked on its last delivery when an earlier delivery lapsed", "NackAfterALapseOnTheLastDeliveryDeadLetters")
}

// --- A Receive hands out each message once --------------------------------

func init() {
	mutants["receivesTillNone"] = func(m *broker.Memory, _ broker.PolicyValue, _ func() time.Time) broker.Broker {
		return m // wrapped by mutantBackend.Queue, which gives it a clock of its own
	}
}

// receivesTillNone takes messages until a take finds none, on a clock that
// moves on a nanosecond between two takes of one Receive, as a real one
// does while a broker asks its server again: a lease of the first take
// can lapse before the next, which then takes its message again. Between
// calls its clock is the suite's.
type receivesTillNone struct {
	*broker.Memory
	moved *atomic.Int64 // how far the Memory's clock is ahead of the suite's
}

func (q *receivesTillNone) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	defer q.moved.Store(0)                 // between calls, the suite's clock: only the takes of one call see it move
	out, err := q.Memory.Receive(ctx, max) // the Memory's refusals, and its take
	for err == nil && len(out) > 0 && len(out) < max {
		q.moved.Add(1) // THE BUG: it takes again, a moment later, what lapsed since
		more, merr := q.Memory.Receive(ctx, max-len(out))
		if merr != nil || len(more) == 0 {
			break
		}
		out = append(out, more...)
	}
	return out, err
}

// Seed Broker.Receive "leases up to max messages and returns them", and
// DeliveryValue.Deliveries is 1 on a first delivery. The suite's leases
// last minutes, or a short real time, and no case had one lapse while the
// Receive that handed it out ran, so a broker that takes messages until it
// finds none while its clock moves on — one Receive of one message under
// a 1 ns lease returning it on every delivery it had, counted 1 to 5,
// four receipts void on arrival and the message a dead letter before a
// consumer ran it once (the NATS adapter did so under a 5 ms lease) —
// passed.
func TestTheSuiteFailsABrokerWhoseReceiveTakesAgainWhatLapsedDuringIt(t *testing.T) {
	c := NewClock(t0)
	q := mutantQueue(t, "receivesTillNone", c, broker.PolicyValue{VisibilityTimeout: time.Nanosecond, MaxDeliveries: 5})
	ctx := context.Background()
	if _, err := q.Publish(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 10)
	if err != nil || len(ds) < 2 {
		t.Fatalf("harness: one Receive of one message under a 1 ns lease returned %v, %v; the mutant returns it once, it is not broken", ids(ds), err)
	}
	requireSuiteFails(t, "receivesTillNone", "returns a message again, on its next delivery, when its lease lapsed during the Receive", "AReceiveHandsOutEachMessageOnceUnderTheShortestLease")
}
