package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// A corpse is what a dead letter is made of.
type corpse struct {
	seq        uint64 // in the work stream
	id         string
	enqueued   time.Time
	payload    []byte
	deliveries int
	failedAt   time.Time
	// reply is the ack subject of the delivery that ends in the
	// dead-letter stream; empty for a message no delivery holds any more.
	reply string
}

// bury stores c in the dead-letter stream (subject PREFIX.d.queue.ID, one
// record per ID) with reason, code and public text in headers, then
// removes the message from the work stream: by terminating its delivery,
// or, when none holds it, by deleting it. In that order: a failure between
// the two leaves the message in both (its record is replaced if it dies
// again), never in neither.
func (q *Queue) bury(ctx context.Context, c corpse, reason string, code uint32, public string) error {
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	m := nats.NewMsg(q.n.deadSubject + "." + c.id)
	m.Data = c.payload
	m.Header.Set(hdrID, c.id)
	m.Header.Set(hdrEnqueued, strconv.FormatInt(c.enqueued.UnixNano(), 10))
	m.Header.Set(hdrFailed, strconv.FormatInt(c.failedAt.UnixNano(), 10))
	m.Header.Set(hdrReason, strconv.Quote(reason))
	m.Header.Set(hdrCode, broker.FormatCode(code))
	m.Header.Set(hdrCause, strconv.Quote(public))
	m.Header.Set(hdrDeliveries, strconv.Itoa(c.deliveries))
	if _, err := q.s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(q.n.dead)); err != nil {
		return q.connError("dead-letter "+c.id, err)
	}
	var err error
	if c.reply != "" {
		err = q.tell(ctx, c.reply, "+TERM")
	} else if err = q.work.DeleteMsg(ctx, c.seq); notFound(err) {
		err = nil
	}
	if err != nil {
		return q.connError("remove dead letter "+c.id+" from the queue", err)
	}
	q.forgetFailure(ctx, c.seq, c.id)
	return nil
}

// recordFailure stores, as the last failure of the message at seq (id) of
// the work stream, cause classified as a dead letter records it: reason
// (UNEXPLAINED for nil, UNCLASSIFIED for a cause with no reason), code and
// public text, never an unclassified cause's text, which may hold payload
// bytes and goes to the logger only. One record per work-stream sequence,
// replacing the one before: a lapse of the message's last delivery
// records it (lapseCause). A replay publishes the message again at a new
// sequence, so its new life starts with none.
func (q *Queue) recordFailure(ctx context.Context, seq uint64, id string, cause error) error {
	reason, code, public, unclassified := broker.Classify(cause)
	if unclassified {
		q.s.opts.Logger.Warn("natsjs: unclassified handler failure", "queue", q.name, "message", id, "err", broker.CauseText(cause))
	}
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	m := nats.NewMsg(q.failureSubject(seq))
	m.Header.Set(hdrID, id)
	m.Header.Set(hdrReason, strconv.Quote(reason))
	m.Header.Set(hdrCode, broker.FormatCode(code))
	m.Header.Set(hdrCause, strconv.Quote(public))
	if _, err := q.s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(q.n.failures)); err != nil {
		return q.connError("record the failure of "+id, err)
	}
	return nil
}

// lapseCause returns what the dead letter of the message at seq records
// when its last lease lapsed: the last failure a Nack reported in its life
// (recordFailure), or LEASE_EXPIRED with no code and no cause when no
// consumer reported one (broker.DeadLetterValue.Reason).
func (q *Queue) lapseCause(ctx context.Context, seq uint64, id string) (reason string, code uint32, public string, err error) {
	rctx, cancel := q.s.bounded(ctx)
	defer cancel()
	raw, err := q.failures.GetLastMsgForSubject(rctx, q.failureSubject(seq))
	if notFound(err) {
		return broker.ReasonLeaseExpired, 0, "", nil
	}
	if err != nil {
		return "", 0, "", q.connError("read the last failure of "+id, err)
	}
	h := raw.Header
	if reason, err = strconv.Unquote(h.Get(hdrReason)); err == nil && reason != "" {
		if public, err = strconv.Unquote(h.Get(hdrCause)); err == nil {
			if code, err = broker.ParseCode(h.Get(hdrCode)); err == nil {
				return reason, code, public, nil
			}
		}
	}
	q.s.opts.Logger.Warn("natsjs: unreadable failure record ignored", "queue", q.name, "message", id, "err", err)
	return broker.ReasonLeaseExpired, 0, "", nil
}

