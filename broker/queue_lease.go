package broker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/wal"
)

// Receive leases up to max messages, oldest EnqueuedAt first among those
// receivable now; see Broker.Receive. Lease lapses and retry delays take
// effect by the broker clock when Receive runs: no background goroutine is
// needed. A message whose lease lapsed on its last allowed delivery is moved
// to the dead-letter store instead, with the reason, code and cause of the
// last nack of its life, or LEASE_EXPIRED when no consumer reported anything
// in it. A Receive that meets damage in the index (a table entry that fails
// its checksum) hands out nothing, not even the messages it took before the
// damage: it fails with Corrupt, and the store stops (see Store.Err).
func (q *Queue) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Queue")
	}
	if max <= 0 {
		return nil, fmt.Errorf("broker: queue %s: Receive max %d must be positive: %w", q.name, max, InvalidBatchSize)
	}
	ds, _, err := q.receiveAcking(ctx, max, nil)
	return ds, err
}

// leaseRecordGuess sizes receiveAcking's record buffer: a lease event is
// about 30 bytes and an ack event under 16, so most calls allocate once.
const leaseRecordGuess = 32

// receiveAcking acknowledges receipts and leases up to max messages (max
// may be 0) with one lock, one append and one wait, so that Consume's acks
// share the commit of its next leases. errs holds, for each receipt, what
// Ack would have refused it with, or the error that stopped the commit.
func (q *Queue) receiveAcking(ctx context.Context, max int, receipts []ReceiptValue) ([]DeliveryValue, []error, error) {
	errs := make([]error, len(receipts))
	fail := func(err error) ([]DeliveryValue, []error, error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return nil, errs, err
	}
	if err := q.begin(ctx); err != nil {
		return fail(err)
	}
	type lease struct {
		seq, nonce uint64
		pos        wal.Position
		enqueuedAt int64
		deliveries uint32
	}
	q.mu.Lock()
	now, err := q.s.nowOpen()
	if err != nil {
		q.mu.Unlock()
		return fail(err)
	}
	// A lease this late cannot be recorded: the call leases nothing. The
	// acks it carries are made all the same (their leases are live, and
	// Ack would make them); alone, it refuses before anything moves.
	var leaseErr error
	expires, ok := deadline(now, q.policy.VisibilityTimeout)
	if !ok && max > 0 {
		leaseErr = fmt.Errorf("broker: queue %s: lease deadline now+%v passes year 2262: %w", q.name, q.policy.VisibilityTimeout, QueueMisconfigured)
		if len(receipts) == 0 {
			q.mu.Unlock()
			return fail(leaseErr)
		}
		max = 0
	}
	// The records share one buffer: a slice taken from it stays valid
	// when a later append moves the buffer. Sized for what can be leased
	// (max alone may be any int: a caller's "everything").
	most := min(max, q.iq.Live())
	recs := make([][]byte, 0, len(receipts)+most)
	buf := make([]byte, 0, (len(receipts)+most)*leaseRecordGuess)
	record := func(e *index.Event) {
		start := len(buf)
		buf = e.Append(buf)
		recs = append(recs, buf[start:len(buf):len(buf)])
	}
	acked := 0
	for i, r := range receipts {
		m, err := q.leaseLocked(r, now)
		if err != nil {
			errs[i] = err
			continue
		}
		e := index.Event{Kind: index.KindAck, Queue: q.id, Seq: m.Seq}
		q.iq.Apply(0, &e)
		record(&e)
		acked++
	}
	recs = q.sweepLocked(now, recs)
	leases := make([]lease, 0, most)
	for len(leases) < max {
		m := q.iq.NextReady()
		if m == nil {
			break
		}
		l := lease{seq: m.Seq, nonce: q.s.nonce(), pos: m.Pos, enqueuedAt: m.EnqueuedAt, deliveries: m.Deliveries + 1}
		e := index.Event{Kind: index.KindLease, Queue: q.id, Seq: l.seq, Deliveries: l.deliveries, Time: expires, Nonce: l.nonce}
		q.iq.Apply(0, &e)
		record(&e)
		leases = append(leases, l)
	}
	if err := q.s.idx.Damaged(); err != nil {
		// Damage met on the way (a table entry that fails its checksum
		// ends the stream's walk there): the call hands out nothing, not
		// even what it leased before, and makes no ack, since a lease
		// or an ack logged now would be of a state the store no longer
		// vouches for. The store stops, and the next Open rebuilds the
		// index from the log.
		q.mu.Unlock()
		return fail(q.s.damaged(err))
	}
	q.settledLocked(&q.stats.acked, int64(acked))
	if len(leases) > 0 {
		// The positions just taken stay readable until the payloads are.
		q.s.maint.removeMu.RLock()
		defer q.s.maint.removeMu.RUnlock()
	}
	if err := q.unlockAndWait(recs); err != nil {
		return fail(err)
	}
	if len(leases) == 0 {
		return nil, errs, leaseErr
	}

	out := make([]DeliveryValue, len(leases))
	for i, l := range leases {
		payload, err := q.payload(l.pos, l.seq)
		if err != nil {
			return nil, errs, err
		}
		out[i] = DeliveryValue{
			Lease:      LeaseValue{ExpiresAt: time.Unix(0, expires), Receipt: q.s.keys.make(q.id, l.seq, l.nonce)},
			Message:    MessageValue{ID: messageID(l.seq), EnqueuedAt: time.Unix(0, l.enqueuedAt), Payload: payload},
			Deliveries: int(l.deliveries),
		}
	}
	q.stats.delivered.Add(int64(len(out)))
	return out, errs, nil
}

