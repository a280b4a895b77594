package broker

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/walbroker/walbroker/segment"
)

// MemoryOptions configures a [Memory] queue. The zero value is a safe
// default.
type MemoryOptions struct {
	// Now is the broker's clock: enqueue instants, lease deadlines, retry
	// delays and dedup windows are measured on it. Nil means time.Now. A
	// test that moves its own clock makes every timing of the queue exact.
	// A reading outside the Unix-nanosecond range (1677-09-21 to
	// 2262-04-11, exactly as Options.Now gives it; a zero time.Time among
	// them) is refused by every call that reads it, with
	// QueueMisconfigured, as the file-backed store does. As there (see Options.Now), Now is
	// called with the queue's lock held, must return promptly and must not
	// call the queue, and one that panics fails the call that read it with
	// an error naming MemoryOptions.Now and the panic value, leaving the
	// queue usable.
	Now func() time.Time
	// Logger receives the text of unclassified handler failures, keyed by
	// message ID, as the file-backed store's does (those Consume settles
	// are logged by Consume, and here only when it has no Logger). Nil
	// discards. As there (see Options.Logger), its handler is called without the queue's
	// lock, may read Stats, and a record it panics on is dropped (and
	// reported to the standard log package as there).
	Logger *slog.Logger
}

// Memory is one queue held in memory: the whole port ([Broker],
// [LeaseExtender], [Rejecter], [DeadLetterReader], [DeadLetterManager],
// [Waker]) plus PublishKeyed, PublishBatch, [PolicyValue.Capacity] and the
// dedup window, with the file-backed [Queue]'s semantics — the same
// errors, the same receive order, the same classified-cause recording and
// the same unguessable receipts — and no disk. Its bound on a batch is
// the first a store with the default SegmentBytes applies: a PublishBatch
// whose payloads' frames take more than one segment holds is
// InvalidBatchSize. (The store's second look counts each message's event
// fields too, some 20 bytes a message: a batch within that of the bound
// may be taken by a Memory and refused by the store.) It is for tests of code that
// takes a [Broker], and for work that may be lost with the process.
//
// It is not durable: a message lives as long as the Memory (a crash, or
// dropping the value, loses everything), and "flushed to its device" in
// [Broker.Publish] does not apply. Deadlines (lease lapses, retry delays,
// dedup windows) take effect when a call looks at the clock; no goroutine
// runs on its behalf.
//
// A Memory is safe for concurrent use: one mutex guards its state, and no
// call blocks on anything but that mutex and the caller's own code it runs
// (the clock, MemoryOptions.Now, under the mutex; the methods of a cause
// given to Nack or Reject, before it; the Logger's handler, for an
// unclassified cause, after it). It retains a copy of the payload
// of every message until the message is acknowledged or its dead letter
// deleted, and each dedup key until the first keyed publish after it
// left the window (keys are dropped there, not by a clock); Publish copies
// payloads in, and every value it returns carries copies of its own. The
// methods of a nil *Memory refuse with QueueMisconfigured (see Store).
type Memory struct {
	opts MemoryOptions
	keys receiptKeys // this queue's secret: another queue's receipts do not verify
	// over is closed by Close, under mu (see ender). Never replaced, so
	// ended reads it without mu.
	over chan struct{}

	// mu guards every field below it.
	mu       sync.Mutex
	policy   PolicyValue
	closed   bool
	seq      uint64 // the last message sequence minted
	nonces   *rand.Rand
	st       memState
	signal   chan struct{} // closed by the next event that may make a message receivable
	counters memCounters
}

// memCounters are the counters of [QueueStats]; guarded by Memory.mu.
type memCounters struct {
	published, duplicates, shed, delivered, acked, nacked int64
	rejected, deadLettered, replayed                      int64
}

