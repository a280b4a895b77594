package natsjs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// A lease is one delivery this Queue handed out. The server knows the
// delivery too (its ack subject, its deadline); the adapter keeps the rest:
// the deadline it promised, and the nonce that tells this lease from the
// one an Extend replaced or a later delivery of the same message.
type lease struct {
	nonce      uint64
	reply      string    // the server's ack subject of this delivery
	deliveries int       // the server's count, this delivery included
	last       bool      // the policy allowed no later delivery at hand-out (see buryAbandoned)
	expiresAt  time.Time // with a monotonic reading: compared with time.Now
	id         string
	enqueued   time.Time
	// extending, guarded by the Queue's mu, is non-nil while an Extend of
	// this lease waits for the server, and closed when it settles. The
	// server does not check which delivery an acknowledgement names, so
	// the lease is held for the Extend meanwhile (see hold): an Ack,
	// Nack, Reject or Extend of it waits until the Extend settles, and
	// then finds the lease replaced, or still live when the Extend failed.
	extending chan struct{}
}

// A retry is a message this Queue nacked, until it is delivered again: when
// it becomes visible, and the lease the Nack ended, whose count, ack
// subject and identity a burial needs when a declaration lowers
// MaxDeliveries to or below that count (see buryExhaustedLocked).
type retry struct {
	at time.Time
	l  *lease
}

// A receipt names one lease of one queue of one Store:
//
//	byte 0      version (1)
//	bytes 1-8   the message's stream sequence, little-endian
//	bytes 9-16  the lease's nonce
//	bytes 17-32 first 16 bytes of HMAC-SHA256(Store key, work stream name || bytes 0-16)
//
// in unpadded base64url. The key is random per Store and never leaves the
// process, so a receipt is unguessable, and the stream name in the MAC
// binds it to its queue: a garbled or forged receipt, another queue's, or
// another Store's is broker.UnknownReceipt.
const (
	receiptVersion = 1
	receiptBody    = 17
	receiptLen     = receiptBody + 16
)

// nonces numbers leases; the MAC, not the nonce, makes receipts
// unguessable.
var nonces atomic.Uint64

func (q *Queue) receipt(seq, nonce uint64) broker.ReceiptValue {
	var b [receiptLen]byte
	b[0] = receiptVersion
	binary.LittleEndian.PutUint64(b[1:], seq)
	binary.LittleEndian.PutUint64(b[9:], nonce)
	copy(b[receiptBody:], q.mac(b[:receiptBody]))
	return broker.ReceiptValue(base64.RawURLEncoding.EncodeToString(b[:]))
}

func (q *Queue) mac(body []byte) []byte {
	h := hmac.New(sha256.New, q.s.key)
	h.Write([]byte(q.n.work))
	h.Write(body)
	return h.Sum(nil)[:receiptLen-receiptBody]
}

// parseReceipt verifies r and returns what it names, or an error wrapping
// broker.UnknownReceipt.
func (q *Queue) parseReceipt(r broker.ReceiptValue) (seq, nonce uint64, err error) {
	b, derr := base64.RawURLEncoding.DecodeString(string(r))
	if derr != nil || len(b) != receiptLen || b[0] != receiptVersion || !hmac.Equal(b[receiptBody:], q.mac(b[:receiptBody])) {
		return 0, 0, fmt.Errorf("natsjs: queue %s: receipt %s: not issued for this queue by this store: %w", q.name, quoteReceipt(r), broker.UnknownReceipt)
	}
	return binary.LittleEndian.Uint64(b[1:]), binary.LittleEndian.Uint64(b[9:]), nil
}

// quoteReceipt quotes the first 12 characters of a receipt that was
// refused, marked with "..." only when there were more: enough to tell
// which one it was, while a caller's megabyte of junk stays out of the
// error.
func quoteReceipt(r broker.ReceiptValue) string {
	const shown = 12
	if utf8.RuneCountInString(string(r)) <= shown {
		return fmt.Sprintf("%q", string(r))
	}
	return fmt.Sprintf("%.*q...", shown, string(r))
}

