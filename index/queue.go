package index

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/walbroker/walbroker/internal/shrink"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// State is where a message is in its life.
type State uint8

const (
	// Pending: published, the publish record not yet in the log. Never the
	// result of replaying a log: it exists only between a publish and its
	// commit in a running store. Counts toward capacity, is never received.
	Pending State = iota + 1
	// Ready: receivable from At on (AtOnce: at once).
	Ready
	// Leased: a consumer holds it until At.
	Leased
	// Dead: in the dead-letter store.
	Dead
)

// AtOnce is the At of a Ready message receivable at once, and the
// visibleAt of a nack event that hands a message back at once: the
// earliest instant a broker records (September 1677 in Unix nanoseconds),
// so no clock reading is before it and it is no special case for Promote.
// Every other instant, 0 (the Unix epoch) included, is an ordinary one: a
// message nacked to be visible at 0 is not receivable at -1. A log or
// checkpoint written before AtOnce recorded 0 for "at once"; read now as
// the instant 0, it is the same for every clock reading from 1970 on.
const AtOnce int64 = math.MinInt64

// Message is the projected state of one message. The index owns it: callers
// read it under their own lock and change it only through events.
type Message struct {
	Seq        uint64
	EnqueuedAt int64
	Pos        wal.Position // the publish record, which holds the payload
	Key        string
	State      State
	Deliveries uint32
	// At is when a Ready message becomes receivable (AtOnce for a message
	// receivable at once), or when a Leased one's lease lapses.
	At    int64
	Nonce uint64 // the current lease's
	// Lapsed records that Promote saw this Leased message's lease lapse: it
	// stays lapsed even if the clock then goes backwards. It is a view of
	// time, not state of the log: a replay recomputes it.
	Lapsed bool
	// The dead letter, when State is Dead. While the message is live,
	// Code, Reason and Cause are the last failure a consumer reported in
	// its current life (a nack's classified cause), Reason empty for none;
	// FailedAt is 0.
	FailedAt int64
	Code     uint32
	Reason   string
	Cause    string
	// Size is the length of the publish record's frame, for the count of
	// live bytes.
	Size uint32
	// restate is the length of the frame of the event that restates the
	// message's state (StateEvent; 0 for none), as its publish's segment
	// counts it (SegmentUse.StateBytes) while Pos is not 0: an ack
	// uncounts, and a copy moves, what was counted.
	restate uint32

	heapIdx int // (before heap and stream, which fit in its padding)
	heap    heapID
	stream  bool // the publish joined the stream (decided when applied)
}

// Queue is the projected state of one queue. It is not safe for concurrent
// use; the broker holds its queue's lock around every call.
//
// A queue's messages are in one of two places. Most of a backlog is the
// stream: messages published in sequence order with nondecreasing
// EnqueuedAt and never delivered since, which the table holds (off the Go
// heap) and a cursor walks. Every other message — pending, leased,
// delayed, dead, replayed, or published out of order — is active: a
// Message in msgs and in the heaps below. A stream message becomes active
// when it is leased, and never rejoins the stream.
//
// A nil *Queue, what a caller holds that went on past Declare's error or
// looked up a queue the index does not have, refuses Apply and Commit with
// an error wrapping ErrClosed that says so, changing nothing; the methods
// that return no error answer as for an empty queue.
type Queue struct {
	ID     uint32
	Name   string
	Policy Policy

	x *Index
	// The stream: messages with sequence numbers in [cursor, streamMax]
	// whose table entry is this queue's with the stream bit, that are not
	// in msgs and not in gone. fresh counts them.
	cursor    uint64
	streamMax uint64
	// streamEnq is the EnqueuedAt of streamMax, or math.MinInt64 while no
	// message joined the stream (streamMax 0): a publish joins with any
	// EnqueuedAt then, before 1970 too. (It started at 0 once, which left
	// a backlog published in order before the Unix epoch on the heap.)
	streamEnq int64
	fresh     int
	// gone: stream messages at or past cursor that became active away
	// from it (a replay's leases, for one). The walk forgets each one it
	// reaches or jumps over (passGone), so none is ever below cursor.
	gone map[uint64]struct{}
	head Message // NextReady's answer when the stream's head is oldest

	msgs      map[uint64]*Message
	msgsPeak  int           // the most messages msgs held since it was last rebuilt
	ready     msgHeap       // Ready and receivable now, by EnqueuedAt
	timers    msgHeap       // Ready later, or Leased with deliveries left, by At
	finals    msgHeap       // Leased on their last allowed delivery, by At
	exhausted exhaustedList // leases that lapsed on their last delivery
	dead      deadList      // by FailedAt, then Seq
	live      int           // Pending, Ready or Leased

	seen      map[string]seenKey
	seenOrder keyHeap
	seenPeak  int // the most keys seen held since it was last rebuilt
	// lastEvicts is the latest clock reading: of an eviction, or a
	// publish. Written under the owner's lock (or by a replay); atomic so
	// that the log's writer goroutine may read it for a segment's
	// preamble (LastEvicts) without that lock.
	lastEvicts atomic.Int64
}

