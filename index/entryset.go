package index

import (
	"math/bits"
	"slices"
)

// setPage is the number of consecutive sequence numbers one page of an
// entrySet holds: a multiple of 64 (one word of its bitmap) that divides
// ChunkEntries, so that no page straddles two chunks.
const setPage = 64

// entrySet holds table entries by sequence number, in pages of setPage
// consecutive sequences. The entries of a stream fill their pages in
// order, so a Put costs a store into a page (no hashing of the entry, no
// growth of a table of them) and Flush reads them back in order, in runs,
// without sorting. A scattered entry costs a page of its own (about 2.5
// KiB); those are few: copies forward and positions moved. Not safe for
// concurrent use; Table guards it.
type entrySet struct {
	pages map[uint64]*entryPage // by seq / setPage
	n     int
	// last is the page the last put went to: a stream's next entry is
	// almost always in it.
	last    *entryPage
	lastKey uint64
	// lo and hi bound the keys of pages; meaningless while pages is empty.
	lo, hi uint64
}

type entryPage struct {
	has  uint64 // bit i: ents[i] is set
	ents [setPage]Entry
}

func newEntrySet() *entrySet { return &entrySet{pages: map[uint64]*entryPage{}} }

// put records e, replacing any entry of its sequence.
func (s *entrySet) put(e Entry) {
	key, i := e.Seq/setPage, e.Seq%setPage
	p := s.last
	if p == nil || key != s.lastKey {
		if p = s.pages[key]; p == nil {
			if len(s.pages) == 0 {
				s.lo, s.hi = key, key
			}
			s.lo, s.hi = min(s.lo, key), max(s.hi, key)
			p = &entryPage{}
			s.pages[key] = p
		}
		s.last, s.lastKey = p, key
	}
	if p.has&(1<<i) == 0 {
		p.has |= 1 << i
		s.n++
	}
	p.ents[i] = e
}

// get returns seq's entry, if the set holds one.
func (s *entrySet) get(seq uint64) (Entry, bool) {
	if s == nil {
		return Entry{}, false
	}
	p := s.pages[seq/setPage]
	if p == nil || p.has&(1<<(seq%setPage)) == 0 {
		return Entry{}, false
	}
	return p.ents[seq%setPage], true
}

// nextOf returns the smallest sequence in [from, to] whose entry the set
// holds as a stream message of queue q, and ok false if there is none. It steps through the pages of
// the range, or through every page when the set has fewer of them than the
// range has: a set scattered over a long range costs its size, not the
// range's.
func (s *entrySet) nextOf(q uint32, from, to uint64) (uint64, bool) {
	if s == nil || len(s.pages) == 0 || from > to {
		return 0, false
	}
	lo, hi := max(from/setPage, s.lo), min(to/setPage, s.hi)
	if lo > hi {
		return 0, false
	}
	if hi-lo < uint64(len(s.pages)) {
		for key := lo; key <= hi; key++ {
			if seq, ok := s.pages[key].nextOf(key, q, from, to); ok {
				return seq, true
			}
		}
		return 0, false
	}
	best, found := uint64(0), false
	for key, p := range s.pages {
		if key < lo || key > hi || (found && key*setPage > best) {
			continue
		}
		if seq, ok := p.nextOf(key, q, from, to); ok && (!found || seq < best) {
			best, found = seq, true
		}
	}
	return best, found
}

// nextOf is entrySet.nextOf within the page of key (nil: none).
func (p *entryPage) nextOf(key uint64, q uint32, from, to uint64) (uint64, bool) {
	if p == nil {
		return 0, false
	}
	for i := uint64(0); i < setPage; i++ {
		seq := key*setPage + i
		if seq < from || seq > to || p.has&(1<<i) == 0 {
			continue
		}
		// Compared field by field, not as the files' queue field: an
		// entry whose queue number takes the stream bit (which Flush
		// refuses) must not pass for another queue's stream message.
		if e := &p.ents[i]; e.Stream && e.Queue == q {
			return seq, true
		}
	}
	return 0, false
}

// len is the number of entries held.
func (s *entrySet) len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// putAll records every entry of o that s does not hold: s's own win.
func (s *entrySet) putAll(o *entrySet) {
	for key, op := range o.pages {
		for i := uint64(0); i < setPage; i++ {
			if op.has&(1<<i) == 0 {
				continue
			}
			if _, ok := s.get(key*setPage + i); !ok {
				s.put(op.ents[i])
			}
		}
	}
}

// dropChunks forgets every entry of the table chunks gone reports true
// for.
func (s *entrySet) dropChunks(gone func(chunk uint64) bool) {
	for key, p := range s.pages {
		if gone(key * setPage / ChunkEntries) {
			s.n -= bits.OnesCount64(p.has)
			delete(s.pages, key)
			if p == s.last {
				s.last = nil
			}
		}
	}
}

// maxRun bounds the runs that runs hands out, so that its slice never
// grows: a checkpoint after a busy half segment flushes a run of hundreds
// of thousands of entries, and growing one slice to hold them all took
// more of the checkpoint's time (fresh memory, copied at each doubling)
// than writing them.
const maxRun = 4096

// runs calls f with the entries in ascending sequence order, in runs of
// consecutive sequences within one chunk, at most maxRun long, and stops at
// f's first error. The slice is reused between calls.
func (s *entrySet) runs(f func(run []Entry) error) error {
	keys := make([]uint64, 0, len(s.pages))
	for key := range s.pages {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	run := make([]Entry, 0, min(maxRun, s.len()))
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		err := f(run)
		run = run[:0]
		return err
	}
	for _, key := range keys {
		p := s.pages[key]
		for i := uint64(0); i < setPage; i++ {
			if p.has&(1<<i) == 0 {
				continue
			}
			e := p.ents[i]
			if len(run) > 0 {
				prev := run[len(run)-1].Seq
				if e.Seq != prev+1 || ChunkOf(e.Seq) != ChunkOf(prev) || len(run) == maxRun {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			run = append(run, e)
		}
	}
	return flush()
}