// forgetFailure deletes the failure record of the message at seq, once
// the message left the work stream (acknowledged or buried). Sequences are
// never reused, so a record left behind (the request failed) only takes
// room; it is logged, not returned: the message is settled already.
func (q *Queue) forgetFailure(ctx context.Context, seq uint64, id string) {
	ctx, cancel := q.s.bounded(context.WithoutCancel(ctx))
	defer cancel()
	err := q.failures.Purge(ctx, jetstream.WithPurgeSubject(q.failureSubject(seq)))
	if err != nil && !notFound(err) {
		q.s.opts.Logger.Warn("natsjs: the failure record of a settled message is left behind", "queue", q.name, "message", id, "err", err)
	}
}

// failureSubject is the subject of the failure record of the message at
// seq of the work stream.
func (q *Queue) failureSubject(seq uint64) string {
	return q.n.failureSubject + "." + strconv.FormatUint(seq, 10)
}

// buryLeased dead-letters the message of a lease this Queue holds, with
// cause classified. The payload is read back from the work stream: the
// adapter keeps none.
//
// A message the work stream no longer holds, while its lease is live
// here, was removed through that lease: by an earlier Reject or Nack of
// it that stored the dead letter and terminated the delivery, but did not
// hear the server's answer, and so kept the lease for the caller to try
// again. When the dead letter is there (a record no replay claimed: one
// that names no replay's Nats-Msg-Id), that call did the work, and this
// one is done. Otherwise the message was acknowledged: the error wraps
// broker.LeaseExpired, the lease is of no more use, and errLeaseGone
// tells the caller not to keep it.
func (q *Queue) buryLeased(ctx context.Context, seq uint64, l *lease, cause error) error {
	rctx, cancel := q.s.bounded(ctx)
	raw, err := q.work.GetMsg(rctx, seq)
	cancel()
	if notFound(err) {
		rctx, cancel := q.s.bounded(ctx)
		rec, rerr := q.deadRecord(rctx, l.id)
		cancel()
		switch {
		case rerr == nil && rec.Header.Get(hdrReplayID) == "":
			q.forgetFailure(ctx, seq, l.id)
			return nil
		case rerr != nil && !errors.Is(rerr, broker.DeadLetterNotFound):
			return rerr
		}
		return fmt.Errorf("natsjs: queue %s: message %s is no longer in the queue, nor a dead letter: %w: %w", q.name, l.id, broker.LeaseExpired, errLeaseGone)
	}
	if err != nil {
		return q.connError("read message "+l.id+" to dead-letter it", err)
	}
	reason, code, public, unclassified := broker.Classify(cause)
	if unclassified {
		q.s.opts.Logger.Warn("natsjs: unclassified handler failure", "queue", q.name, "message", l.id, "err", broker.CauseText(cause))
	}
	return q.bury(ctx, corpse{seq: seq, id: l.id, enqueued: l.enqueued, payload: raw.Data, deliveries: l.deliveries,
		failedAt: time.Now(), reply: l.reply}, reason, code, public)
}

// buryLapsed dead-letters, with the last failure reported (else
// LEASE_EXPIRED; see lapseCause), d, a delivery beyond the policy's
// MaxDeliveries: the message had its earlier deliveries under a larger
// MaxDeliveries (another Store's, or this one's before a declaration
// lowered it). Its Deliveries is the count at death, the deliveries it
// had before this one, which no consumer gets (d.delivered-1): "how many
// times the message was delivered before it was abandoned"
// (broker.DeadLetterValue), above the policy's MaxDeliveries when it ran
// past it, as the file store counts a message that a lowered
// MaxDeliveries cut off.
func (q *Queue) buryLapsed(ctx context.Context, d delivery) error {
	id, enqueued := identity(d.msg.Header, d.seq, d.stored)
	reason, code, public, err := q.lapseCause(ctx, d.seq, id)
	if err != nil {
		return err
	}
	return q.bury(ctx, corpse{seq: d.seq, id: id, enqueued: enqueued, payload: d.msg.Data, deliveries: d.delivered - 1,
		failedAt: time.Now(), reply: d.msg.Reply}, reason, code, public)
}