// settledLocked counts n settlements (acks, nacks, rejects, dead letters,
// replays) as the index applies them, under q.mu, which the caller holds:
// the gauges show a settlement from then on, and the counters agree with
// them. So Close's frozen Stats, read under the lock after its checkpoint,
// count every settlement the checkpoint holds, however late its call gets
// back from its wait (counted after it, they missed a call held on its way
// back while Close ran). A settlement whose record the log then fails to
// take stays counted, as the gauges keep it: the store stops, and the
// next Open counts from its log.
func (q *Queue) settledLocked(counter *atomic.Int64, n int64) {
	counter.Add(n)
}

// sweepLocked moves every message whose last lease lapsed to the dead-letter
// store and appends those events to recs. The caller holds q.mu and queues
// recs.
func (q *Queue) sweepLocked(now int64, recs [][]byte) [][]byte {
	q.iq.Promote(now)
	exhausted := q.iq.Exhausted() // a copy: each dead letter takes its message off the list
	moved := 0
	for _, m := range exhausted {
		e := lapseDeadLetter(q.id, m, m.At)
		if q.diedBeforeOpenLocked(m) {
			delete(q.diedBeforeOpen, m.Seq)
		} else {
			moved++
		}
		q.iq.Apply(0, &e)
		recs = append(recs, e.Append(nil))
	}
	q.stats.deadLettered.Add(int64(moved))
	return recs
}

// lapseDeadLetter is the dead-letter event, failed at failedAt, of a
// message that ran out of deliveries without a nack or reject on its last
// one: the last failure a consumer reported in its current life (its
// reason, code and public cause, kept by the index from the nack events),
// or LEASE_EXPIRED with no code and no cause when no consumer ever
// reported one (DeadLetterValue.Reason).
func lapseDeadLetter(queue uint32, m *index.Message, failedAt int64) index.Event {
	e := index.Event{Kind: index.KindDeadLetter, Queue: queue, Seq: m.Seq, Deliveries: m.Deliveries,
		Time: failedAt, Code: m.Code, Reason: m.Reason, Cause: m.Cause}
	if e.Reason == "" {
		e.Code, e.Reason, e.Cause = 0, ReasonLeaseExpired, ""
	}
	return e
}

// diedBeforeOpenLocked reports whether m's last lease had lapsed when the
// store was opened (see Queue.diedBeforeOpen).
func (q *Queue) diedBeforeOpenLocked(m *index.Message) bool {
	nonce, ok := q.diedBeforeOpen[m.Seq]
	return ok && nonce == m.Nonce
}

// lockHeld locks q.mu for a call that settles or extends a lease and
// returns the message receipt names if its lease is live now (see
// leaseLocked), with now. On success the caller holds q.mu and must
// release it; on an error q.mu is released.
func (q *Queue) lockHeld(receipt ReceiptValue) (*index.Message, int64, error) {
	q.mu.Lock()
	now, err := q.s.nowOpen()
	if err == nil {
		var m *index.Message
		if m, err = q.leaseLocked(receipt, now); err == nil {
			return m, now, nil
		}
	}
	q.mu.Unlock()
	return nil, 0, err
}

// leaseLocked returns the message a receipt names if its lease is live now:
// UnknownReceipt for a receipt this store (or one sharing its secret: see
// receipt.go) did not issue for this queue's number,
// LeaseExpired for one whose lease lapsed (at ExpiresAt exactly), was
// replaced by Extend, or ended by Ack, Nack or Reject.
func (q *Queue) leaseLocked(r ReceiptValue, now int64) (*index.Message, error) {
	queue, seq, nonce, err := q.s.keys.parse(r)
	if err != nil {
		return nil, fmt.Errorf("broker: queue %s: %w", q.name, err)
	}
	if queue != q.id {
		return nil, fmt.Errorf("broker: queue %s: the receipt belongs to another queue: %w", q.name, UnknownReceipt)
	}
	// Looking at a lease is observing whether it lapsed: a lapse seen
	// here stays seen if the clock then goes backwards.
	q.iq.Promote(now)
	m := q.iq.Get(seq)
	if m == nil || m.Nonce != nonce || !index.LeaseLive(m, now) {
		return nil, fmt.Errorf("broker: queue %s: message %s: the lease is no longer held: %w", q.name, messageID(seq), LeaseExpired)
	}
	return m, nil
}

// Ack removes the leased message for good; see Broker.Ack.
func (q *Queue) Ack(ctx context.Context, receipt ReceiptValue) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	if err := q.begin(ctx); err != nil {
		return err
	}
	m, _, err := q.lockHeld(receipt)
	if err != nil {
		return err
	}
	e := index.Event{Kind: index.KindAck, Queue: q.id, Seq: m.Seq}
	q.iq.Apply(0, &e)
	q.settledLocked(&q.stats.acked, 1)
	return q.unlockAndWait([][]byte{e.Append(nil)})
}

// Nack hands the leased message back after the policy's retry delay, or
// dead-letters it when it has had MaxDeliveries deliveries; see Broker.Nack.
// The cause is recorded by the classified-cause rule (see Error): only its
// Reason, Code and Public text reach the dead letter; the Error() text of an
// unclassified cause goes to Options.Logger with the message ID, never to
// disk.
func (q *Queue) Nack(ctx context.Context, receipt ReceiptValue, cause error) (NackValue, error) {
	if q.unmade() {
		return NackValue{}, nilReceiver("Queue")
	}
	if err := q.begin(ctx); err != nil {
		return NackValue{}, err
	}
	v := judge(ctx, cause)
	m, now, err := q.lockHeld(receipt)
	if err != nil {
		return NackValue{}, err
	}
	out := NackValue{Deliveries: int(m.Deliveries)}
	var e index.Event
	if int(m.Deliveries) >= q.policy.MaxDeliveries {
		e = q.deadLetterEvent(m, now, v)
		out.DeadLettered = true
	} else {
		delay := q.policy.retryDelay(int(m.Deliveries))
		at, ok := deadline(now, delay)
		if !ok {
			q.mu.Unlock()
			return NackValue{}, fmt.Errorf("broker: queue %s: retry instant passes year 2262: %w", q.name, QueueMisconfigured)
		}
		visible := at
		if delay == 0 {
			// Eligible as soon as the nack returns, whatever the clock
			// reads next: one stepped back must not hide it.
			visible = index.AtOnce
		}
		// The nack records its classified cause (never an unclassified
		// error's text): should the message then run out of deliveries
		// by a lapse, its dead letter names this failure, not
		// LEASE_EXPIRED.
		e = index.Event{Kind: index.KindNack, Queue: q.id, Seq: m.Seq, Deliveries: m.Deliveries, Time: visible,
			Code: v.code, Reason: v.reason, Cause: v.public}
		out.VisibleAt = time.Unix(0, at)
	}
	q.iq.Apply(0, &e)
	if !out.DeadLettered {
		q.wakeLocked()
	}
	q.settledLocked(&q.stats.nacked, 1)
	if out.DeadLettered {
		q.settledLocked(&q.stats.deadLettered, 1)
	}
	err = q.unlockAndWait([][]byte{e.Append(nil)})
	q.logUnclassified(e.Seq, v)
	if err != nil {
		return NackValue{}, err
	}
	return out, nil
}

