package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The server keeps an atomic batch open, holding one of its places for
// open batches (50 per stream), from the batch's first message until its
// commit, or until it received nothing of the batch for its batch timeout
// (10 s by default). A Queue holds one of its tokens (see batchesInFlight)
// for each batch the server may hold open on its work stream, so that it
// never has more open there than it allows itself. A batch that sent some
// of its messages and then got no answer to its commit that ends it (its
// context ended before the commit was sent, the connection failed, the
// commit got no answer or an unexpected one) may be open still: it is
// abandoned, and its token kept until the server answered that the batch
// is not open, or, lacking that answer, until the server must have dropped
// it by its timeout.
const (
	// serverBatchTimeout is how long the server keeps an open batch of
	// which it receives nothing: its default max_batch_timeout, which a
	// client cannot read. (A server configured with a longer one may
	// still hold a batch whose token came back by this bound: a batch
	// refused for want of room is then sent again, see PublishBatch.)
	serverBatchTimeout = 10 * time.Second
	// abandonMargin is added to serverBatchTimeout, from when the abandon
	// was handed to the connection: the batch's last message may reach
	// the server a moment after it was sent, and the server's timer
	// starts then.
	abandonMargin = 5 * time.Second
)

// takeBatchToken takes one of the Queue's batch tokens, waiting while all
// are taken, or returns the context's error. A token kept for an abandoned
// batch comes back when the server answers the abandon (see abandoned),
// or once the instant it is kept until passed on the Store's clock: the
// waiting call itself gives those back (there is no timer or goroutine
// per abandoned batch), looking again when the first of them is due.
func (q *Queue) takeBatchToken(ctx context.Context) error {
	for {
		next := q.reclaimHeld()
		var due <-chan time.Time
		var timer *time.Timer
		if !next.IsZero() {
			timer = time.NewTimer(next.Sub(q.s.clock()))
			due = timer.C
		}
		var err error
		select {
		case q.batches <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		case <-due:
			continue // the timer fired: nothing to stop
		}
		if timer != nil {
			timer.Stop()
		}
		return err
	}
}

// reclaimHeld gives back the tokens kept for abandoned batches whose
// instant passed on the Store's clock, and returns the earliest instant
// of those still kept (zero: none).
func (q *Queue) reclaimHeld() (next time.Time) {
	q.holdMu.Lock()
	defer q.holdMu.Unlock()
	now := q.s.clock()
	for id, until := range q.held {
		if !now.Before(until) {
			delete(q.held, id)
			<-q.batches
			continue
		}
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	return next
}

// abandon ends the atomic batch id of n messages, which the server may
// hold open, and takes over its token (which the caller holds). It sends
// one more message of the batch, at sequence n+1: whatever the server
// received of the batch, that is a gap, and the server refuses a batch
// with a gap and drops it, or knows no such batch (it ended), and answers
// that the batch is incomplete either way (ADR-50). The abandon carries
// no payload and is never stored. Its answer, heard by the Queue's
// subscription (see abandoned), gives the token back; until then the
// token is kept, at most until the server must have dropped the batch by
// its timeout (see reclaimHeld). A failure to send the abandon, or to
// subscribe to its answer, only leaves the token kept that long. After
// Close no batch is admitted any more: the abandon is still sent, for the
// sake of other clients' batches, and the token given back at once.
//
// The abandon never stores a batch in part: a commit sent before it on
// the same connection is taken by the server before it, and one that the
// abandon overtook (the connection was lost meanwhile) finds no batch
// and stores nothing. A batch whose commit got no answer may therefore
// come out not stored where it would have been; its call returned that it
// may or may not be.
func (q *Queue) abandon(id string, n int) {
	m := nats.NewMsg(q.n.workSubject)
	m.Header.Set(hdrBatchID, id)
	m.Header.Set(hdrBatchSeq, strconv.Itoa(n+1))
	q.holdMu.Lock()
	if q.holdClosed {
		q.holdMu.Unlock()
		<-q.batches
		_ = sendBatchAbandon(func() error { return q.s.nc.PublishMsg(m) })
		return
	}
	if q.abandonSub == nil {
		inbox := nats.NewInbox()
		sub, err := q.s.nc.Subscribe(inbox+".*", q.abandoned)
		if err != nil {
			q.s.opts.Logger.Warn("natsjs: no subscription for the answers to abandoned batches; their tokens are kept until the server's batch timeout passed",
				"queue", q.name, "err", err)
		} else {
			q.abandonSub, q.abandonInbox = sub, inbox
		}
	}
	if q.abandonSub != nil {
		m.Reply = q.abandonInbox + "." + id
	}
	// Kept before the abandon is sent, so that its answer finds it.
	q.held[id] = q.s.clock().Add(serverBatchTimeout + abandonMargin)
	q.holdMu.Unlock()
	if err := sendBatchAbandon(func() error { return q.s.nc.PublishMsg(m) }); err != nil {
		q.s.opts.Logger.Warn("natsjs: an atomic batch cut short could not be abandoned; its token is kept until the server's batch timeout passed",
			"queue", q.name, "batch", id, "err", err)
	}
}

// abandoned hears the server's answer to an abandon (see abandon), sent to
// the Queue's abandon inbox followed by the batch's id, and gives the
// batch's token back when the answer says that the server holds no such
// batch open: incomplete (it dropped the batch, or knew none), or too
// large (it knew none, and the abandon's sequence is past its bound). Any
// other answer (a refusal that came before the server looked the batch
// up, a stream without responders) leaves the token kept until due.
func (q *Queue) abandoned(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	var resp batchReply
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error == nil ||
		(resp.Error.ErrorCode != codeIncomplete && resp.Error.ErrorCode != codeBatchSize) {
		return
	}
	q.holdMu.Lock()
	defer q.holdMu.Unlock()
	if _, ok := q.held[id]; ok {
		delete(q.held, id)
		<-q.batches
	}
}

// closeBatches ends the subscription to the answers of abandons; an
// abandon after it gives its token back at once (see abandon). The tokens
// kept are left as they are: no batch is admitted after Close.
func (q *Queue) closeBatches() error {
	q.holdMu.Lock()
	defer q.holdMu.Unlock()
	q.holdClosed = true
	if q.abandonSub == nil {
		return nil
	}
	err := q.abandonSub.Unsubscribe()
	q.abandonSub = nil
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
		return nil
	}
	return err
}

// sendBatchAbandon sends the abandon of a batch with send; tests lose it
// there.
var sendBatchAbandon = func(send func() error) error { return send() }