// NewMemory returns an empty queue with policy. A policy that
// [PolicyValue.Validate] refuses is an error wrapping [QueueMisconfigured],
// and so is one whose MaxMessageBytes is above what a store with the
// default options takes ([Options.MaxMessageBytes]), as [Store.Queue]
// refuses it: a Memory that took it would then refuse a single payload
// within MaxMessageBytes as a batch too large for one log segment, where
// the seed promises MessageTooLarge only above MaxMessageBytes. A
// MaxDeliveries above what a store counts (math.MaxUint32) is refused
// too, as Store.Queue refuses it.
func NewMemory(policy PolicyValue, opts MemoryOptions) (*Memory, error) {
	if err := policy.validate("broker: memory queue: policy: "); err != nil {
		return nil, err
	}
	if limit := memoryMaxPayload; policy.maxMessageBytes() > limit {
		return nil, fmt.Errorf("broker: memory queue: MaxMessageBytes %d exceeds what one log segment of a store with the default SegmentBytes holds (%d): %w",
			policy.maxMessageBytes(), limit, QueueMisconfigured)
	}
	if err := deliveriesCounted(policy); err != nil {
		return nil, fmt.Errorf("broker: memory queue: policy: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = guardLogger(opts.Logger)
	var secret [32]byte
	var seed [32]byte
	// crypto/rand.Read never returns an error (it crashes the program
	// instead, since Go 1.24): receipts always carry random bits.
	_, _ = crand.Read(secret[:])
	_, _ = crand.Read(seed[:])
	keys, err := newReceiptKeys(secret[:])
	if err != nil {
		return nil, fmt.Errorf("broker: memory queue: %w", err)
	}
	return &Memory{
		opts:   opts,
		keys:   keys,
		policy: policy,
		nonces: rand.New(rand.NewChaCha8(seed)),
		st:     newMemState(),
		signal: make(chan struct{}),
		over:   make(chan struct{}),
	}, nil
}

// memoryQueueID is the queue number in a Memory's receipts: each Memory
// has its own secret, so the number need not tell queues apart.
const memoryQueueID = 1

// now reads the clock in Unix nanoseconds, or fails for a reading no
// broker can record and for a clock that panics (see readClock).
func (q *Memory) now() (int64, error) { return readClock("MemoryOptions.Now", q.opts.Now) }

// beginLocked checks what every call checks first, with q.mu held: the
// context and whether the queue was closed. It reads the clock.
func (q *Memory) beginLocked(ctx context.Context) (now int64, err error) {
	if err := q.usableLocked(ctx); err != nil {
		return 0, err
	}
	if now, err = q.now(); err != nil {
		return 0, fmt.Errorf("broker: memory queue: %w", err)
	}
	return now, nil
}

// usableLocked returns the error a call with ctx gets before it does
// anything: a nil or ended context, or a closed queue.
func (q *Memory) usableLocked(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("broker: memory queue: nil context: %w", QueueMisconfigured)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.closed {
		return fmt.Errorf("broker: memory queue: %w", Closed)
	}
	return nil
}

// observeLocked applies the deadlines that have come by now. A call
// observes the clock where the file-backed store's does, after the checks
// of its arguments, so that the two agree on what a clock stepping
// backwards undoes (nothing a call has observed).
func (q *Memory) observeLocked(now int64) {
	q.counters.deadLettered += int64(q.st.promote(now))
}

// wakeLocked closes the current wake signal and makes a new one. It is
// never called once q is closed (every call that wakes returns Closed
// first), whose signal stays closed.
func (q *Memory) wakeLocked() {
	close(q.signal)
	q.signal = make(chan struct{})
}

// Publish copies payload into the queue; see [Broker.Publish]. It is not
// durable: the message lives as long as q.
func (q *Memory) Publish(ctx context.Context, payload []byte) (MessageValue, error) {
	if q.unmade() {
		return MessageValue{}, nilReceiver("Memory")
	}
	ms, err := q.publish(ctx, "", [][]byte{payload})
	if err != nil {
		return MessageValue{}, err
	}
	return ms[0], nil
}

// PublishKeyed is an idempotent Publish, as [Queue.PublishKeyed]: a key
// seen within the policy's DedupWindow returns the ORIGINAL message's ID
// and EnqueuedAt with a nil error and enqueues nothing — even after that
// message was acknowledged, and even when the queue is full. Such a
// duplicate carries no Payload: its Payload is nil, while a message this
// call enqueued has a non-nil one (empty for an empty payload). key must
// be 1 to 256 bytes ([InvalidDedupKey]), which is checked before anything
// else; a payload above MaxMessageBytes is [MessageTooLarge], checked
// before the key is looked up (even when the key was seen).
func (q *Memory) PublishKeyed(ctx context.Context, key string, payload []byte) (MessageValue, error) {
	if q.unmade() {
		return MessageValue{}, nilReceiver("Memory")
	}
	if len(key) == 0 || len(key) > maxKeyBytes {
		return MessageValue{}, fmt.Errorf("broker: memory queue: dedup key of %d bytes, want 1 to %d: %w", len(key), maxKeyBytes, InvalidDedupKey)
	}
	ms, err := q.publish(ctx, key, [][]byte{payload})
	if err != nil {
		return MessageValue{}, err
	}
	return ms[0], nil
}

// PublishBatch publishes every payload or none, as [Queue.PublishBatch]: a
// batch that does not fit the policy's Capacity is refused whole
// ([QueueFull]); an empty one, and one larger than a log segment of a
// store with the default SegmentBytes holds, is [InvalidBatchSize]; one
// with a payload above the policy's MaxMessageBytes is [MessageTooLarge].
func (q *Memory) PublishBatch(ctx context.Context, payloads [][]byte) ([]MessageValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Memory")
	}
	if len(payloads) == 0 {
		return nil, fmt.Errorf("broker: memory queue: empty batch: %w", InvalidBatchSize)
	}
	return q.publish(ctx, "", payloads)
}

func (q *Memory) publish(ctx context.Context, key string, payloads [][]byte) ([]MessageValue, error) {
	if err := q.refuseOversized(ctx, payloads); err != nil {
		return nil, err
	}
	// Copy before taking the lock: the caller may reuse its slices once
	// this returns, and concurrent producers need not copy one at a time.
	copies := make([][]byte, len(payloads))
	for i, p := range payloads {
		copies[i] = append(make([]byte, 0, len(p)), p...)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now, err := q.beginLocked(ctx)
	if err != nil {
		return nil, err
	}
	// (A Memory's policy is fixed by NewMemory: refuseOversized's check of
	// the sizes still holds.)
	q.observeLocked(now)
	// Dedup comes before admission: a duplicate is admitted even when the
	// queue is full, and a shed publish never enters the seen-set.
	if key != "" {
		q.st.evictSeen(now, int64(q.policy.dedupWindow()))
		if k, ok := q.st.seen[key]; ok {
			q.counters.duplicates++
			return []MessageValue{{ID: messageID(k.seq), EnqueuedAt: time.Unix(0, k.enqueuedAt)}}, nil
		}
	}
	if c := q.policy.Capacity; c > 0 && q.st.live()+len(copies) > c {
		q.counters.shed++
		return nil, fmt.Errorf("broker: memory queue holds %d of %d messages, %d more do not fit: %w", q.st.live(), c, len(copies), QueueFull)
	}
	// An enqueue instant is a reading of the clock too: eviction never runs
	// on a clock behind it.
	q.st.lastEvicts = max(q.st.lastEvicts, now)
	out := make([]MessageValue, len(copies))
	for i, p := range copies {
		q.seq++
		m := &memMessage{seq: q.seq, payload: p, enqueuedAt: now, heapIdx: -1}
		q.st.msgs[m.seq] = m
		q.st.makeReady(m)
		if key != "" {
			q.st.remember(key, m.seq, now)
		}
		out[i] = MessageValue{ID: messageID(m.seq), EnqueuedAt: time.Unix(0, now), Payload: payloadCopy(p)}
	}
	q.counters.published += int64(len(copies))
	q.wakeLocked()
	return out, nil
}

// memoryMaxGroup bounds the bytes of a batch a Memory takes, as a store
// with the default SegmentBytes bounds it: a program tested against a
// Memory meets the store's refusal of a batch larger than one segment.
var memoryMaxGroup = Options{}.maxGroup()

// memoryMaxPayload is the largest MaxMessageBytes NewMemory takes: what a
// store with the default SegmentBytes takes (Options.MaxMessageBytes).
var memoryMaxPayload = Options{}.MaxMessageBytes()

// refuseOversized refuses, before any payload is copied, a payload above
// the queue's MaxMessageBytes, a batch larger than one segment of a store
// with the default SegmentBytes holds (counting its payloads' frames, as
// the store's first check does), and a batch larger than its Capacity,
// which no state of the queue admits: the copy of a caller's oversized
// input would cost memory in proportion to it. (A Memory's policy is fixed
// by NewMemory, so the sizes need no second look under the lock that
// admits them.)
func (q *Memory) refuseOversized(ctx context.Context, payloads [][]byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(ctx); err != nil {
		return err
	}
	if err := tooLargeFor(payloads, q.policy.maxMessageBytes()); err != nil {
		return err
	}
	least := 0
	for _, p := range payloads {
		least += segment.Size(len(p))
	}
	if least > memoryMaxGroup {
		return fmt.Errorf("broker: memory queue: batch of %d messages and at least %d bytes does not fit in one log segment of a store with the default SegmentBytes: %w", len(payloads), least, InvalidBatchSize)
	}
	if c := q.policy.Capacity; c > 0 && len(payloads) > c {
		// Refused after the clock is read and observed, as the store
		// refuses it (there the check of the queue's state does it): a
		// clock no broker can record fails the call, and sheds nothing.
		now, err := q.beginLocked(ctx)
		if err != nil {
			return err
		}
		q.observeLocked(now)
		q.counters.shed++
		return fmt.Errorf("broker: memory queue holds at most %d messages, a batch of %d does not fit: %w", c, len(payloads), QueueFull)
	}
	return nil
}

// tooLargeFor returns MessageTooLarge for the first payload above limit,
// if there is one.
func tooLargeFor(payloads [][]byte, limit int) error {
	for i, p := range payloads {
		if len(p) > limit {
			return fmt.Errorf("broker: memory queue: %s is %d bytes, MaxMessageBytes is %d: %w", payloadName(i, len(payloads)), len(p), limit, MessageTooLarge)
		}
	}
	return nil
}

// Receive leases up to max messages, oldest EnqueuedAt first among those
// receivable now; see [Broker.Receive]. A message whose lease lapsed on its
// last allowed delivery is a dead letter from the instant it lapsed, with the
// reason, code and cause of the last nack of its life, or LEASE_EXPIRED when
// no consumer reported anything in it. A lease deadline past year 2262 is
// [QueueMisconfigured], and such a Receive leases and observes nothing.
func (q *Memory) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	now, err := q.lockBatch(ctx, "Receive", max)
	if err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	// The deadline is checked before the clock is observed, as the
	// file-backed store checks it: a Receive refused for it observes
	// nothing (see observeLocked).
	expires, ok := deadline(now, q.policy.VisibilityTimeout)
	if !ok {
		return nil, fmt.Errorf("broker: memory queue: lease deadline now+%v passes year 2262: %w", q.policy.VisibilityTimeout, QueueMisconfigured)
	}
	q.observeLocked(now)
	var out []DeliveryValue
	for len(out) < max && q.st.ready.Len() > 0 {
		m := q.st.ready.peek()
		q.st.detach(m)
		m.deliveries++
		nonce := q.nonces.Uint64()
		q.st.lease(m, expires, nonce, m.deliveries >= q.policy.MaxDeliveries)
		out = append(out, DeliveryValue{
			Lease:      LeaseValue{ExpiresAt: time.Unix(0, expires), Receipt: q.keys.make(memoryQueueID, m.seq, nonce)},
			Message:    m.handedOut(),
			Deliveries: m.deliveries,
		})
	}
	q.counters.delivered += int64(len(out))
	return out, nil
}

// lockBatch begins a call named method that returns up to max values: it
// refuses a nil q and a max that is not positive, then takes q.mu and
// begins the call (see beginLocked), in that order. On success the caller
// holds q.mu and unlocks it; on error q.mu is not held.
func (q *Memory) lockBatch(ctx context.Context, method string, max int) (now int64, err error) {
	if q.unmade() {
		return 0, nilReceiver("Memory")
	}
	if max <= 0 {
		return 0, fmt.Errorf("broker: memory queue: %s max %d must be positive: %w", method, max, InvalidBatchSize)
	}
	q.mu.Lock()
	if now, err = q.beginLocked(ctx); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	return now, nil
}

// heldLocked begins a call that settles or extends a lease (see
// beginLocked) and returns the message receipt names if its lease is live
// now (see leaseLocked), with now. The caller holds q.mu.
func (q *Memory) heldLocked(ctx context.Context, receipt ReceiptValue) (*memMessage, int64, error) {
	now, err := q.beginLocked(ctx)
	if err != nil {
		return nil, 0, err
	}
	m, err := q.leaseLocked(receipt, now)
	return m, now, err
}

// leaseLocked returns the message a receipt names if its lease is live at
// now: [UnknownReceipt] for a receipt q did not issue, [LeaseExpired] for
// one whose lease lapsed (at ExpiresAt exactly), was replaced by Extend, or
// was ended by Ack, Nack or Reject. Looking at a lease observes the
// clock. The caller holds q.mu.
func (q *Memory) leaseLocked(r ReceiptValue, now int64) (*memMessage, error) {
	queue, seq, nonce, err := q.keys.parse(r)
	if err != nil {
		return nil, fmt.Errorf("broker: memory queue: %w", err)
	}
	if queue != memoryQueueID {
		return nil, fmt.Errorf("broker: memory queue: the receipt names another queue: %w", UnknownReceipt)
	}
	q.observeLocked(now)
	m := q.st.msgs[seq]
	if m == nil || m.state != memLeased || m.nonce != nonce || now >= m.at {
		return nil, fmt.Errorf("broker: memory queue: message %s: the lease is no longer held: %w", messageID(seq), LeaseExpired)
	}
	return m, nil
}

// Ack removes the leased message for good; see [Broker.Ack].
func (q *Memory) Ack(ctx context.Context, receipt ReceiptValue) error {
	if q.unmade() {
		return nilReceiver("Memory")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	m, _, err := q.heldLocked(ctx, receipt)
	if err != nil {
		return err
	}
	q.st.detach(m)
	q.st.forget(m.seq)
	q.counters.acked++
	return nil
}

// Nack hands the leased message back after the policy's retry delay, or
// dead-letters it when it has had MaxDeliveries deliveries; see
// [Broker.Nack]. The cause is recorded by the classified-cause rule (see
// [Error]); the Error text of an unclassified cause goes to
// MemoryOptions.Logger with the message ID and is not kept.
func (q *Memory) Nack(ctx context.Context, receipt ReceiptValue, cause error) (NackValue, error) {
	if q.unmade() {
		return NackValue{}, nilReceiver("Memory")
	}
	v := judge(ctx, cause)
	var seq uint64 // the message nacked; 0 for none
	// Deferred first, so run last: the logger is the caller's code, and
	// runs once the lock is released (see logUnclassified).
	defer func() { q.logUnclassified(seq, v) }()
	q.mu.Lock()
	defer q.mu.Unlock()
	m, now, err := q.heldLocked(ctx, receipt)
	if err != nil {
		return NackValue{}, err
	}
	out := NackValue{Deliveries: m.deliveries}
	if m.deliveries >= q.policy.MaxDeliveries {
		q.buryLocked(m, now, v)
		out.DeadLettered = true
	} else {
		delay := q.policy.retryDelay(m.deliveries)
		at, ok := deadline(now, delay)
		if !ok {
			return NackValue{}, fmt.Errorf("broker: memory queue: retry instant passes year 2262: %w", QueueMisconfigured)
		}
		q.st.detach(m)
		m.reason, m.code, m.cause = v.reason, v.code, v.public // its last failure (see promote)
		if delay == 0 {
			q.st.makeReady(m) // whatever the clock reads next, as the Store
		} else {
			q.st.delay(m, at)
		}
		out.VisibleAt = time.Unix(0, at)
		q.wakeLocked()
	}
	q.counters.nacked++
	seq = m.seq
	return out, nil
}

// Reject dead-letters the leased message now, with cause recorded as Nack
// records it; see [Rejecter].
func (q *Memory) Reject(ctx context.Context, receipt ReceiptValue, cause error) error {
	if q.unmade() {
		return nilReceiver("Memory")
	}
	v := judge(ctx, cause)
	var seq uint64                               // the message rejected; 0 for none
	defer func() { q.logUnclassified(seq, v) }() // after the unlock, as in Nack
	q.mu.Lock()
	defer q.mu.Unlock()
	m, now, err := q.heldLocked(ctx, receipt)
	if err != nil {
		return err
	}
	q.buryLocked(m, now, v)
	q.counters.rejected++
	seq = m.seq
	return nil
}

// buryLocked dead-letters the leased m at now with the cause's verdict.
func (q *Memory) buryLocked(m *memMessage, now int64, v verdict) {
	q.st.detach(m)
	q.st.bury(m, now, v.reason, v.code, v.public)
	q.counters.deadLettered++
}

// logUnclassified sends the text of a cause that carries no reason to the
// logger, keyed by message ID (seq; 0 for none, which logs nothing): it
// may hold payload bytes, so it is not kept with the dead letter. Called
// without the queue's lock: the logger's handler is the caller's code,
// and may read the queue's Stats.
func (q *Memory) logUnclassified(seq uint64, v verdict) {
	if v.text != "" && seq != 0 {
		q.opts.Logger.Warn("broker: unclassified handler failure", "queue", "memory", "message", messageID(seq), "err", v.text)
	}
}

// Extend renews a live lease for by from now and returns the new lease,
// whose receipt replaces the old one; see [LeaseExtender].
func (q *Memory) Extend(ctx context.Context, receipt ReceiptValue, by time.Duration) (LeaseValue, error) {
	if q.unmade() {
		return LeaseValue{}, nilReceiver("Memory")
	}
	if by <= 0 {
		return LeaseValue{}, fmt.Errorf("broker: memory queue: Extend by %v must be positive: %w", by, QueueMisconfigured)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	m, now, err := q.heldLocked(ctx, receipt)
	if err != nil {
		return LeaseValue{}, err
	}
	at, ok := deadline(now, by)
	if !ok {
		return LeaseValue{}, fmt.Errorf("broker: memory queue: Extend by %v passes year 2262; the lease is unchanged: %w", by, QueueMisconfigured)
	}
	nonce := q.nonces.Uint64()
	sooner := at < m.at
	q.st.detach(m)
	q.st.lease(m, at, nonce, m.deliveries >= q.policy.MaxDeliveries)
	if sooner {
		q.wakeLocked() // the lease lapses sooner than a waiting consumer was told
	}
	return LeaseValue{ExpiresAt: time.Unix(0, at), Receipt: q.keys.make(memoryQueueID, m.seq, nonce)}, nil
}
