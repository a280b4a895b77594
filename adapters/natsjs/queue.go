package natsjs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	hdrID           = "Walbroker-Id"         // message ID; absent: the stream sequence is the ID
	hdrEnqueued     = "Walbroker-Enqueued"   // EnqueuedAt, Unix nanoseconds
	hdrOrigin       = "Walbroker-Origin"     // the publishing Store's random id
	hdrFailed       = "Walbroker-Failed"     // dead letter: FailedAt, Unix nanoseconds
	hdrReason       = "Walbroker-Reason"     // dead letter: reason, Go-quoted
	hdrCode         = "Walbroker-Code"       // dead letter: dotted-quad code
	hdrCause        = "Walbroker-Cause"      // dead letter: public text, Go-quoted
	hdrDeliveries   = "Walbroker-Deliveries" // dead letter: deliveries
	hdrReplayID     = "Walbroker-Replay"     // dead letter: the Nats-Msg-Id of its replay, fixed by its first claim
	hdrClaimUntil   = "Walbroker-Claimed"    // dead letter: when a replay's claim on it ends, Unix nanoseconds; kept once ended while that replay's publish may be stored (see releaseDead)
	hdrBatchID      = "Nats-Batch-Id"        // atomic batch publish (server 2.12+)
	hdrBatchSeq     = "Nats-Batch-Sequence"  //
	hdrBatchEnd     = "Nats-Batch-Commit"    //
	maxKeyBytes     = 256                    // as the file-backed store
	headerRoom      = 8 << 10                // bytes kept for headers below the server's max_payload (see checkSize)
	maxBatch        = 1000                   // the server's default bound on an atomic batch
	codeTooLarge    = 10054                  // JSStreamMessageExceedsMaximumErr
	codeStoreFail   = 10077                  // JSStreamStoreFailedF: "maximum messages exceeded" and others
	codeBatchSize   = 10199                  // JSAtomicPublishTooLargeBatchErrF
	codeIDInProcess = 10158                  // JSStreamDuplicateMessageConflict: "duplicate message id is in process"
	codeIncomplete  = 10176                  // JSAtomicPublishIncompleteBatchErr
	codeInflight    = 10210                  // JSAtomicPublishTooManyInflight
	// batchTries bounds the sends of one batch the server refused for
	// want of room for another open batch (see PublishBatch).
	batchTries = 8
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
// retains no payload. A nil or zero *Queue refuses every call (see
// nilreceiver.go).
type Queue struct {
	s      *Store
	name   string
	n      names
	cons   jetstream.Consumer
	work   jetstream.Stream
	dead   jetstream.Stream
	keys   jetstream.Stream
	deaths jetstream.Stream
	// failures keeps the last Nack's classified cause of each message
	// (see recordFailure).
	failures jetstream.Stream

	// deathSub hears the republished MAX_DELIVERIES advisories and sets
	// unburied (as does a sweep that leaves suspects). It is made before
	// the Queue is shared, and from then on guarded by mu: close ends it
	// and clears it under mu. lastSweep is when the last sweep began.
	deathSub  *nats.Subscription
	unburied  atomic.Bool
	lastSweep atomic.Int64 // Unix nanoseconds
	// sweepMu serialises sweeps (see dead.go). Lock order: sweepMu
	// before mu, and the Store's mu before mu (a re-declaration sets the
	// policy); sweepMu and the Store's mu are never held together, and no
	// call holds mu while it takes another lock.
	sweepMu sync.Mutex
	// batches holds a token for each atomic batch this Queue may have open
	// on the server (see PublishBatch and batchtoken.go).
	batches chan struct{}
	// holdMu guards the four below: held names the abandoned batches
	// whose token this Queue keeps, since the server may hold them open
	// still, with the instant on the Store's clock past which it must
	// have dropped them; abandonSub, made at the first abandon and ended
	// by Close (which sets holdClosed), hears the server's answers to the
	// abandons, sent to abandonInbox followed by the batch's id (see
	// abandon). holdMu is taken alone: no other lock is taken under it,
	// nor it under another.
	holdMu       sync.Mutex
	held         map[string]time.Time
	abandonSub   *nats.Subscription
	abandonInbox string
	holdClosed   bool
	// suspects, guarded by sweepMu, are the messages the last sweep found
	// at or below the consumer's ack floor, with when a sweep first did
	// (see sweepAbandonedLocked).
	suspects map[uint64]time.Time

	// mu guards everything below.
	mu      sync.Mutex
	policy  broker.PolicyValue
	leases  map[uint64]*lease // by stream sequence: the leases this Queue handed out (mu guards their extending too)
	sweepAt int               // len(leases)+len(retries) at which Receive drops the long-lapsed ones (see trimLeases)
	retries map[uint64]retry  // by stream sequence: the messages this Queue nacked, until delivered again
	// lowered is when a declaration last lowered MaxDeliveries (zero:
	// never): a lease that lapsed before it with deliveries left is not
	// this Queue's to bury (see lapsedLast); its message, which the
	// server gives up later, died then (see lapseDeathLocked).
	lowered time.Time
	signal  chan struct{}      // closed by the next event that may make a message receivable
	wakeSub *nats.Subscription // the publications of other clients; nil until Wake is first called
	// subscribing: a Wake is making wakeSub, without mu (see subscribe);
	// subscribeAfter: a failed attempt is not tried again before it.
	subscribing    bool
	subscribeAfter time.Time
	// ready reports that a message may be receivable now: set by every
	// event that makes one so at once, cleared by a Receive that found
	// fewer than it asked for while no such event happened (readyEvents
	// counts them).
	ready       bool
	readyEvents uint64
	// stored is the newest work-stream sequence known to hold a message:
	// this Queue's publishes and replays, and the publications of other
	// clients it heard of (see undelivered).
	stored uint64
	// recheck is when an idle consumer should look again because other
	// processes hold leases (zero: none known); see settle.
	recheck time.Time
	closed  bool
}

