package index

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/walbroker/walbroker/wal"
)

// Index is the projection of a whole store: its secret, its queues, the
// next message sequence, the table of message entries, and what each log
// segment and table chunk still holds. It is not safe for concurrent use
// except as documented: the broker serialises access (a store-wide lock for
// the queue table, a queue's lock for that queue's state).
//
// A nil *Index, what a caller holds that went on past the error of Load or
// Rebuild, refuses every call with an error wrapping ErrClosed that says
// so; the methods that return no error answer as for an empty index.
type Index struct {
	// Secret, queues, byName, Orphans, OnOrphan and maxQueue are the queue
	// table. Once the index is shared (after Load and the replay), only
	// Declare writes them, and they are read and written under the
	// caller's store-wide lock (the broker's Store.mu).
	Secret []byte
	// Table has its own lock (see Table).
	Table  *Table
	queues map[uint32]*Queue
	byName map[string]*Queue
	// nextSeq is the next message sequence to hand out. Atomic: queues
	// draw from it under their own locks (NextSeq's compare-and-swap),
	// and the log's writer reads it for a segment's preamble. Apply's
	// load-then-store runs only in a replay, before the index is shared.
	nextSeq atomic.Uint64
	// Orphans counts message events that named no message the index held:
	// events about messages acknowledged before their segment was removed,
	// or whose publish salvage cut. OnOrphan, if set, is told of each.
	Orphans  int
	OnOrphan func(pos wal.Position, e *Event)
	// CheckpointBytes is the size of the checkpoint file Load read (0 for
	// an index rebuilt from the log).
	CheckpointBytes int64

	// useMu guards segs and chunks, which every queue updates under its
	// own lock. Load fills them before the index is shared.
	useMu  sync.Mutex
	segs   map[uint32]*SegmentUse
	chunks map[uint64]int // live messages per table chunk

	// damaged is the first damage found in the table (see Damaged): set
	// once, by compare-and-swap, from any queue's goroutine.
	damaged atomic.Pointer[error]

	// maxQueue is the highest queue number any event applied (or the
	// checkpoint loaded) named, declared or not: a queue whose declaration
	// salvage lost still has its number in the log, so no new queue may
	// take it (see NextQueueID).
	maxQueue uint32
}

// LastSeq is the highest message sequence. The next sequence past it,
// MaxUint64-1, is the highest a mark or a checkpoint may hold: Apply and
// Load refuse MaxUint64, past which the count would wrap to 0 and hand
// every sequence out again.
const LastSeq = math.MaxUint64 - 2

// ErrNoSequence is returned by NextSeq once every message sequence is
// taken. Check with errors.Is.
var ErrNoSequence = errors.New("index: every message sequence is taken")

// errNilIndex is the error of a method called on a nil *Index: what a
// caller holds that went on past the error of Load or Rebuild. It wraps
// ErrClosed, since such an index takes no call (Damaged returns it too),
// and the methods that return no error answer as for an empty index
// (Holds, LargestLive, LiveChunks, LiveIn, LiveInByQueue, PeekNextSeq,
// Queue, QueueByID and Queues return zero values, SegmentUses an empty
// map, and NextQueueID says no number is left): a panic would end the
// process from a call given nothing to act on.
var errNilIndex = fmt.Errorf("index: a method of a nil *index.Index was called (was the error of Load or Rebuild ignored?): %w", ErrClosed)

// SegmentUse is what still needs one log segment: live messages (dead
// letters included) whose publish record is there, their bytes, the bytes
// of the events that restate their state, and dedup keys remembered from
// publishes there.
type SegmentUse struct {
	Messages int
	Bytes    int64 // of those messages' publish records, frames included
	// StateBytes is the length, frames included, of the events that
	// restate those messages' state (StateEvent): a lease with its
	// nonce, a nack with its retry instant, a dead letter with its
	// reason, code and public cause. A copy forward writes each beside
	// its publish, so with Bytes it is what copying the messages costs,
	// and what they still need of the log. A dead letter's may be over a
	// thousand bytes longer than its publish (its reason and public cause
	// are bounded by the broker). A checkpoint does not hold
	// it; Load counts it again from the messages.
	StateBytes int64
	Keys       int
	// KeyBytes is the length of those keys together: with Keys, what
	// copying them forward costs. A checkpoint does not hold it; Load
	// counts it again from the keys.
	KeyBytes int64
	// MinSeq and MaxSeq bound the sequence numbers of the messages ever
	// counted here (they never shrink): where to look for them.
	MinSeq, MaxSeq uint64
}