// errLeaseGone is wrapped by a burial that found the lease's message gone
// from the queue (see buryLeased): the lease is not restored.
var errLeaseGone = errors.New("the lease's message left the queue")

// look begins a call that looks at the queue: it checks the store and the
// context, bounds the context by Options.Timeout, and makes the messages
// whose last lease lapsed dead letters (sweepDeaths). The caller calls
// cancel when done.
func (q *Queue) look(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := q.s.begin(ctx, q.name); err != nil {
		return nil, nil, err
	}
	ctx, cancel := q.s.bounded(ctx)
	if err := q.sweepDeaths(ctx); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// sweepDeaths buries the messages whose last allowed lease lapsed. The
// consumer's MaxDeliver is the policy's MaxDeliveries: at such a lapse the
// server stops delivering the message, leaves it in the work stream (a
// work-queue stream keeps what was not acknowledged) and publishes a
// MAX_DELIVERIES advisory, which the queue's deaths stream stores — so the
// death is durable even when no process is listening — and republishes,
// headers only, to the Stores of the queue. Each of them then sweeps at
// its next call that looks (Receive, DeadLetters, replay, delete, a
// publish refused as full): every stored advisory becomes a dead letter
// (with the last failure a Nack reported, else LEASE_EXPIRED: see
// lapseCause; FailedAt the lapse: the ExpiresAt of the lease when this
// Queue handed it out, else the advisory's instant; see buryDeath), its
// message is deleted from the work stream, and the advisory too. Two
// Stores sweeping at once both write the record of a death (one record
// per ID survives) and both delete; nothing is lost or doubled.
//
// A sweep also buries the messages of this Queue's own last leases that
// lapsed, which the server may not have noticed yet (buryLapsedLastLocked),
// and those this Queue nacked that a lowered MaxDeliveries left no
// delivery (buryExhaustedLocked).
//
// A sweep runs when a notice came, when a last lease of this Queue lapsed
// (the server sends no notice of it before the consumer's next pull), and,
// to make up for a notice lost while the connection was down, at a call
// sweepEvery or more after the last sweep.
func (q *Queue) sweepDeaths(ctx context.Context) error {
	due := func() bool {
		return time.Since(time.Unix(0, q.lastSweep.Load())) >= sweepEvery || q.anyLapsedLast(time.Now())
	}
	if !q.unburied.Load() && !due() {
		return nil
	}
	q.sweepMu.Lock()
	defer q.sweepMu.Unlock()
	if !q.unburied.Swap(false) && !due() {
		return nil // swept by another call meanwhile
	}
	q.lastSweep.Store(time.Now().UnixNano())
	done := false
	defer func() {
		if !done {
			q.unburied.Store(true)
		}
	}()
	for seq := uint64(1); ; {
		raw, err := q.deaths.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(q.n.deathSubject))
		if notFound(err) {
			break
		}
		if err != nil {
			return q.connError("read the lapsed last deliveries", err)
		}
		var advisory struct {
			Time       time.Time `json:"timestamp"`
			StreamSeq  uint64    `json:"stream_seq"`
			Deliveries int       `json:"deliveries"`
		}
		if err := json.Unmarshal(raw.Data, &advisory); err != nil || advisory.StreamSeq == 0 {
			q.s.opts.Logger.Warn("natsjs: unreadable MAX_DELIVERIES advisory dropped", "queue", q.name, "seq", raw.Sequence, "err", err)
		} else if err := q.buryDeath(ctx, advisory.StreamSeq, advisory.Deliveries, advisory.Time); err != nil {
			return err
		}
		if err := q.deaths.DeleteMsg(ctx, raw.Sequence); err != nil && !notFound(err) {
			return q.connError("delete a handled MAX_DELIVERIES advisory", err)
		}
		seq = raw.Sequence + 1
	}
	if err := q.buryLapsedLastLocked(ctx); err != nil {
		return err
	}
	if err := q.buryExhaustedLocked(ctx); err != nil {
		return err
	}
	if err := q.sweepAbandonedLocked(ctx); err != nil {
		return err
	}
	done = true
	return nil
}

