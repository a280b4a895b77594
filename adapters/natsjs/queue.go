package natsjs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// Headers the adapter writes. A message's ID and enqueue instant travel
// with it, so that a replayed dead letter keeps both.
const (
	hdrID         = "Walbroker-Id"         // message ID; absent: the stream sequence is the ID
	hdrEnqueued   = "Walbroker-Enqueued"   // EnqueuedAt, Unix nanoseconds
	hdrOrigin     = "Walbroker-Origin"     // the publishing Store's random id
	hdrFailed     = "Walbroker-Failed"     // dead letter: FailedAt, Unix nanoseconds
	hdrReason     = "Walbroker-Reason"     // dead letter: reason, Go-quoted
	hdrCode       = "Walbroker-Code"       // dead letter: dotted-quad code
	hdrCause      = "Walbroker-Cause"      // dead letter: public text, Go-quoted
	hdrDeliveries = "Walbroker-Deliveries" // dead letter: deliveries
	hdrBatchID    = "Nats-Batch-Id"        // atomic batch publish (server 2.12+)
	hdrBatchSeq   = "Nats-Batch-Sequence"  //
	hdrBatchEnd   = "Nats-Batch-Commit"    //
	maxKeyBytes   = 256                    // as the file-backed store
	headerRoom    = 8 << 10                // bytes kept for headers below the server's max_payload (see checkSize)
	maxBatch      = 1000                   // the server's default bound on an atomic batch
	codeTooLarge  = 10054                  // JSStreamMessageExceedsMaximumErr
	codeStoreFail = 10077                  // JSStreamStoreFailedF: "maximum messages exceeded" and others
	codeBatchSize = 10199                  // JSAtomicPublishTooLargeBatchErrF
)

// Queue is one named queue of a [Store]. It implements broker.Broker,
// broker.LeaseExtender, broker.Rejecter, broker.DeadLetterReader,
// broker.DeadLetterManager and broker.Waker, and adds PublishKeyed and
// PublishBatch, like the file-backed *broker.Queue.
//
// Every method is safe for concurrent use. The queue's messages, dead
// letters and dedup keys live on the server; the Queue holds only the
// leases it handed out (to refuse a lapsed or replaced receipt, see
// lease.go) and what its wake signal needs, all dropped at Close. It
// retains no payload.
type Queue struct {
	s      *Store
	name   string
	n      names
	cons   jetstream.Consumer
	work   jetstream.Stream
	dead   jetstream.Stream
	keys   jetstream.Stream
	deaths jetstream.Stream

	// deathSub hears the republished MAX_DELIVERIES advisories and sets
	// unburied; lastSweep is when the last sweep began; sweepMu
	// serialises sweeps (see dead.go).
	deathSub  *nats.Subscription
	unburied  atomic.Bool
	lastSweep atomic.Int64 // Unix nanoseconds
	sweepMu   sync.Mutex

	// mu guards everything below.
	mu      sync.Mutex
	policy  broker.PolicyValue
	leases  map[uint64]*lease    // by stream sequence: the leases this Queue handed out
	sweepAt int                  // len(leases) at which Receive drops the long-lapsed ones
	retries map[uint64]time.Time // by stream sequence: when a message this Queue nacked becomes visible
	signal  chan struct{}        // closed by the next event that may make a message receivable
	wakeSub *nats.Subscription   // the publications of other clients; nil until Wake is first called
	// ready reports that a message may be receivable now: set by every
	// event that makes one so at once, cleared by a Receive that found
	// fewer than it asked for while no such event happened (readyEvents
	// counts them).
	ready       bool
	readyEvents uint64
	// recheck is when an idle consumer should look again because other
	// processes hold leases (zero: none known); see settle.
	recheck time.Time
	closed  bool
}

