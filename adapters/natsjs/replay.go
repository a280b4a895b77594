package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

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
	if q.unmade() {
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
	if q.unmade() {
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