// liveLocked returns the lease r names if it is live at now: UnknownReceipt
// for a receipt this Queue did not issue, Closed once the Queue is closed,
// LeaseExpired for one whose lease lapsed (at ExpiresAt exactly), was
// replaced by Extend, or was ended by Ack, Nack or Reject. The caller
// holds q.mu.
func (q *Queue) liveLocked(r broker.ReceiptValue, now time.Time) (uint64, *lease, error) {
	seq, nonce, err := q.parseReceipt(r)
	if err != nil {
		return 0, nil, err
	}
	if q.closed {
		// Close ran since the call's begin, and forgot the leases: the
		// lease may well be held on the server still (until it lapses),
		// so the call is told why it is refused, not LeaseExpired.
		return 0, nil, q.closedError()
	}
	l := q.leases[seq]
	if l == nil || l.nonce != nonce || !now.Before(l.expiresAt) {
		return 0, nil, fmt.Errorf("natsjs: queue %s: message %s: the lease is no longer held: %w", q.name, messageID(seq), broker.LeaseExpired)
	}
	return seq, l, nil
}

// take removes and returns the live lease r names, so that no other call
// ends it too. It waits for an Extend of the lease in flight (see hold).
func (q *Queue) take(ctx context.Context, r broker.ReceiptValue) (uint64, *lease, error) {
	seq, l, _, err := q.hold(ctx, r, func(seq uint64, _ *lease) { delete(q.leases, seq) })
	return seq, l, err
}

// hold returns the live lease r names, and the instant it was found live,
// once no Extend of it is in flight; mark runs under q.mu before q.mu is
// released, so that it claims the lease before any other call looks (take
// removes it, Extend marks it extending). While an Extend waits for the
// server, hold waits for it without q.mu, up to ctx's deadline (the
// Store's Timeout without one), and looks again: the receipt may name a
// lease the Extend has replaced since.
func (q *Queue) hold(ctx context.Context, r broker.ReceiptValue, mark func(uint64, *lease)) (uint64, *lease, time.Time, error) {
	for {
		now := time.Now()
		q.mu.Lock()
		seq, l, err := q.liveLocked(r, now)
		if err != nil {
			q.mu.Unlock()
			return 0, nil, time.Time{}, err
		}
		busy := l.extending
		if busy == nil {
			mark(seq, l)
			q.mu.Unlock()
			return seq, l, now, nil
		}
		q.mu.Unlock()
		if err := q.awaitExtend(ctx, busy, l.id); err != nil {
			return 0, nil, time.Time{}, err
		}
	}
}

// awaitExtend waits until busy, the signal of an Extend in flight on
// message id's lease, is closed, or ctx (bounded by the Store's Timeout)
// ends.
func (q *Queue) awaitExtend(ctx context.Context, busy <-chan struct{}, id string) error {
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	select {
	case <-busy:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("natsjs: queue %s: message %s: waiting for an Extend of the lease that the server has not confirmed: %w", q.name, id, ctx.Err())
	}
}

// restore puts back a lease that take removed when the server could not be
// told: the call failed, and the caller may try again with the same
// receipt.
func (q *Queue) restore(seq uint64, l *lease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.leases[seq] == nil {
		q.leases[seq] = l
	}
}