// lapsedLast returns the leases this Queue handed out on a delivery the
// policy allows no more of, which lapsed before now and which no Extend
// holds, and whose delivery was the last when it lapsed: handed out as the
// last the policy allowed (lease.last), or lapsed after a declaration of
// this Queue lowered MaxDeliveries to or below its count, which set the
// consumer's MaxDeliver first. Their messages are dead since their lapse,
// and the server delivers them to no one else. The server may not know
// it yet: nats-server notices the lapse of a redelivered message's last
// lease only at the consumer's next pull (and then sends the
// MAX_DELIVERIES advisory), and until then the message is pending, so no
// sweep of advisories or of abandoned messages sees it, while it holds a
// place of the queue's Capacity.
//
// A lease that lapsed with deliveries left, before the declaration that
// lowered MaxDeliveries to or below its count, is not among them: the
// server handed the message back at that lapse, and may have delivered it
// again, to another Store, whose lease the declaration does not cut off.
// Buried from this Queue's stale lease, that message would be a dead
// letter while the other Store handles it, and its Ack would still
// succeed. Such a message is the server's to give up: the consumer's
// lowered MaxDeliver stops its redelivery, and the server sends the
// advisory at the next pull, which a sweep buries (buryDeath, dated by
// lapseDeathLocked).
func (q *Queue) lapsedLast(now time.Time) map[uint64]*lease {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out map[uint64]*lease
	for seq, l := range q.leases {
		if q.lapsedLastLocked(l, now) {
			if out == nil {
				out = map[uint64]*lease{}
			}
			out[seq] = l
		}
	}
	return out
}

// anyLapsedLast reports whether lapsedLast would return a lease.
func (q *Queue) anyLapsedLast(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range q.leases {
		if q.lapsedLastLocked(l, now) {
			return true
		}
	}
	return false
}

// lapsedLastLocked reports whether l is one of lapsedLast's. The caller
// holds q.mu, which guards what it reads: the policy, lowered and l's
// extending.
func (q *Queue) lapsedLastLocked(l *lease, now time.Time) bool {
	return l.deliveries >= q.policy.MaxDeliveries && (l.last || q.lowered.Before(l.expiresAt)) && !now.Before(l.expiresAt) && l.extending == nil
}

// buryLapsedLast buries raw, the message at seq whose last lease l
// lapsed (or was nacked, when a lowered MaxDeliveries made it the last),
// as failed at failedAt. A message whose death is recorded already (a
// Reject or Nack that stopped after it wrote the record, and whose
// restored lease then lapsed; see deathRecorded) keeps its record, as in
// buryAbandoned: its delivery is only terminated.
func (q *Queue) buryLapsedLast(ctx context.Context, seq uint64, l *lease, raw *jetstream.RawStreamMsg, failedAt time.Time) error {
	if recorded, err := q.deathRecorded(ctx, l.id, raw.Header); err != nil {
		return err
	} else if recorded {
		if err := q.tell(ctx, l.reply, "+TERM"); err != nil {
			return q.connError("remove dead letter "+l.id+" from the queue", err)
		}
		return nil
	}
	reason, code, public, err := q.lapseCause(ctx, seq, l.id)
	if err != nil {
		return err
	}
	return q.bury(ctx, corpse{seq: seq, id: l.id, enqueued: l.enqueued, payload: raw.Data, deliveries: l.deliveries,
		failedAt: failedAt, reply: l.reply}, reason, code, public)
}

