package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/index"
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
type Queue struct {
	s    *Store
	name string
	id   uint32

	// mu guards iq, policy and signal.
	mu     sync.Mutex
	iq     *index.Queue
	policy PolicyValue
	signal chan struct{} // closed by the next event that may make a message receivable

	stats queueCounters
}

type queueCounters struct {
	published, duplicates, shed, delivered, acked, nacked atomic.Int64
	rejected, deadLettered, replayed                      atomic.Int64
}

func newQueue(s *Store, iq *index.Queue, p PolicyValue) *Queue {
	return &Queue{s: s, name: iq.Name, id: iq.ID, iq: iq, policy: p, signal: make(chan struct{})}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// wakeLocked closes the current wake signal and makes a new one.
func (q *Queue) wakeLocked() {
	close(q.signal)
	q.signal = make(chan struct{})
}

// unlockAndWait queues recs (if any) as state-change events, releases q.mu,
// which the caller holds, and waits for them as the sync mode asks. Queuing
// under the lock is what keeps the log in decision order.
func (q *Queue) unlockAndWait(recs [][]byte) error {
	if len(recs) == 0 {
		q.mu.Unlock()
		return nil
	}
	pend := q.s.log.Enqueue(q.s.opts.durable(false), recs...)
	q.mu.Unlock()
	_, err := q.s.wait(pend)
	return err
}

// begin checks what every call checks first: the context and the store.
func (q *Queue) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.s.usable()
}

// Publish appends payload to the queue; see Broker.Publish. Under SyncAll
// and SyncPublish it returns after an fdatasync covers the message.
func (q *Queue) Publish(ctx context.Context, payload []byte) (MessageValue, error) {
	ms, err := q.publish(ctx, "", [][]byte{payload})
	if err != nil {
		return MessageValue{}, err
	}
	return ms[0], nil
}

// PublishKeyed is an idempotent Publish. A key seen within the queue's
// DedupWindow returns the ORIGINAL message's ID and EnqueuedAt with a nil
// error and enqueues nothing — even after that message was acknowledged,
// and even when the queue is full. Such a duplicate carries no Payload (the
// original's may be gone). key must be 1 to 256 bytes (InvalidDedupKey).
func (q *Queue) PublishKeyed(ctx context.Context, key string, payload []byte) (MessageValue, error) {
	if len(key) == 0 || len(key) > maxKeyBytes {
		return MessageValue{}, fmt.Errorf("broker: queue %s: dedup key of %d bytes, want 1 to %d: %w", q.name, len(key), maxKeyBytes, InvalidDedupKey)
	}
	ms, err := q.publish(ctx, key, [][]byte{payload})
	if err != nil {
		return MessageValue{}, err
	}
	return ms[0], nil
}

// PublishBatch publishes every payload, all or nothing, in one commit:
// after a crash either every message of the batch exists or none does. A
// batch that does not fit the queue's Capacity is refused whole
// (QueueFull); an empty one is InvalidBatchSize.
func (q *Queue) PublishBatch(ctx context.Context, payloads [][]byte) ([]MessageValue, error) {
	if len(payloads) == 0 {
		return nil, fmt.Errorf("broker: queue %s: empty batch: %w", q.name, InvalidBatchSize)
	}
	return q.publish(ctx, "", payloads)
}