func (u *SegmentUse) cover(seq uint64) {
	if u.MinSeq == 0 || seq < u.MinSeq {
		u.MinSeq = seq
	}
	u.MaxSeq = max(u.MaxSeq, seq)
}

// New returns an empty index whose table lives in memory only: Put and Get
// work, but it has no files, so a Flush of any entry and a SyncDir fail
// (see Table), and no checkpoint can name its chunks. For tests and tools
// that replay without writing.
func New() *Index {
	return NewWithTable(&Table{chunks: map[uint64]*chunk{}, overlay: newEntrySet(), dirty: map[uint64]bool{}})
}

// NewWithTable returns an empty index over t.
func NewWithTable(t *Table) *Index {
	x := &Index{Table: t, queues: map[uint32]*Queue{}, byName: map[string]*Queue{},
		segs: map[uint32]*SegmentUse{}, chunks: map[uint64]int{}}
	x.nextSeq.Store(1)
	return x
}

// hold counts a message committed at pos.
func (x *Index) hold(seq uint64, pos wal.Position, size uint32) {
	x.useMu.Lock()
	u := x.segUse(pos.Segment())
	u.Messages++
	u.Bytes += int64(size)
	u.cover(seq)
	x.chunks[ChunkOf(seq)]++
	x.useMu.Unlock()
}

// release uncounts a message that is gone for good: its publish record of
// size bytes, and the restate bytes of the event that restated its state.
func (x *Index) release(seq uint64, pos wal.Position, size, restate uint32) {
	x.useMu.Lock()
	u := x.segUse(pos.Segment())
	u.Messages--
	u.Bytes -= int64(size)
	u.StateBytes -= int64(restate)
	x.dropIfUnused(pos.Segment(), u)
	if x.chunks[ChunkOf(seq)]--; x.chunks[ChunkOf(seq)] <= 0 {
		delete(x.chunks, ChunkOf(seq))
	}
	x.useMu.Unlock()
}

// move counts a message whose record was copied from one position to
// another, with the restate bytes of the event that restates its state
// (which a copy writes beside the publish).
func (x *Index) move(seq uint64, from, to wal.Position, fromSize, toSize, restate uint32) {
	x.useMu.Lock()
	u := x.segUse(from.Segment())
	u.Messages--
	u.Bytes -= int64(fromSize)
	u.StateBytes -= int64(restate)
	x.dropIfUnused(from.Segment(), u)
	v := x.segUse(to.Segment())
	v.Messages++
	v.Bytes += int64(toSize)
	v.StateBytes += int64(restate)
	v.cover(seq)
	x.useMu.Unlock()
}

// restate counts, for a message whose publish record is at pos, the event
// restating its new state (to bytes) in place of its old one (from).
func (x *Index) restate(pos wal.Position, from, to uint32) {
	x.useMu.Lock()
	x.segUse(pos.Segment()).StateBytes += int64(to) - int64(from)
	x.useMu.Unlock()
}

func (x *Index) pinKey(seg uint32, key string) {
	x.useMu.Lock()
	u := x.segUse(seg)
	u.Keys++
	u.KeyBytes += int64(len(key))
	x.useMu.Unlock()
}

func (x *Index) unpinKey(seg uint32, key string) {
	x.useMu.Lock()
	u := x.segUse(seg)
	u.Keys--
	u.KeyBytes -= int64(len(key))
	x.dropIfUnused(seg, u)
	x.useMu.Unlock()
}

func (x *Index) segUse(seg uint32) *SegmentUse { return useOf(x.segs, seg) }