// deathRecorded reports whether dead letter id has a record of the death
// of the message with headers h, which the work stream still holds. Any
// record of id does, but one a replay claimed when the message is a
// replay's copy of id: that record is of an earlier death, left by a
// replay that published the copy and stopped before it deleted the
// record (see ReplayDeadLetter). Kept, it would hide the copy's own
// death, and a later replay, publishing the record's Nats-Msg-Id again,
// would be folded into the dead copy: nothing queued, the record deleted,
// the message lost. So that death is buried as any other, with a fresh
// record, which a later replay publishes under a fresh Nats-Msg-Id.
func (q *Queue) deathRecorded(ctx context.Context, id string, h nats.Header) (bool, error) {
	raw, err := q.deadRecord(ctx, id)
	if errors.Is(err, broker.DeadLetterNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	replayCopy := strings.HasPrefix(h.Get(jetstream.MsgIDHeader), replayIDPrefix(id))
	return raw.Header.Get(hdrReplayID) == "" || !replayCopy, nil
}

// buryLapsedLastLocked buries the messages of lapsedLast as dead letters
// (the last failure a Nack reported, else LEASE_EXPIRED; see lapseCause),
// FailedAt the lease's ExpiresAt and Deliveries its count
// (see buryLapsedLast): the dead letter is stored, then the lease's
// delivery terminated, which
// removes the message from the work stream (and its place from the
// Capacity), and the lease is forgotten. No receipt can act on such a
// message any more (this Queue refuses a lapsed lease, and the server
// delivers the message to no one else), so nothing races the burial; an
// advisory the server sends later finds the message gone. Called with
// sweepMu held.
func (q *Queue) buryLapsedLastLocked(ctx context.Context) error {
	for seq, l := range q.lapsedLast(time.Now()) {
		rctx, cancel := q.s.bounded(ctx)
		raw, err := q.work.GetMsg(rctx, seq)
		cancel()
		if err != nil && !notFound(err) {
			return q.connError("read message "+l.id+" whose last lease lapsed", err)
		}
		if err == nil {
			if err := q.buryLapsedLast(ctx, seq, l, raw, l.expiresAt); err != nil {
				return err
			}
		}
		q.mu.Lock()
		if q.leases[seq] == l {
			delete(q.leases, seq)
		}
		q.mu.Unlock()
	}
	return nil
}

// exhausted returns the messages this Queue nacked whose retry delay has
// not ended and whose count is at or above the policy's MaxDeliveries: a
// declaration lowered it since the Nack, and they have no delivery left.
func (q *Queue) exhausted(now time.Time) map[uint64]*lease {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out map[uint64]*lease
	for seq, r := range q.retries {
		if r.l.deliveries >= q.policy.MaxDeliveries && r.at.After(now) {
			if out == nil {
				out = map[uint64]*lease{}
			}
			out[seq] = r.l
		}
	}
	return out
}

// buryExhaustedLocked buries the messages of exhausted as dead letters, as
// the file store does at a declaration that lowers MaxDeliveries to or
// below a waiting message's count: FailedAt now (the declaration, which
// sweeps at once), Deliveries the count the message had, and the last
// failure a Nack reported (the Nack that began the delay recorded it; see
// lapseCause). The dead letter is stored, then the delivery the Nack
// ended is terminated: the server applies that to the message whatever
// delivery it names, and removes it from the work stream, so it no longer
// holds a place of the Capacity. Nothing races the burial: the message
// waits out its retry delay (the server's instant is later than this
// Queue's), so no consumer holds it, and the server delivers it to no one
// any more, since the declaration set the consumer's MaxDeliver before
// this Queue took up the new policy. A message whose retry delay has
// ended is left alone: another Store may have taken it since, on a
// delivery the declaration did not cut off. The server delivers it no
// more either; a later sweep buries it (its advisory, or as given up).
// Called with sweepMu held.
func (q *Queue) buryExhaustedLocked(ctx context.Context) error {
	now := time.Now()
	for seq, l := range q.exhausted(now) {
		rctx, cancel := q.s.bounded(ctx)
		raw, err := q.work.GetMsg(rctx, seq)
		cancel()
		if err != nil && !notFound(err) {
			return q.connError("read message "+l.id+" that has no delivery left", err)
		}
		if err == nil {
			if err := q.buryLapsedLast(ctx, seq, l, raw, now); err != nil {
				return err
			}
		}
		q.mu.Lock()
		if r, ok := q.retries[seq]; ok && r.l == l {
			delete(q.retries, seq)
		}
		q.mu.Unlock()
	}
	return nil
}

// sweepAbandonedLocked buries the messages the consumer gave up on
// without an advisory any stream stored. The server drops an advisory nothing
// listens for, and a restarted server restores its streams in parallel:
// its consumer can notice a lapse from before the restart, and give the
// message up, before the deaths stream listens again. Such a message
// stays in the work stream, delivered but no longer pending, where the
// consumer never goes back to it. The consumer's info does not list what
// is pending, so a delivered message still stored counts as given up
// when it lies at or below the ack floor, or when nothing is pending at
// all (acknowledged messages are deleted from a work-queue stream; the
// stored ack floor moves only at an acknowledgement, so in an idle queue
// only the second holds).
//
// The server forgets an acknowledged message's lease a moment before it
// deletes the message, so a message is buried only when a later sweep, at
// least abandonGrace on, finds it given up still; until then every call
// that looks sweeps again. Its FailedAt is that later sweep's instant and
// its Deliveries the policy's MaxDeliveries, or, when this Queue handed
// the last lease out, that lease's ExpiresAt and count: the server's
// instant of the lapse and count were never told. A message whose death
// is recorded already (a bury that stopped before its delete; see
// deathRecorded) is only deleted. Called with sweepMu held.
func (q *Queue) sweepAbandonedLocked(ctx context.Context) error {
	ci, err := q.cons.Info(ctx)
	if err != nil {
		return q.connError("read the consumer's state", err)
	}
	last := ci.AckFloor.Stream
	if ci.NumAckPending == 0 {
		last = ci.Delivered.Stream
	}
	si, err := q.work.Info(ctx)
	if err != nil {
		return q.connError("read the queue's first message", err)
	}
	suspects := map[uint64]time.Time{}
	defer func() {
		q.suspects = suspects
		if len(suspects) > 0 {
			q.unburied.Store(true)
		}
	}()
	if si.State.Msgs == 0 || si.State.FirstSeq > last {
		return nil
	}
	q.mu.Lock()
	maxDeliveries := q.policy.MaxDeliveries
	q.mu.Unlock()
	now := time.Now()
	for seq := si.State.FirstSeq; seq <= last; {
		raw, err := q.work.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(q.n.workSubject))
		if notFound(err) {
			break
		}
		if err != nil {
			return q.connError("read a delivered message no lease holds", err)
		}
		if raw.Sequence > last {
			break
		}
		seq = raw.Sequence + 1
		first, ok := q.suspects[raw.Sequence]
		if !ok || now.Sub(first) < abandonGrace {
			if !ok {
				first = now
			}
			suspects[raw.Sequence] = first
			continue
		}
		if err := q.buryAbandoned(ctx, raw, maxDeliveries, now); err != nil {
			return err
		}
	}
	return nil
}

