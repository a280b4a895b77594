package index

import "fmt"

// exhaustedList holds the leases that lapsed on their last delivery, in
// the order Promote saw them lapse, which is the order the broker's sweep
// dead-letters them in. Any of them may leave first (an ack applied from
// a log, say), and leaving costs the same wherever one stands: its place
// is in its heapIdx (it is in no heap), and it leaves a hole behind.
// Holes at either end are dropped at once, and the list is closed up when
// holes are more than half of it, so each leave costs O(1) amortized and
// a list emptied from its front, as the sweep does, moves nothing. (It
// searched the list and moved its tail, once: 52 µs a leave from the
// middle of 100,000.)
type exhaustedList struct {
	items []*Message // nil where one left
	// base is the place of items[0]: the places of those dropped from
	// the front are not reused until the list is closed up or emptied.
	base  int
	holes int
}

// push adds m, which is in no heap, at the end.
func (l *exhaustedList) push(m *Message) {
	m.heapIdx = l.base + len(l.items)
	l.items = append(l.items, m)
}

// remove takes m out, keeping the others' order. It reports false, and
// changes nothing, when m is not in the list.
func (l *exhaustedList) remove(m *Message) bool {
	i := m.heapIdx - l.base
	if i < 0 || i >= len(l.items) || l.items[i] != m {
		return false
	}
	l.items[i] = nil
	m.heapIdx = -1
	l.holes++
	for len(l.items) > 0 && l.items[0] == nil {
		l.items = l.items[1:] // the array outlives the slice until the next append moves it
		l.base++
		l.holes--
	}
	for n := len(l.items); n > 0 && l.items[n-1] == nil; n = len(l.items) {
		l.items = l.items[:n-1]
		l.holes--
	}
	if len(l.items) == 0 {
		l.items, l.base = nil, 0
	} else if l.holes > len(l.items)/2 {
		l.closeUp()
	}
	return true
}

// closeUp removes the holes and renumbers the places from 0.
func (l *exhaustedList) closeUp() {
	if l.holes == 0 {
		return
	}
	kept := l.items[:0]
	for _, m := range l.items {
		if m != nil {
			m.heapIdx = len(kept)
			kept = append(kept, m)
		}
	}
	clear(l.items[len(kept):])
	l.items, l.base, l.holes = kept, 0, 0
}

// len is the number of messages in the list.
func (l *exhaustedList) len() int { return len(l.items) - l.holes }

// all returns the messages in order, closing the list up first.
func (l *exhaustedList) all() []*Message {
	l.closeUp()
	return l.items
}

// verify checks that each message knows its place and the holes are
// counted.
func (l *exhaustedList) verify() error {
	holes := 0
	for i, m := range l.items {
		switch {
		case m == nil:
			holes++
		case m.heap != inNone || m.heapIdx != l.base+i:
			return fmt.Errorf("exhausted message %d at place %d says it is at %d (heap %d)", m.Seq, l.base+i, m.heapIdx, m.heap)
		}
	}
	if holes != l.holes {
		return fmt.Errorf("the exhausted list has %d holes, counted %d", holes, l.holes)
	}
	return nil
}
