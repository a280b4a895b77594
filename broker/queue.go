package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// maxKeyBytes bounds a dedup key.
const maxKeyBytes = 256

// Queue is one named queue of a Store. It implements Broker, LeaseExtender,
// Rejecter, DeadLetterReader, DeadLetterManager and Waker.
//
// Every method is safe for concurrent use. A state change is decided, applied
// to the queue's index and queued to the log under the queue's lock, so the
// log holds the changes in the order they were decided; the call then waits
// for the log without the lock, so concurrent calls share each fdatasync.
//
// Each method looks at its ctx once, when it begins: a ctx already ended
// refuses the call with ctx's error, and nothing is done. A call that began
// runs to the end (its wait for the device is not cut short), so an error
// from ctx always means that nothing changed. The methods of a nil *Queue
// refuse with QueueMisconfigured (see Store).
type Queue struct {
	s    *Store
	name string
	id   uint32

	// mu guards iq (and through it the index's state of this queue),
	// policy, signal, signalOut, shut, inflight, answering and
	// diedBeforeOpen.
	mu     sync.Mutex
	iq     *index.Queue
	policy PolicyValue
	signal chan struct{} // closed by the next event that may make a message receivable
	// signalOut: Wake handed signal out since it was made. One nobody
	// holds need not be closed and replaced, which spares every publish
	// to a queue no consumer waits on an allocation.
	signalOut bool
	// shut: the store closed or failed, and with it signal, for good: a
	// consumer waiting for the queue, or asking Wake after, looks again at
	// once and is told Closed, or why the store failed.
	shut bool
	// inflight holds the publishes queued to the log and not yet
	// committed to the index, so that a checkpoint can commit them.
	inflight map[*wal.Pending]inflightPublish
	// answering holds the duplicate and shed publishes answered and not
	// yet counted, so that a checkpoint can count them (see answer).
	answering map[*answer]struct{}
	// diedBeforeOpen: messages whose last lease had lapsed when the store
	// was opened. They died before this process, which logs their move to
	// the dead-letter store but does not count it in DeadLettered:
	// counters are since open, and the death came before (a process that
	// saw the lease lapse counted it; one that closed before it lapsed did
	// not, and then no process does). Each is known by its sequence and
	// lease nonce: a later lease is another life. Open looks at the queue
	// (index.Queue.Promote), so each is in the index's exhausted list
	// until the sweep, which forgets it here as it takes it out.
	diedBeforeOpen map[uint64]uint64
	// handed: Store.Queue returned q in this process (see
	// giveUpSpentLocked). Guarded by the store's mu, not by q.mu.
	handed bool

	stats queueCounters
	// closedStats is what Stats returns once the store's Close has let
	// the files go (set once, before the index closes; see Store.close).
	closedStats atomic.Pointer[QueueStats]
}

type queueCounters struct {
	published, duplicates, shed, delivered, acked, nacked atomic.Int64
	rejected, deadLettered, replayed                      atomic.Int64
}

// inflightPublish is the publish events of one queued publish, whose
// records start at index skip of its append.
type inflightPublish struct {
	events []index.Event
	skip   int
}

func newQueue(s *Store, iq *index.Queue, p PolicyValue) *Queue {
	return &Queue{s: s, name: iq.Name, id: iq.ID, iq: iq, policy: p, signal: make(chan struct{}),
		inflight: map[*wal.Pending]inflightPublish{}, answering: map[*answer]struct{}{}}
}

// commitInflightLocked commits every queued publish, and counts every
// answer (see answer), whose appends must be complete (a checkpoint's
// barrier waited for them). The caller holds q.mu.
func (q *Queue) commitInflightLocked() error {
	for p, in := range q.inflight {
		pos, err := p.Wait()
		if err != nil {
			return q.s.failure(err)
		}
		for i, e := range in.events {
			if err := q.iq.Commit(e.Seq, pos[in.skip+i]); err != nil {
				return q.s.failure(err)
			}
		}
		// Its publish, back from its wait, finds it gone and counts
		// nothing (see publish).
		q.stats.published.Add(int64(len(in.events)))
		delete(q.inflight, p)
	}
	return q.commitAnswersLocked()
}