// useOf returns seg's use in uses, adding an empty one if there is none.
func useOf(uses map[uint32]*SegmentUse, seg uint32) *SegmentUse {
	u := uses[seg]
	if u == nil {
		u = &SegmentUse{}
		uses[seg] = u
	}
	return u
}

func (x *Index) dropIfUnused(seg uint32, u *SegmentUse) {
	if u.Messages <= 0 && u.Keys <= 0 {
		delete(x.segs, seg)
	}
}

// SegmentUses returns a copy of what each log segment still holds, for the
// segments that hold anything. Safe for concurrent use.
func (x *Index) SegmentUses() map[uint32]SegmentUse {
	if x == nil {
		return map[uint32]SegmentUse{}
	}
	x.useMu.Lock()
	defer x.useMu.Unlock()
	out := make(map[uint32]SegmentUse, len(x.segs))
	for s, u := range x.segs {
		out[s] = *u
	}
	return out
}

// LiveChunks returns the table chunks that hold a live message, sorted.
// Safe for concurrent use.
func (x *Index) LiveChunks() []uint64 {
	if x == nil {
		return nil
	}
	x.useMu.Lock()
	defer x.useMu.Unlock()
	return slices.Sorted(maps.Keys(x.chunks))
}

// Damaged returns the first damage found in the table, or nil. The log is
// the source of truth: a damaged index must be rebuilt from it. Safe for
// concurrent use.
func (x *Index) Damaged() error {
	if x == nil {
		return errNilIndex
	}
	if p := x.damaged.Load(); p != nil {
		return *p
	}
	return nil
}

func (x *Index) setDamaged(err error) { x.damaged.CompareAndSwap(nil, &err) }

// Apply applies one event found at pos. Message events for a queue the index
// does not know are counted as orphans, not refused; a salvaged event
// changes nothing (what it says is for the open that replays the log: see
// the package documentation). An event no log this
// code writes holds (an unknown kind, a sequence or queue number out of
// range, a secret not SecretSize bytes long, a queue number given a second
// name, a pending publish at pos 0 of a message its queue holds) is
// refused with ErrBadEvent, and the index is left as it was.
func (x *Index) Apply(pos wal.Position, e *Event) error {
	if x == nil {
		return errNilIndex
	}
	if e == nil {
		return fmt.Errorf("%w: nil event at %v", ErrBadEvent, pos)
	}
	switch e.Kind {
	case KindMeta:
		if len(e.Secret) != SecretSize {
			// Decode gives exactly SecretSize bytes, and Load refuses a
			// checkpoint holding any other length.
			return fmt.Errorf("%w: meta event at %v: secret of %d bytes, want %d", ErrBadEvent, pos, len(e.Secret), SecretSize)
		}
		x.Secret = append([]byte(nil), e.Secret...)
		return nil
	case KindDeclare:
		if _, err := x.declare(e.Queue, e.Name, e.Policy); err != nil {
			return fmt.Errorf("declare event at %v: %w", pos, err)
		}
		return nil
	case KindMark:
		if e.Seq == math.MaxUint64 {
			// The one sequence left would be handed out, and the next
			// would wrap to 0 (Load refuses such a checkpoint too).
			return fmt.Errorf("%w: mark event at %v: next sequence %d leaves none to hand out", ErrBadEvent, pos, e.Seq)
		}
		if e.Seq > x.nextSeq.Load() {
			x.nextSeq.Store(e.Seq)
		}
		return nil
	case KindSalvaged:
		// It changes no state: it tells an open that a checkpoint taken
		// before it is not a projection of the log as it now is (the
		// broker refuses such a checkpoint when its replay meets it).
		return nil
	case KindPublish, KindLease, KindAck, KindNack, KindDeadLetter, KindExtend, KindReplay, KindDelete, KindEvict:
	default:
		// Refused before anything changes: taken for a message event, it
		// took a stream message out of the stream and put it nowhere.
		return fmt.Errorf("%w: event at %v: unknown kind %d", ErrBadEvent, pos, uint8(e.Kind))
	}
	if e.Queue > maxQueueID {
		return fmt.Errorf("%w: %s event at %v: queue number %d is not below 2^31", ErrBadEvent, e.Kind, pos, e.Queue)
	}
	// Every sequence an event names was handed out: never again, even
	// when the event is an orphan (its queue's declaration, or its
	// publish and the mark before it, lost to salvage).
	if e.Seq == 0 && e.Kind != KindEvict {
		// Sequences start at 1; Load refuses a checkpoint holding message
		// 0, so a replay that took one would write a checkpoint no open
		// can use.
		return fmt.Errorf("%w: %s event at %v: message sequence 0", ErrBadEvent, e.Kind, pos)
	}
	if e.Seq > LastSeq {
		// The next sequence would be one Load refuses, or wrap to 0 and
		// every ID be handed out again: no log this code writes gets
		// there (NextSeq stops at LastSeq).
		return fmt.Errorf("%w: %s event at %v: message sequence %d is out of range", ErrBadEvent, e.Kind, pos, e.Seq)
	}
	if e.Seq != 0 && e.Seq >= x.nextSeq.Load() {
		x.nextSeq.Store(e.Seq + 1)
	}
	x.maxQueue = max(x.maxQueue, e.Queue)
	q := x.queues[e.Queue]
	if q == nil {
		x.orphan(pos, e)
		return nil
	}
	if e.Kind == KindEvict {
		q.evict(e.Time, e.Window) // as logged: see Queue.evict
		return nil
	}
	held, err := q.Apply(pos, e)
	if err != nil {
		return fmt.Errorf("event at %v: %w", pos, err)
	}
	if !held {
		x.orphan(pos, e)
	}
	return nil
}

