// Package blocklist keeps a sorted list in blocks of consecutive elements,
// so that an insertion or a removal anywhere moves a bounded number of
// them. A queue's dead letters were one sorted slice, and a dead letter
// replayed or deleted from its middle shifted every one after it: a user
// deleting 100,000 dead letters from the middle of 200,000, one by one as
// DeleteDeadLetter takes them, moved billions of pointers under the
// queue's lock. A block holds at most 2*Block elements, and finding an
// element's block is a binary search over the first of each. Removing the
// first of a block moves no other, which keeps emptying the list from the
// front, in its order, as cheap as it was.
package blocklist

import (
	"slices"
	"sort"
)

// Block is the size a block is cut back to when it outgrows twice that.
const Block = 512

// List holds elements in the order of the cmp its callers pass, the same
// on every call; elements cmp finds equal are the same one (the order is
// total). The zero List is empty and ready for use. A List is not safe
// for concurrent use; it retains the elements it holds.
type List[T comparable] struct {
	blocks [][]T // none empty; each in order, and after the one before
	n      int
}

// Len is the number of elements.
func (l *List[T]) Len() int { return l.n }

// block returns the index of the block x belongs in: the last whose first
// element is not after x, or 0. There is at least one block.
func (l *List[T]) block(x T, cmp func(a, b T) int) int {
	i := sort.Search(len(l.blocks), func(i int) bool { return cmp(l.blocks[i][0], x) > 0 })
	return max(i-1, 0)
}

// Insert adds x in its place.
func (l *List[T]) Insert(x T, cmp func(a, b T) int) {
	l.n++
	if len(l.blocks) == 0 {
		l.blocks = append(l.blocks, []T{x})
		return
	}
	b := l.block(x, cmp)
	blk := l.blocks[b]
	i, _ := slices.BinarySearchFunc(blk, x, cmp)
	blk = slices.Insert(blk, i, x)
	if len(blk) > 2*Block {
		// Cut in two: the second half in an array of its own, so that
		// an insertion into the first does not write over it.
		tail := slices.Clone(blk[Block:])
		clear(blk[Block:])
		blk = blk[:Block]
		l.blocks = slices.Insert(l.blocks, b+1, tail)
	}
	l.blocks[b] = blk
}

// Remove takes x out, and reports whether it was there.
func (l *List[T]) Remove(x T, cmp func(a, b T) int) bool {
	if l.n == 0 {
		return false
	}
	b := l.block(x, cmp)
	blk := l.blocks[b]
	i, ok := slices.BinarySearchFunc(blk, x, cmp)
	if !ok || blk[i] != x {
		return false
	}
	l.n--
	if blk = DeleteAt(blk, i); len(blk) > 0 {
		l.blocks[b] = blk
		return true
	}
	l.blocks = DeleteAt(l.blocks, b)
	return true
}

// First returns up to max elements, the first ones, in a slice of their
// own: none when max is not positive.
func (l *List[T]) First(max int) []T {
	if max <= 0 {
		return nil
	}
	out := make([]T, 0, min(max, l.n))
	for _, blk := range l.blocks {
		if len(out)+len(blk) >= max {
			return append(out, blk[:max-len(out)]...)
		}
		out = append(out, blk...)
	}
	return out
}

// DeleteAt removes s[i]. The first element goes without moving the
// others, so that emptying a slice from its front, one by one, is not
// quadratic.
func DeleteAt[E any](s []E, i int) []E {
	if i > 0 {
		return slices.Delete(s, i, i+1)
	}
	var none E
	s[0] = none // the array outlives the slice until the next append moves it
	if len(s) == 1 {
		return nil
	}
	return s[1:]
}