// errNilQueue is the error of Apply or Commit on a nil *Queue: what a
// caller holds that went on past Declare's error, or that Index.Queue or
// Index.QueueByID gave for a queue the index does not have. It wraps
// ErrClosed, since such a queue takes no event; an error, not a silent
// success, because a publish applied or committed there would be lost. The
// methods that return no error answer as for an empty queue (Promote does
// nothing, EvictSeen forgets nothing, LastEvicts is math.MinInt64, the
// others return zero values), except Dump, which says the queue is nil so
// that it matches no real queue's dump: a panic would end the process from
// a call given nothing to act on.
var errNilQueue = fmt.Errorf("index: a method of a nil *index.Queue was called (was Declare's error ignored, or did Index.Queue or QueueByID find none?): %w", ErrClosed)

func newQueue(x *Index, id uint32, name string, p Policy) *Queue {
	q := &Queue{
		ID: id, Name: name, Policy: p, x: x,
		cursor:    1,
		streamEnq: math.MinInt64,
		gone:      map[uint64]struct{}{},
		msgs:      map[uint64]*Message{},
		ready:     msgHeap{less: byEnqueued, id: inReady},
		timers:    msgHeap{less: byDue, id: inTimers},
		finals:    msgHeap{less: byDue, id: inFinals},
		seen:      map[string]seenKey{},
	}
	q.lastEvicts.Store(math.MinInt64)
	return q
}

// Apply changes the queue by one message event: a publish, lease, extend,
// nack, deadletter, replay, ack or delete of this queue (an evict goes
// through Index.Apply or EvictSeen). pos is the event's record position; a
// publish applied with pos 0 is of a new message, Pending until Commit. A
// publish applied at a position, of a message the queue holds and has
// committed (live or dead), is a copy of its record (see the reclamation
// of the broker): it moves the message's position and changes nothing
// else; of a Pending message, it is the message's commit there. Any other
// event about a message the queue does not hold changes nothing and is
// reported not held: a replayed log holds such events after segments were
// removed or salvaged. An event of another kind or another queue, with a
// sequence out of range, or a publish at pos 0 of a message the queue
// holds (a sequence is never reused), or a change of state of a Pending
// message but its ack or delete, is refused with ErrBadEvent before
// anything changes.
func (q *Queue) Apply(pos wal.Position, e *Event) (held bool, err error) {
	if q == nil {
		return false, errNilQueue
	}
	if err := q.check(e); err != nil {
		return false, err
	}
	if e.Kind == KindPublish {
		return q.publish(pos, e)
	}
	m := q.msgs[e.Seq]
	if m == nil {
		if m = q.activate(e.Seq); m == nil {
			return false, nil
		}
	}
	if m.State == Pending && e.Kind != KindAck && e.Kind != KindDelete {
		// Nothing hands out a message before its publish is in the log:
		// taken, the event would leave it at position 0, where its commit
		// (which acts only on a Pending message) would never count it.
		return false, fmt.Errorf("%w: queue %s: %s event of message %d, whose publish is not yet in the log", ErrBadEvent, q.Name, e.Kind, e.Seq)
	}
	switch e.Kind {
	case KindLease, KindExtend:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = e.Deliveries, e.Time, e.Nonce
		m.noteFailure(e)
		q.attach(m, Leased)
		q.restated(m)
	case KindNack:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = e.Deliveries, e.Time, 0
		m.noteFailure(e)
		q.attach(m, Ready)
		q.restated(m)
	case KindDeadLetter:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = e.Deliveries, 0, 0
		m.FailedAt, m.Code, m.Reason, m.Cause = e.Time, e.Code, e.Reason, e.Cause
		q.attach(m, Dead)
		q.restated(m)
	case KindReplay:
		q.detach(m)
		m.Deliveries, m.At, m.Nonce = 0, AtOnce, 0
		m.FailedAt, m.Code, m.Reason, m.Cause = 0, 0, "", ""
		q.attach(m, Ready)
		q.restated(m)
	case KindAck, KindDelete:
		q.detach(m)
		q.forget(m.Seq)
		if m.Pos != 0 {
			q.x.release(m.Seq, m.Pos, m.Size, m.restate)
		}
	}
	return true, nil
}

// noteFailure keeps the failure a nack or lease event carries (see Event)
// as m's last one. An event without one keeps the one m has: a lease, a
// lapse or a hand-back at a policy change reports nothing.
func (m *Message) noteFailure(e *Event) {
	if e.Reason != "" {
		m.Code, m.Reason, m.Cause = e.Code, e.Reason, e.Cause
	}
}

// restated counts again, after m's state changed, the event that restates
// it in a copy forward: its publish's segment counts it (StateBytes) once
// the publish is in the log.
func (q *Queue) restated(m *Message) {
	n := restateSize(q.ID, m)
	if m.Pos != 0 && n != m.restate {
		q.x.restate(m.Pos, m.restate, n)
	}
	m.restate = n
}