func (x *Index) orphan(pos wal.Position, e *Event) {
	x.Orphans++
	if x.OnOrphan != nil {
		x.OnOrphan(pos, e)
	}
}

func (x *Index) declare(id uint32, name string, p Policy) (*Queue, error) {
	if id > maxQueueID {
		// Its entries' queue field would carry the stream bit: another
		// queue's stream would take its messages.
		return nil, fmt.Errorf("%w: queue %q: number %d is not below 2^31", ErrBadEvent, name, id)
	}
	q := x.queues[id]
	if q != nil && q.Name != name {
		// A queue number never changes its name; a log saying so was not
		// written by this code.
		return nil, fmt.Errorf("%w: queue number %d is named %q, not %q", ErrBadEvent, id, q.Name, name)
	}
	if other := x.byName[name]; other != nil && other.ID != id {
		// Two queue numbers under one name: the name can find only one,
		// and a checkpoint holding both does not load. No log this code
		// writes says so (a name is looked up before it is given a
		// number).
		return nil, fmt.Errorf("%w: queue %q is number %d, not %d", ErrBadEvent, name, other.ID, id)
	}
	if q != nil {
		q.setPolicy(p)
		return q, nil
	}
	q = newQueue(x, id, name, p)
	x.maxQueue = max(x.maxQueue, id)
	x.queues[id] = q
	x.byName[name] = q
	return q, nil
}

// ApplyRecord decodes and applies the record at pos.
func (x *Index) ApplyRecord(pos wal.Position, rec []byte) error {
	if x == nil {
		return errNilIndex
	}
	e, err := Decode(rec)
	if err != nil {
		return fmt.Errorf("index: record at %v: %w", pos, err)
	}
	return x.Apply(pos, &e)
}

// Queue returns the queue named name, or nil.
func (x *Index) Queue(name string) *Queue {
	if x == nil {
		return nil
	}
	return x.byName[name]
}

// QueueByID returns queue id, or nil.
func (x *Index) QueueByID(id uint32) *Queue {
	if x == nil {
		return nil
	}
	return x.queues[id]
}

// Queues returns the names of every declared queue.
func (x *Index) Queues() []string {
	if x == nil {
		return nil
	}
	names := make([]string, 0, len(x.byName))
	for n := range x.byName {
		names = append(names, n)
	}
	return names
}