// Receive leases up to max messages; see broker.Broker. It asks the
// server for what is available now and does not wait for more; only when a
// message is known to have been published since the last Receive that came
// back short does it wait, up to 200 ms, for the first (see readyWait). A
// Receive that found nothing while the work stream holds a message its
// consumer has not delivered yet (a publish that returned, which the
// server's consumer has not offered yet: a moment that a loaded server
// can stretch past that wait) asks again, each time waiting as long, until
// the message comes or the call's deadline (the context's, else
// Options.Timeout) leaves no room for one more such wait and a second for
// the answer (see roomToPull). The lease's ExpiresAt is
// measured from before the request, so it never falls after the server's
// own deadline (unless another Store lowered the VisibilityTimeout, which
// this one has not declared: see Store.Queue). A deadline that passes
// during a pull cuts its wait, not its answer: the messages the server
// sent are leased and counted by it, so they are returned without an error
// (see pull); the Receive returns the context's error only when the server
// sent none. Messages whose last allowed lease lapsed are made dead
// letters first (see sweepDeaths).
func (q *Queue) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Queue")
	}
	if max <= 0 {
		return nil, fmt.Errorf("natsjs: queue %s: Receive max %d must be positive: %w", q.name, max, broker.InvalidBatchSize)
	}
	ctx, cancel, err := q.look(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	q.mu.Lock()
	policy, events := q.policy, q.readyEvents
	// A recheck that is due asked for this Receive. It stays due until
	// the Receive has read the consumer's state (settle or drained
	// clears it then), so that Wake goes on asking for a look when the
	// server does not answer.
	due := q.recheck
	if due.After(time.Now()) {
		due = time.Time{}
	}
	q.mu.Unlock()
	q.trimLeases()
	var out []broker.DeliveryValue
	wait := time.Duration(0)
	if q.isReady() {
		wait = readyWait
	}
	var replies []string // of out's deliveries
	var last delivery    // the last one pulled
	var highest uint64   // the highest stream sequence pulled
	// index finds a message's delivery in out by its stream sequence, and
	// firstLapse is when the lease of out's first delivery lapses: the
	// earliest, since every later pull began later. A pull after it may
	// hand out again a message this Receive leased (see below).
	index := map[uint64]int{}
	var firstLapse time.Time
	for len(out) < max {
		start := time.Now()
		got, err := q.pull(ctx, max-len(out), wait)
		afterPull()
		var exhausted []delivery
		for i, d := range got {
			if d.delivered > policy.MaxDeliveries {
				// Delivered under a larger MaxDeliveries that a policy
				// change has since lowered.
				exhausted = append(exhausted, d)
				continue
			}
			dv, ok := q.deliver(d, start.Add(policy.VisibilityTimeout), d.delivered >= policy.MaxDeliveries)
			if !ok {
				for _, d := range append(exhausted, got[i:]...) {
					replies = append(replies, d.msg.Reply)
				}
				return nil, q.handBack(ctx, replies)
			}
			if j, ok := index[d.seq]; ok {
				// Leased by an earlier pull of this Receive, whose lease
				// lapsed since, and delivered again: deliver replaced
				// that lease, so its receipt is void. The message is
				// returned once, on this delivery.
				out[j], replies[j] = dv, d.msg.Reply
				continue
			}
			if len(out) == 0 {
				firstLapse = start.Add(policy.VisibilityTimeout)
			}
			index[d.seq] = len(out)
			out, replies = append(out, dv), append(replies, d.msg.Reply)
		}
		if err != nil {
			return q.handOut(ctx, out, replies, q.connError("receive", err))
		}
		for _, d := range exhausted {
			if err := q.buryLapsed(ctx, d); err != nil {
				return q.handOut(ctx, out, replies, err)
			}
		}
		if len(got) > 0 {
			last = got[len(got)-1]
			for _, d := range got {
				if d.seq > highest {
					highest = d.seq
				}
			}
			// A pull may end before the stream's last message when the
			// server has stored messages its consumer was not yet told
			// about: ask again, briefly, until a pull finds nothing. But
			// not once a lease this Receive handed out may have lapsed
			// before that pull's answer (a VisibilityTimeout shorter than
			// a few pulls): the server would deliver its message again,
			// to this Receive, which would spend the message's
			// deliveries one pull after another, to its dead letter,
			// before any consumer ran it once.
			if len(out) > 0 && !time.Now().Add(tailWait).Before(firstLapse) {
				break
			}
			wait = tailWait
			continue
		}
		if !q.settle(ctx, events, policy, due) || len(out) > 0 || !roomToPull(ctx) {
			break
		}
		// Nothing came, yet a message awaits its first delivery.
		wait = readyWait
	}
	if len(out) == max {
		q.drained(ctx, events, policy, due, last, highest)
	}
	return q.handOut(ctx, out, replies, nil)
}