// Reject dead-letters the leased message now, with cause recorded as Nack
// records it; see Rejecter.
func (q *Queue) Reject(ctx context.Context, receipt ReceiptValue, cause error) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	if err := q.begin(ctx); err != nil {
		return err
	}
	v := judge(ctx, cause)
	m, now, err := q.lockHeld(receipt)
	if err != nil {
		return err
	}
	e := q.deadLetterEvent(m, now, v)
	q.iq.Apply(0, &e)
	q.settledLocked(&q.stats.rejected, 1)
	q.settledLocked(&q.stats.deadLettered, 1)
	err = q.unlockAndWait([][]byte{e.Append(nil)})
	q.logUnclassified(e.Seq, v)
	return err
}

// deadLetterEvent builds the event that moves m to the dead-letter store
// with the cause's verdict.
func (q *Queue) deadLetterEvent(m *index.Message, now int64, v verdict) index.Event {
	return index.Event{Kind: index.KindDeadLetter, Queue: q.id, Seq: m.Seq, Deliveries: m.Deliveries,
		Time: now, Code: v.code, Reason: v.reason, Cause: v.public}
}

// logUnclassified sends the text of a cause that carries no reason to the
// store's logger, keyed by message ID: it may hold payload bytes, so it is
// never written to disk. Called without the queue's lock.
func (q *Queue) logUnclassified(seq uint64, v verdict) {
	if v.text != "" {
		q.s.opts.Logger.Warn("broker: unclassified handler failure", "queue", q.name, "message", messageID(seq), "err", v.text)
	}
}

// Extend renews a live lease for by from now and returns the new lease,
// whose receipt replaces the old one; see LeaseExtender.
func (q *Queue) Extend(ctx context.Context, receipt ReceiptValue, by time.Duration) (LeaseValue, error) {
	if q.unmade() {
		return LeaseValue{}, nilReceiver("Queue")
	}
	if by <= 0 {
		return LeaseValue{}, fmt.Errorf("broker: queue %s: Extend by %v must be positive: %w", q.name, by, QueueMisconfigured)
	}
	if err := q.begin(ctx); err != nil {
		return LeaseValue{}, err
	}
	m, now, err := q.lockHeld(receipt)
	if err != nil {
		return LeaseValue{}, err
	}
	at, ok := deadline(now, by)
	if !ok {
		q.mu.Unlock()
		return LeaseValue{}, fmt.Errorf("broker: queue %s: Extend by %v passes year 2262; the lease is unchanged: %w", q.name, by, QueueMisconfigured)
	}
	e := index.Event{Kind: index.KindExtend, Queue: q.id, Seq: m.Seq, Deliveries: m.Deliveries, Time: at, Nonce: q.s.nonce()}
	sooner := at < m.At
	q.iq.Apply(0, &e)
	if sooner {
		q.wakeLocked() // the lease lapses sooner than a waiting consumer was told
	}
	if err := q.unlockAndWait([][]byte{e.Append(nil)}); err != nil {
		return LeaseValue{}, err
	}
	return LeaseValue{ExpiresAt: time.Unix(0, at), Receipt: q.s.keys.make(q.id, e.Seq, e.Nonce)}, nil
}