// abandonGrace is how long a message must stay given up before
// sweepAbandonedLocked buries it.
const abandonGrace = time.Second

// buryAbandoned dead-letters raw, a message of the work stream the
// consumer gave up on; see sweepAbandonedLocked. Its Deliveries is the
// count at death (broker.DeadLetterValue): that of the lapsed lease this Queue
// holds when it was the last delivery, which exceeds the policy's when
// MaxDeliveries was lowered during the lease, as the file store records
// it; else deliveries, the policy's MaxDeliveries, which is the server's
// count unless the policy changed.
func (q *Queue) buryAbandoned(ctx context.Context, raw *jetstream.RawStreamMsg, deliveries int, now time.Time) error {
	id, enqueued := identity(raw.Header, raw.Sequence, raw.Time)
	if recorded, err := q.deathRecorded(ctx, id, raw.Header); err != nil {
		return err
	} else if recorded {
		if err := q.work.DeleteMsg(ctx, raw.Sequence); err != nil && !notFound(err) {
			return q.connError("remove dead letter "+id+" from the queue", err)
		}
		return nil
	}
	failedAt := now
	q.mu.Lock()
	// The lease this Queue holds may be of an earlier delivery: another
	// Store (or a pull whose answer this one lost) took the message again
	// after it lapsed, and this Queue keeps a lapsed lease for a while
	// (leaseMemory). Its instant and count would then date the death at
	// that earlier lapse, before the later delivery even began. No
	// advisory names the count here (as the server's does for buryDeath),
	// but the server gives a message up only after a lease on a delivery
	// the policy allows no more of: so only such a lease, under the policy
	// of its hand-out or the one in force, can be the last.
	if l := q.leases[raw.Sequence]; l != nil && (l.last || l.deliveries >= deliveries) && l.expiresAt.Before(failedAt) {
		failedAt, deliveries = q.lapseDeathLocked(l, failedAt), l.deliveries
	}
	q.mu.Unlock()
	reason, code, public, err := q.lapseCause(ctx, raw.Sequence, id)
	if err != nil {
		return err
	}
	return q.bury(ctx, corpse{seq: raw.Sequence, id: id, enqueued: enqueued, payload: raw.Data, deliveries: deliveries, failedAt: failedAt},
		reason, code, public)
}

