package natsjs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// PublishBatch publishes every payload, all or nothing, as one atomic batch
// of the server (its stream sequences are consecutive): a batch that does
// not fit the queue's Capacity is refused whole (broker.QueueFull); an
// empty one, or one of more than 1000 payloads (the server's bound), is
// broker.InvalidBatchSize.
func (q *Queue) PublishBatch(ctx context.Context, payloads [][]byte) ([]broker.MessageValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Queue")
	}
	if len(payloads) == 0 || len(payloads) > maxBatch {
		return nil, fmt.Errorf("natsjs: queue %s: batch of %d payloads, want 1 to %d: %w", q.name, len(payloads), maxBatch, broker.InvalidBatchSize)
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return nil, err
	}
	policy := q.currentPolicy()
	for i, p := range payloads {
		if err := q.checkSize(policy, i, len(payloads), p); err != nil {
			return nil, err
		}
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("natsjs: queue %s: batch id: %w", q.name, err)
	}
	batch := hex.EncodeToString(id[:])
	now := unixTime(time.Now())
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	var resp batchReply
	attempt := 0
	err := q.full(ctx, func() error {
		var err error
		for range batchTries {
			attempt++
			resp, err = q.publishBatch(ctx, batch+"-"+strconv.Itoa(attempt), payloads, now)
			if !isNoRoom(err) {
				break
			}
			// Other Stores' batches filled the server's room for open
			// batches. A refused batch stored nothing, so it is sent
			// again, under a new id, once one of theirs may have ended.
			beforeBatchRetry()
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(attempt) * time.Millisecond):
			}
		}
		return err
	})
	if err != nil {
		return nil, q.publishError(err)
	}
	if resp.Count != len(payloads) || resp.Sequence < uint64(len(payloads)) {
		return nil, fmt.Errorf("natsjs: queue %s: the server committed %d of a batch of %d (last sequence %d)", q.name, resp.Count, len(payloads), resp.Sequence)
	}
	q.wakeReady(resp.Sequence)
	out := make([]broker.MessageValue, len(payloads))
	first := resp.Sequence - uint64(len(payloads)) + 1
	for i, p := range payloads {
		out[i] = broker.MessageValue{ID: messageID(first + uint64(i)), EnqueuedAt: now, Payload: clone(p)}
	}
	return out, nil
}

// batchReply is the server's answer to an atomic batch's commit.
type batchReply struct {
	Error    *jetstream.APIError `json:"error"`
	Sequence uint64              `json:"seq"`
	Count    int                 `json:"count"`
}

// batchesInFlight bounds the atomic batches one Queue has open on its
// work stream at once: the server holds at most 50 per stream (and 1000 in
// all), and refuses the one past that. Below it, a Store leaves room for
// other Stores publishing to the same queue. (A variable only so that
// tests can lift it.)
var batchesInFlight = 16

// isNoRoom reports whether the server refused an atomic batch for want of
// room for one more open batch: at once (the commit was its first
// message), or at its commit, having dropped its first message, which
// asks for no reply.
func isNoRoom(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == codeIncomplete || api.ErrorCode == codeInflight)
}

// publishBatch sends payloads as the atomic batch id: every message but
// the last without a reply, the last, marked as the commit, as a request.
// It holds one of the Queue's batch tokens while the batch may be open on
// the server: until the server answered its commit with the batch's end,
// or, for a batch that sent some of its messages and then got no such
// answer (its context ended before the commit was sent, the connection
// failed, the commit got no answer), until the server dropped it (see
// abandon). Until it has a token it has sent nothing: a context that ends
// meanwhile, or a Close that ran meanwhile, is refused as such, so that
// the caller knows the batch is not stored, and a batch that had sent
// nothing when Close returned sends nothing after. (Close does not wait
// for the calls under way: a batch already sending when it ran may still
// be stored after it returned, as may any publish under way then.)
func (q *Queue) publishBatch(ctx context.Context, id string, payloads [][]byte, now time.Time) (batchReply, error) {
	if err := q.takeBatchToken(ctx); err != nil {
		return batchReply{}, fmt.Errorf("waiting for one of the queue's %d open batches to end (nothing was sent): %w", cap(q.batches), err)
	}
	// open reports that the server may hold the batch open: once the
	// first of several messages was sent (a batch of one is its commit,
	// which the server stores or refuses at once, whole), until the
	// server answered the commit with the batch's end.
	open := false
	defer func() {
		if open {
			q.abandon(id, len(payloads))
			return
		}
		<-q.batches
	}()
	if q.s.closed.Load() {
		return batchReply{}, fmt.Errorf("the store closed while the batch waited for one of the queue's %d open batches to end (nothing was sent): %w", cap(q.batches), broker.Closed)
	}
	var reply *nats.Msg
	for i, p := range payloads {
		m := q.message(p, now)
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(payloads)-1 {
			if err := q.s.nc.PublishMsg(m); err != nil {
				return batchReply{}, err
			}
			open = true
			continue
		}
		m.Header.Set(hdrBatchEnd, "1")
		var err error
		if reply, err = sendBatchCommit(func() (*nats.Msg, error) { return q.s.nc.RequestMsgWithContext(ctx, m) }); err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return batchReply{}, err // no server took the commit
			}
			// A timeout, an ended context or a lost connection: the
			// server may have taken the commit, and may store the batch
			// after this call gave up, as for any publish that times out.
			return batchReply{}, noAnswer("the batch's commit", "the whole batch", "a retry may store it twice: a batch carries no dedup key", err)
		}
	}
	var resp batchReply
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return batchReply{}, fmt.Errorf("batch reply %q: %w", reply.Data, err)
	}
	// The server stored the batch, or refused it as incomplete, having
	// dropped it or known no such batch. A refusal of another kind may
	// have come before the server looked the batch up (a sealed stream,
	// an account's limits), which leaves it open.
	open = resp.Error != nil && resp.Error.ErrorCode != codeIncomplete
	if resp.Error != nil {
		return batchReply{}, resp.Error
	}
	return resp, nil
}

// beforeBatchRetry runs after the server refused a batch for want of room
// for one more open batch, before the batch waits to be sent again; tests
// end other batches there, which makes room.
var beforeBatchRetry = func() {}

// sendBatchCommit sends a batch's commit with send and returns the
// server's answer; tests end the call's context before the commit is
// sent, or lose the commit or its answer there.
var sendBatchCommit = func(send func() (*nats.Msg, error)) (*nats.Msg, error) { return send() }