func newQueue(ctx context.Context, s *Store, name string, n names, policy broker.PolicyValue) (*Queue, error) {
	q := &Queue{s: s, name: name, n: n, policy: policy, leases: map[uint64]*lease{}, sweepAt: minSweep,
		retries: map[uint64]retry{}, signal: make(chan struct{}), batches: make(chan struct{}, batchesInFlight), held: map[string]time.Time{}}
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
	if q.failures, err = s.js.Stream(ctx, n.failures); err != nil {
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
func (q *Queue) Name() string {
	if q.unmade() {
		return ""
	}
	return q.name
}

// setPolicy applies the policy of a re-declaration. A changed policy
// closes the wake signal, as the file store's does: what Wake said may no
// longer hold (a raised MaxDeliveries makes a lease on its formerly last
// delivery one whose lapse hands the message back). It reports whether
// MaxDeliveries went down: the messages this Queue knows to wait for a
// delivery the new policy no longer allows are then dead, and it marks
// them for the next sweep (see buryExhaustedLocked), which the
// declaration runs at once.
func (q *Queue) setPolicy(p broker.PolicyValue) (lowered bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p == q.policy {
		return false
	}
	if lowered = p.MaxDeliveries < q.policy.MaxDeliveries; lowered {
		q.lowered = time.Now()
		q.unburied.Store(true)
	}
	q.policy = p
	q.wakeLocked()
	return lowered
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
	if q.unmade() {
		return broker.MessageValue{}, nilReceiver("Queue")
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return broker.MessageValue{}, err
	}
	if err := q.checkSize(q.currentPolicy(), 0, 1, payload); err != nil {
		return broker.MessageValue{}, err
	}
	now := unixTime(time.Now())
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()
	var ack *jetstream.PubAck
	err := q.full(ctx, func() (err error) {
		ack, err = sendPublish(func() (*jetstream.PubAck, error) {
			return q.s.js.PublishMsg(ctx, q.message(payload, now), jetstream.WithExpectStream(q.n.work))
		})
		return err
	})
	if err != nil {
		if unanswered(err) {
			err = noAnswer("the message's publish", "it", "a retry may store it twice: PublishKeyed is the publish a retry cannot repeat", err)
		}
		return broker.MessageValue{}, q.publishError(err)
	}
	q.wakeReady(ack.Sequence)
	return broker.MessageValue{ID: messageID(ack.Sequence), EnqueuedAt: now, Payload: clone(payload)}, nil
}

// PublishKeyed is an idempotent Publish: a key seen within the policy's
// DedupWindow returns the ORIGINAL message's ID and EnqueuedAt with a nil
// error and enqueues nothing — even after the original was acknowledged,
// after the server restarted, and when the queue is full. Such a duplicate
// carries no Payload. key must be 1 to 256 bytes (broker.InvalidDedupKey);
// it is sent to the server only as its SHA-256.
//
// The key lives in a record of the queue's keys stream (one per key):
// first a claim carrying the enqueue instant, written only where no live
// record is (a compare-and-set on the key's subject), then, once the
// message is stored, the same record naming the message's ID. A publish
// that finds a record naming an ID, with an EnqueuedAt within the window
// (on this process's clock), is a duplicate of it. One that finds a claim
// (a publish in flight, or one that failed after its claim: a crash,
// QueueFull) publishes the message with Nats-Msg-Id = the key's hash, so
// the server's duplicate window folds the racing publishes into one
// message, and completes the record. The message takes the claim's
// EnqueuedAt when the claim is at most 10 ms old, else the instant of its
// own publish, from which the server's duplicate window runs. A nil
// error means the record names the message: the key then survives the
// message's acknowledgement and a restart of the server, which rebuilds
// its Nats-Msg-Id memory only from messages it still stores. What a
// publisher that dies halfway leaves is in the package documentation
// (Dedup).
func (q *Queue) PublishKeyed(ctx context.Context, key string, payload []byte) (broker.MessageValue, error) {
	if q.unmade() {
		return broker.MessageValue{}, nilReceiver("Queue")
	}
	if len(key) == 0 || len(key) > maxKeyBytes {
		return broker.MessageValue{}, fmt.Errorf("natsjs: queue %s: dedup key of %d bytes, want 1 to %d: %w", q.name, len(key), maxKeyBytes, broker.InvalidDedupKey)
	}
	if err := q.s.begin(ctx, q.name); err != nil {
		return broker.MessageValue{}, err
	}
	policy := q.currentPolicy()
	if err := q.checkSize(policy, 0, 1, payload); err != nil {
		return broker.MessageValue{}, err
	}
	window := dedupWindow(policy)
	sum := sha256.Sum256([]byte(key))
	hash := hex.EncodeToString(sum[:])
	subject := q.n.keySubject + "." + hash
	ctx, cancel := q.s.bounded(ctx)
	defer cancel()

	claim, stale, dup, err := q.claimKey(ctx, subject, window)
	if err != nil {
		// The key's record is claimed before the message is sent: a
		// failed claim (even one the server got no answer to) sent no
		// message, which the error must not leave the caller to wonder.
		return broker.MessageValue{}, fmt.Errorf("%w (in the claim of the dedup key's record, made before the message is sent: the message was not sent)", err)
	}
	if dup != nil {
		return *dup, nil
	}

	enqueued := claim.enqueued
	if !claim.fresh && !recentClaim(time.Now(), claim.enqueued) {
		enqueued = unixTime(time.Now()) // see recentClaim
	}
	var ack *jetstream.PubAck
	var racing error // the server's "in process", when the call ended while it waited for the racing publish
	err = q.full(ctx, func() (err error) {
		for {
			ack, err = sendPublish(func() (*jetstream.PubAck, error) {
				return q.s.js.PublishMsg(ctx, q.message(payload, enqueued), jetstream.WithMsgID(hash), jetstream.WithExpectStream(q.n.work))
			})
			if !isInProcess(err) {
				return err
			}
			// A racing publish of the key is being stored on the stream's
			// replicas: once it is, this one is its duplicate.
			select {
			case <-ctx.Done():
				racing = err
				return ctx.Err()
			case <-time.After(inProcessPause):
			}
		}
	})
	if err != nil {
		const retry = "a retry with the same key within the DedupWindow is answered with the original if it was stored, and stores it once if not"
		switch {
		case racing != nil:
			// The server took nothing of this call's: whether the key's
			// message is stored is up to the racing publish, which may
			// yet store it.
			err = fmt.Errorf("the keyed message's publish was answered that another publish of the key is being stored (%v), and the call's context ended while it waited for that one: the server may or may not have stored the key's message by that publish, and may yet (%s): %w", racing, retry, err)
		case unanswered(err):
			err = noAnswer("the keyed message's publish", "it", retry, err)
		}
		return broker.MessageValue{}, q.publishError(err)
	}
	out := broker.MessageValue{ID: messageID(ack.Sequence), EnqueuedAt: enqueued}
	if ack.Duplicate {
		// The server's window still holds the key: a publish racing on
		// the same claim got there first, or the claim replaced a record
		// the server's clock does not yet find stale.
		switch {
		case stale.id == out.ID:
			out.EnqueuedAt = stale.enqueued
		case claim.fresh || enqueued != claim.enqueued:
			// The message may be another publish's: should its header
			// be gone (acknowledged), the claim's instant stands, that
			// of a claimant that died after storing it.
			out.EnqueuedAt = claim.enqueued
			if raw, err := q.work.GetMsg(ctx, ack.Sequence); err == nil {
				if at, err := headerTime(raw.Header, hdrEnqueued); err == nil {
					out.EnqueuedAt = at
				}
			}
		}
	} else {
		out.Payload = clone(payload)
		q.wakeReady(ack.Sequence)
	}
	if err := q.completeKey(ctx, subject, claim.seq, out); err != nil {
		return broker.MessageValue{}, fmt.Errorf("natsjs: queue %s: message %s is enqueued, but its dedup key's record could not name it (publish the key again): %w", q.name, out.ID, err)
	}
	return out, nil
}

// keyRecord is what a record of the keys stream says about one key.
type keyRecord struct {
	seq      uint64    // the record's sequence in the keys stream
	enqueued time.Time // the EnqueuedAt of the key's message
	id       string    // the message's ID; empty for a claim
	fresh    bool      // written by this call
}

// maxClaims bounds how often claimKey contends for one key's record
// before it gives up: each lost round means another publish of the key
// made progress.
const maxClaims = 8

// claimPause waits before claim round round+1 after a record that was
// there could not be read: 1 ms, doubling, at most 64 ms. No pause
// follows the last round, so the pauses of a claim add up to 127 ms at
// most.
func claimPause(ctx context.Context, round int) error {
	t := time.NewTimer(time.Millisecond << min(round, 6))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// claimKey finds what the key's record says, in at most a few requests.
// It returns the claim this publish builds on (its own, written now, or a
// live one of another publish to adopt), the stale record it replaced,
// if any, or, when a live record names a message, the duplicate's answer.
func (q *Queue) claimKey(ctx context.Context, subject string, window time.Duration) (claim, stale keyRecord, dup *broker.MessageValue, err error) {
	expect := uint64(0) // the record to replace: none
	unreadable := false // the last round found a record it could not read
	for round := range maxClaims {
		beforeKeyClaim(round)
		now := unixTime(time.Now())
		record := nats.NewMsg(subject)
		record.Header.Set(hdrEnqueued, strconv.FormatInt(now.UnixNano(), 10))
		ack, err := q.s.js.PublishMsg(ctx, record, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithExpectStream(q.n.keys))
		if err == nil {
			return keyRecord{seq: ack.Sequence, enqueued: now, fresh: true}, stale, nil, nil
		}
		if !isWrongLast(err) {
			return keyRecord{}, keyRecord{}, nil, q.publishError(err)
		}
		// Some record is there: read it.
		rec, found, err := q.readKey(ctx, subject)
		if err != nil {
			return keyRecord{}, keyRecord{}, nil, err
		}
		if unreadable = !found; unreadable {
			// Expired since, or, on a replicated stream, written by a
			// publish whose proposal is not yet readable here: the
			// next compare-and-set would only lose again at once, so
			// it waits a little longer each round.
			expect = 0
			if round == maxClaims-1 {
				break
			}
			if err := claimPause(ctx, round); err != nil {
				return keyRecord{}, keyRecord{}, nil, err
			}
			continue
		}
		if withinWindow(time.Now(), rec.enqueued, window) {
			if rec.id != "" {
				return keyRecord{}, keyRecord{}, &broker.MessageValue{ID: rec.id, EnqueuedAt: rec.enqueued}, nil
			}
			return rec, stale, nil, nil
		}
		stale, expect = rec, rec.seq
	}
	if unreadable {
		return keyRecord{}, keyRecord{}, nil, fmt.Errorf("natsjs: queue %s: %d attempts to claim the record of a dedup key failed; the last lost to a record this server could not read (expired since, or not yet readable here)", q.name, maxClaims)
	}
	return keyRecord{}, keyRecord{}, nil, fmt.Errorf("natsjs: queue %s: the record of a dedup key changed under %d attempts to claim it", q.name, maxClaims)
}

// recentClaim reports whether a claim of another publish, made at
// enqueued, is recent enough at now that the message takes its instant as
// its EnqueuedAt. The server's duplicate window runs from the instant it
// stores the message: enqueued under an older claim (one that a publish
// refused as full, or a crashed one, left), a message stamped with the
// claim's instant would hold its key on the server for up to a window
// past its EnqueuedAt, and a publish after that window would be answered
// as its duplicate. Such a message takes the instant of its own publish
// instead, and racers on the claim read the EnqueuedAt of the one the
// server stored. A claim stamped ahead of now by another process's clock
// is recent.
func recentClaim(now, enqueued time.Time) bool {
	return now.Sub(enqueued) <= recentClaimFor
}

// recentClaimFor bounds how long after a claim a message still takes its
// instant (see recentClaim): a few requests' time.
const recentClaimFor = 10 * time.Millisecond

// withinWindow reports whether a key enqueued at enqueued is still held at
// now: it is evicted only when STRICTLY older than the window (API.md
// §5.8), so at enqueued+window exactly it still holds.
func withinWindow(now, enqueued time.Time, window time.Duration) bool {
	return !now.After(enqueued.Add(window))
}

// beforeKeyClaim runs before each attempt of claimKey (round 0, 1, ...);
// tests change the key's record there.
var beforeKeyClaim = func(round int) {}

// readKey reads the key's record on subject; found is false when there is
// none.
func (q *Queue) readKey(ctx context.Context, subject string) (rec keyRecord, found bool, err error) {
	raw, err := q.keys.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return keyRecord{}, false, nil
	}
	if err != nil {
		return keyRecord{}, false, q.connError("read a dedup key's record", err)
	}
	rec = keyRecord{seq: raw.Sequence, id: raw.Header.Get(hdrID)}
	if rec.enqueued, err = headerTime(raw.Header, hdrEnqueued); err != nil {
		return keyRecord{}, false, fmt.Errorf("natsjs: queue %s: dedup key record %d: %w", q.name, raw.Sequence, err)
	}
	if rec.id != "" && !validID(rec.id) {
		return keyRecord{}, false, fmt.Errorf("natsjs: queue %s: dedup key record %d names %q, not a message ID", q.name, raw.Sequence, rec.id)
	}
	return rec, true, nil
}

// completeKey replaces the claim (record sequence claim) with a record
// naming m. Another publish that built on the same claim may have done so
// first, with the same message: that conflict is success.
func (q *Queue) completeKey(ctx context.Context, subject string, claim uint64, m broker.MessageValue) error {
	record := nats.NewMsg(subject)
	record.Header.Set(hdrEnqueued, strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10))
	record.Header.Set(hdrID, m.ID)
	_, err := q.s.js.PublishMsg(ctx, record, jetstream.WithExpectLastSequencePerSubject(claim), jetstream.WithExpectStream(q.n.keys))
	if err != nil && !isWrongLast(err) {
		return err
	}
	return nil
}

// isWrongLast reports whether the server refused a publish because the
// subject's last sequence was not the one expected (10071; 10164 on a
// replicated stream while another write of the subject is being proposed).
func isWrongLast(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// isInProcess reports whether the server refused a publish because a
// message with the same Nats-Msg-Id is still being stored: a replicated
// stream answers so until its replicas agreed on the first (10158), where a
// single server answers at once with the duplicate.
func isInProcess(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == codeIDInProcess
}

// inProcessPause is how long a keyed publish refused as in process waits
// before it asks again.
const inProcessPause = 10 * time.Millisecond

// sendPublish sends the message of a Publish or PublishKeyed with send and
// returns the server's answer; tests end the call's context before the
// message is sent, or answer in the server's place there.
var sendPublish = func(send func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error) { return send() }

// unanswered reports whether a publish's err means the server did not
// answer it: the call's context ended, the request timed out or the
// connection was lost while it waited. The server may have taken the
// message, and may store it after the call gave up. (A refusal of the
// server, or no server to take the message, is an answer: nothing was
// stored.)
func unanswered(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected)
}

// noAnswer is the error of a publish the server did not answer, err
// saying why (see unanswered): what got no answer, that the server may
// or may not have stored what was sent (stored), and may yet, and what a
// retry does then.
func noAnswer(what, stored, retry string, err error) error {
	return fmt.Errorf("%s got no answer: the server may or may not have stored %s, and may yet (%s): %w", what, stored, retry, err)
}

// full runs publish and, when the queue is full while messages whose last
// lease lapsed may still hold places in it (a death was announced, or a
// lease this Queue handed out on a last delivery lapsed), buries those
// (they are dead letters, which do not count) and runs it once more.
func (q *Queue) full(ctx context.Context, publish func() error) error {
	err := publish()
	if err == nil || !isFull(err) {
		return err
	}
	if !q.unburied.Load() && !q.anyLapsedLast(time.Now()) {
		return err
	}
	q.unburied.Store(true) // sweep now, however recent the last sweep
	if serr := q.sweepDeaths(ctx); serr != nil {
		return errors.Join(err, serr)
	}
	return publish()
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
func (q *Queue) checkSize(p broker.PolicyValue, i, n int, payload []byte) error {
	limit := p.MaxMessageBytes
	if limit <= 0 {
		limit = broker.DefaultMaxMessageBytes
	}
	if len(payload) > limit {
		return fmt.Errorf("natsjs: queue %s: %s is %d bytes, MaxMessageBytes is %d: %w", q.name, payloadName(i, n), len(payload), limit, broker.MessageTooLarge)
	}
	if maxPayload := int(q.s.nc.MaxPayload()); len(payload) > maxPayload-headerRoom {
		return fmt.Errorf("natsjs: queue %s: %s is %d bytes, over the %d the server takes: its max_payload, %d bytes as it announced to this connection, less %d for headers: %w",
			q.name, payloadName(i, n), len(payload), maxPayload-headerRoom, maxPayload, headerRoom, serverTooLarge)
	}
	return nil
}

// payloadName names payload i of n in an error: "payload" for a single
// publish, "payload i of the batch of n" for a batch's (as the broker
// package's errors do).
func payloadName(i, n int) string {
	if n == 1 {
		return "payload"
	}
	return fmt.Sprintf("payload %d of the batch of %d", i, n)
}

// serverTooLarge is broker.MessageTooLarge (the same reason and code, so
// errors.Is matches it) for a payload refused by the server's bound
// rather than the policy's: its text names max_payload, where the
// sentinel's names MaxMessageBytes, which such a payload need not exceed.
var serverTooLarge = broker.NewError(broker.MessageTooLarge.Reason(), broker.MessageTooLarge.Code(),
	"message payload exceeds the NATS server's max_payload", "")

// publishError maps what the server or the connection refused a publish
// with onto the port's errors.
func (q *Queue) publishError(err error) error {
	var api *jetstream.APIError
	switch {
	case isFull(err):
		return fmt.Errorf("natsjs: queue %s is full (%v): %w", q.name, err, broker.QueueFull)
	case errors.As(err, &api) && api.ErrorCode == codeTooLarge, errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("natsjs: queue %s: the server refused the message's size (%v): its max_payload is %d bytes, as it announced to this connection: %w",
			q.name, err, q.s.nc.MaxPayload(), serverTooLarge)
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
