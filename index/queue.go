package index

import (
	"math"
	"slices"

	"github.com/walbroker/walbroker/wal"
)

// State is where a message is in its life.
type State uint8

const (
	// Pending: published, the publish record not yet in the log. Never the
	// result of replaying a log: it exists only between a publish and its
	// commit in a running store. Counts toward capacity, is never received.
	Pending State = iota + 1
	// Ready: receivable from At on (At 0: at once).
	Ready
	// Leased: a consumer holds it until At.
	Leased
	// Dead: in the dead-letter store.
	Dead
)

// Message is the projected state of one message. The index owns it: callers
// read it under their own lock and change it only through events.
type Message struct {
	Seq        uint64
	EnqueuedAt int64
	Pos        wal.Position // the publish record, which holds the payload
	Key        string
	State      State
	Deliveries uint32
	// At is when a Ready message becomes receivable, or when a Leased one's
	// lease lapses.
	At    int64
	Nonce uint64 // the current lease's
	// Lapsed records that Promote saw this Leased message's lease lapse: it
	// stays lapsed even if the clock then goes backwards. It is a view of
	// time, not state of the log: a replay recomputes it.
	Lapsed bool
	// The dead letter, when State is Dead.
	FailedAt int64
	Code     uint32
	Reason   string
	Cause    string

	heap    heapID
	heapIdx int
}

// Queue is the projected state of one queue. It is not safe for concurrent
// use; the broker holds its queue's lock around every call.
type Queue struct {
	ID     uint32
	Name   string
	Policy Policy

	msgs      map[uint64]*Message
	ready     msgHeap    // Ready and receivable now, by EnqueuedAt
	timers    msgHeap    // Ready later, or Leased with deliveries left, by At
	finals    msgHeap    // Leased on their last allowed delivery, by At
	exhausted []*Message // leases that lapsed on their last delivery
	dead      []*Message // by FailedAt, then Seq
	live      int        // Pending, Ready or Leased

	seen       map[string]seenKey
	seenOrder  keyHeap
	lastEvicts int64 // the latest clock reading: of an eviction, or a publish
}

func newQueue(id uint32, name string, p Policy) *Queue {
	return &Queue{
		ID: id, Name: name, Policy: p,
		msgs:       map[uint64]*Message{},
		ready:      msgHeap{less: byEnqueued, id: inReady},
		timers:     msgHeap{less: byDue, id: inTimers},
		finals:     msgHeap{less: byDue, id: inFinals},
		seen:       map[string]seenKey{},
		lastEvicts: math.MinInt64,
	}
}

// Apply changes the queue by one message event. pos is the event's record
// position; a publish applied with pos 0 is Pending until Commit. Events
// about a message the queue does not hold are ignored (and reported false):
// a replayed log may hold them after salvage.
func (q *Queue) Apply(pos wal.Position, e *Event) bool {
	if e.Kind == KindPublish {
		m := q.msgs[e.Seq]
		if m == nil {
			m = &Message{Seq: e.Seq, heapIdx: -1}
			q.msgs[e.Seq] = m
		} else {
			q.detach(m)
		}
		m.EnqueuedAt, m.Key, m.Pos = e.Time, e.Key, pos
		// An enqueue instant is a reading of the broker clock: eviction
		// never runs on a clock behind it, and this survives a replay.
		q.lastEvicts = max(q.lastEvicts, e.Time)
		m.Deliveries, m.At, m.Nonce = 0, 0, 0
		if e.Key != "" {
			q.remember(e.Key, e.Seq, e.Time)
		}
		if pos == 0 {
			m.State = Pending
			q.live++
		} else {
			q.attach(m, Ready)
		}
		return true
	}
	m := q.msgs[e.Seq]
	if m == nil {
		return false
	}
	switch e.Kind {
	case KindLease, KindExtend:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = e.Deliveries, e.Time, e.Nonce
		q.attach(m, Leased)
	case KindNack:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = e.Deliveries, e.Time, 0
		q.attach(m, Ready)
	case KindDeadLetter:
		q.detach(m)
		m.Deliveries, m.Nonce = e.Deliveries, 0
		m.FailedAt, m.Code, m.Reason, m.Cause = e.Time, e.Code, e.Reason, e.Cause
		q.attach(m, Dead)
	case KindReplay:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = 0, 0, 0
		m.FailedAt, m.Code, m.Reason, m.Cause = 0, 0, "", ""
		q.attach(m, Ready)
	case KindAck, KindDelete:
		q.detach(m)
		delete(q.msgs, m.Seq)
	}
	return true
}

