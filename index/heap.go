package index

import "github.com/walbroker/walbroker/internal/shrink"

// msgHeap is a binary min-heap of messages that records each message's
// place in it (Message.heapIdx), so a message can be removed or re-placed
// in O(log n) when an event changes it. A message is in at most one heap,
// and its State does not change while it is there (attach sets it before
// the push, detach clears it after the removal).
type msgHeap struct {
	items []*Message
	less  func(a, b *Message) bool
	id    heapID
	// leased counts the Leased messages among items, so that the gauges
	// (Queue.Counts, which Stats reads under the queue's lock) need not
	// walk the heap: a walk cost about 5 ms for 300,000 leases, at every
	// Stats call, while every publish to the queue waited.
	leased int
}

type heapID uint8

const (
	inNone heapID = iota
	inReady
	inTimers
	inFinals
)

func (h *msgHeap) Len() int { return len(h.items) }

func (h *msgHeap) peek() *Message {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *msgHeap) push(m *Message) {
	if m.State == Leased {
		h.leased++
	}
	m.heap, m.heapIdx = h.id, len(h.items)
	h.items = append(h.items, m)
	h.up(m.heapIdx)
}

func (h *msgHeap) pop() *Message {
	m := h.items[0]
	h.remove(m)
	return m
}

func (h *msgHeap) remove(m *Message) {
	if m.State == Leased {
		h.leased--
	}
	i := m.heapIdx
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	m.heap, m.heapIdx = inNone, -1
	h.items = shrink.Slice(h.items) // a burst's array is given back
}

func (h *msgHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].heapIdx = i
	h.items[j].heapIdx = j
}

func (h *msgHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *msgHeap) down(i int) bool {
	start := i
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			c = r
		}
		if !h.less(h.items[c], h.items[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

// byEnqueued orders ready messages: oldest EnqueuedAt first, then by seq.
func byEnqueued(a, b *Message) bool {
	if a.EnqueuedAt != b.EnqueuedAt {
		return a.EnqueuedAt < b.EnqueuedAt
	}
	return a.Seq < b.Seq
}

// byDue orders waiting messages by the instant they become receivable.
func byDue(a, b *Message) bool {
	if a.At != b.At {
		return a.At < b.At
	}
	return a.Seq < b.Seq
}

// keyHeap orders dedup keys by when they were enqueued, for eviction.
type keyHeap []seenKey

type seenKey struct {
	key        string
	seq        uint64
	enqueuedAt int64
	seg        uint32 // the log segment holding its publish; 0 until written
}

func (h *keyHeap) push(k seenKey) {
	*h = append(*h, k)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].enqueuedAt <= s[i].enqueuedAt {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *keyHeap) pop() seenKey {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = seenKey{} // its key, gone from seen, is not kept alive here
	s = s[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		c := l
		if r := l + 1; r < len(s) && s[r].enqueuedAt < s[l].enqueuedAt {
			c = r
		}
		if s[i].enqueuedAt <= s[c].enqueuedAt {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}
