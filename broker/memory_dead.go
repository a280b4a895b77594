package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/walbroker/walbroker/internal/blocklist"
)

// DeadLetters returns up to max dead letters, oldest FailedAt first,
// without removing them; see [DeadLetterReader]. Each carries a copy of
// its payload. As with [Queue.DeadLetters], there is no cursor: a call
// returns the oldest ones again.
func (q *Memory) DeadLetters(ctx context.Context, max int) ([]DeadLetterValue, error) {
	now, err := q.lockBatch(ctx, "DeadLetters", max)
	if err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	q.observeLocked(now)
	dead := q.st.dead.First(max)
	out := make([]DeadLetterValue, len(dead))
	for i, m := range dead {
		out[i] = DeadLetterValue{
			FailedAt:   time.Unix(0, m.failedAt),
			Reason:     m.reason,
			Cause:      m.cause,
			Code:       m.code,
			Deliveries: m.deliveries,
			Message:    m.handedOut(),
		}
	}
	return out, nil
}

// ReplayDeadLetter moves dead letter id (its Message.ID, as DeadLetters
// returns it) back into the queue, receivable at once, with its delivery count
// reset; it keeps its ID, payload and EnqueuedAt (so Receive hands it out
// before every message enqueued after it, by EnqueuedAt), and closes the Wake
// signal. Replays of one dead letter racing each other queue it once: one
// returns nil, the others [DeadLetterNotFound]. A queue at its Capacity
// refuses it ([QueueFull], not counted as shed) and the dead letter stays as
// it was. See [DeadLetterManager].
func (q *Memory) ReplayDeadLetter(ctx context.Context, id string) error {
	m, err := q.lockDeadLetter(ctx, id)
	if err != nil {
		return err
	}
	defer q.mu.Unlock()
	if c := q.policy.Capacity; c > 0 && q.st.live() >= c {
		return fmt.Errorf("broker: memory queue holds %d of %d messages, dead letter %s does not fit: %w", q.st.live(), c, id, QueueFull)
	}
	q.st.detach(m)
	m.deliveries, m.reason, m.code, m.cause, m.failedAt = 0, "", 0, "", 0
	q.st.makeReady(m)
	q.counters.replayed++
	q.wakeLocked()
	return nil
}

// DeleteDeadLetter removes dead letter id (its Message.ID) for good,
// payload and all; see [DeadLetterManager].
func (q *Memory) DeleteDeadLetter(ctx context.Context, id string) error {
	m, err := q.lockDeadLetter(ctx, id)
	if err != nil {
		return err
	}
	defer q.mu.Unlock()
	q.st.detach(m)
	q.st.forget(m.seq)
	return nil
}

// lockDeadLetter refuses a nil q, then takes q.mu, begins the call (see
// beginLocked) and returns the dead letter id, or [DeadLetterNotFound]. On
// success the caller holds q.mu and unlocks it; on error q.mu is not held.
func (q *Memory) lockDeadLetter(ctx context.Context, id string) (*memMessage, error) {
	if q.unmade() {
		return nil, nilReceiver("Memory")
	}
	q.mu.Lock()
	m, err := q.deadLetterLocked(ctx, id)
	if err != nil {
		q.mu.Unlock()
		return nil, err
	}
	return m, nil
}

// deadLetterLocked begins a call (see beginLocked) and returns the dead
// letter id, or [DeadLetterNotFound]. The caller holds q.mu.
func (q *Memory) deadLetterLocked(ctx context.Context, id string) (*memMessage, error) {
	now, err := q.beginLocked(ctx)
	if err != nil {
		return nil, err
	}
	q.observeLocked(now)
	seq, ok := parseMessageID(id)
	var m *memMessage
	if ok {
		m = q.st.msgs[seq]
	}
	if m == nil || m.state != memDead {
		return nil, fmt.Errorf("broker: memory queue: dead letter %.64q: %w", id, DeadLetterNotFound)
	}
	return m, nil
}

// Wake returns what an idle consumer should wait on; see [Waker]. Signal
// is closed by the next Publish, Nack that hands a message back, replay,
// Extend that brings a lease's lapse closer, or Close of q; after Close
// it is closed already, so a consumer that asks then looks again at once
// and is told Closed. In is measured on q's clock.
func (q *Memory) Wake() WakeValue {
	if q.unmade() {
		return WakeValue{Signal: lookNow}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	w := WakeValue{Signal: q.signal}
	if q.closed {
		return w
	}
	now, err := q.now()
	if err != nil {
		// Look now: Receive reports the clock no broker can record.
		w.Scheduled = true
		return w
	}
	q.observeLocked(now)
	if q.st.ready.Len() > 0 {
		w.Scheduled = true
		return w
	}
	if m := q.st.timers.peek(); m != nil {
		w.Scheduled, w.In = true, until(now, m.at)
	}
	return w
}

// Stats returns the queue's gauges as of its clock now, and its counters
// since it was made; the gauges are those of the file-backed [Queue.Stats].
// After Close the gauges are zero (the messages are dropped) and the
// counters stay as they were.
func (q *Memory) Stats() QueueStats {
	if q.unmade() {
		return QueueStats{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if now, err := q.now(); err == nil && !q.closed {
		// (A reading no broker can record observes nothing: the calls
		// that change state report it.)
		q.observeLocked(now)
	}
	delayed := q.st.delayed
	leased := q.st.finals.Len() + q.st.timers.Len() - delayed
	var oldest time.Time
	if m := q.st.ready.peek(); m != nil {
		oldest = time.Unix(0, m.enqueuedAt)
	}
	c := q.counters
	return QueueStats{
		Ready: q.st.ready.Len(), Leased: leased, Delayed: delayed, DeadLetters: q.st.dead.Len(), OldestReady: oldest,
		Published: c.published, Duplicates: c.duplicates, Shed: c.shed, Delivered: c.delivered,
		Acked: c.acked, Nacked: c.nacked, Rejected: c.rejected, DeadLettered: c.deadLettered, Replayed: c.replayed,
	}
}

// Close ends the queue: every later call returns an error wrapping
// [Closed], and a consumer waiting on Wake, or asking it later, is woken
// to find that out: the signal stays closed for good. The
// messages it held are dropped. Close is idempotent and returns nil, but
// on a nil *Memory, which it says is nil (as every method does).
func (q *Memory) Close() error {
	if q.unmade() {
		return nilReceiver("Memory")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	q.st.msgs, q.st.ready.items, q.st.timers.items, q.st.finals.items = nil, nil, nil, nil
	q.st.delayed, q.st.dead = 0, blocklist.List[*memMessage]{}
	q.st.seen, q.st.seenOrder = nil, nil
	close(q.signal) // not replaced: no event will ever close another
	close(q.over)
	return nil
}

// ended and endErr make the queue an ender (see Consume).
// ended and endErr answer for an unmade q too (see Queue.ended).
func (q *Memory) ended() <-chan struct{} {
	if q.unmade() {
		return lookNow
	}
	return q.over
}

func (q *Memory) endErr() error {
	if q.unmade() {
		return nilReceiver("Memory")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("broker: memory queue: %w", Closed)
	}
	return nil
}
