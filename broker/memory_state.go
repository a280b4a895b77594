package broker

import (
	"cmp"
	"container/heap"
	"math"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/internal/blocklist"
	"github.com/walbroker/walbroker/internal/shrink"
)

// The states of a message of a [Memory] queue.
const (
	memReady   = iota + 1 // in ready: receivable now
	memDelayed            // in timers: nacked, receivable at at
	memLeased             // in timers, or in finals on its last delivery: held until at
	memDead               // in dead
)

// memMessage is one message of a Memory queue. Its fields are guarded by
// the queue's mu.
type memMessage struct {
	seq        uint64
	payload    []byte // the queue's own copy; handed out only as copies
	enqueuedAt int64
	state      int
	deliveries int
	at         int64  // memLeased: the lease's expiry; memDelayed: when it is receivable
	nonce      uint64 // memLeased: names the live lease
	heapIdx    int    // index in the heap that holds it, -1 in none

	// The dead-letter record, when state is memDead. While the message
	// is live, reason, code and cause are the last failure a consumer
	// reported in its current life (a nack's classified cause; reason ""
	// for none), as the store's index keeps them from its nack events.
	failedAt int64
	reason   string
	code     uint32
	cause    string
}

// handedOut is m as Receive and DeadLetters hand it out: with a copy of
// its payload, never the queue's own.
func (m *memMessage) handedOut() MessageValue {
	return MessageValue{ID: messageID(m.seq), EnqueuedAt: time.Unix(0, m.enqueuedAt), Payload: payloadCopy(m.payload)}
}

// memHeap orders messages by less; it keeps each message's heapIdx. It is
// a container/heap.Interface and is used only through heap's functions.
type memHeap struct {
	items []*memMessage
	less  func(a, b *memMessage) bool
}

func (h *memHeap) Len() int           { return len(h.items) }
func (h *memHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *memHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].heapIdx, h.items[j].heapIdx = i, j
}
func (h *memHeap) Push(x any) {
	m := x.(*memMessage)
	m.heapIdx = len(h.items)
	h.items = append(h.items, m)
}
func (h *memHeap) Pop() any {
	n := len(h.items) - 1
	m := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	m.heapIdx = -1
	h.items = shrink.Slice(h.items) // a burst's array is given back
	return m
}

