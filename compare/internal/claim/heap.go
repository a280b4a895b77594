package claim

// idHeap is a min-heap of message IDs. It is written out rather than
// built on container/heap so that a push or pop does not box its value.
type idHeap []uint64

func (h *idHeap) push(id uint64) {
	*h = append(*h, id)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent] <= s[i] {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

// pop removes and returns the smallest ID. The heap must not be empty.
func (h *idHeap) pop() uint64 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		smallest, left, right := i, 2*i+1, 2*i+2
		if left < len(s) && s[left] < s[smallest] {
			smallest = left
		}
		if right < len(s) && s[right] < s[smallest] {
			smallest = right
		}
		if smallest == i {
			break
		}
		s[i], s[smallest] = s[smallest], s[i]
		i = smallest
	}
	*h = s
	return top
}

// expiryEntry is one lease granted: the message and when its lease ends.
type expiryEntry struct {
	expiry int64
	id     uint64
}

// expiryHeap is a min-heap of leases on their expiry.
type expiryHeap []expiryEntry

func (h *expiryHeap) push(e expiryEntry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent].expiry <= s[i].expiry {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

// pop removes the lease that ends first. The heap must not be empty.
func (h *expiryHeap) pop() {
	s := *h
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		smallest, left, right := i, 2*i+1, 2*i+2
		if left < len(s) && s[left].expiry < s[smallest].expiry {
			smallest = left
		}
		if right < len(s) && s[right].expiry < s[smallest].expiry {
			smallest = right
		}
		if smallest == i {
			break
		}
		s[i], s[smallest] = s[smallest], s[i]
		i = smallest
	}
	*h = s
}