// shutLocked closes the wake signal for good: the store is closed, or
// failed.
func (q *Queue) shutLocked() {
	if !q.shut {
		q.shut = true
		close(q.signal)
	}
}

// Name returns the queue's name.
func (q *Queue) Name() string {
	if q.unmade() {
		return ""
	}
	return q.name
}

// wakeLocked closes the current wake signal and makes a new one, unless
// nobody was given the current one.
func (q *Queue) wakeLocked() {
	if !q.signalOut || q.shut {
		return
	}
	close(q.signal)
	q.signal = make(chan struct{})
	q.signalOut = false
}

// unlockAndWait queues recs (if any) as state-change events, releases q.mu,
// which the caller holds, and waits for them as the sync mode asks. Queuing
// under the lock is what keeps the log in decision order.
func (q *Queue) unlockAndWait(recs [][]byte) error {
	pends := q.enqueueLocked(recs)
	q.mu.Unlock()
	return q.waitAll(pends)
}

// enqueueLocked queues recs as state-change events. They need not be one
// atomic group (each stands alone), so they are queued in as many appends
// as one segment requires: a Receive of many messages from a store of
// small segments must not fail for its size.
func (q *Queue) enqueueLocked(recs [][]byte) []*wal.Pending {
	var pends []*wal.Pending
	limit := q.s.maxGroup()
	for start := 0; start < len(recs); {
		end, size := start, 0
		for end < len(recs) && (end == start || size+segment.Size(len(recs[end])) <= limit) {
			size += segment.Size(len(recs[end]))
			end++
		}
		pends = append(pends, q.s.log.Enqueue(q.s.opts.durable(false), recs[start:end]...))
		start = end
	}
	return pends
}

// waitAll waits for each of pends, and returns the first error.
func (q *Queue) waitAll(pends []*wal.Pending) error {
	for _, p := range pends {
		if _, err := q.s.wait(p); err != nil {
			return err
		}
	}
	return nil
}

// stopped returns the failure that stopped the queue's store for good
// (see Store.failure and Store.damaged), or nil. Consume ends on it.
// ended and endErr make the queue an ender (see Consume).
// ended, endErr and stopped answer for an unmade q too: a caller's type
// that embeds a nil or zero *Queue gets them, and Consume then returns
// their error at once.
func (q *Queue) ended() <-chan struct{} {
	if q.unmade() {
		return lookNow
	}
	return q.s.over
}

func (q *Queue) endErr() error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	return q.s.Err()
}