func (q *Queue) publish(ctx context.Context, key string, payloads [][]byte) ([]MessageValue, error) {
	if err := q.begin(ctx); err != nil {
		return nil, err
	}
	q.mu.Lock()
	limit := q.policy.maxMessageBytes()
	total := 0
	for i, p := range payloads {
		if len(p) > limit {
			q.mu.Unlock()
			return nil, fmt.Errorf("broker: queue %s: payload %d is %d bytes, MaxMessageBytes is %d: %w", q.name, i, len(p), limit, MessageTooLarge)
		}
		total += len(p) + 64
	}
	if total > q.s.maxPayload() {
		q.mu.Unlock()
		return nil, fmt.Errorf("broker: queue %s: batch of %d messages and %d bytes does not fit in one log segment: %w", q.name, len(payloads), total, InvalidBatchSize)
	}
	now := q.s.now()

	// Dedup comes before admission: a duplicate is admitted even when the
	// queue is full, and a shed publish never enters the seen-set. An
	// eviction is a state change like any other: it is logged.
	var recs [][]byte
	if key != "" {
		window := int64(q.policy.dedupWindow())
		if q.iq.EvictSeen(now, window) {
			e := index.Event{Kind: index.KindEvict, Queue: q.id, Time: now, Window: window}
			recs = append(recs, e.Append(nil))
		}
		if seq, at, ok := q.iq.Seen(key); ok {
			m := q.iq.Get(seq)
			pending := m != nil && m.State == index.Pending
			if err := q.unlockAndWait(recs); err != nil {
				return nil, err
			}
			q.stats.duplicates.Add(1)
			if pending {
				// The original is queued but not yet in the log: this call
				// may not report success before the original would.
				if err := q.s.log.Barrier(q.s.opts.durable(true)); err != nil {
					return nil, q.s.failure(err)
				}
			}
			return []MessageValue{{ID: messageID(seq), EnqueuedAt: time.Unix(0, at)}}, nil
		}
	}
	q.iq.Promote(now) // so that leases lapsed for good stop holding capacity
	if c := q.policy.Capacity; c > 0 && q.iq.Live()+len(payloads) > c {
		live := q.iq.Live()
		if err := q.unlockAndWait(recs); err != nil {
			return nil, err
		}
		q.stats.shed.Add(1)
		return nil, fmt.Errorf("broker: queue %s holds %d of %d messages, %d more do not fit: %w", q.name, live, c, len(payloads), QueueFull)
	}

	seqs := make([]uint64, len(payloads))
	evicts := len(recs)
	recs = append(recs, make([][]byte, len(payloads))...)
	for i, p := range payloads {
		e := index.Event{Kind: index.KindPublish, Queue: q.id, Seq: q.s.idx.NextSeq(), Time: now, Key: key, Payload: p}
		seqs[i] = e.Seq
		recs[evicts+i] = e.Append(make([]byte, 0, len(p)+32+len(key)))
		q.iq.Apply(0, &e) // Pending until its record is in the log
	}
	pend := q.s.log.Enqueue(q.s.opts.durable(true), recs...)
	q.mu.Unlock()

	pos, err := q.s.wait(pend)
	if err != nil {
		return nil, err
	}
	out := make([]MessageValue, len(payloads))
	q.mu.Lock()
	for i := range seqs {
		q.iq.Commit(seqs[i], pos[evicts+i])
		out[i] = MessageValue{ID: messageID(seqs[i]), EnqueuedAt: time.Unix(0, now), Payload: append([]byte(nil), payloads[i]...)}
	}
	q.wakeLocked()
	q.mu.Unlock()
	q.stats.published.Add(int64(len(payloads)))
	return out, nil
}

// payload reads a message's payload from its publish record: a copy that
// belongs to the caller.
func (q *Queue) payload(pos wal.Position) ([]byte, error) {
	var out []byte
	err := q.s.log.View(pos, func(rec []byte) error {
		e, err := index.Decode(rec)
		if err != nil {
			return err
		}
		if e.Kind != index.KindPublish {
			return fmt.Errorf("record at %v is a %s event", pos, e.Kind)
		}
		out = append(make([]byte, 0, len(e.Payload)), e.Payload...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("broker: queue %s: read payload: %w: %w", q.name, Corrupt, err)
	}
	return out, nil
}

// InvalidDedupKey is returned by PublishKeyed for a key that is empty or
// longer than 256 bytes; nothing is published. Check with errors.Is.
var InvalidDedupKey = NewError("INVALID_DEDUP_KEY", codeQueue|11, "a dedup key must be 1 to 256 bytes", "")
