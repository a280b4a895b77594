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
	return nil
}

// buryLeased dead-letters the message of a lease this Queue holds, with
// cause classified. The payload is read back from the work stream: the
// adapter keeps none.
func (q *Queue) buryLeased(ctx context.Context, seq uint64, l *lease, cause error) error {
	rctx, cancel := q.s.bounded(ctx)
	raw, err := q.work.GetMsg(rctx, seq)
	cancel()
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

// buryLapsed dead-letters, as LEASE_EXPIRED with MaxDeliveries deliveries,
// a message the server delivered more often than the policy allows (a
// policy change lowered MaxDeliveries after its last lease was taken).
func (q *Queue) buryLapsed(ctx context.Context, d delivery, policy broker.PolicyValue) error {
	id, enqueued := identity(d.msg.Header, d.seq, d.stored)
	return q.bury(ctx, corpse{seq: d.seq, id: id, enqueued: enqueued, payload: d.msg.Data, deliveries: policy.MaxDeliveries,
		failedAt: time.Now(), reply: d.msg.Reply}, broker.ReasonLeaseExpired, 0, "")
}

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
// (reason LEASE_EXPIRED, FailedAt the server's instant of the lapse), its
// message is deleted from the work stream, and the advisory too. Two
// Stores sweeping at once both write the record of a death (one record
// per ID survives) and both delete; nothing is lost or doubled.
//
// A sweep also buries the messages of this Queue's own last leases that
// lapsed, which the server may not have noticed yet (buryLapsedLastLocked).
//
// A notice lost while the connection was down is made up for by a sweep at
// least every sweepEvery, notice or not.
func (q *Queue) sweepDeaths(ctx context.Context) error {
	if !q.unburied.Load() && time.Since(time.Unix(0, q.lastSweep.Load())) < sweepEvery {
		return nil
	}
	q.sweepMu.Lock()
	defer q.sweepMu.Unlock()
	if !q.unburied.Swap(false) && time.Since(time.Unix(0, q.lastSweep.Load())) < sweepEvery {
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
	if err := q.sweepAbandonedLocked(ctx); err != nil {
		return err
	}
	done = true
	return nil
}

// lapsedLast returns the leases this Queue handed out on a delivery the
// policy allows no more of, which lapsed before now and which no Extend
// holds: their messages are dead since their lapse. The server may not
// know it yet: nats-server notices the lapse of a redelivered message's
// last lease only at the consumer's next pull (and then sends the
// MAX_DELIVERIES advisory), and until then the message is pending, so no
// sweep of advisories or of abandoned messages sees it, while it holds a
// place of the queue's Capacity.
func (q *Queue) lapsedLast(now time.Time) map[uint64]*lease {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out map[uint64]*lease
	for seq, l := range q.leases {
		if l.deliveries >= q.policy.MaxDeliveries && !now.Before(l.expiresAt) && l.extending == nil {
			if out == nil {
				out = map[uint64]*lease{}
			}
			out[seq] = l
		}
	}
	return out
}

// buryLapsedLast buries raw, the message at seq whose last lease l
// lapsed. A message whose death is recorded already (a Reject or Nack
// that stopped after it wrote the record, and whose restored lease then
// lapsed; see deathRecorded) keeps its record, as in buryAbandoned: its
// delivery is only terminated.
func (q *Queue) buryLapsedLast(ctx context.Context, seq uint64, l *lease, raw *jetstream.RawStreamMsg) error {
	if recorded, err := q.deathRecorded(ctx, l.id, raw.Header); err != nil {
		return err
	} else if recorded {
		if err := q.tell(ctx, l.reply, "+TERM"); err != nil {
			return q.connError("remove dead letter "+l.id+" from the queue", err)
		}
		return nil
	}
	return q.bury(ctx, corpse{seq: seq, id: l.id, enqueued: l.enqueued, payload: raw.Data, deliveries: l.deliveries,
		failedAt: l.expiresAt, reply: l.reply}, broker.ReasonLeaseExpired, 0, "")
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

// buryLapsedLastLocked buries the messages of lapsedLast as LEASE_EXPIRED
// dead letters, FailedAt the lease's ExpiresAt and Deliveries its count
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
			if err := q.buryLapsedLast(ctx, seq, l, raw); err != nil {
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
		failedAt, deliveries = l.expiresAt, l.deliveries
	}
	q.mu.Unlock()
	return q.bury(ctx, corpse{seq: raw.Sequence, id: id, enqueued: enqueued, payload: raw.Data, deliveries: deliveries, failedAt: failedAt},
		broker.ReasonLeaseExpired, 0, "")
}

// sweepEvery bounds how long a death whose notice was lost (the connection
// was down) waits for a sweep.
const sweepEvery = time.Minute

// buryDeath dead-letters the message at seq of the work stream, whose last
// lease lapsed, unless it is gone already. FailedAt is the lapse: the
// ExpiresAt of that lease when this Queue handed it out, else the
// advisory's instant. (nats-server 2.15 notices the lapse of a lease
// that was not the first delivery only at the consumer's next pull, so
// the advisory may come late.)
func (q *Queue) buryDeath(ctx context.Context, seq uint64, deliveries int, failedAt time.Time) error {
	q.mu.Lock()
	if l := q.leases[seq]; l != nil && l.deliveries == deliveries && l.expiresAt.Before(failedAt) {
		failedAt = l.expiresAt
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
	return q.bury(ctx, corpse{seq: seq, id: id, enqueued: enqueued, payload: m.Data, deliveries: deliveries, failedAt: failedAt},
		broker.ReasonLeaseExpired, 0, "")
}

// logUnclassified sends the text of a cause with no reason to the logger,
// keyed by message ID: it may hold payload bytes, so it never reaches the
// server.
func (q *Queue) logUnclassified(id string, cause error) {
	if _, _, _, unclassified := broker.Classify(cause); unclassified {
		q.s.opts.Logger.Warn("natsjs: unclassified handler failure", "queue", q.name, "message", id, "err", broker.CauseText(cause))
	}
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
	if q == nil {
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

// ReplayDeadLetter moves dead letter id back into the queue, receivable at
// once, its delivery count reset (it is a new message of the work stream),
// keeping its ID, payload and EnqueuedAt; it closes this Queue's wake
// signal. See broker.DeadLetterManager. A queue at its Capacity refuses
// the replay (broker.QueueFull), as every broker of the port does; a
// message whose last lease lapsed holds no place (see Queue.full).
//
// Of replays and deletes of one dead letter racing each other, one
// succeeds; the others find it gone (broker.DeadLetterNotFound) and queue
// nothing. The replay first claims the record (claimDead), which a racing
// replay or delete of the record it read makes fail; then it publishes
// the message, with the Nats-Msg-Id its claim names, and deletes the
// record. A replay that stops between the two (its process dies, its
// delete fails) leaves the record claimed, naming the Nats-Msg-Id it
// published under, until the claim ends; a later replay publishes the
// same Nats-Msg-Id, which the work stream's duplicate window (the
// DedupWindow) folds into the first one's message while that message
// awaits its first delivery; otherwise it queues the message again (see
// publishReplay). The claim ends with the call, but a
// publish the server did not answer may be stored after it: such a
// replay leaves its claim, ended, for a delete to finish the replay
// rather than remove the record (see releaseDead and DeleteDeadLetter).
// A replay whose claim a death of the message replaced before it
// published (see renameClaim) queues nothing and returns an error that
// says so; the new record is there to replay.
func (q *Queue) ReplayDeadLetter(ctx context.Context, id string) error {
	if q == nil {
		return nilReceiver("Queue")
	}
	ctx, cancel, err := q.look(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	raw, err := q.deadRecord(ctx, id)
	if err != nil {
		return err
	}
	return q.replay(ctx, id, raw)
}

// replay replays raw, the record of dead letter id: it claims the record,
// publishes the message and deletes the record.
func (q *Queue) replay(ctx context.Context, id string, raw *jetstream.RawStreamMsg) error {
	enqueued, err := headerTime(raw.Header, hdrEnqueued)
	if err != nil {
		return fmt.Errorf("natsjs: queue %s: dead letter %s: %w", q.name, id, err)
	}
	c, err := q.claimDead(ctx, id, raw)
	if err != nil {
		return err
	}
	// No request after the claim ends: another call may take the record
	// over then.
	ctx, cancelClaim := context.WithDeadline(ctx, c.until)
	defer cancelClaim()
	seq, sent, err := q.publishReplay(ctx, id, raw.Data, enqueued, &c)
	if errors.Is(err, errClaimLost) {
		return err // the record is no longer the claim's to release
	}
	if err != nil {
		q.releaseDead(ctx, id, c, sent)
		return err
	}
	q.wakeReady(seq)
	// The claim is gone only when the message died again since, and its
	// new record replaced the claim: the replay is done all the same.
	if err := q.dead.DeleteMsg(ctx, c.seq); err != nil && !notFound(err) {
		return q.connError("replayed dead letter "+id+", but could not delete its record", err)
	}
	return nil
}

// publishReplay publishes the message of dead letter id (its payload and
// EnqueuedAt) for the replay that holds claim c, and returns its sequence
// in the work stream. It publishes through full, as Publish does: the
// places of messages whose last lease lapsed are free, whether or not the
// server noticed yet.
//
// sent reports, with an error, whether a publish of it may have been
// stored all the same (see refused).
//
// The work stream takes a publish with the claim's Nats-Msg-Id for a
// duplicate when an earlier replay of the record published the message
// and stopped before it deleted the record. That earlier copy stands for
// this one only while it awaits its first delivery: then it is visible,
// and its next delivery counts 1, as the replay promises. Once it is
// gone (acknowledged, or dead since, its record replaced by a later
// death), or was delivered (it may have died unnoticed since; see
// earlierCopy), the message is published again under a Nats-Msg-Id of
// this claim's own, so that the replay never reports success with
// nothing queued, nor with the message folded into a dead copy; and a
// delivered copy is then deleted from the work stream. A copy that was
// acknowledged, or that a consumer holds meanwhile, is then processed
// twice, which at-least-once permits; a loss it does not.
//
// Before it publishes under that fresh Nats-Msg-Id, it writes the ID into
// its claim (c, which it updates): should this replay stop before it
// deletes the record, the next replay or delete of it publishes the
// fresh ID again, which the work stream folds into this replay's copy.
// When the record changed since the claim (the message died again, and
// its new record replaced the claim), nothing is published, and the
// error wraps errClaimLost.
func (q *Queue) publishReplay(ctx context.Context, id string, payload []byte, enqueued time.Time, c *deadClaim) (seq uint64, sent bool, err error) {
	m := q.message(payload, enqueued)
	m.Header.Set(hdrID, id)
	publish := func(msgID string) (*jetstream.PubAck, bool, error) {
		var ack *jetstream.PubAck
		err := q.full(ctx, func() (err error) {
			ack, err = q.s.js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(q.n.work))
			return err
		})
		if err != nil {
			return nil, !refused(err), q.publishError(err)
		}
		return ack, false, nil
	}
	ack, sent, err := publish(c.replayID)
	if err != nil || !ack.Duplicate {
		return ackSequence(ack), sent, err
	}
	earlier := ack.Sequence
	stored, delivered, err := q.earlierCopy(ctx, id, earlier)
	if err != nil {
		return 0, false, err
	}
	if stored && !delivered {
		return earlier, false, nil
	}
	// The claim's sequence in the dead-letter stream names no first claim
	// (those are named after a record no claim wrote): a fresh ID.
	if err := q.renameClaim(ctx, id, c, replayIDPrefix(id)+strconv.FormatUint(c.seq, 10)); err != nil {
		return 0, false, err
	}
	if ack, sent, err = publish(c.replayID); err != nil {
		return 0, sent, err
	}
	if stored {
		// The earlier copy, delivered, may be dead already: its death,
		// noticed at a later pull, would record a dead letter of the
		// message this replay has just queued. A consumer that holds it
		// alive processes the message a second time all the same.
		if err := q.work.DeleteMsg(ctx, earlier); err != nil && !notFound(err) {
			q.s.opts.Logger.Warn("natsjs: a replay could not remove the copy an earlier replay queued; the message may be processed twice",
				"queue", q.name, "message", id, "seq", earlier, "err", err)
		}
	}
	return ack.Sequence, false, nil
}

// earlierCopy reports whether the work stream stores the message at seq,
// a copy of dead letter id an earlier replay queued, and whether its
// consumer has delivered it. The consumer delivers messages for the first time in stream order,
// so a copy above the last sequence it delivered awaits its first
// delivery: alive, and its next delivery counts 1. A delivered one may be
// leased or waiting for a redelivery, or dead: its last lease may have
// lapsed unseen by this Store, which nats-server notices only at its
// consumer's next pull (see lapsedLast), and until then the copy stays
// stored.
func (q *Queue) earlierCopy(ctx context.Context, id string, seq uint64) (stored, delivered bool, err error) {
	if _, err := q.work.GetMsg(ctx, seq); notFound(err) {
		return false, false, nil
	} else if err != nil {
		return false, false, q.connError("read the message an earlier replay of dead letter "+id+" queued", err)
	}
	info, err := q.cons.Info(ctx)
	if err != nil {
		return false, false, q.connError("read whether the consumer delivered the message an earlier replay of dead letter "+id+" queued", err)
	}
	return true, seq <= info.Delivered.Stream, nil
}

// errClaimLost is wrapped by a replay whose claim on the dead-letter
// record was replaced before it published: see renameClaim.
var errClaimLost = errors.New("the record changed during the replay, which queued nothing")

// renameClaim writes claim c of dead letter id again, naming replayID as
// the replay's Nats-Msg-Id, expecting the claim to be the record's last
// write, and updates c. A record that changed since (a death of the
// message replaced the claim, or, after the claim ended, another call
// took the record over) is left as it is: the error wraps errClaimLost.
func (q *Queue) renameClaim(ctx context.Context, id string, c *deadClaim, replayID string) error {
	m := deadCopy(c.record)
	m.Header.Set(hdrReplayID, replayID)
	m.Header.Set(hdrClaimUntil, strconv.FormatInt(c.until.UnixNano(), 10))
	ack, err := q.s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(c.seq), jetstream.WithExpectStream(q.n.dead))
	if isWrongLast(err) {
		return fmt.Errorf("natsjs: queue %s: dead letter %q: %w (the message died again, or another call took the record over after the claim ended)", q.name, id, errClaimLost)
	}
	if err != nil {
		return q.connError("name the Nats-Msg-Id of dead letter "+id+"'s replay in its claim", err)
	}
	c.seq, c.replayID = ack.Sequence, replayID
	return nil
}

// refused reports whether a publish failed with the server's answer (or
// before it was sent), so that it stored nothing and never will; any
// other failure (a timeout, a lost connection) leaves a publish that may
// have been stored, or may yet be: the server can store it after the
// call that sent it gave up.
func refused(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) || errors.Is(err, nats.ErrMaxPayload)
}

// ackSequence is the stream sequence ack names; 0 for none.
func ackSequence(ack *jetstream.PubAck) uint64 {
	if ack == nil {
		return 0
	}
	return ack.Sequence
}

// replayIDPrefix begins every Nats-Msg-Id a replay of dead letter id
// publishes under.
func replayIDPrefix(id string) string { return "replay-" + id + "-" }

// A deadClaim is a replay's claim on a dead-letter record.
type deadClaim struct {
	record   *jetstream.RawStreamMsg // the record claimed
	seq      uint64                  // the claim's sequence in the dead-letter stream
	replayID string                  // the replayed message's Nats-Msg-Id
	until    time.Time               // when the claim ends
}

// maxClaim bounds how long a claim on a dead letter lasts, and so how long
// a replay that stopped halfway keeps other calls off the record.
const maxClaim = time.Minute

// claimDead claims raw, the record of dead letter id, for a replay: it
// writes the record again, marked with when the claim ends (the call's
// deadline, at most Options.Timeout and maxClaim from now), expecting raw
// to be its subject's last record. That compare-and-set is what a racing
// replay or delete that read the same record makes fail (the delete
// removes raw; a claim replaces it, one record per subject), and this
// call then finds the dead letter gone. A live claim of another call is
// left to it, as gone too: that replay is under way.
//
// The first claim of a record names the replay's Nats-Msg-Id after it
// ("replay-<id>-<its sequence>"), and every later claim keeps it, so that
// a replay after one that stopped halfway publishes the same message. A
// replay that publishes under a fresh Nats-Msg-Id names that one in its
// claim first (see publishReplay), and the later claims keep it instead.
func (q *Queue) claimDead(ctx context.Context, id string, raw *jetstream.RawStreamMsg) (deadClaim, error) {
	now := time.Now()
	if claimed(raw.Header, now) {
		return deadClaim{}, fmt.Errorf("natsjs: queue %s: dead letter %q is being replayed: %w", q.name, id, broker.DeadLetterNotFound)
	}
	until := now.Add(min(q.s.opts.Timeout, maxClaim))
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(until) {
		until = deadline
	}
	replayID := raw.Header.Get(hdrReplayID)
	if replayID == "" {
		replayID = replayIDPrefix(id) + strconv.FormatUint(raw.Sequence, 10)
	}
	m := deadCopy(raw)
	m.Header.Set(hdrReplayID, replayID)
	m.Header.Set(hdrClaimUntil, strconv.FormatInt(until.UnixNano(), 10))
	ack, err := q.s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(raw.Sequence), jetstream.WithExpectStream(q.n.dead))
	if isWrongLast(err) {
		return deadClaim{}, fmt.Errorf("natsjs: queue %s: dead letter %q was replayed or deleted by a racing call: %w", q.name, id, broker.DeadLetterNotFound)
	}
	if err != nil {
		return deadClaim{}, q.publishError(err)
	}
	return deadClaim{record: raw, seq: ack.Sequence, replayID: replayID, until: until}, nil
}

// releaseDead gives up claim c of dead letter id after the replay failed,
// so that the next replay or delete need not wait for the claim to end. It
// keeps the Nats-Msg-Id the replay published under last (the claim's,
// or the fresh one publishReplay named in it), for the next replay to
// publish again.
// When the failed publish may have been stored all the same, or may yet
// be (sent; see refused), or an earlier replay's may (the record claimed
// carried an ended claim), the record keeps a claim, ended now: the
// dead letter is there again for a replay, and a delete finishes the
// replay rather than remove what may be queued (see DeleteDeadLetter).
// Otherwise the record is as it was before the claim. A failure is only
// logged; the claim then ends on its own.
func (q *Queue) releaseDead(ctx context.Context, id string, c deadClaim, sent bool) {
	ctx, cancel := q.s.bounded(context.WithoutCancel(ctx))
	defer cancel()
	m := deadCopy(c.record)
	m.Header.Set(hdrReplayID, c.replayID)
	if sent || c.record.Header.Get(hdrClaimUntil) != "" {
		m.Header.Set(hdrClaimUntil, strconv.FormatInt(time.Now().UnixNano(), 10))
	} else {
		m.Header.Del(hdrClaimUntil)
	}
	if _, err := q.s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(c.seq), jetstream.WithExpectStream(q.n.dead)); err != nil {
		q.s.opts.Logger.Warn("natsjs: a failed replay could not release its claim on the dead letter; it ends on its own",
			"queue", q.name, "message", id, "until", c.until, "err", err)
	}
}

// claimed reports whether the dead-letter record with headers h is
// claimed by a replay at now.
func claimed(h nats.Header, now time.Time) bool {
	until, err := headerTime(h, hdrClaimUntil)
	return err == nil && now.Before(until)
}

// deadCopy returns a message that writes raw, a dead-letter record, again:
// its subject, payload and the adapter's headers (not the server's).
func deadCopy(raw *jetstream.RawStreamMsg) *nats.Msg {
	m := nats.NewMsg(raw.Subject)
	m.Data = raw.Data
	for k, v := range raw.Header {
		if strings.HasPrefix(k, "Walbroker-") {
			m.Header[k] = v
		}
	}
	return m
}

// DeleteDeadLetter removes dead letter id for good; see
// broker.DeadLetterManager. A record a replay claimed is left to that
// replay (see ReplayDeadLetter), as gone; of racing deletes and replays
// one succeeds.
//
// A claim that ended without its replay learning whether its publish was
// stored (the replay timed out, lost its connection or its process, or
// an earlier one did; see releaseDead) leaves a record the delete cannot
// remove for good: that publish may be stored still, at any later time,
// by a server that got it after the call gave up. Such a record is
// replayed instead, under the claim's Nats-Msg-Id, which the work stream
// folds into that publish's copy (one stored before that awaits its first
// delivery, or one stored after; see publishReplay), and the delete
// finds the dead letter gone (broker.DeadLetterNotFound): the replay won
// the race.
func (q *Queue) DeleteDeadLetter(ctx context.Context, id string) error {
	if q == nil {
		return nilReceiver("Queue")
	}
	ctx, cancel, err := q.look(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	raw, err := q.deadRecord(ctx, id)
	if err != nil {
		return err
	}
	if claimed(raw.Header, time.Now()) {
		return fmt.Errorf("natsjs: queue %s: dead letter %q is being replayed: %w", q.name, id, broker.DeadLetterNotFound)
	}
	if raw.Header.Get(hdrClaimUntil) != "" {
		if err := q.replay(ctx, id, raw); err != nil {
			return fmt.Errorf("natsjs: queue %s: dead letter %q: an earlier replay may yet queue it, and finishing that replay failed: %w", q.name, id, err)
		}
		return fmt.Errorf("natsjs: queue %s: dead letter %q: an earlier replay, which may have queued it, is finished: %w", q.name, id, broker.DeadLetterNotFound)
	}
	if err := q.dead.DeleteMsg(ctx, raw.Sequence); err != nil {
		if notFound(err) {
			return fmt.Errorf("natsjs: queue %s: dead letter %q: %w", q.name, id, broker.DeadLetterNotFound)
		}
		return q.connError("delete dead letter "+id, err)
	}
	return nil
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