// StateEvent returns the event that gives message m of queue queue its
// present state once a replay has applied its publish record alone, and
// false when the publish gives that state (Ready at once, never
// delivered) or m is Pending or nil: a lease with its deliveries, expiry
// and nonce (so that its receipt stays valid), a nack with its deliveries
// and retry instant (each with the message's last failure, if it has one),
// a dead letter with its deliveries, instant, code,
// reason and public cause. A copy forward writes it after the publish, in
// one group; its length is what the message's segment counts beside the
// publish (SegmentUse.StateBytes).
func StateEvent(queue uint32, m *Message) (Event, bool) {
	if m == nil {
		return Event{}, false
	}
	e := Event{Queue: queue, Seq: m.Seq, Deliveries: m.Deliveries}
	switch m.State {
	case Leased:
		e.Kind, e.Time, e.Nonce = KindLease, m.At, m.Nonce
		e.Code, e.Reason, e.Cause = m.Code, m.Reason, m.Cause
	case Dead:
		e.Kind, e.Time, e.Code, e.Reason, e.Cause = KindDeadLetter, m.FailedAt, m.Code, m.Reason, m.Cause
	case Ready:
		if m.At == AtOnce && m.Deliveries == 0 && m.Reason == "" {
			return Event{}, false
		}
		e.Kind, e.Time = KindNack, m.At
		e.Code, e.Reason, e.Cause = m.Code, m.Reason, m.Cause
	default:
		return Event{}, false
	}
	return e, true
}

// restateSize is the length of the record of m's StateEvent, frame
// included, or 0 when it has none. It is computed, not encoded: Apply
// calls it at every lease and nack.
func restateSize(queue uint32, m *Message) uint32 {
	e, ok := StateEvent(queue, m)
	if !ok {
		return 0
	}
	return uint32(segment.Size(e.encodedLen()))
}

// check refuses an event Apply does not handle. Every kind check passes is
// one of Apply's cases: a message taken out of the stream (activate) is
// always placed.
func (q *Queue) check(e *Event) error {
	if e == nil {
		return fmt.Errorf("%w: queue %s: nil event", ErrBadEvent, q.Name)
	}
	switch e.Kind {
	case KindPublish, KindLease, KindExtend, KindNack, KindDeadLetter, KindReplay, KindAck, KindDelete:
	default:
		return fmt.Errorf("%w: queue %s: a %s event is not a message event", ErrBadEvent, q.Name, e.Kind)
	}
	if e.Queue != q.ID {
		return fmt.Errorf("%w: queue %s (number %d): %s event of queue %d", ErrBadEvent, q.Name, q.ID, e.Kind, e.Queue)
	}
	if e.Seq == 0 || e.Seq > LastSeq {
		// Sequences start at 1, and end at LastSeq, as in Index.Apply: a
		// publish of MaxUint64 made every walk of the stream (from seq+1
		// on) wrap to 0 and never end.
		return fmt.Errorf("%w: queue %s: %s event: message sequence %d is out of range", ErrBadEvent, q.Name, e.Kind, e.Seq)
	}
	return nil
}

// publish applies a publish event (see Apply for what it does to a
// message the queue holds).
func (q *Queue) publish(pos wal.Position, e *Event) (bool, error) {
	if pos == 0 {
		if err := q.checkNew(e.Seq); err != nil {
			return false, err
		}
	}
	size := publishSize(e)
	// An enqueue instant is a reading of the broker clock: eviction never
	// runs on a clock behind it, and this survives a replay.
	q.observeClock(e.Time)
	if pos != 0 && q.copied(pos, e, size) {
		return true, nil
	}
	if old := q.msgs[e.Seq]; old != nil {
		// Pending (every other message held was copied above): its
		// record is in the log now, and its life starts there afresh.
		q.detach(old)
	}
	m := &Message{Seq: e.Seq, EnqueuedAt: e.Time, Key: e.Key, Size: size, At: AtOnce, heapIdx: -1}
	q.msgs[e.Seq] = m
	// A message joins the stream if it keeps the stream in order: a later
	// sequence and no earlier EnqueuedAt than the stream's last.
	m.stream = e.Seq > q.streamMax && e.Time >= q.streamEnq
	if m.stream {
		q.streamMax, q.streamEnq = e.Seq, e.Time
	}
	if e.Key != "" {
		q.remember(e.Key, e.Seq, e.Time)
	}
	if pos == 0 {
		m.State = Pending
		q.live++
		return true, nil
	}
	q.commit(m, pos)
	return true, nil
}

// checkNew refuses a pending publish (at position 0) of seq if the queue
// holds seq: a pending publish is of a new message, and made a held one
// Pending again, still counted where its record was (or, from the stream,
// counted twice), with its dead letter's failure kept.
func (q *Queue) checkNew(seq uint64) error {
	if q.msgs[seq] == nil {
		if _, inStream := q.freshEntry(seq); !inStream {
			return nil
		}
	}
	return fmt.Errorf("%w: queue %s: publish of message %d at position 0 (pending), which the queue holds already: a sequence is never reused", ErrBadEvent, q.Name, seq)
}

// copied moves seq's record to pos, a copy of it, if the queue holds the
// message committed (in msgs and not Pending, or in the stream), and
// reports whether it did: a copy changes nothing else.
func (q *Queue) copied(pos wal.Position, e *Event, size uint32) bool {
	if m := q.msgs[e.Seq]; m != nil && m.State != Pending {
		q.x.move(m.Seq, m.Pos, pos, m.Size, size, m.restate)
		m.Pos, m.Size = pos, size
		q.moveKey(e.Key, e.Seq, pos)
		return true
	}
	if ent, ok := q.freshEntry(e.Seq); ok {
		q.x.move(ent.Seq, ent.Pos, pos, ent.Size, size, 0) // restated by nothing
		ent.Pos, ent.Size = pos, size
		q.x.Table.Put(ent)
		q.moveKey(e.Key, e.Seq, pos)
		return true
	}
	return false
}

// publishSize is the length of e's record in the log, frame included.
func publishSize(e *Event) uint32 {
	return uint32(segment.Size(e.encodedLen()))
}

// commit makes m, not in any structure, Ready at pos: in the stream if its
// publish joined it and the cursor has not passed it, active otherwise.
func (q *Queue) commit(m *Message, pos wal.Position) {
	m.Pos = pos
	// Its state is a publish's (m.restate is 0): only its record counts.
	q.x.hold(m.Seq, pos, m.Size)
	if m.Key != "" {
		q.moveKey(m.Key, m.Seq, pos)
	}
	if m.stream && m.Seq >= q.cursor {
		q.forget(m.Seq)
		q.x.Table.Put(Entry{Seq: m.Seq, Pos: pos, EnqueuedAt: m.EnqueuedAt, Queue: q.ID, Stream: true, Size: m.Size})
		q.fresh++
		return
	}
	q.attach(m, Ready)
}

// freshEntry returns seq's table entry if seq is in the stream.
func (q *Queue) freshEntry(seq uint64) (Entry, bool) {
	ent, ok, _ := q.streamEntry(seq)
	return ent, ok
}

// streamEntry is freshEntry, and says whether seq's entry was damaged (which
// marks the index damaged; see entry).
func (q *Queue) streamEntry(seq uint64) (ent Entry, ok, damaged bool) {
	if seq < q.cursor || seq > q.streamMax {
		return Entry{}, false, false
	}
	if _, ok := q.msgs[seq]; ok {
		return Entry{}, false, false
	}
	if _, ok := q.gone[seq]; ok {
		return Entry{}, false, false
	}
	ent, ok, _, damaged = q.entry(seq)
	return ent, ok, damaged
}

// entry returns seq's entry if it is this queue's and joined the stream.
// A damaged entry sets damaged, and marks the index damaged. A closed
// table (its store closed, and a reader of the queue came after: Stats
// and Wake take no look at the store) reads as no entry, with closed set:
// it is not damage.
func (q *Queue) entry(seq uint64) (ent Entry, ok, closed, damaged bool) {
	ent, ok, err := q.x.Table.Get(seq)
	// (A nil Table also answers ErrClosed, but an index that runs over
	// none has lost its entries: damage, not a closed store.)
	if errors.Is(err, ErrClosed) && q.x.Table != nil {
		return Entry{}, false, true, false
	}
	if err != nil {
		q.x.setDamaged(err)
		return Entry{}, false, false, true
	}
	return ent, ok && ent.Queue == q.ID && ent.Stream, false, false
}

// activate takes seq out of the stream, if it is there, and returns it as
// an active Ready message not in any structure yet (the caller's event
// places it).
func (q *Queue) activate(seq uint64) *Message {
	ent, ok := q.freshEntry(seq)
	if !ok {
		return nil
	}
	q.fresh--
	if seq == q.cursor {
		q.cursor++
	} else {
		q.gone[seq] = struct{}{}
	}
	m := &Message{Seq: seq, EnqueuedAt: ent.EnqueuedAt, Pos: ent.Pos, Size: ent.Size, State: Ready, At: AtOnce, heapIdx: -1}
	q.msgs[seq] = m
	q.live++
	return m
}

// streamHead returns the stream's first message, moving the cursor past
// every sequence number that is not in the stream. From a sequence that is
// not the queue's it jumps to the queue's next stream entry
// (Table.NextStream), so the messages of other queues between two of its
// own cost a word and a checksum each.
//
// Damage stops the walk where it is found, whether at the cursor (Get) or
// in a jump (NextStream), and marks the index damaged: the stream then
// has no head, and gives none on later calls, so that nothing published
// after a damaged entry is taken for the oldest message while the store
// stops.
func (q *Queue) streamHead() (Entry, bool) {
	for q.fresh > 0 && q.cursor <= q.streamMax {
		seq := q.cursor
		ent, ok, closed, damaged := q.entry(seq)
		if closed || damaged {
			// A closed table: nothing can be read, and the walk below
			// would take the stream for one that ends early (damage
			// that is not there). A damaged entry: see above.
			return Entry{}, false
		}
		if !ok {
			next, found, err := q.x.Table.NextStream(q.ID, seq+1, q.streamMax)
			if errors.Is(err, ErrClosed) && q.x.Table != nil {
				// Closed since the look above (Close runs on another
				// goroutine): as above, and no head. Taken for a stream
				// that ends here, it counted the messages after as
				// damage.
				return Entry{}, false
			}
			if err != nil {
				q.x.setDamaged(fmt.Errorf("queue %s: %w", q.Name, err))
				return Entry{}, false
			}
			if !found {
				break
			}
			q.passGone(seq, next)
			q.cursor = next
			continue
		}
		if _, ok := q.gone[seq]; ok {
			delete(q.gone, seq)
		} else if _, ok := q.msgs[seq]; !ok {
			return ent, true
		}
		q.cursor++
	}
	if q.fresh != 0 {
		q.x.setDamaged(fmt.Errorf("%w: queue %s counts %d stream messages past the end of its stream", ErrDamaged, q.Name, q.fresh))
		q.fresh = 0
	}
	// Nothing left in the stream: whatever gone still names became active
	// and is in msgs.
	q.cursor = q.streamMax + 1
	clear(q.gone)
	return Entry{}, false
}

// passGone forgets the gone entries in [from, to), which the cursor jumps
// over: nothing reads the stream behind the cursor. A jump passes one only
// where the table no longer holds its entry (NextStream lands on every
// entry of the stream, gone or not, and the walk forgets it there): a
// replay marked it gone ahead of the cursor, then every message of its
// table file was acknowledged, and the file dropped, before the cursor got
// there. Kept, it would lie below the cursor in every later checkpoint.
// Every gone entry is at or past from, so this costs the lesser of the
// range and the map's size, and nothing while gone is empty, as it is
// unless a replay took stream messages away from the cursor.
func (q *Queue) passGone(from, to uint64) {
	if len(q.gone) == 0 {
		return
	}
	if to-from <= uint64(len(q.gone)) {
		for seq := from; seq < to; seq++ {
			delete(q.gone, seq)
		}
		return
	}
	for seq := range q.gone {
		if seq < to {
			delete(q.gone, seq)
		}
	}
}

// eachFresh calls f with every stream message in [from, to], in sequence
// order, until f returns false. It does not move the cursor. Damage ends
// it, and marks the index damaged.
func (q *Queue) eachFresh(from, to uint64, f func(Entry) bool) {
	from, to = max(from, q.cursor), min(to, q.streamMax)
	for from <= to {
		seq, ok, err := q.x.Table.NextStream(q.ID, from, to)
		if errors.Is(err, ErrClosed) && q.x.Table != nil {
			return // a closed table is not a damaged one (see entry)
		}
		if err != nil {
			q.x.setDamaged(fmt.Errorf("queue %s: %w", q.Name, err))
			return
		}
		if !ok {
			return
		}
		ent, ok, damaged := q.streamEntry(seq)
		if damaged || ok && !f(ent) {
			return
		}
		from = seq + 1
	}
}

// detach takes m out of every structure that reflects its state.
func (q *Queue) detach(m *Message) {
	exhausted := q.IsExhausted(m) // (before the heaps below forget where it was)
	switch m.heap {
	case inReady:
		q.ready.remove(m)
	case inTimers:
		q.timers.remove(m)
	case inFinals:
		q.finals.remove(m)
	}
	if exhausted {
		// (Not a lapsed lease with deliveries left, which is in the
		// ready heap.) Leaving costs the same wherever m stands in the
		// list: see exhaustedList.
		q.exhausted.remove(m)
	}
	switch m.State {
	case Pending, Ready, Leased:
		q.live--
	case Dead:
		q.dead.remove(m)
	}
	m.State, m.Lapsed = 0, false
}

// attach puts m, whose fields are set, into the structures of state s.
func (q *Queue) attach(m *Message, s State) {
	m.State = s
	switch s {
	case Ready:
		// A message receivable at once goes straight where Promote would
		// move it at any clock reading. Any other instant waits for
		// Promote, even 0: taken for "at once", it made a message nacked
		// to be visible at the Unix epoch receivable before it.
		if m.At == AtOnce {
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
		q.dead.insert(m)
	}
}

func byFailed(a, b *Message) int {
	return cmp.Or(cmp.Compare(a.FailedAt, b.FailedAt), cmp.Compare(a.Seq, b.Seq))
}

// Commit makes a Pending message Ready at pos, once its publish record is
// in the log. A message that is not Pending (committed already, as a
// checkpoint does for every queued publish) is left as it is. Position 0,
// where no record lives, is refused with ErrBadEvent.
func (q *Queue) Commit(seq uint64, pos wal.Position) error {
	if q == nil {
		return errNilQueue
	}
	if pos == 0 {
		// Position 0 is what makes a publish Pending (see Apply):
		// committed there, the message was counted in segment 0, and its
		// ack, taking it for Pending, never uncounted it.
		return fmt.Errorf("%w: queue %s: commit of message %d at position 0, where no record lives", ErrBadEvent, q.Name, seq)
	}
	m := q.msgs[seq]
	if m == nil || m.State != Pending {
		return nil
	}
	q.detach(m)
	q.commit(m, pos)
	return nil
}

// Get returns the active message seq (pending, leased, delayed, dead or
// replayed), or nil: a message in the stream is not active.
func (q *Queue) Get(seq uint64) *Message {
	if q == nil {
		return nil
	}
	return q.msgs[seq]
}

// final reports whether a Leased message is on its last allowed delivery:
// when its lease lapses it dies instead of becoming receivable.
func (q *Queue) final(m *Message) bool { return int64(m.Deliveries) >= q.Policy.MaxDeliveries }

// Promote moves every message whose At has come (At <= now) to the
// receivable set: a delayed message, or one whose lease lapsed. A lapsed
// lease on a message delivered maxDeliveries times or more is not made
// receivable: it joins Exhausted, for the caller to dead-letter.
func (q *Queue) Promote(now int64) {
	if q == nil {
		return
	}
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
		q.exhausted.push(m)
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

// Lapsed returns the Leased messages whose lease Promote saw lapse with
// deliveries left: they are receivable again (in the ready heap). The log
// does not record that observation; a replay judges such a lease by the
// policy it then holds.
func (q *Queue) Lapsed() []*Message {
	if q == nil {
		return nil
	}
	var out []*Message
	for _, m := range q.ready.items {
		if m.State == Leased {
			out = append(out, m)
		}
	}
	return out
}

// Spent returns, by sequence number, the messages not leased — Ready,
// now or after a retry delay, or Leased with a lease Promote saw lapse —
// that were delivered max times or more: under a MaxDeliveries lowered to
// max they have no delivery left. Stream messages were never delivered.
func (q *Queue) Spent(max int64) []*Message {
	if q == nil {
		return nil
	}
	var out []*Message
	for _, m := range q.msgs {
		if (m.State == Ready || m.State == Leased && m.Lapsed) && int64(m.Deliveries) >= max {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *Message) int { return compareSeq(a.Seq, b.Seq) })
	return out
}

// FinalsDue returns the messages leased on their last allowed delivery
// whose lease lapses at or before now, without observing the lapse (see
// Promote, which does).
func (q *Queue) FinalsDue(now int64) []*Message {
	if q == nil {
		return nil
	}
	var out []*Message
	for _, m := range q.finals.items {
		if m.At <= now {
			out = append(out, m)
		}
	}
	return out
}

// Exhausted returns the messages whose last lease lapsed (see Promote).
// They stay Leased until the caller applies their dead-letter events,
// which take them off the queue's list: the slice is a copy, the
// caller's to keep while it does.
func (q *Queue) Exhausted() []*Message {
	if q == nil {
		return nil
	}
	return slices.Clone(q.exhausted.all())
}

// ExhaustedLen is the number of messages Exhausted returns. It costs the
// same whatever the queue holds.
func (q *Queue) ExhaustedLen() int {
	if q == nil {
		return 0
	}
	return q.exhausted.len()
}

// IsExhausted reports whether m is one of Exhausted's: a lease that
// Promote saw lapse on its last allowed delivery, not yet dead-lettered.
// It costs the same whatever the queue holds.
func (q *Queue) IsExhausted(m *Message) bool {
	// A lapsed lease with deliveries left is in the ready heap; one on its
	// last is in no heap, only in exhausted.
	return q != nil && m != nil && m.State == Leased && m.Lapsed && m.heap == inNone
}

// NextReady returns the oldest receivable message without removing it, or
// nil. Call Promote first. The result is valid until the next call on q.
func (q *Queue) NextReady() *Message {
	if q == nil {
		return nil
	}
	m := q.ready.peek()
	ent, ok := q.streamHead()
	if !ok {
		return m
	}
	q.head = Message{Seq: ent.Seq, EnqueuedAt: ent.EnqueuedAt, Pos: ent.Pos, Size: ent.Size, State: Ready, At: AtOnce, heapIdx: -1}
	if m != nil && byEnqueued(m, &q.head) {
		return m
	}
	return &q.head
}

// NextDue returns the earliest At at which a message not yet receivable
// becomes receivable by itself (a retry delay ending, a lease lapsing with
// deliveries left), and whether there is one.
func (q *Queue) NextDue() (int64, bool) {
	if q == nil {
		return 0, false
	}
	if m := q.timers.peek(); m != nil {
		return m.At, true
	}
	return 0, false
}

// Counts returns the gauges as of the last Promote: receivable now,
// leased, delayed (Ready later), dead (exhausted leases included). It
// costs the same whatever the queue holds.
func (q *Queue) Counts() (ready, leased, delayed, dead int) {
	if q == nil {
		return 0, 0, 0, 0
	}
	// Counted, not walked: the timers heap holds every lease with
	// deliveries left and every message waiting out a retry delay.
	leased = q.timers.leased + q.finals.Len()
	delayed = q.timers.Len() - q.timers.leased
	return q.ready.Len() + q.fresh, leased, delayed, q.dead.Len() + q.exhausted.len()
}

// Live is the count of messages that hold capacity: Pending, Ready and
// Leased, less the exhausted ones (as of the last Promote), which are on
// their way to the dead-letter store.
func (q *Queue) Live() int {
	if q == nil {
		return 0
	}
	return q.live + q.fresh - q.exhausted.len()
}

// Active is the count of the queue's active messages: those held on the
// heap, not in the stream.
func (q *Queue) Active() int {
	if q == nil {
		return 0
	}
	return len(q.msgs)
}

// LeaseLive reports whether m's lease is held at now: m is Leased, its
// lease has not lapsed (at At exactly, it has), and no Promote saw it lapse.
// No message (nil) holds no lease.
func LeaseLive(m *Message, now int64) bool {
	return m != nil && m.State == Leased && !m.Lapsed && now < m.At
}

// DeadLetters returns up to max dead letters, oldest FailedAt first, in a
// slice of the caller's: none when max is not positive.
func (q *Queue) DeadLetters(max int) []*Message {
	if q == nil {
		return nil
	}
	if max <= 0 {
		return nil
	}
	return q.dead.first(max)
}

// remember records a dedup key. Until its publish is in the log it pins
// no segment (see moveKey).
//
// A key remembered again for the message it already names (a copy forward
// of the key, or a replay of such a copy) keeps its one entry in seenOrder:
// every entry of seen has one there already, with the same enqueue
// instant, and pushing another at each copy grew the heap by one entry per
// key per reclamation round, without bound while no keyed publish evicts.
func (q *Queue) remember(key string, seq uint64, at int64) {
	old, ok := q.seen[key]
	if ok && old.seg != 0 {
		q.x.unpinKey(old.seg, key)
	}
	k := seenKey{key: key, seq: seq, enqueuedAt: at}
	q.seen[key] = k
	if ok && old.seq == seq && old.enqueuedAt == at {
		return
	}
	q.seenOrder.push(k)
}

// moveKey records that key, if it names seq, now lives in pos's segment: a
// replay from the log needs that segment to remember the key.
func (q *Queue) moveKey(key string, seq uint64, pos wal.Position) {
	k, ok := q.seen[key]
	if !ok || k.seq != seq || k.seg == pos.Segment() {
		return
	}
	if k.seg != 0 {
		q.x.unpinKey(k.seg, key)
	}
	k.seg = pos.Segment()
	q.x.pinKey(k.seg, key)
	q.seen[key] = k
}

// Seen returns the message a dedup key names, if the key is remembered.
func (q *Queue) Seen(key string) (seq uint64, enqueuedAt int64, ok bool) {
	if q == nil {
		return 0, 0, false
	}
	k, ok := q.seen[key]
	return k.seq, k.enqueuedAt, ok
}

// EvictSeen forgets the dedup keys enqueued strictly more than window
// before now, and reports whether it forgot any: the caller then logs an
// evict event with the same clock and window, so that a replay forgets the
// same keys. If the clock went backwards — now is behind an earlier
// eviction's clock or a publish's enqueue instant — nothing is evicted.
// A later now becomes the queue's reading (LastEvicts) whether or not a
// key is forgotten; that reading is the caller's to log (see LastEvicts).
func (q *Queue) EvictSeen(now, window int64) bool {
	if q == nil {
		return false
	}
	if now < q.lastEvicts.Load() {
		return false
	}
	return q.evict(now, window)
}

// observeClock records a clock reading: the latest is kept.
func (q *Queue) observeClock(now int64) {
	if now > q.lastEvicts.Load() {
		q.lastEvicts.Store(now)
	}
}

// evict forgets the dedup keys enqueued strictly more than window before
// now, whatever the clock read before, and reports whether it forgot any.
// A replay applies a logged eviction with it: the call that logged it
// already asked whether the clock went backwards, and a replay may know a
// later reading than that call did (a segment's preamble carries the
// latest reading at its rotation, ahead of records queued before it).
func (q *Queue) evict(now, window int64) bool {
	q.observeClock(now)
	if window == NoEviction {
		return false
	}
	evicted := false
	q.seenPeak = max(q.seenPeak, len(q.seen)) // keys join only between evictions
	for len(q.seenOrder) > 0 && OlderThan(q.seenOrder[0].enqueuedAt, now, window) {
		k := q.seenOrder.pop()
		if cur, ok := q.seen[k.key]; ok && cur.seq == k.seq {
			if cur.seg != 0 {
				q.x.unpinKey(cur.seg, k.key)
			}
			delete(q.seen, k.key)
			evicted = true
		}
	}
	if shrink.Due(len(q.seen), q.seenPeak) {
		q.shrinkSeen()
	}
	return evicted
}

// shrinkSeen gives back the memory of evicted keys (see package shrink):
// a burst of keys in one window (about 130 bytes a key) stayed on the
// heap at its size after the window passed and every key of it was
// evicted.
func (q *Queue) shrinkSeen() {
	q.seen = shrink.Map(q.seen)
	q.seenOrder = slices.Clone(q.seenOrder)
	q.seenPeak = len(q.seen)
}

// forget removes message seq from msgs, and rebuilds msgs by the rule of
// package shrink: a burst of leases (a consumer that took 400,000
// messages and acked them) left the map's room on the heap, about 32
// bytes a message with the heaps' arrays, until the store was reopened.
func (q *Queue) forget(seq uint64) {
	q.msgsPeak = max(q.msgsPeak, len(q.msgs)) // messages join only between removals
	delete(q.msgs, seq)
	if shrink.Due(len(q.msgs), q.msgsPeak) {
		q.msgs = shrink.Map(q.msgs)
		q.msgsPeak = len(q.msgs)
	}
}

// NoEviction is the window of an evict event that records a clock reading
// and evicts nothing, whatever the reading and the keys' instants: a
// segment's preamble logs one per queue. (As a window it would not do: the
// broker's clock runs from 1678 to 2262, and a key and a reading can be
// further apart than any int64 count of nanoseconds.)
const NoEviction int64 = math.MaxInt64

// OlderThan reports whether now-at > window, exactly: the difference of
// two instants far apart overflows an int64, and wrapped to a negative
// one it kept the oldest key, and every key behind it, for good. It is
// the dedup window's rule, exported so that the in-memory broker evicts
// by it too.
func OlderThan(at, now, window int64) bool {
	if now >= at {
		d := uint64(now) - uint64(at) // now-at, which fits in a uint64
		return window < 0 || d > uint64(window)
	}
	// now-at is -d, below any window that is not negative.
	d := uint64(at) - uint64(now)
	return window < 0 && d < uint64(-(window+1))+1 // -d > window, that is d < -window
}

// SeenCount is the number of remembered dedup keys.
func (q *Queue) SeenCount() int {
	if q == nil {
		return 0
	}
	return len(q.seen)
}

// Dump renders the queue's state as of now in a canonical form: two queues
// that behave the same from now on dump the same, whether a message is in
// the stream or active. Promote runs first. It is for tests and tools: it
// walks the whole stream.
func (q *Queue) Dump(now int64) string {
	if q == nil {
		return "queue <nil>\n"
	}
	q.Promote(now)
	ready, leased, delayed, dead := q.Counts()
	var b strings.Builder
	fmt.Fprintf(&b, "queue %d %s policy=%+v live=%d ready=%d leased=%d delayed=%d dead=%d\n",
		q.ID, q.Name, q.Policy, q.Live(), ready, leased, delayed, dead)
	var all []*Message
	for _, m := range q.msgs {
		all = append(all, m)
	}
	q.eachFresh(q.cursor, q.streamMax, func(ent Entry) bool {
		all = append(all, &Message{Seq: ent.Seq, EnqueuedAt: ent.EnqueuedAt, Pos: ent.Pos, Size: ent.Size, State: Ready, At: AtOnce})
		return true
	})
	slices.SortFunc(all, func(a, b *Message) int { return compareSeq(a.Seq, b.Seq) })
	var order []*Message
	for _, m := range all {
		fmt.Fprintf(&b, "  %d: state=%d del=%d at=%d nonce=%d enq=%d pos=%v size=%d failed=%d code=%d %q %q\n",
			m.Seq, m.State, m.Deliveries, m.At, m.Nonce, m.EnqueuedAt, m.Pos, m.Size, m.FailedAt, m.Code, m.Reason, m.Cause)
		if m.State == Ready && (m.heap == inReady || (m.heap == inNone && q.msgs[m.Seq] == nil)) {
			order = append(order, m)
		}
	}
	slices.SortFunc(order, func(a, b *Message) int {
		if byEnqueued(a, b) {
			return -1
		}
		return 1
	})
	b.WriteString("  ready order")
	for _, m := range order {
		fmt.Fprintf(&b, " %d", m.Seq)
	}
	b.WriteString("\n  dead order")
	for _, m := range q.DeadLetters(q.dead.Len()) {
		fmt.Fprintf(&b, " %d", m.Seq)
	}
	b.WriteString("\n  exhausted")
	for _, m := range q.exhausted.items {
		if m != nil {
			fmt.Fprintf(&b, " %d", m.Seq)
		}
	}
	keys := slices.Sorted(maps.Keys(q.seen))
	b.WriteString("\n  seen")
	for _, k := range keys {
		fmt.Fprintf(&b, " %q=%d@%d", k, q.seen[k].seq, q.seen[k].enqueuedAt)
	}
	b.WriteString("\n")
	return b.String()
}

// KeyRef is a remembered dedup key.
type KeyRef struct {
	Key        string
	Seq        uint64
	EnqueuedAt int64
}

// Pinning returns what keeps log segment seg needed by this queue: its live
// messages whose publish record is there (copies, for a stream message),
// and the dedup keys remembered from publishes there whose message is gone.
// minSeq and maxSeq bound the messages' sequence numbers (SegmentUse).
func (q *Queue) Pinning(seg uint32, minSeq, maxSeq uint64) ([]*Message, []KeyRef) {
	if q == nil {
		return nil, nil
	}
	var msgs []*Message
	for _, m := range q.msgs {
		if m.State != Pending && m.Pos.Segment() == seg {
			msgs = append(msgs, m)
		}
	}
	q.eachFresh(minSeq, maxSeq, func(ent Entry) bool {
		if ent.Pos.Segment() == seg {
			msgs = append(msgs, &Message{Seq: ent.Seq, EnqueuedAt: ent.EnqueuedAt, Pos: ent.Pos, Size: ent.Size, State: Ready, At: AtOnce, heapIdx: -1})
		}
		return true
	})
	slices.SortFunc(msgs, func(a, b *Message) int { return compareSeq(a.Seq, b.Seq) })
	var keys []KeyRef
	for k, sk := range q.seen {
		if sk.seg != seg {
			continue
		}
		if _, live := q.msgs[sk.seq]; live {
			continue
		}
		if _, fresh := q.freshEntry(sk.seq); fresh {
			continue
		}
		keys = append(keys, KeyRef{Key: k, Seq: sk.seq, EnqueuedAt: sk.enqueuedAt})
	}
	slices.SortFunc(keys, func(a, b KeyRef) int { return compareSeq(a.Seq, b.Seq) })
	return msgs, keys
}

// LastEvicts is the latest clock reading the queue has seen, or
// math.MinInt64: of an eviction applied or asked for (EvictSeen records
// its reading even when it forgets nothing, and logs nothing), or of a
// publish's enqueue instant. The log holds it only if the caller keeps
// the log in step: a caller whose EvictSeen moved the reading forward and
// that writes no record carrying it logs an evict event of nothing at
// that instant (the broker does), so that a replay ends with the same
// reading. Safe for concurrent use.
func (q *Queue) LastEvicts() int64 {
	if q == nil {
		return math.MinInt64
	}
	return q.lastEvicts.Load()
}