// sweepEvery bounds how long a death whose notice was lost (the connection
// was down) waits for a sweep.
const sweepEvery = time.Minute

// lapseDeathLocked returns when the message of l, a lapsed lease of this
// Queue on the message's last delivery, died, given that its death was
// noticed at noticed: at the lapse, unless l lapsed with deliveries left
// at hand-out (not lease.last) and a declaration of this Queue lowered
// MaxDeliveries to or below its count after the lapse and before the
// notice. The message then died at that declaration, which left it no
// delivery, as the file store dates it. Called with q.mu held.
func (q *Queue) lapseDeathLocked(l *lease, noticed time.Time) time.Time {
	if !l.last && q.lowered.After(l.expiresAt) && q.lowered.Before(noticed) {
		return q.lowered
	}
	return l.expiresAt
}

// buryDeath dead-letters the message at seq of the work stream, whose last
// lease lapsed, unless it is gone already. FailedAt is the lapse: the
// ExpiresAt of that lease when this Queue handed it out, else the
// advisory's instant. (nats-server 2.15 notices the lapse of a lease
// that was not the first delivery only at the consumer's next pull, so
// the advisory may come late.) A message whose death is recorded already
// keeps its record and is only deleted (see deathRecorded): a Nack or
// Reject on the last delivery stores its dead letter, then terminates
// the delivery, and when its acknowledgement reaches the server after
// the lease's deadline (see Lease expiry in the package documentation),
// the advisory of that lapse can be swept between the two; written again
// here, the record would lose the cause the consumer reported.
func (q *Queue) buryDeath(ctx context.Context, seq uint64, deliveries int, failedAt time.Time) error {
	q.mu.Lock()
	if l := q.leases[seq]; l != nil && l.deliveries == deliveries && l.expiresAt.Before(failedAt) {
		failedAt = q.lapseDeathLocked(l, failedAt)
	}
	q.mu.Unlock()
	m, err := q.work.GetMsg(ctx, seq)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return q.connError("read a message whose last lease lapsed", err)
	}
	id, enqueued := identity(m.Header, seq, m.Time)
	if recorded, err := q.deathRecorded(ctx, id, m.Header); err != nil {
		return err
	} else if recorded {
		if err := q.work.DeleteMsg(ctx, seq); err != nil && !notFound(err) {
			return q.connError("remove dead letter "+id+" from the queue", err)
		}
		return nil
	}
	reason, code, public, err := q.lapseCause(ctx, seq, id)
	if err != nil {
		return err
	}
	return q.bury(ctx, corpse{seq: seq, id: id, enqueued: enqueued, payload: m.Data, deliveries: deliveries, failedAt: failedAt},
		reason, code, public)
}