func newQueue(ctx context.Context, s *Store, name string, n names, policy broker.PolicyValue) (*Queue, error) {
	q := &Queue{s: s, name: name, n: n, policy: policy, leases: map[uint64]*lease{}, sweepAt: minSweep,
		retries: map[uint64]time.Time{}, signal: make(chan struct{})}
	var err error
	if q.work, err = s.js.Stream(ctx, n.work); err != nil {
		return nil, err
	}
	if q.dead, err = s.js.Stream(ctx, n.dead); err != nil {
		return nil, err
	}
	if q.keys, err = s.js.Stream(ctx, n.keys); err != nil {
		return nil, err
	}
	if q.deaths, err = s.js.Stream(ctx, n.deaths); err != nil {
		return nil, err
	}
	if q.cons, err = q.work.Consumer(ctx, consumerName); err != nil {
		return nil, err
	}
	// Subscribe before looking, so that no death falls between the two.
	q.unburied.Store(true)
	if q.deathSub, err = s.nc.Subscribe(n.deathNotice, func(*nats.Msg) { q.unburied.Store(true) }); err != nil {
		return nil, err
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		q.deathSub.Unsubscribe()
		return nil, err
	}
	info := q.cons.CachedInfo()
	q.ready = info.NumPending > 0
	if info.NumAckPending > 0 && s.opts.Recheck > 0 {
		// Leases of other processes (or of this one before a restart).
		q.recheck = time.Now().Add(min(s.opts.Recheck, policy.VisibilityTimeout))
	}
	return q, nil
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

func (q *Queue) setPolicy(p broker.PolicyValue) {
	q.mu.Lock()
	q.policy = p
	q.mu.Unlock()
}

func (q *Queue) currentPolicy() broker.PolicyValue {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.policy
}

// Publish appends payload to the queue; see broker.Broker. It returns once
// the server has stored the message (on the stream's quorum when
// replicated; on the device only when the server syncs every write, see
// the package documentation). The ID is the message's stream sequence in
// 16 hex digits; EnqueuedAt is this process's clock.
func (q *Queue) Publish(ctx context.Context, payload []byte) (broker.MessageValue, error) {
	if err := q.s.begin(ctx, q.name); err != nil {
		return broker.MessageValue{}, err
	}
	if err := q.checkSize(q.currentPolicy(), 0, payload); err != nil {
		return broker.MessageValue{}, err
	}
	now := unixTime(time.Now())
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	var ack *jetstream.PubAck
	err := q.full(ctx, func() (err error) {
		ack, err = q.s.js.PublishMsg(ctx, q.message(payload, now), jetstream.WithExpectStream(q.n.work))
		return err
	})
	if err != nil {
		return broker.MessageValue{}, q.publishError(err)
	}
	q.wakeReady()
	return broker.MessageValue{ID: messageID(ack.Sequence), EnqueuedAt: now, Payload: clone(payload)}, nil
}

// PublishKeyed is an idempotent Publish, deduplicated by the server's
// Nats-Msg-Id window (the policy's DedupWindow, on the server's clock): a
// key seen within it returns the ORIGINAL message's ID and EnqueuedAt with
// a nil error and enqueues nothing — even after the original was
// acknowledged, and even when the queue is full. Such a duplicate carries
// no Payload. key must be 1 to 256 bytes (broker.InvalidDedupKey); it is
// sent to the server only as its SHA-256.
//
// The original's EnqueuedAt is kept in a record of the queue's keys stream,
// written before the message: a publish that failed after the record (a
// crash, QueueFull) leaves it behind, and the retry that then enqueues the
// message gives it the record's, earlier, EnqueuedAt.
func (q *Queue) PublishKeyed(ctx context.Context, key string, payload []byte) (broker.MessageValue, error) {
	if len(key) == 0 || len(key) > maxKeyBytes {
		return broker.MessageValue{}, fmt.Errorf("natsjs: queue %s: dedup key of %d bytes, want 1 to %d: %w", q.name, len(key), maxKeyBytes, broker.InvalidDedupKey)
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return broker.MessageValue{}, err
	}
	if err := q.checkSize(q.currentPolicy(), 0, payload); err != nil {
		return broker.MessageValue{}, err
	}
	sum := sha256.Sum256([]byte(key))
	hash := hex.EncodeToString(sum[:])
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()

	enqueued := unixTime(time.Now())
	record := nats.NewMsg(q.n.keySubject + "." + hash)
	record.Header.Set(hdrEnqueued, strconv.FormatInt(enqueued.UnixNano(), 10))
	rack, err := q.s.js.PublishMsg(ctx, record, jetstream.WithMsgID(hash), jetstream.WithExpectStream(q.n.keys))
	if err != nil {
		return broker.MessageValue{}, q.publishError(err)
	}
	if rack.Duplicate {
		raw, err := q.keys.GetMsg(ctx, rack.Sequence)
		if err != nil {
			return broker.MessageValue{}, fmt.Errorf("natsjs: queue %s: read the enqueue instant of a dedup key: %w", q.name, err)
		}
		if enqueued, err = headerTime(raw.Header, hdrEnqueued); err != nil {
			return broker.MessageValue{}, fmt.Errorf("natsjs: queue %s: dedup key record %d: %w", q.name, raw.Sequence, err)
		}
	}

	var ack *jetstream.PubAck
	err = q.full(ctx, func() (err error) {
		ack, err = q.s.js.PublishMsg(ctx, q.message(payload, enqueued), jetstream.WithMsgID(hash), jetstream.WithExpectStream(q.n.work))
		return err
	})
	if err != nil {
		return broker.MessageValue{}, q.publishError(err)
	}
	if ack.Duplicate {
		return broker.MessageValue{ID: messageID(ack.Sequence), EnqueuedAt: enqueued}, nil
	}
	q.wakeReady()
	return broker.MessageValue{ID: messageID(ack.Sequence), EnqueuedAt: enqueued, Payload: clone(payload)}, nil
}

// PublishBatch publishes every payload, all or nothing, as one atomic batch
// of the server (its stream sequences are consecutive): a batch that does
// not fit the queue's Capacity is refused whole (broker.QueueFull); an
// empty one, or one of more than 1000 payloads (the server's bound), is
// broker.InvalidBatchSize.
func (q *Queue) PublishBatch(ctx context.Context, payloads [][]byte) ([]broker.MessageValue, error) {
	if len(payloads) == 0 || len(payloads) > maxBatch {
		return nil, fmt.Errorf("natsjs: queue %s: batch of %d payloads, want 1 to %d: %w", q.name, len(payloads), maxBatch, broker.InvalidBatchSize)
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return nil, err
	}
	policy := q.currentPolicy()
	for i, p := range payloads {
		if err := q.checkSize(policy, i, p); err != nil {
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
		attempt++
		var err error
		resp, err = q.publishBatch(ctx, batch+"-"+strconv.Itoa(attempt), payloads, now)
		return err
	})
	if err != nil {
		return nil, q.publishError(err)
	}
	if resp.Count != len(payloads) || resp.Sequence < uint64(len(payloads)) {
		return nil, fmt.Errorf("natsjs: queue %s: the server committed %d of a batch of %d (last sequence %d)", q.name, resp.Count, len(payloads), resp.Sequence)
	}
	q.wakeReady()
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

// publishBatch sends payloads as the atomic batch id: every message but
// the last without a reply, the last, marked as the commit, as a request.
func (q *Queue) publishBatch(ctx context.Context, id string, payloads [][]byte, now time.Time) (batchReply, error) {
	var reply *nats.Msg
	for i, p := range payloads {
		m := q.message(p, now)
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(payloads)-1 {
			if err := q.s.nc.PublishMsg(m); err != nil {
				return batchReply{}, err
			}
			continue
		}
		m.Header.Set(hdrBatchEnd, "1")
		var err error
		if reply, err = q.s.nc.RequestMsgWithContext(ctx, m); err != nil {
			return batchReply{}, err
		}
	}
	var resp batchReply
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return batchReply{}, fmt.Errorf("batch reply %q: %w", reply.Data, err)
	}
	if resp.Error != nil {
		return batchReply{}, resp.Error
	}
	return resp, nil
}

// full runs publish and, when the queue is full while messages whose last
// lease lapsed may still hold places in it, buries those (they are dead
// letters, which do not count) and runs it once more.
func (q *Queue) full(ctx context.Context, publish func() error) error {
	err := publish()
	if err != nil && q.unburied.Load() && isFull(err) {
		if serr := q.sweepDeaths(ctx); serr != nil {
			return errors.Join(err, serr)
		}
		err = publish()
	}
	return err
}

// isFull reports whether the server refused a publish for the stream's
// MaxMsgs.
func isFull(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == codeStoreFail && strings.Contains(api.Description, "maximum messages")
}

// message builds the message that carries payload into the work stream.
// The payload is not copied: the connection copies it before the publish
// returns, and nothing keeps the message after.
func (q *Queue) message(payload []byte, enqueued time.Time) *nats.Msg {
	m := nats.NewMsg(q.n.workSubject)
	m.Data = payload
	m.Header.Set(hdrEnqueued, strconv.FormatInt(enqueued.UnixNano(), 10))
	m.Header.Set(hdrOrigin, q.s.origin)
	return m
}

// checkSize refuses payload i when it exceeds the policy's MaxMessageBytes
// or what the server accepts in one message (its max_payload, less room
// for the headers). The room is the dead-letter record's, the largest:
// besides its fixed headers it carries the reason (up to
// broker.MaxReasonBytes) and the public cause (up to
// broker.MaxPublicBytes), Go-quoted, which can make each byte four
// (about 5 KiB in all). A payload the queue takes must be one it can
// dead-letter with any cause.
func (q *Queue) checkSize(p broker.PolicyValue, i int, payload []byte) error {
	limit := p.MaxMessageBytes
	if limit <= 0 {
		limit = broker.DefaultMaxMessageBytes
	}
	if len(payload) > limit {
		return fmt.Errorf("natsjs: queue %s: payload %d is %d bytes, MaxMessageBytes is %d: %w", q.name, i, len(payload), limit, broker.MessageTooLarge)
	}
	if server := int(q.s.nc.MaxPayload()) - headerRoom; len(payload) > server {
		return fmt.Errorf("natsjs: queue %s: payload %d is %d bytes, the server takes %d (its max_payload less %d for headers): %w",
			q.name, i, len(payload), server, headerRoom, broker.MessageTooLarge)
	}
	return nil
}

// publishError maps what the server or the connection refused a publish
// with onto the port's errors.
func (q *Queue) publishError(err error) error {
	var api *jetstream.APIError
	switch {
	case isFull(err):
		return fmt.Errorf("natsjs: queue %s is full (%v): %w", q.name, err, broker.QueueFull)
	case errors.As(err, &api) && api.ErrorCode == codeTooLarge, errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("natsjs: queue %s: %v: %w", q.name, err, broker.MessageTooLarge)
	case errors.As(err, &api) && api.ErrorCode == codeBatchSize:
		return fmt.Errorf("natsjs: queue %s: %v: %w", q.name, err, broker.InvalidBatchSize)
	}
	return q.connError("publish", err)
}

// connError wraps a failed request, as broker.Closed when the connection
// is gone.
func (q *Queue) connError(what string, err error) error {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("natsjs: queue %s: %s: %v: %w", q.name, what, err, broker.Closed)
	}
	return fmt.Errorf("natsjs: queue %s: %s: %w", q.name, what, err)
}

// messageID renders a stream sequence as a message ID: 16 hex digits, as
// the file-backed store's.
func messageID(seq uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[seq&0xf]
		seq >>= 4
	}
	return string(b[:])
}

// validID reports whether id has the shape of an ID this adapter mints,
// and so is safe to use as a subject token.
func validID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// unixTime drops t's monotonic reading and location, so that the instant a
// call returns equals the one decoded from a header.
func unixTime(t time.Time) time.Time { return time.Unix(0, t.UnixNano()) }

// headerTime decodes a Unix-nanosecond header.
func headerTime(h nats.Header, key string) (time.Time, error) {
	v := h.Get(key)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("header %s %q is not Unix nanoseconds", key, v)
	}
	return time.Unix(0, n), nil
}

func clone(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }
