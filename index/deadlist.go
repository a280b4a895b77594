package index

import (
	"slices"
	"sort"
)

// deadBlock is the size a block of a deadList is cut back to when it
// outgrows twice that.
const deadBlock = 512

// deadList holds a queue's dead letters in byFailed order (FailedAt, then
// Seq), in blocks of consecutive ones. It was one sorted slice, and a dead
// letter replayed or deleted from its middle shifted every one after it:
// a user deleting 100,000 dead letters from the middle of 200,000, one by
// one as DeleteDeadLetter takes them, moved billions of pointers under the
// queue's lock. A block holds at most 2*deadBlock, so an insertion or a
// removal anywhere moves at most that many, and finding its block is a
// binary search over the first of each. Removing the first of a block
// moves no other (deleteAt), which keeps emptying the list oldest first,
// in DeadLetters' order, as cheap as it was.
type deadList struct {
	blocks [][]*Message // none empty; each in order, and after the one before
	n      int
}

// Len is the number of dead letters.
func (l *deadList) Len() int { return l.n }

// block returns the index of the block m belongs in: the last whose
// first dead letter is not after m, or 0. There is at least one block.
func (l *deadList) block(m *Message) int {
	i := sort.Search(len(l.blocks), func(i int) bool { return byFailed(l.blocks[i][0], m) > 0 })
	return max(i-1, 0)
}

// insert adds m in its place.
func (l *deadList) insert(m *Message) {
	l.n++
	if len(l.blocks) == 0 {
		l.blocks = append(l.blocks, []*Message{m})
		return
	}
	b := l.block(m)
	blk := l.blocks[b]
	i, _ := slices.BinarySearchFunc(blk, m, byFailed)
	blk = slices.Insert(blk, i, m)
	if len(blk) > 2*deadBlock {
		// Cut in two: the second half in an array of its own, so that
		// an insertion into the first does not write over it.
		tail := slices.Clone(blk[deadBlock:])
		clear(blk[deadBlock:])
		blk = blk[:deadBlock]
		l.blocks = slices.Insert(l.blocks, b+1, tail)
	}
	l.blocks[b] = blk
}

// remove takes m out, and reports whether it was there.
func (l *deadList) remove(m *Message) bool {
	if l.n == 0 {
		return false
	}
	b := l.block(m)
	blk := l.blocks[b]
	i, ok := slices.BinarySearchFunc(blk, m, byFailed)
	if !ok || blk[i] != m {
		return false
	}
	l.n--
	if blk = deleteAt(blk, i); len(blk) > 0 {
		l.blocks[b] = blk
		return true
	}
	l.blocks = deleteAt(l.blocks, b)
	return true
}

// first returns up to max dead letters, the oldest first, in a slice of
// their own.
func (l *deadList) first(max int) []*Message {
	out := make([]*Message, 0, min(max, l.n))
	for _, blk := range l.blocks {
		if len(out)+len(blk) >= max {
			return append(out, blk[:max-len(out)]...)
		}
		out = append(out, blk...)
	}
	return out
}