// DeadLetters returns up to max dead letters, oldest FailedAt first,
// without removing them; see broker.DeadLetterReader.
//
// The dead-letter stream's order is the order the records were written,
// which is not FailedAt's: the death of a message whose last lease lapsed
// is written at a later sweep (for a redelivered message, after the
// server noticed at a later pull) with the lapse as FailedAt, after
// records of messages that died since. So every record is read and the
// oldest max are returned.
func (q *Queue) DeadLetters(ctx context.Context, max int) ([]broker.DeadLetterValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Queue")
	}
	if max <= 0 {
		return nil, fmt.Errorf("natsjs: queue %s: DeadLetters max %d must be positive: %w", q.name, max, broker.InvalidBatchSize)
	}
	ctx, cancel, err := q.look(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var out []broker.DeadLetterValue
	for seq := uint64(1); ; {
		raw, err := q.dead.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(q.n.deadSubject+".*"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, q.connError("read dead letters", err)
		}
		dl, err := decodeDead(raw)
		if err != nil {
			return nil, fmt.Errorf("natsjs: queue %s: dead letter at sequence %d of %s: %w", q.name, raw.Sequence, q.n.dead, err)
		}
		out = append(out, dl)
		seq = raw.Sequence + 1
	}
	slices.SortStableFunc(out, func(a, b broker.DeadLetterValue) int { return a.FailedAt.Compare(b.FailedAt) })
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}

// decodeDead reads a record of the dead-letter stream.
func decodeDead(raw *jetstream.RawStreamMsg) (broker.DeadLetterValue, error) {
	h := raw.Header
	var dl broker.DeadLetterValue
	var err error
	if dl.FailedAt, err = headerTime(h, hdrFailed); err != nil {
		return dl, err
	}
	if dl.Message.EnqueuedAt, err = headerTime(h, hdrEnqueued); err != nil {
		return dl, err
	}
	if dl.Message.ID = h.Get(hdrID); !validID(dl.Message.ID) {
		return dl, fmt.Errorf("header %s %q is not a message ID", hdrID, dl.Message.ID)
	}
	if dl.Reason, err = strconv.Unquote(h.Get(hdrReason)); err != nil {
		return dl, fmt.Errorf("header %s %q: %w", hdrReason, h.Get(hdrReason), err)
	}
	if dl.Cause, err = strconv.Unquote(h.Get(hdrCause)); err != nil {
		return dl, fmt.Errorf("header %s %q: %w", hdrCause, h.Get(hdrCause), err)
	}
	if dl.Code, err = broker.ParseCode(h.Get(hdrCode)); err != nil {
		return dl, err
	}
	if dl.Deliveries, err = strconv.Atoi(h.Get(hdrDeliveries)); err != nil {
		return dl, fmt.Errorf("header %s %q: %w", hdrDeliveries, h.Get(hdrDeliveries), err)
	}
	dl.Message.Payload = clone(raw.Data)
	return dl, nil
}

// deadRecord returns the dead-letter record of id, or an error wrapping
// broker.DeadLetterNotFound. An id that is not one this adapter mints is
// never sent to the server (it could be a subject wildcard).
func (q *Queue) deadRecord(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	if !validID(id) {
		return nil, fmt.Errorf("natsjs: queue %s: dead letter %q: %w", q.name, id, broker.DeadLetterNotFound)
	}
	raw, err := q.dead.GetLastMsgForSubject(ctx, q.n.deadSubject+"."+id)
	if notFound(err) {
		return nil, fmt.Errorf("natsjs: queue %s: dead letter %q: %w", q.name, id, broker.DeadLetterNotFound)
	}
	if err != nil {
		return nil, q.connError("read dead letter "+id, err)
	}
	return raw, nil
}

// notFound reports whether the server answered that a message does not
// exist.
func notFound(err error) bool {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeMessageNotFound || api.ErrorCode == codeDeleteFailed) {
		return true
	}
	// Stream.DeleteMsg reports the server's refusal as
	// ErrMsgDeleteUnsuccessful with the API error as text only.
	return errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "err_code="+strconv.Itoa(codeDeleteFailed)+" ")
}

// codeDeleteFailed is JSStreamMsgDeleteFailedF, the server's answer to a
// delete of a sequence it does not hold.
const codeDeleteFailed = 10057

// identity returns the ID and EnqueuedAt of a stored message: its headers'
// when a replay or this adapter set them, else its stream sequence and the
// server's store instant (a message published by another client).
func identity(h nats.Header, seq uint64, stored time.Time) (string, time.Time) {
	id := h.Get(hdrID)
	if !validID(id) {
		id = messageID(seq)
	}
	enqueued, err := headerTime(h, hdrEnqueued)
	if err != nil {
		enqueued = stored
	}
	return id, enqueued
}