// detach takes m out of every structure that reflects its state.
func (q *Queue) detach(m *Message) {
	switch m.heap {
	case inReady:
		q.ready.remove(m)
	case inTimers:
		q.timers.remove(m)
	case inFinals:
		q.finals.remove(m)
	}
	if i := slices.Index(q.exhausted, m); i >= 0 {
		q.exhausted = slices.Delete(q.exhausted, i, i+1)
	}
	switch m.State {
	case Pending, Ready, Leased:
		q.live--
	case Dead:
		if i, ok := slices.BinarySearchFunc(q.dead, m, byFailed); ok {
			q.dead = slices.Delete(q.dead, i, i+1)
		}
	}
	m.State, m.Lapsed = 0, false
}

// attach puts m, whose fields are set, into the structures of state s.
func (q *Queue) attach(m *Message, s State) {
	m.State = s
	switch s {
	case Ready:
		if m.At == 0 {
			q.ready.push(m)
		} else {
			q.timers.push(m)
		}
		q.live++
	case Leased:
		if q.final(m) {
			q.finals.push(m)
		} else {
			q.timers.push(m)
		}
		q.live++
	case Dead:
		i, _ := slices.BinarySearchFunc(q.dead, m, byFailed)
		q.dead = slices.Insert(q.dead, i, m)
	}
}

