package index

import "github.com/walbroker/walbroker/internal/blocklist"

// deadList holds a queue's dead letters in byFailed order (FailedAt, then
// Seq), in blocks of consecutive ones (see package blocklist). It was one
// sorted slice, and a dead letter replayed or deleted from its middle
// shifted every one after it; in blocks, an insertion or a removal
// anywhere moves at most 2*blocklist.Block, and removing the oldest, as a
// user empties the list in DeadLetters' order, moves no other.
type deadList struct {
	l blocklist.List[*Message]
}

// Len is the number of dead letters.
func (l *deadList) Len() int { return l.l.Len() }

// insert adds m in its place.
func (l *deadList) insert(m *Message) { l.l.Insert(m, byFailed) }

// remove takes m out, and reports whether it was there.
func (l *deadList) remove(m *Message) bool { return l.l.Remove(m, byFailed) }

// first returns up to max dead letters, the oldest first, in a slice of
// their own.
func (l *deadList) first(max int) []*Message { return l.l.First(max) }