// NextQueueID returns the number the next declared queue gets: one past
// every number the index has seen, not the count of queues plus one, which
// after a salvage that lost a declaration (queue 1 gone, queue 2 kept) is a
// number in use, so that the new queue's declaration would be taken as a
// second name of that queue. Queue numbers are below 2³¹ (see the package
// documentation); ok is false when no number is left below it.
func (x *Index) NextQueueID() (id uint32, ok bool) {
	if x == nil {
		return 0, false
	}
	if x.maxQueue >= maxQueueID {
		return 0, false
	}
	return x.maxQueue + 1, true
}

// PeekNextSeq returns the next message sequence without reserving it. Safe
// for concurrent use.
func (x *Index) PeekNextSeq() uint64 {
	if x == nil {
		return 0
	}
	return x.nextSeq.Load()
}

// NextSeq reserves and returns the next message sequence number. Once
// every sequence is taken it returns ErrNoSequence, and reserves nothing.
// It is safe for concurrent use.
func (x *Index) NextSeq() (uint64, error) {
	if x == nil {
		return 0, errNilIndex
	}
	for {
		n := x.nextSeq.Load()
		if n > LastSeq {
			return 0, fmt.Errorf("%w: the next would be %d", ErrNoSequence, n)
		}
		if x.nextSeq.CompareAndSwap(n, n+1) {
			return n, nil
		}
	}
}

// Declare declares (or re-declares with a new policy) queue id, which is
// below 2³¹. A queue number keeps its name and a name its number for good:
// giving either another, or a number out of range, is refused with
// ErrBadEvent, and nothing changes. The caller holds whatever lock guards
// the queue table and, for a re-declaration, the queue's own lock.
func (x *Index) Declare(id uint32, name string, p Policy) (*Queue, error) {
	if x == nil {
		return nil, errNilIndex
	}
	return x.declare(id, name, p)
}

// Holds reports whether some queue holds message seq live (dead letters
// included).
func (x *Index) Holds(seq uint64) bool {
	if x == nil {
		return false
	}
	for _, q := range x.queues {
		if q.msgs[seq] != nil {
			return true
		}
		if _, ok := q.freshEntry(seq); ok {
			return true
		}
	}
	return false
}

// LargestLive returns the live message (dead letters included) whose
// publish record is the longest, and that length (frame included); size
// is 0 when no message is live. It reads every live message's entry.
func (x *Index) LargestLive() (seq uint64, size uint32) {
	if x == nil {
		return 0, 0
	}
	for _, q := range x.queues {
		for _, m := range q.msgs {
			if m.State != Pending && m.Size > size {
				seq, size = m.Seq, m.Size
			}
		}
		q.eachFresh(q.cursor, q.streamMax, func(e Entry) bool {
			if e.Size > size {
				seq, size = e.Seq, e.Size
			}
			return true
		})
	}
	return seq, size
}

// LiveIn returns the live messages (dead letters included) whose publish
// record lies in segment seg at an offset in [from, to), in order.
func (x *Index) LiveIn(seg uint32, from, to int) []uint64 {
	var out []uint64
	for _, seqs := range x.LiveInByQueue(seg, from, to) {
		out = append(out, seqs...)
	}
	slices.Sort(out)
	return out
}

// LiveInByQueue returns the messages LiveIn does, by the number of the
// queue that holds each (each queue's in order): what a salvage that
// skipped the span lost, and whose producers must send again.
func (x *Index) LiveInByQueue(seg uint32, from, to int) map[uint32][]uint64 {
	if x == nil {
		return nil
	}
	x.useMu.Lock()
	u, ok := x.segs[seg]
	var use SegmentUse
	if ok {
		use = *u
	}
	x.useMu.Unlock()
	if !ok {
		return nil
	}
	var out map[uint32][]uint64
	for _, q := range x.queues {
		msgs, _ := q.Pinning(seg, use.MinSeq, use.MaxSeq)
		for _, m := range msgs {
			if off := m.Pos.Offset(); off >= from && off < to {
				if out == nil {
					out = map[uint32][]uint64{}
				}
				out[q.ID] = append(out[q.ID], m.Seq)
			}
		}
	}
	for _, seqs := range out {
		slices.Sort(seqs)
	}
	return out
}