func byFailed(a, b *Message) int {
	switch {
	case a.FailedAt != b.FailedAt:
		if a.FailedAt < b.FailedAt {
			return -1
		}
		return 1
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}

// Commit makes a Pending message Ready at pos, once its publish record is
// in the log.
func (q *Queue) Commit(seq uint64, pos wal.Position) {
	m := q.msgs[seq]
	if m == nil || m.State != Pending {
		return
	}
	q.detach(m)
	m.Pos = pos
	q.attach(m, Ready)
}

// Get returns the message seq, or nil.
func (q *Queue) Get(seq uint64) *Message { return q.msgs[seq] }

// final reports whether a Leased message is on its last allowed delivery:
// when its lease lapses it dies instead of becoming receivable.
func (q *Queue) final(m *Message) bool { return int64(m.Deliveries) >= q.Policy.MaxDeliveries }

// Promote moves every message whose At has come (At <= now) to the
// receivable set: a delayed message, or one whose lease lapsed. A lapsed
// lease on a message delivered maxDeliveries times or more is not made
// receivable: it joins Exhausted, for the caller to dead-letter.
func (q *Queue) Promote(now int64) {
	for {
		m := q.timers.peek()
		if m == nil || m.At > now {
			break
		}
		q.timers.pop()
		if m.State == Leased {
			m.Lapsed = true
		}
		q.ready.push(m)
	}
	for {
		m := q.finals.peek()
		if m == nil || m.At > now {
			break
		}
		q.finals.pop()
		m.Lapsed = true
		q.exhausted = append(q.exhausted, m)
	}
}

// setPolicy changes the policy; leases are re-sorted if what counts as a
// last delivery changed.
func (q *Queue) setPolicy(p Policy) {
	old := q.Policy.MaxDeliveries
	q.Policy = p
	if p.MaxDeliveries == old {
		return
	}
	var leased []*Message
	for _, m := range append(append([]*Message(nil), q.timers.items...), q.finals.items...) {
		if m.State == Leased {
			leased = append(leased, m)
		}
	}
	for _, m := range leased {
		if m.heap == inTimers {
			q.timers.remove(m)
		} else {
			q.finals.remove(m)
		}
		if q.final(m) {
			q.finals.push(m)
		} else {
			q.timers.push(m)
		}
	}
}

// Exhausted returns the messages whose last lease lapsed (see Promote).
// They stay Leased until the caller applies their dead-letter events.
func (q *Queue) Exhausted() []*Message { return q.exhausted }

// NextReady returns the oldest receivable message without removing it, or
// nil. Call Promote first.
func (q *Queue) NextReady() *Message { return q.ready.peek() }

// NextDue returns the earliest At at which a message not yet receivable
// becomes receivable by itself (a retry delay ending, a lease lapsing with
// deliveries left), and whether there is one.
func (q *Queue) NextDue() (int64, bool) {
	if m := q.timers.peek(); m != nil {
		return m.At, true
	}
	return 0, false
}

// Counts returns the gauges as of the last Promote: receivable now,
// leased, delayed (Ready later), dead (exhausted leases included).
func (q *Queue) Counts() (ready, leased, delayed, dead int) {
	ready = q.ready.Len()
	for _, m := range q.timers.items {
		if m.State == Leased {
			leased++
		} else {
			delayed++
		}
	}
	leased += q.finals.Len()
	return ready, leased, delayed, len(q.dead) + len(q.exhausted)
}

// Live is the count of messages that hold capacity: Pending, Ready and
// Leased, less the exhausted ones (as of the last Promote), which are on
// their way to the dead-letter store.
func (q *Queue) Live() int { return q.live - len(q.exhausted) }

// LeaseLive reports whether m's lease is held at now: m is Leased, its
// lease has not lapsed (at At exactly, it has), and no Promote saw it lapse.
func LeaseLive(m *Message, now int64) bool {
	return m.State == Leased && !m.Lapsed && now < m.At
}

// DeadLetters returns up to max dead letters, oldest FailedAt first.
func (q *Queue) DeadLetters(max int) []*Message {
	return q.dead[:min(max, len(q.dead))]
}

// remember records a dedup key.
func (q *Queue) remember(key string, seq uint64, at int64) {
	k := seenKey{key: key, seq: seq, enqueuedAt: at}
	q.seen[key] = k
	q.seenOrder.push(k)
}

// Seen returns the message a dedup key names, if the key is remembered.
func (q *Queue) Seen(key string) (seq uint64, enqueuedAt int64, ok bool) {
	k, ok := q.seen[key]
	return k.seq, k.enqueuedAt, ok
}

// Forget drops a dedup key that names seq: a publish that never made it
// into the log (the store fails then, but its memory must not lie).
func (q *Queue) Forget(key string, seq uint64) {
	if k, ok := q.seen[key]; ok && k.seq == seq {
		delete(q.seen, key)
	}
}

// EvictSeen forgets the dedup keys enqueued strictly more than window
// before now, and reports whether it forgot any: the caller then logs an
// evict event with the same clock and window, so that a replay forgets the
// same keys. If the clock went backwards — now is behind an earlier
// eviction's clock or a publish's enqueue instant — nothing is evicted.
func (q *Queue) EvictSeen(now, window int64) bool {
	if now < q.lastEvicts {
		return false
	}
	q.lastEvicts = now
	evicted := false
	for len(q.seenOrder) > 0 && now-q.seenOrder[0].enqueuedAt > window {
		k := q.seenOrder.pop()
		if cur, ok := q.seen[k.key]; ok && cur.seq == k.seq {
			delete(q.seen, k.key)
			evicted = true
		}
	}
	return evicted
}

// SeenCount is the number of remembered dedup keys.
func (q *Queue) SeenCount() int { return len(q.seen) }
