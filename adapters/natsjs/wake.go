package natsjs

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

const (
	// wakeSlack is added to an instant Wake names: the server's deadline
	// of a lease or retry falls a request's flight after the adapter's,
	// and a consumer woken before it would find nothing and wait again.
	wakeSlack = 50 * time.Millisecond
	// lapseGrace is how long after a lease lapsed or a retry became due
	// Wake still counts on the message reappearing (and names a moment
	// wakeSlack away): the server redelivers it at its own deadline, a
	// little later than the adapter's.
	lapseGrace = time.Second
	// wakeRetry is how long after a failed wake subscription Wake tries
	// again.
	wakeRetry = time.Second
)

// Wake returns what an idle consumer should wait on; see broker.Waker.
//
// Signal is closed by the next Publish, PublishKeyed or PublishBatch that
// enqueues a message, Nack that hands one back, ReplayDeadLetter, or
// Extend that brings a lease's lapse closer, made through this Queue, or
// by a Store.Queue of this Store that changes the queue's policy; and — beyond the port's promise — by a publication
// on this queue from any other client, which the work stream republishes,
// headers only, to a subject this Queue subscribes to from its first Wake
// on. Signal is never closed by another queue's calls.
//
// Scheduled with In zero means a message may be receivable now: one was
// published, replayed or nacked without delay since the last Receive that
// came back short, or that came back full with the last message the
// server had to offer and nothing of this Queue's due (see drained).
// Otherwise In and Scheduled know this Queue's leases and delayed nacks:
// when the earliest of them lapses or ends its retry delay (plus a 50 ms
// slack: the server's deadline is a little later than the adapter's); a
// lease on its last allowed delivery does not count, since its lapse
// makes a dead letter, not a receivable message, nor does the retry of a
// message nacked on a delivery that a lowered MaxDeliveries has since
// made its last (the server delivers it no more). The leases and
// nacks of ANOTHER process are invisible here: while the server reports
// leases this Queue did not hand out (asked at open, and by each Receive
// that clears "now": one that comes back short, or that takes the last
// message), Wake names a look again Options.Recheck away (1 s by default,
// VisibilityTimeout when shorter), so that the message of a consumer that
// died elsewhere is picked up within that much of its lapse. Leases
// another process takes after that are seen at the next such Receive.
func (q *Queue) Wake() broker.WakeValue {
	if q.unmade() {
		return broker.WakeValue{Signal: lookNow}
	}
	q.subscribe()
	q.mu.Lock()
	defer q.mu.Unlock()
	w := broker.WakeValue{Signal: q.signal}
	if q.ready {
		w.Scheduled = true
		return w
	}
	now := time.Now()
	cut := now.Add(-lapseGrace) // older instants passed long ago: nothing more comes of them
	var next time.Time
	note := func(at time.Time) {
		if at.After(cut) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for _, l := range q.leases {
		if l.deliveries < q.policy.MaxDeliveries {
			note(l.expiresAt)
		}
	}
	for _, r := range q.retries {
		// A message nacked on a delivery that a declaration has since
		// made its last is not delivered again: the server's MaxDeliver
		// stops it, and a sweep buries it.
		if r.l.deliveries < q.policy.MaxDeliveries {
			note(r.at)
		}
	}
	if !q.recheck.IsZero() && (next.IsZero() || q.recheck.Before(next)) {
		// Kept after it passed, until a Receive looks (and settles
		// whether to look again).
		next = q.recheck
	}
	if !next.IsZero() {
		w.Scheduled = true
		w.In = wakeIn(next, now)
	}
	return w
}

// wakeReady closes the current wake signal and records that a message is
// receivable now: the one stored at seq of the work stream (0: unknown).
func (q *Queue) wakeReady(seq uint64) {
	q.mu.Lock()
	q.stored = max(q.stored, seq)
	q.wakeReadyLocked()
	q.mu.Unlock()
}

func (q *Queue) wakeReadyLocked() {
	q.ready = true
	q.readyEvents++
	q.wakeLocked()
}

// wakeLocked closes the current wake signal and makes a new one, unless
// the Queue is closed (its signal then stays closed for good). The caller
// holds q.mu.
func (q *Queue) wakeLocked() {
	if q.closed {
		return
	}
	close(q.signal)
	q.signal = make(chan struct{})
}

// isReady reports whether a message is known to be receivable now.
func (q *Queue) isReady() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready
}

// settle runs after a Receive that found fewer messages than it asked
// for, which began when readyEvents was events. It asks the server about
// the consumer. With messages left to deliver (see undelivered: the server
// had not yet told its consumer about them, or had not yet offered them),
// a message is receivable now, and settle reports it. With none, nothing
// is (unless an event came since). With leases pending that this Queue
// did not hand out, another process holds them, and they may lapse at any
// moment this Queue cannot know: Wake then names a look again Recheck from
// now (or VisibilityTimeout, when shorter). A change that the Wake value a
// consumer already holds did not know closes its signal, so that it asks
// again. The recheck due, which the Receive was the look for (zero: none),
// ends once the consumer's state is read; when the server does not
// answer, it stays, and Wake goes on naming it.
func (q *Queue) settle(ctx context.Context, events uint64, policy broker.PolicyValue, due time.Time) (pending bool) {
	info, err := q.cons.Info(ctx)
	if err == nil {
		pending, err = q.undelivered(ctx, info)
	}
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		q.s.opts.Logger.Warn("natsjs: consumer state", "queue", q.name, "err", err)
		if q.readyEvents == events {
			q.ready = false
		}
		return false
	}
	q.recheckedLocked(due)
	if pending {
		if !q.ready {
			q.wakeReadyLocked()
		}
		return true
	}
	if q.readyEvents == events {
		q.ready = false
	}
	q.recheckLocked(info, now, policy)
	return false
}