func (q *Queue) stopped() error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	if p := q.s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// begin checks what every call checks first: the context and the store.
func (q *Queue) begin(ctx context.Context) error {
	if q.unmade() {
		return nilReceiver("Queue")
	}
	if ctx == nil {
		return fmt.Errorf("broker: queue %s: nil context: %w", q.name, QueueMisconfigured)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.s.usable()
}

// Publish appends payload to the queue; see Broker.Publish. Under SyncAll
// and SyncPublish it returns after an fdatasync covers the message. The
// message's EnqueuedAt is read, and its ID minted, when the queue accepts
// it: concurrent publishes to one queue get EnqueuedAt in the order the
// queue accepted them (unless the clock went backwards between them), and
// Receive hands them out in that order.
func (q *Queue) Publish(ctx context.Context, payload []byte) (MessageValue, error) {
	if q.unmade() {
		return MessageValue{}, nilReceiver("Queue")
	}
	var one [1]MessageValue
	ms, err := q.publish(ctx, "", [][]byte{payload}, one[:])
	if err != nil {
		return MessageValue{}, err
	}
	return ms[0], nil
}

// PublishKeyed is an idempotent Publish. A key seen within the queue's
// DedupWindow returns the ORIGINAL message's ID and EnqueuedAt with a nil
// error and enqueues nothing — even after that message was acknowledged,
// and even when the queue is full. Such a duplicate carries no Payload (the
// original's may be gone): its Payload is nil, while a message this call
// enqueued has a non-nil one (empty for an empty payload), so the caller
// can tell which happened. key must be 1 to 256 bytes (InvalidDedupKey),
// which is checked before anything else. The payload's size is checked
// next, before the key is looked up: a payload above MaxMessageBytes is
// MessageTooLarge even when its key was seen, as it would be for the
// first publish of that key.
func (q *Queue) PublishKeyed(ctx context.Context, key string, payload []byte) (MessageValue, error) {
	if q.unmade() {
		return MessageValue{}, nilReceiver("Queue")
	}
	if len(key) == 0 || len(key) > maxKeyBytes {
		return MessageValue{}, fmt.Errorf("broker: queue %s: dedup key of %d bytes, want 1 to %d: %w", q.name, len(key), maxKeyBytes, InvalidDedupKey)
	}
	var one [1]MessageValue
	ms, err := q.publish(ctx, key, [][]byte{payload}, one[:])
	if err != nil {
		return MessageValue{}, err
	}
	return ms[0], nil
}

// PublishBatch publishes every payload, all or nothing, in one commit:
// after a crash either every message of the batch exists or none does. A
// batch that does not fit the queue's Capacity is refused whole
// (QueueFull); an empty one, and one larger than a log segment holds (see
// Options.SegmentBytes), is InvalidBatchSize; one with a payload above
// the queue's MaxMessageBytes is MessageTooLarge, naming which payload.
func (q *Queue) PublishBatch(ctx context.Context, payloads [][]byte) ([]MessageValue, error) {
	if q.unmade() {
		return nil, nilReceiver("Queue")
	}
	if len(payloads) == 0 {
		return nil, fmt.Errorf("broker: queue %s: empty batch: %w", q.name, InvalidBatchSize)
	}
	return q.publish(ctx, "", payloads, make([]MessageValue, len(payloads)))
}

// refuseOversized refuses, before any payload is copied, a payload above
// what every queue of the store refuses and a batch whose payloads alone
// take more than one segment holds: the copy of a caller's oversized input
// cost memory in proportion to it. The limits that count are checked again
// under the lock (a payload above the queue's own MaxMessageBytes, and
// below the store's, is refused there).
func (q *Queue) refuseOversized(payloads [][]byte) error {
	most, least := q.s.maxPayload(), 0
	for _, p := range payloads {
		if len(p) > most {
			return q.tooLarge(payloads)
		}
		least += segment.Size(len(p))
	}
	if least > q.s.maxGroup() {
		// A payload too large is named first, as under the lock.
		if err := q.tooLarge(payloads); err != nil {
			return err
		}
		return fmt.Errorf("broker: queue %s: batch of %d messages and at least %d bytes does not fit in one log segment: %w", q.name, len(payloads), least, InvalidBatchSize)
	}
	return nil
}

// tooLarge returns MessageTooLarge for the first payload above the queue's
// MaxMessageBytes, if there is one.
func (q *Queue) tooLarge(payloads [][]byte) error {
	q.mu.Lock()
	limit := q.policy.maxMessageBytes()
	q.mu.Unlock()
	for i, p := range payloads {
		if len(p) > limit {
			return fmt.Errorf("broker: queue %s: %s is %d bytes, MaxMessageBytes is %d: %w", q.name, payloadName(i, len(payloads)), len(p), limit, MessageTooLarge)
		}
	}
	return nil
}

// payloadName names payload i of n in an error: "payload" for a single
// publish, "payload i of the batch of n" for a batch's.
func payloadName(i, n int) string {
	if n == 1 {
		return "payload"
	}
	return fmt.Sprintf("payload %d of the batch of %d", i, n)
}

// publish publishes payloads and returns their messages in out, which has
// room for one per payload.
func (q *Queue) publish(ctx context.Context, key string, payloads [][]byte, out []MessageValue) ([]MessageValue, error) {
	if err := q.begin(ctx); err != nil {
		return nil, err
	}
	if err := q.refuseOversized(payloads); err != nil {
		return nil, err
	}
	// Encode before taking the lock: it copies every payload, and 64
	// producers would otherwise do that one at a time. The sequence
	// number and the time are stamped under the lock (see below); these
	// are guesses that give the records their likely length.
	events := make([]index.Event, len(payloads))
	recs := make([][]byte, 0, len(payloads))
	// (The guessed time only sizes the records: the reading that counts
	// is taken, and checked, under the lock. A clock that fails here fails
	// the call, as it would there, where the sizes are checked first: a
	// payload above the queue's MaxMessageBytes says so rather than the
	// clock.)
	guess, err := q.s.now()
	if err != nil {
		if terr := q.tooLarge(payloads); terr != nil {
			return nil, terr
		}
		return nil, err
	}
	next := q.s.idx.PeekNextSeq()
	for i, p := range payloads {
		events[i] = index.Event{Kind: index.KindPublish, Queue: q.id, Seq: next + uint64(i), Time: guess, Key: key, Payload: p}
		recs = append(recs, events[i].Append(getRecordBuffer(len(p)+32+len(key))))
	}
	// Once the log has taken the records (it copies them into its own
	// buffer), their buffers serve the next publish.
	defer func() {
		for _, r := range recs {
			putRecordBuffer(r)
		}
	}()

	q.mu.Lock()
	limit := q.policy.maxMessageBytes()
	for i, p := range payloads {
		if len(p) > limit {
			q.mu.Unlock()
			return nil, fmt.Errorf("broker: queue %s: %s is %d bytes, MaxMessageBytes is %d: %w", q.name, payloadName(i, len(payloads)), len(p), limit, MessageTooLarge)
		}
	}
	// The broker accepts the messages now, under the lock that orders the
	// queue's publishes: their EnqueuedAt is read and their sequence
	// numbers drawn here, so that both grow in the order the publishes
	// enter the queue. Read before the lock, a publish that lost the race
	// for it would enter the queue behind a later sequence number or
	// instant, out of the stream's order, and its message would be held on
	// the heap (index.Queue: the stream) — at 64 producers, one in twenty.
	// Restamp rewrites only each record's head. Sequence numbers come from
	// a store-wide counter; one drawn for a publish that is then refused is
	// simply never used.
	now, err := q.s.nowOpen()
	if err != nil {
		q.mu.Unlock()
		return nil, err
	}
	total := 0
	for i := range events {
		seq, err := q.s.idx.NextSeq()
		if err != nil {
			q.mu.Unlock()
			return nil, fmt.Errorf("broker: queue %s: %w", q.name, err)
		}
		events[i].Seq, events[i].Time = seq, now
		recs[i] = events[i].Restamp(recs[i])
		total += segment.Size(len(recs[i]))
	}
	if total > q.s.maxGroup() {
		q.mu.Unlock()
		return nil, fmt.Errorf("broker: queue %s: batch of %d messages and %d bytes does not fit in one log segment: %w", q.name, len(payloads), total, InvalidBatchSize)
	}

	// Dedup comes before admission: a duplicate is admitted even when the
	// queue is full, and a shed publish never enters the seen-set.
	// A publish looks at the queue: it observes its deadlines (a
	// duplicate too, which returns before admission).
	q.iq.Promote(now)
	var evict, reading [][]byte
	if key != "" {
		evict, reading = q.evictLocked(now)
		if seq, at, ok := q.iq.Seen(key); ok {
			return q.duplicateLocked(key, seq, at, reading)
		}
	}
	// (Promote above: leases lapsed for good stop holding capacity.)
	if c := q.policy.Capacity; c > 0 && q.iq.Live()+len(payloads) > c {
		live := q.iq.Live()
		a := q.answerLocked(&q.stats.shed, reading)
		q.mu.Unlock()
		err := q.waitAll(a.pends)
		q.settle(a, err)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("broker: queue %s holds %d of %d messages, %d more do not fit: %w", q.name, live, c, len(payloads), QueueFull)
	}
	for i := range events {
		q.iq.Apply(0, &events[i]) // Pending until its record is in the log
	}
	all := recs
	if len(evict) > 0 {
		all = append(evict, recs...)
	}
	// Under SyncNone the sequences are reserved by a durable mark before
	// the IDs are handed out (see seqReservation).
	resv, bound := q.s.reserveSeqs(events[len(events)-1].Seq)
	pend := q.s.log.Enqueue(q.s.opts.durable(true), all...)
	q.inflight[pend] = inflightPublish{events: events, skip: len(evict)}
	q.mu.Unlock()

	pos, err := q.s.wait(pend)
	if err == nil && resv != nil {
		if _, err = q.s.wait(resv); err == nil {
			q.s.reservedSeqs(bound)
		}
	}
	if err != nil {
		q.mu.Lock()
		delete(q.inflight, pend)
		q.mu.Unlock()
		return nil, err
	}
	pos = pos[len(evict):]
	for i, e := range events {
		out[i] = MessageValue{ID: messageID(e.Seq), EnqueuedAt: time.Unix(0, now), Payload: payloadCopy(payloads[i])}
	}
	q.mu.Lock()
	_, mine := q.inflight[pend] // else a checkpoint committed and counted it
	delete(q.inflight, pend)
	for i, e := range events {
		if err := q.iq.Commit(e.Seq, pos[i]); err != nil {
			q.mu.Unlock()
			return nil, q.s.failure(err)
		}
	}
	if mine {
		// Counted under the lock that commits: Close's frozen Stats,
		// read under it, count every publish its checkpoint holds.
		q.stats.published.Add(int64(len(payloads)))
	}
	q.wakeLocked()
	q.mu.Unlock()
	return out, nil
}

// evictLocked forgets the dedup keys past the queue's window before a keyed
// publish looks its key up. An eviction is a state change like any other:
// evict holds its record when it forgot any, to be logged with the
// publish. A call that writes no publish record (a duplicate, a shed
// publish) still read the clock: reading holds what it must log then — the
// eviction, or, if the reading is the latest, an eviction of nothing, so
// that a replay knows the clock went backwards after it.
func (q *Queue) evictLocked(now int64) (evict, reading [][]byte) {
	window := int64(q.policy.dedupWindow())
	advanced := now > q.iq.LastEvicts()
	e := index.Event{Kind: index.KindEvict, Queue: q.id, Time: now, Window: window}
	if q.iq.EvictSeen(now, window) {
		evict = [][]byte{e.Append(nil)}
		return evict, evict
	}
	if advanced {
		reading = [][]byte{e.Append(nil)}
	}
	return nil, reading
}

// duplicateLocked answers a keyed publish whose key names message seq,
// enqueued at at: it logs reading (see evictLocked), releases q.mu, which
// the caller holds, and returns the original once it is in the log.
func (q *Queue) duplicateLocked(key string, seq uint64, at int64, reading [][]byte) ([]MessageValue, error) {
	// The original may be queued and not yet in the log: this call may not
	// report success before the original does, nor if it fails (a barrier
	// could succeed where the original's own append did not: a segment it
	// needed could not be made).
	var orig, resv *wal.Pending
	var bound uint64
	if m := q.iq.Get(seq); m != nil && m.State == index.Pending {
		if orig = q.inflightWithLocked(seq); orig == nil {
			// Still pending but no longer queued: its append failed (a
			// publish that succeeds commits under the lock it leaves
			// inflight under), and the store with it. This call may have
			// passed begin before that.
			q.mu.Unlock()
			if err := q.s.usable(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("broker: queue %s: the publish of key %q failed", q.name, key)
		}
		// Nor before the mark that reserves the original's sequence is
		// durable (SyncNone): the original waits for it before it
		// returns the ID, and a power loss before then would let the
		// reopened store hand the ID out again (see seqReservation).
		resv, bound = q.s.reserveSeqs(seq)
	}
	var waits []*wal.Pending
	for _, p := range []*wal.Pending{orig, resv} {
		if p != nil {
			waits = append(waits, p)
		}
	}
	a := q.answerLocked(&q.stats.duplicates, reading, waits...)
	q.mu.Unlock()
	err := q.waitAll(a.pends)
	if err == nil && resv != nil {
		q.s.reservedSeqs(bound)
	}
	q.settle(a, err)
	if err != nil {
		return nil, err
	}
	return []MessageValue{{ID: messageID(seq), EnqueuedAt: time.Unix(0, at)}}, nil
}

// inflightWithLocked returns the append of the in-flight publish of
// message seq. A message the index holds as Pending is always in one: the
// publish queues its records and records them here under one hold of
// q.mu, which the caller holds.
func (q *Queue) inflightWithLocked(seq uint64) *wal.Pending {
	for p, in := range q.inflight {
		for _, e := range in.events {
			if e.Seq == seq {
				return p
			}
		}
	}
	return nil
}

// recordBuffers recycles the buffers publish records are encoded into:
// they live only until the log has copied them, and at high rates
// allocating one per message keeps the garbage collector busy.
var recordBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRecord bounds the buffers kept, so that one large message does
// not pin a large buffer in the pool.
const maxPooledRecord = 64 << 10

func getRecordBuffer(size int) []byte {
	if size > maxPooledRecord {
		return make([]byte, 0, size)
	}
	b := *recordBuffers.Get().(*[]byte)
	if cap(b) < size {
		b = make([]byte, 0, max(size, 2<<10))
	}
	return b[:0]
}

func putRecordBuffer(b []byte) {
	if cap(b) <= maxPooledRecord {
		recordBuffers.Put(&b)
	}
}

// payload reads the payload of message seq from its publish record at
// pos: a copy that belongs to the caller. A record there that is not that
// message's publish is damage (an index that names the wrong record: a
// table file of another store, say, whose entries verify on their own).
func (q *Queue) payload(pos wal.Position, seq uint64) ([]byte, error) {
	var out []byte
	var misplaced error
	err := q.s.log.View(pos, func(rec []byte) error {
		e, err := index.Decode(rec)
		if err == nil && e.Kind != index.KindPublish {
			err = fmt.Errorf("record at %v is a %s event, not the message's publish", pos, e.Kind)
		}
		if err == nil && (e.Seq != seq || e.Queue != q.id) {
			// A sound record, but not the one the index meant.
			misplaced = fmt.Errorf("the index names the record at %v for message %s of queue %d, and it holds the publish of message %s of queue %d: the index is damaged",
				pos, messageID(seq), q.id, messageID(e.Seq), e.Queue)
			return misplaced
		}
		if err != nil {
			// The frame verified: only the event says it is damage, and
			// the error names the file and offset as the log's own do.
			return &wal.CorruptionError{File: q.s.log.SegmentPath(pos.Segment()), Offset: pos.Offset(), Cause: err}
		}
		out = append(make([]byte, 0, len(e.Payload)), e.Payload...)
		return nil
	})
	if misplaced != nil {
		return nil, q.s.damaged(fmt.Errorf("queue %s: %w", q.name, misplaced))
	}
	if err != nil {
		if errors.Is(err, wal.ErrClosed) {
			// Not expected: the caller holds removeMu shared from the
			// position to here, and Close closes the log only once it
			// has removeMu. Asked, rather than whether Close has set
			// closed: it sets closed before it waits for removeMu, and a
			// read that fails meanwhile found damage, which must stop
			// the store and mark the checkpoint suspect all the same.
			return nil, fmt.Errorf("broker: store %s: %w", q.s.dir, Closed)
		}
		// The log is damaged where the last open did not look (see
		// wal.Options.Sealed): stop, so that the next open scans it all.
		return nil, q.s.damaged(fmt.Errorf("queue %s: read payload at %v: %w", q.name, pos, err))
	}
	return out, nil
}

// InvalidDedupKey is returned by PublishKeyed for a key that is empty or
// longer than 256 bytes; nothing is published. Check with errors.Is.
var InvalidDedupKey = NewError("INVALID_DEDUP_KEY", codeQueue|11, "a dedup key must be 1 to 256 bytes", "")
