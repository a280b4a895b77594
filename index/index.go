package index

import (
	"fmt"
	"sync/atomic"

	"github.com/walbroker/walbroker/wal"
)

// Index is the projection of a whole store: its secret, its queues, and
// the next message sequence. It is not safe for concurrent use: the broker
// serialises access (a store-wide lock for the queue table, a queue's lock
// for that queue's state).
type Index struct {
	Secret  []byte
	queues  map[uint32]*Queue
	byName  map[string]*Queue
	nextSeq atomic.Uint64 // the next message sequence to hand out
	// Orphans counts message events that named no message the index held
	// (possible only in a log salvage cut into).
	Orphans int
}

// New returns an empty index.
func New() *Index {
	x := &Index{queues: map[uint32]*Queue{}, byName: map[string]*Queue{}}
	x.nextSeq.Store(1)
	return x
}

// Apply applies one event found at pos. Message events for a queue the index
// does not know are counted as orphans, not refused.
func (x *Index) Apply(pos wal.Position, e *Event) error {
	switch e.Kind {
	case KindMeta:
		x.Secret = append([]byte(nil), e.Secret...)
		return nil
	case KindDeclare:
		x.declare(e.Queue, e.Name, e.Policy)
		return nil
	}
	q := x.queues[e.Queue]
	if q == nil {
		x.Orphans++
		return nil
	}
	if e.Kind == KindEvict {
		q.EvictSeen(e.Time, e.Window)
		return nil
	}
	if e.Kind == KindPublish && e.Seq >= x.nextSeq.Load() {
		x.nextSeq.Store(e.Seq + 1)
	}
	if !q.Apply(pos, e) {
		x.Orphans++
	}
	return nil
}

func (x *Index) declare(id uint32, name string, p Policy) *Queue {
	if q := x.queues[id]; q != nil {
		if q.Name != name {
			// A queue number never changes its name; a log saying so was
			// not written by this code.
			return q
		}
		q.setPolicy(p)
		return q
	}
	q := newQueue(id, name, p)
	x.queues[id] = q
	x.byName[name] = q
	return q
}

// ApplyRecord decodes and applies the record at pos.
func (x *Index) ApplyRecord(pos wal.Position, rec []byte) error {
	e, err := Decode(rec)
	if err != nil {
		return fmt.Errorf("index: record at %v: %w", pos, err)
	}
	return x.Apply(pos, &e)
}

// Queue returns the queue named name, or nil.
func (x *Index) Queue(name string) *Queue { return x.byName[name] }

// QueueByID returns queue id, or nil.
func (x *Index) QueueByID(id uint32) *Queue { return x.queues[id] }

// Queues returns the names of every declared queue.
func (x *Index) Queues() []string {
	names := make([]string, 0, len(x.byName))
	for n := range x.byName {
		names = append(names, n)
	}
	return names
}

// NextQueueID returns the number the next declared queue gets.
func (x *Index) NextQueueID() uint32 { return uint32(len(x.queues)) + 1 }

// NextSeq reserves and returns the next message sequence number. It is
// safe for concurrent use.
func (x *Index) NextSeq() uint64 { return x.nextSeq.Add(1) - 1 }

// Declare declares (or re-declares with a new policy) queue id. The caller
// holds whatever lock guards the queue table and, for a re-declaration, the
// queue's own lock.
func (x *Index) Declare(id uint32, name string, p Policy) *Queue { return x.declare(id, name, p) }