func (h *memHeap) peek() *memMessage {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// memByEnqueued is the receive order: oldest EnqueuedAt first, then
// publish order.
func memByEnqueued(a, b *memMessage) bool {
	if a.enqueuedAt != b.enqueuedAt {
		return a.enqueuedAt < b.enqueuedAt
	}
	return a.seq < b.seq
}

// memByDue orders waiting messages by the instant they become receivable.
func memByDue(a, b *memMessage) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// memByFailed is the dead-letter order: oldest FailedAt first (API.md §5.1).
func memByFailed(a, b *memMessage) int {
	return cmp.Or(cmp.Compare(a.failedAt, b.failedAt), cmp.Compare(a.seq, b.seq))
}

// memSeen is a remembered dedup key.
type memSeen struct {
	key        string
	seq        uint64
	enqueuedAt int64
}

// memSeenHeap orders remembered keys oldest enqueue first, for eviction.
type memSeenHeap []memSeen

func (h memSeenHeap) Len() int           { return len(h) }
func (h memSeenHeap) Less(i, j int) bool { return h[i].enqueuedAt < h[j].enqueuedAt }
func (h memSeenHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *memSeenHeap) Push(x any)        { *h = append(*h, x.(memSeen)) }
func (h *memSeenHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = memSeen{} // the key, gone from the map, is not kept alive here
	*h = shrink.Slice(old[:len(old)-1])
	return k
}

// memState is the queue state of a Memory: where each message is. Every
// method needs the caller to hold the owning Memory's mu.
type memState struct {
	msgs   map[uint64]*memMessage // every message not acknowledged or deleted
	ready  memHeap                // memReady, by enqueue
	timers memHeap                // memDelayed, and memLeased not on their last delivery, by at
	finals memHeap                // memLeased on their last delivery, by at
	// delayed counts the memDelayed messages in timers; the others there
	// are leased. Stats reads it instead of walking timers, as the
	// store's index counts its gauges.
	delayed int
	// dead holds the memDead messages by memByFailed, in blocks, so that
	// replaying or deleting one from the middle moves a bounded number
	// of the others.
	dead blocklist.List[*memMessage]
	// seen maps a dedup key to the message it was published with;
	// seenOrder holds the same keys for eviction (an entry whose key was
	// re-published since is skipped).
	seen       map[string]memSeen
	seenOrder  memSeenHeap
	lastEvicts int64 // the latest clock reading of an eviction or an enqueue; MinInt64 before any
	// msgsPeak and seenPeak are the most entries msgs and seen held since
	// each was last rebuilt (see package shrink).
	msgsPeak, seenPeak int
}

func newMemState() memState {
	return memState{
		msgs:       map[uint64]*memMessage{},
		ready:      memHeap{less: memByEnqueued},
		timers:     memHeap{less: memByDue},
		finals:     memHeap{less: memByDue},
		seen:       map[string]memSeen{},
		lastEvicts: math.MinInt64,
	}
}

// detach removes m, ready, leased or dead, from the structure of its
// state. A delayed message is never detached: no call takes one out of
// timers but promote, when its delay ends, which keeps delayed in step.
func (s *memState) detach(m *memMessage) {
	switch m.state {
	case memReady:
		heap.Remove(&s.ready, m.heapIdx)
	case memLeased:
		if s.finals.Len() > m.heapIdx && s.finals.items[m.heapIdx] == m {
			heap.Remove(&s.finals, m.heapIdx)
		} else {
			heap.Remove(&s.timers, m.heapIdx)
		}
	case memDead:
		s.dead.Remove(m, memByFailed)
	}
	m.state = 0
}

// makeReady makes m receivable now.
func (s *memState) makeReady(m *memMessage) {
	m.state = memReady
	heap.Push(&s.ready, m)
}

// lease makes m leased until at; final says it is on its last delivery.
func (s *memState) lease(m *memMessage, at int64, nonce uint64, final bool) {
	m.state, m.at, m.nonce = memLeased, at, nonce
	if final {
		heap.Push(&s.finals, m)
	} else {
		heap.Push(&s.timers, m)
	}
}

// delay makes m receivable at at.
func (s *memState) delay(m *memMessage, at int64) {
	m.state, m.at = memDelayed, at
	heap.Push(&s.timers, m)
	s.delayed++
}

// bury makes m a dead letter.
func (s *memState) bury(m *memMessage, failedAt int64, reason string, code uint32, cause string) {
	m.state, m.failedAt, m.reason, m.code, m.cause = memDead, failedAt, reason, code, cause
	s.dead.Insert(m, memByFailed)
}

// promote applies every deadline that has come by now (at <= now): a
// delayed message becomes receivable, a lapsed lease makes its message
// receivable again, or a dead letter (failed at the lapse) when it was the
// last delivery: with the last failure a consumer reported, or
// LEASE_EXPIRED when none did. It returns how many died so.
//
// Deadlines are applied once: a lapse seen stays seen when the clock then
// goes backwards.
func (s *memState) promote(now int64) (died int) {
	for m := s.timers.peek(); m != nil && m.at <= now; m = s.timers.peek() {
		heap.Pop(&s.timers)
		if m.state == memDelayed {
			s.delayed--
		}
		s.makeReady(m)
	}
	for m := s.finals.peek(); m != nil && m.at <= now; m = s.finals.peek() {
		heap.Pop(&s.finals)
		if m.reason == "" {
			s.bury(m, m.at, ReasonLeaseExpired, 0, "")
		} else {
			s.bury(m, m.at, m.reason, m.code, m.cause)
		}
		died++
	}
	return died
}

// live is how many messages hold capacity: ready, leased and delayed.
func (s *memState) live() int { return s.ready.Len() + s.timers.Len() + s.finals.Len() }

// evictSeen forgets the keys strictly older than window at now, unless the
// clock has gone backwards since the last eviction or enqueue (then nothing
// is evicted: a key must not be forgotten by a clock that jumped).
func (s *memState) evictSeen(now, window int64) {
	if now < s.lastEvicts {
		return
	}
	s.lastEvicts = now
	s.seenPeak = max(s.seenPeak, len(s.seen)) // keys join only between evictions
	for len(s.seenOrder) > 0 && index.OlderThan(s.seenOrder[0].enqueuedAt, now, window) {
		k := heap.Pop(&s.seenOrder).(memSeen)
		if cur, ok := s.seen[k.key]; ok && cur.seq == k.seq {
			delete(s.seen, k.key)
		}
	}
	if shrink.Due(len(s.seen), s.seenPeak) {
		s.seen = shrink.Map(s.seen)
		s.seenPeak = len(s.seen)
	}
}

// forget removes message seq, acknowledged or deleted, from msgs.
func (s *memState) forget(seq uint64) {
	s.msgsPeak = max(s.msgsPeak, len(s.msgs)) // messages join only between removals
	delete(s.msgs, seq)
	if shrink.Due(len(s.msgs), s.msgsPeak) {
		s.msgs = shrink.Map(s.msgs)
		s.msgsPeak = len(s.msgs)
	}
}

// remember records key as published with seq at enqueuedAt.
func (s *memState) remember(key string, seq uint64, enqueuedAt int64) {
	k := memSeen{key: key, seq: seq, enqueuedAt: enqueuedAt}
	s.seen[key] = k
	heap.Push(&s.seenOrder, k)
}