// drained is settle for a Receive that got all it asked for, which began
// when readyEvents was events (and was the look the recheck due asked
// for, unless due is zero): last is the last delivery it pulled, and
// highest the highest stream sequence. The server tells, with each
// delivery, how many messages its consumer has left to deliver for the
// first time; when the last one said none, no message this Queue knows of
// was stored after those delivered, and no nack or lease of this Queue is
// due (a redelivery, which that count leaves out), nothing is known to be
// receivable now, and Wake stops saying so. Nothing that costs a request,
// while messages are left: a Receive that came back full would otherwise
// pay for every batch.
//
// The delivery says nothing of the leases other processes hold, whose
// lapses Wake must look again for (see recheckLocked): so the Receive
// that takes the last message asks the server for the consumer's state,
// as settle does, when that changes what Wake says (it said "now", or
// this Receive was the look a recheck asked for). That is the request
// the look after it would have made, which then needs no pull. When the
// server does not answer, Wake goes on saying "now" (or names the recheck
// due, a moment away), and that look settles it.
func (q *Queue) drained(ctx context.Context, events uint64, policy broker.PolicyValue, due time.Time, last delivery, highest uint64) {
	if last.pending > 0 {
		return
	}
	q.mu.Lock()
	ask := (q.ready || !due.IsZero()) && q.nothingDueLocked(events, highest, time.Now())
	q.mu.Unlock()
	if !ask {
		return
	}
	var info *jetstream.ConsumerInfo
	if q.s.opts.Recheck > 0 {
		var err error
		if info, err = q.cons.Info(ctx); err != nil {
			q.s.opts.Logger.Warn("natsjs: consumer state", "queue", q.name, "err", err)
			return
		}
	}
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.nothingDueLocked(events, highest, now) {
		return
	}
	q.ready = false
	if info != nil {
		q.recheckedLocked(due)
		q.recheckLocked(info, now, policy)
	}
}

// nothingDueLocked reports whether, for a Receive that began when
// readyEvents was events and pulled up to stream sequence highest, no
// event came since, no message this Queue knows of was stored after it,
// and no nack or lease of this Queue is due at now (see drained). The
// caller holds q.mu.
func (q *Queue) nothingDueLocked(events, highest uint64, now time.Time) bool {
	if q.readyEvents != events || highest < q.stored {
		return false
	}
	for _, r := range q.retries {
		if !r.at.After(now) {
			return false
		}
	}
	for _, l := range q.leases {
		if l.deliveries < q.policy.MaxDeliveries && !l.expiresAt.After(now) {
			return false
		}
	}
	return true
}

// roomToPull reports whether ctx has a deadline that leaves time for one
// more pull that waits readyWait, with a second to spare for the server's
// answer.
func roomToPull(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) > readyWait+time.Second
}

// handOut ends a Receive that leased out (replies their ack subjects) and
// met err, if any. Close may have run after out's leases were recorded,
// between two pulls or after the last: it forgot them, so that out could
// not be settled, and Close has returned; then out is handed back as
// deliver's refusal hands back a pull's (handBack), and the Receive
// returns Closed. Else it returns what partial does.
func (q *Queue) handOut(ctx context.Context, out []broker.DeliveryValue, replies []string, err error) ([]broker.DeliveryValue, error) {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed && len(out) > 0 {
		return nil, q.handBack(ctx, replies)
	}
	return q.partial(out, err)
}

// partial returns the deliveries already leased, if any, rather than err:
// their leases are taken, and dropping them would only delay them.
func (q *Queue) partial(out []broker.DeliveryValue, err error) ([]broker.DeliveryValue, error) {
	if len(out) > 0 {
		q.s.opts.Logger.Warn("natsjs: receive cut short", "queue", q.name, "delivered", len(out), "err", err)
		return out, nil
	}
	return nil, err
}

// deliver records the lease of d, the last the policy allows when last,
// and returns its delivery; ok is false, and nothing is recorded, once the
// Queue is closed.
func (q *Queue) deliver(d delivery, expiresAt time.Time, last bool) (dv broker.DeliveryValue, ok bool) {
	id, enqueued := identity(d.msg.Header, d.seq, d.stored)
	l := &lease{nonce: nonces.Add(1), reply: d.msg.Reply, deliveries: d.delivered, last: last, expiresAt: expiresAt, id: id, enqueued: enqueued}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return broker.DeliveryValue{}, false
	}
	q.leases[d.seq] = l
	delete(q.retries, d.seq)
	q.mu.Unlock()
	return broker.DeliveryValue{
		Lease:      broker.LeaseValue{ExpiresAt: expiresAt.Round(0), Receipt: q.receipt(d.seq, l.nonce)},
		Message:    broker.MessageValue{ID: id, EnqueuedAt: enqueued, Payload: clone(d.msg.Data)},
		Deliveries: l.deliveries,
	}, true
}