// recheckedLocked ends the recheck due, which a Receive that read the
// consumer's state was the look for, unless another was set since. The
// caller holds q.mu.
func (q *Queue) recheckedLocked(due time.Time) {
	if !due.IsZero() && q.recheck.Equal(due) {
		q.recheck = time.Time{}
	}
}

// recheckLocked sets when an idle consumer should look again from info,
// the consumer's state read at now: with more leases pending on the server
// than this Queue handed out (and nacks it made, which the server counts
// as pending too), another process holds some, and their lapses are
// invisible here, so Wake names a look Recheck from now (VisibilityTimeout
// when shorter); with none, no look is due. The caller holds q.mu.
func (q *Queue) recheckLocked(info *jetstream.ConsumerInfo, now time.Time, policy broker.PolicyValue) {
	if q.s.opts.Recheck <= 0 {
		return
	}
	ours := 0
	cut := now.Add(-lapseGrace)
	for _, l := range q.leases {
		if l.expiresAt.After(cut) {
			ours++
		}
	}
	for _, r := range q.retries {
		if r.at.After(cut) {
			ours++
		}
	}
	if info.NumAckPending <= ours {
		q.recheck = time.Time{}
		return
	}
	at := now.Add(min(q.s.opts.Recheck, policy.VisibilityTimeout))
	if q.recheck.IsZero() || at.Before(q.recheck) {
		q.recheck = at
		q.wakeLocked()
	}
}

// undelivered reports whether the work stream holds a message the
// consumer (whose state is info) has not delivered yet: one stored after
// the last the consumer delivered, which this Queue knows of (the server
// acknowledges a publish before it tells its consumer of the message, so
// the consumer's count of pending messages can lag behind a publish that
// returned), or one the consumer counts as pending.
func (q *Queue) undelivered(ctx context.Context, info *jetstream.ConsumerInfo) (bool, error) {
	q.mu.Lock()
	stored := q.stored
	q.mu.Unlock()
	if info.Delivered.Stream < stored {
		_, err := q.work.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(q.n.workSubject))
		if err == nil {
			return true, nil
		}
		if !notFound(err) {
			return false, q.connError("read a message the consumer has not delivered yet", err)
		}
	}
	return info.NumPending > 0, nil
}

// subscribe subscribes, once, to the headers the work stream republishes,
// so that a publication by another client closes the signal, and waits
// for the server to confirm the subscription, so that a publication after
// Wake returns is not missed. It runs without q.mu: the confirmation is a
// round trip to the server, which waits up to Options.Timeout while the
// connection is down, and must not hold up the queue's other calls (nor
// another Wake, which meanwhile goes on without the subscription). A
// failure is logged and tried again by a Wake wakeRetry later or more.
func (q *Queue) subscribe() {
	q.mu.Lock()
	if q.wakeSub != nil || q.closed || q.subscribing || time.Now().Before(q.subscribeAfter) {
		q.mu.Unlock()
		return
	}
	q.subscribing = true
	q.mu.Unlock()

	var sub *nats.Subscription
	err := wakeSubscribeFault()
	if err == nil {
		sub, err = q.s.nc.Subscribe(q.n.wakeSubject, func(m *nats.Msg) {
			if m.Header.Get(hdrOrigin) == q.s.origin {
				return // this Store's own publish, which closed the signal already
			}
			seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			q.wakeReady(seq)
		})
	}
	if err == nil {
		beforeWakeFlush()
		if err = q.s.nc.FlushTimeout(q.s.opts.Timeout); err != nil {
			_ = sub.Unsubscribe()
		}
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	q.subscribing = false
	switch {
	case err != nil:
		q.subscribeAfter = time.Now().Add(wakeRetry)
		q.s.opts.Logger.Warn("natsjs: wake subscription failed; publications of other clients will not wake this queue", "queue", q.name, "err", err, "retry_in", wakeRetry)
	case q.closed: // Close ran meanwhile, and ended no subscription of ours
		_ = sub.Unsubscribe()
	default:
		q.wakeSub = sub
	}
}

// beforeWakeFlush runs between the wake subscription and its confirmation;
// tests hold a subscription there.
var beforeWakeFlush = func() {}

// wakeSubscribeFault is the error a wake subscription fails with before it
// is tried; tests make it fail there.
var wakeSubscribeFault = func() error { return nil }

// close ends the Queue's subscription, forgets its leases and closes its
// wake signal for good, so that a consumer waiting on it (broker.Consume)
// calls Receive again and learns that the store is closed, as with the
// file-backed store. The caller is Store.Close, which has marked the Store
// closed, or watchConn, once the connection closed (every call then
// refuses with Closed). It ends the subscription to the answers of
// abandoned batches too (see closeBatches), first: holdMu is taken alone.
func (q *Queue) close() error {
	berr := q.closeBatches()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return berr
	}
	close(q.signal)
	q.closed = true
	q.leases, q.retries = map[uint64]*lease{}, map[uint64]retry{}
	var errs []error
	for _, sub := range []*nats.Subscription{q.wakeSub, q.deathSub} {
		if sub == nil {
			continue
		}
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	q.wakeSub, q.deathSub = nil, nil
	return errors.Join(append(errs, berr)...)
}

// wakeIn is Wake's In for a message receivable at next: the time until
// then, never less than zero, plus wakeSlack. Sub clamps to the largest
// Duration, and the slack must not wrap that to a negative In ("now")
// after the clock stepped back by centuries.
func wakeIn(next, now time.Time) time.Duration {
	in := max(next.Sub(now), 0)
	return in + min(wakeSlack, math.MaxInt64-in)
}
