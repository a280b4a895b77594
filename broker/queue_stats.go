package broker

import "time"

// QueueStats are a queue's gauges (now) and counters (since the store was
// opened: each Open starts them from zero, as a restarted process's
// counters do, so alert on their rates, not on their totals).
type QueueStats struct {
	Ready       int // receivable now
	Leased      int // held by a consumer whose lease has not lapsed
	Delayed     int // nacked, waiting for their retry delay
	DeadLetters int // in the dead-letter store now: they stay until deleted or replayed
	// OldestReady is when the oldest message receivable now was enqueued
	// (its EnqueuedAt: the message Receive hands out next), or the zero
	// Time when none is. Its age on the broker clock is how far consumers
	// lag (SQS's ApproximateAgeOfOldestMessage, for the ready ones).
	// Messages waiting out a retry delay are not in it: consumers that
	// fail every message show as Delayed and Nacked, not as lag.
	OldestReady time.Time

	Published    int64 // messages enqueued (not duplicates, not shed)
	Duplicates   int64 // keyed publishes answered with the original
	Shed         int64 // publish calls refused with QueueFull (a refused PublishBatch counts once)
	Delivered    int64 // deliveries handed out by Receive
	Acked        int64
	Nacked       int64 // Nack calls, including those that dead-lettered
	Rejected     int64
	DeadLettered int64 // messages moved to the dead-letter store, any way
	Replayed     int64
}

// Stats returns the queue's figures, as of the broker clock now. Once
// the store is closed, they are those Close left, and do not move. Once
// it has stopped on a failed write or fdatasync (Store.Err), they may
// count the changes of the calls that failed with it: each of those
// returned an error, and its change may or may not be in the log, which
// is what the reopened store's figures count.
func (q *Queue) Stats() QueueStats {
	if q.unmade() {
		return QueueStats{}
	}
	if st := q.closedStats.Load(); st != nil {
		return *st
	}
	st := q.statsNow()
	// A call that raced Close may have read the index after it closed
	// (OldestReady is read from it): Close set the figures first.
	if closed := q.closedStats.Load(); closed != nil {
		return *closed
	}
	return st
}

// statsNow is Stats, read from the queue's index now.
func (q *Queue) statsNow() QueueStats {
	q.mu.Lock()
	if now, err := q.s.now(); err == nil {
		// (A reading no store can record observes nothing: the calls
		// that change state report it.)
		q.iq.Promote(now)
	}
	ready, leased, delayed, dead := q.iq.Counts()
	var oldest time.Time
	if m := q.iq.NextReady(); m != nil {
		oldest = time.Unix(0, m.EnqueuedAt)
	}
	// A lease lapsed on its last delivery is a dead letter from the moment
	// it lapsed, for the counter as for the gauge, though the next call that
	// sweeps writes its event.
	exhausted := q.exhaustedSinceOpenLocked()
	// The counters are read under the lock too: every one but Delivered
	// moves under it (see settledLocked and answer), so that they agree
	// with the gauges.
	st := QueueStats{
		Ready: ready, Leased: leased, Delayed: delayed, DeadLetters: dead, OldestReady: oldest,
		Published:    q.stats.published.Load(),
		Duplicates:   q.stats.duplicates.Load(),
		Shed:         q.stats.shed.Load(),
		Delivered:    q.stats.delivered.Load(),
		Acked:        q.stats.acked.Load(),
		Nacked:       q.stats.nacked.Load(),
		Rejected:     q.stats.rejected.Load(),
		DeadLettered: q.stats.deadLettered.Load() + exhausted,
		Replayed:     q.stats.replayed.Load(),
	}
	q.mu.Unlock()
	return st
}

// Wake returns what an idle consumer should wait on; see Waker. Signal is
// closed by the next Publish, Nack that hands a message back, replay,
// policy change, or Extend that brings a lease's lapse closer, on this
// queue in this process, and for good when the store closes or stops:
// then it is closed already, nothing is Scheduled, and Wake leaves the
// queue's state alone, so a consumer that asks looks again at once and is
// told why (Closed, or the store's error). In is measured on the broker
// clock.
func (q *Queue) Wake() WakeValue {
	if q.unmade() {
		return WakeValue{Signal: lookNow}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.shut && q.s.ending() {
		// The store closes or stopped, and has not shut its queues yet
		// (Close's checkpoint, or the handler a stop logs to, runs
		// first): nothing would close the signal.
		q.shutLocked()
	}
	w := WakeValue{Signal: q.signal}
	if q.shut {
		return w
	}
	q.signalOut = true
	now, err := q.s.now()
	if err != nil {
		// Look now: Receive reports the clock no store can record.
		w.Scheduled = true
		return w
	}
	q.iq.Promote(now)
	if q.iq.NextReady() != nil || q.s.idx.Damaged() != nil {
		// Ready now, or the walk to the next ready message met damage
		// (a table entry that fails its checksum): look now, and the
		// Receive reports the damage and stops the store, as it would
		// have on a clock no store can record.
		w.Scheduled = true
		return w
	}
	if at, ok := q.iq.NextDue(); ok {
		w.Scheduled, w.In = true, until(now, at)
	}
	return w
}

// exhaustedSinceOpenLocked counts the leases that lapsed on their last
// delivery, not yet swept, less those that had lapsed when the store was
// opened (diedBeforeOpen): the deaths DeadLettered counts before their
// sweep. Stats runs under q.mu, which every publish waits for, and a
// consumer that died holding 100,000 last deliveries left them all
// exhausted until the next call that sweeps (a Receive), so the count
// walks neither list: Open saw each of diedBeforeOpen lapse, so each is
// exhausted from then on (a lapse once seen stays seen), and only the
// sweep takes an exhausted lease out, forgetting it in diedBeforeOpen as
// it does (an ack, nack or extend of a lapsed lease is refused). The
// caller holds q.mu.
func (q *Queue) exhaustedSinceOpenLocked() int64 {
	return int64(q.iq.ExhaustedLen() - len(q.diedBeforeOpen))
}