// handBack ends at once the deliveries (by their ack subjects, replies)
// of a Receive that found the Queue closed when it came to record them or
// to return them: Close ran during the Receive, and forgot every lease
// (see handOut). Returned, they could
// not be settled (every later call is Closed), and each would hold its
// message from every other consumer until its lease lapsed; Close has
// returned, and must not leave leases taken after it. The server counts
// the deliveries, as it would a lapse. It returns the Receive's error.
func (q *Queue) handBack(ctx context.Context, replies []string) error {
	ctx = context.WithoutCancel(ctx) // bounded by Options.Timeout (tell)
	for _, r := range replies {
		if err := q.tell(ctx, r, "-NAK"); err != nil {
			q.s.opts.Logger.Warn("natsjs: a delivery made as the store closed could not be handed back; it waits for its lease to lapse",
				"queue", q.name, "err", err)
		}
	}
	return fmt.Errorf("natsjs: queue %s: the store closed during the receive; what it pulled is handed back: %w", q.name, broker.Closed)
}

// afterPull runs after each pull of a Receive; tests close the Store
// there.
var afterPull = func() {}

// closedError is what a call that began before Close, and finds the Queue
// closed, returns.
func (q *Queue) closedError() error {
	return fmt.Errorf("natsjs: queue %s: the store is closed: %w", q.name, broker.Closed)
}

// Ack removes the leased message for good; see broker.Broker. It returns
// once the server confirmed the acknowledgement.
func (q *Queue) Ack(ctx context.Context, receipt broker.ReceiptValue) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return err
	}
	seq, l, err := q.take(ctx, receipt)
	if err != nil {
		return err
	}
	if err := q.tell(ctx, l.reply, "+ACK"); err != nil {
		q.restore(seq, l)
		return q.connError("ack "+l.id, err)
	}
	if l.deliveries > 1 {
		// A redelivered message may have a failure recorded by a Nack.
		q.forgetFailure(ctx, seq, l.id)
	}
	return nil
}

// Nack hands the leased message back after the policy's retry delay (the
// server's delayed NAK), or moves it to the dead-letter stream when it has
// had MaxDeliveries deliveries; see broker.Broker. VisibleAt is measured
// from before the request, so the server's instant is never earlier. The
// cause is recorded by the classified-cause rule (see dead.go): in the dead
// letter on the last delivery, else in the failures stream (recordFailure),
// for a lapse of a later delivery to record. A "-NAK" that got no answer
// (a timeout, an ended context, a lost connection) may have been applied:
// the lease is given up, and the error says so; the message comes back after
// its retry delay, or when the lease lapses if the server never got it.
func (q *Queue) Nack(ctx context.Context, receipt broker.ReceiptValue, cause error) (broker.NackValue, error) {
	if q.unmade() {
		return broker.NackValue{}, nilReceiver("Queue")
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return broker.NackValue{}, err
	}
	seq, l, err := q.take(ctx, receipt)
	if err != nil {
		return broker.NackValue{}, err
	}
	policy := q.currentPolicy()
	out := broker.NackValue{Deliveries: l.deliveries}
	if l.deliveries >= policy.MaxDeliveries {
		if err := q.buryLeased(ctx, seq, l, cause); err != nil {
			if !errors.Is(err, errLeaseGone) {
				q.restore(seq, l)
			}
			return broker.NackValue{}, err
		}
		out.DeadLettered = true
		return out, nil
	}
	delay := policy.RetryDelayAfter(l.deliveries)
	now := time.Now()
	if _, ok := deadline(now, delay); !ok {
		q.restore(seq, l)
		return broker.NackValue{}, fmt.Errorf("natsjs: queue %s: retry instant passes year 2262: %w", q.name, broker.QueueMisconfigured)
	}
	// The classified cause is stored before the server may redeliver the
	// message, so that a lapse of its last delivery records it.
	if err := q.recordFailure(ctx, seq, l.id, cause); err != nil {
		q.restore(seq, l)
		return broker.NackValue{}, err
	}
	body := "-NAK"
	if delay > 0 {
		body = fmt.Sprintf(`-NAK {"delay": %d}`, delay.Nanoseconds())
	}
	visible := now.Add(delay)
	if err := q.tell(ctx, l.reply, body); err != nil {
		if !unanswered(err) {
			q.restore(seq, l)
			return broker.NackValue{}, q.connError("nack "+l.id, err)
		}
		// The server may have applied the "-NAK" (and may yet): the
		// message is then handed back, and may be another consumer's
		// by the time the caller tries again. The server applies an
		// acknowledgement to whichever delivery is pending, so a
		// restored lease would settle that consumer's delivery. The
		// lease is given up instead: the message comes back after its
		// retry delay, or, when the server never got the "-NAK", when
		// the lease lapses (a lease this Queue no longer knows, which
		// Wake's recheck looks for as for another process's).
		q.handedBack(seq, visible, l, delay)
		return broker.NackValue{}, q.connError("nack "+l.id, fmt.Errorf("the nack got no answer: the server may or may not have handed the message back, and may yet; the lease is given up, its receipt acts no more, and the message comes back after its retry delay or when its lease lapses: %w", err))
	}
	out.VisibleAt = visible.Round(0)
	q.handedBack(seq, visible, l, delay)
	return out, nil
}

// handedBack records that the message at seq, whose lease l a Nack ended,
// is due again at visible (after a retry delay of delay), and closes the
// wake signal.
func (q *Queue) handedBack(seq uint64, visible time.Time, l *lease, delay time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return // Close forgot every lease and retry; keep it so
	}
	// Kept without a delay too: until the message is delivered again, it
	// is due (see drained).
	q.retries[seq] = retry{at: visible, l: l}
	if delay > 0 {
		q.wakeLocked()
	} else {
		q.wakeReadyLocked()
	}
}

// Reject moves the leased message to the dead-letter stream now, with
// cause recorded as Nack records it; see broker.Rejecter.
func (q *Queue) Reject(ctx context.Context, receipt broker.ReceiptValue, cause error) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return err
	}
	seq, l, err := q.take(ctx, receipt)
	if err != nil {
		return err
	}
	if err := q.buryLeased(ctx, seq, l, cause); err != nil {
		if !errors.Is(err, errLeaseGone) {
			q.restore(seq, l)
		}
		return err
	}
	return nil
}

// Extend renews a live lease for by from now and returns the new lease,
// whose receipt replaces the old one; see broker.LeaseExtender. A by equal
// to the policy's VisibilityTimeout is the server's "in progress" (+WPI),
// which restarts its AckWait; any other by is the server's delayed NAK,
// which keeps the message pending on this delivery and moves its
// redelivery deadline to now+by — the one request that sets a deadline of
// the caller's choosing. ExpiresAt is measured from before the request.
//
// The server applies an acknowledgement to whatever delivery of the
// message is pending, so the lease is held while the request is in
// flight: an Ack, Nack, Reject or Extend of the same lease waits until
// this Extend settles, and then finds its receipt replaced (LeaseExpired)
// or, when the Extend failed, the lease as it was. Otherwise a call that
// ended the lease meanwhile would be overridden on the server by the
// deadline of an Extend the adapter then refuses. A delayed NAK that got
// no answer (a timeout, an ended context, a lost connection) may have
// been applied: when it would have brought the lapse closer, the lease
// is held until now+by only, under the same receipt, and the error says
// so.
func (q *Queue) Extend(ctx context.Context, receipt broker.ReceiptValue, by time.Duration) (broker.LeaseValue, error) {
	if q.unmade() {
		return broker.LeaseValue{}, nilReceiver("Queue")
	}
	if by <= 0 {
		return broker.LeaseValue{}, fmt.Errorf("natsjs: queue %s: Extend by %v must be positive: %w", q.name, by, broker.QueueMisconfigured)
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return broker.LeaseValue{}, err
	}
	if _, ok := deadline(time.Now(), by); !ok {
		return broker.LeaseValue{}, fmt.Errorf("natsjs: queue %s: Extend by %v passes year 2262; the lease is unchanged: %w", q.name, by, broker.QueueMisconfigured)
	}
	var policy broker.PolicyValue
	seq, l, now, err := q.hold(ctx, receipt, func(_ uint64, l *lease) {
		l.extending = make(chan struct{})
		policy = q.policy
	})
	if err != nil {
		return broker.LeaseValue{}, err
	}
	at, ok := deadline(now, by)
	body := fmt.Sprintf(`-NAK {"delay": %d}`, by.Nanoseconds())
	if by == policy.VisibilityTimeout {
		body = "+WPI"
	}
	if ok {
		err = q.tell(ctx, l.reply, body)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	close(l.extending) // the calls waiting for this Extend look again
	l.extending = nil
	switch {
	case !ok:
		return broker.LeaseValue{}, fmt.Errorf("natsjs: queue %s: Extend by %v passes year 2262; the lease is unchanged: %w", q.name, by, broker.QueueMisconfigured)
	case err != nil && unanswered(err) && at.Before(l.expiresAt) && !q.closed && q.leases[seq] == l:
		// A delayed "-NAK" the server may have applied (and may yet):
		// its deadline is then at or a little after at, where it hands
		// the message to another consumer, whose delivery this
		// receipt, acting after at, would settle. The lease is held
		// until at only, under the same receipt.
		short := *l
		short.expiresAt = at
		q.leases[seq] = &short
		return broker.LeaseValue{}, q.connError("extend "+l.id, fmt.Errorf("the extend got no answer: the server may or may not have moved the lease's lapse to %v from the call, and may yet; the receipt holds the lease until %v only: %w", by, at.Round(0), err))
	case err != nil:
		return broker.LeaseValue{}, q.connError("extend "+l.id, err)
	case q.closed:
		// Close ran during the request and forgot the leases: no receipt
		// of this Queue is honoured any more. The server's deadline moved
		// all the same; the message waits for it.
		return broker.LeaseValue{}, q.closedError()
	case q.leases[seq] != l:
		// Forgotten meanwhile: the lease lapsed long ago (pruneLocked), or
		// a Receive took the message again after it lapsed.
		return broker.LeaseValue{}, fmt.Errorf("natsjs: queue %s: message %s: the lease is no longer held: %w", q.name, l.id, broker.LeaseExpired)
	}
	next := *l
	next.nonce, next.expiresAt = nonces.Add(1), at
	q.leases[seq] = &next
	if at.Before(l.expiresAt) {
		// The lapse comes sooner than a Wake handed out may have said.
		q.wakeLocked()
	}
	return broker.LeaseValue{ExpiresAt: at.Round(0), Receipt: q.receipt(seq, next.nonce)}, nil
}

// tell sends an acknowledgement of one delivery to the server and waits for
// its confirmation (on a replicated consumer, after the quorum applied
// it).
func (q *Queue) tell(ctx context.Context, reply, body string) error {
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	err := sendTell(body, func() error {
		_, err := q.s.nc.RequestWithContext(ctx, reply, []byte(body))
		return err
	})
	afterTell()
	return err
}

// sendTell sends an acknowledgement (body) with send and returns its
// error; tests answer in the server's place there.
var sendTell = func(body string, send func() error) error { return send() }

// afterTell runs after each acknowledgement sent to the server; tests
// close the Store there.
var afterTell = func() {}

const (
	// minSweep is the fewest leases worth sweeping for.
	minSweep = 1024
	// leaseMemory is how long a lapsed lease is remembered: long enough
	// to date the death of a message whose last lease it was (see
	// buryDeath), which the server may notice only at a later pull.
	leaseMemory = 10 * time.Minute
)

// trimLeases drops the long-lapsed leases (and long-passed retry instants)
// once there are many: a lapsed lease is refused as LeaseExpired either
// way, so keeping it only costs memory.
func (q *Queue) trimLeases() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.leases)+len(q.retries) < q.sweepAt {
		return
	}
	q.pruneLocked(time.Now().Add(-leaseMemory))
	q.sweepAt = max(minSweep, 2*(len(q.leases)+len(q.retries)))
}

// pruneLocked drops the leases that lapsed and the retries that became
// visible before cut. The caller holds q.mu.
func (q *Queue) pruneLocked(cut time.Time) {
	for seq, l := range q.leases {
		if l.expiresAt.Before(cut) {
			delete(q.leases, seq)
		}
	}
	for seq, r := range q.retries {
		if r.at.Before(cut) {
			delete(q.retries, seq)
		}
	}
}

// deadline returns now+d when that instant fits Unix nanoseconds (before
// April 2262), as the file-backed store records deadlines.
func deadline(now time.Time, d time.Duration) (time.Time, bool) {
	n := now.UnixNano()
	if d > 0 && n > math.MaxInt64-int64(d) {
		return time.Time{}, false
	}
	return now.Add(d), true
}
