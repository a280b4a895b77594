package index

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// heldCounts is what an index holds off the table, counted again: per log
// segment the committed active messages and the dedup keys there (their
// MinSeq and MaxSeq bound those messages' sequences), per table chunk the
// committed active messages, and the messages its queues count in their
// streams.
type heldCounts struct {
	segs   map[uint32]*SegmentUse
	chunks map[uint64]int
	fresh  uint64
}

func (h *heldCounts) seg(s uint32) *SegmentUse { return useOf(h.segs, s) }

// hold counts a committed message of seq whose publish record of size
// bytes is in log segment s, restated by an event of restate bytes.
func (h *heldCounts) hold(seq uint64, s uint32, size, restate uint32) {
	u := h.seg(s)
	u.Messages++
	u.Bytes += int64(size)
	u.StateBytes += int64(restate)
	u.cover(seq)
	h.chunks[ChunkOf(seq)]++
}

// countHeld counts what the index holds off the table (see heldCounts),
// and returns an error naming the first thing it holds that no index
// holds: a queue listed under another number or name, a stream outside
// the sequences handed out (below the next sequence), a message marked
// gone outside its stream, a message or a dedup key outside the sequences
// handed out, a message in no state, a committed one at position 0, a
// queue's live or dead count or heaps that disagree with its messages.
// It reads nothing of the table.
func (x *Index) countHeld() (heldCounts, error) {
	h := heldCounts{segs: map[uint32]*SegmentUse{}, chunks: map[uint64]int{}}
	next := x.nextSeq.Load()
	for _, id := range slices.Sorted(maps.Keys(x.queues)) {
		q := x.queues[id]
		if q.ID != id || x.byName[q.Name] != q {
			return h, fmt.Errorf("queue %d %q is listed as %d, or its name finds another", q.ID, q.Name, id)
		}
		if q.cursor == 0 || q.cursor > q.streamMax+1 || q.streamMax >= next {
			return h, fmt.Errorf("queue %d: stream [%d, %d] outside the sequences taken (below %d)", id, q.cursor, q.streamMax, next)
		}
		if uint64(q.fresh) > q.streamMax+1-q.cursor {
			return h, fmt.Errorf("queue %d: %d messages counted in its stream [%d, %d]", id, q.fresh, q.cursor, q.streamMax)
		}
		// Saturated: the segments' count it is compared with is far below.
		h.fresh += min(uint64(q.fresh), math.MaxUint64-h.fresh)
		for seq := range q.gone {
			if seq < q.cursor || seq > q.streamMax {
				return h, fmt.Errorf("queue %d: message %d marked gone outside its stream [%d, %d]", id, seq, q.cursor, q.streamMax)
			}
		}
		live, dead, waiting := 0, 0, 0
		for seq, m := range q.msgs {
			if m.Seq != seq || seq == 0 || seq >= next {
				return h, fmt.Errorf("queue %d: message %d (kept as %d) outside the sequences taken (below %d)", id, m.Seq, seq, next)
			}
			switch m.State {
			case Pending, Ready, Leased:
				live++
			case Dead:
				dead++
			default:
				return h, fmt.Errorf("queue %d: message %d in state %d", id, seq, m.State)
			}
			if m.State == Ready || m.State == Leased {
				waiting++
			}
			if m.State == Pending {
				continue // counted nowhere until its commit
			}
			if m.Pos == 0 {
				return h, fmt.Errorf("queue %d: message %d committed at position 0, where no record lives", id, seq)
			}
			h.hold(seq, m.Pos.Segment(), m.Size, m.restate)
		}
		if live != q.live {
			return h, fmt.Errorf("queue %d: %d active messages pending, ready or leased, counted %d", id, live, q.live)
		}
		if dead != q.dead.Len() {
			return h, fmt.Errorf("queue %d: %d dead messages, %d in its dead letters", id, dead, q.dead.Len())
		}
		if err := q.exhausted.verify(); err != nil {
			return h, fmt.Errorf("queue %d: %w", id, err)
		}
		if n := q.ready.Len() + q.timers.Len() + q.finals.Len() + q.exhausted.len(); n != waiting {
			return h, fmt.Errorf("queue %d: %d ready or leased messages, %d in its heaps", id, waiting, n)
		}
		for _, hp := range []*msgHeap{&q.ready, &q.timers, &q.finals} {
			leased := 0
			for _, m := range hp.items {
				if m.State == Leased {
					leased++
				}
			}
			if leased != hp.leased {
				return h, fmt.Errorf("queue %d: %d leased messages in a heap that counts %d", id, leased, hp.leased)
			}
		}
		for key, k := range q.seen {
			if k.key != key || k.seq == 0 || k.seq >= next {
				return h, fmt.Errorf("queue %d: dedup key %q (kept as %q) names message %d, outside the sequences taken (below %d)", id, key, k.key, k.seq, next)
			}
			if k.seg != 0 {
				u := h.seg(k.seg)
				u.Keys++
				u.KeyBytes += int64(len(key))
			}
		}
	}
	return h, nil
}

// checkHeld returns an error naming the first count the index keeps that
// h, what it holds off the table, contradicts whatever the table holds: a
// log segment's dedup keys, their bytes or its restating bytes other than
// those held; fewer messages or bytes than the active messages there; an
// active message's sequence outside those the segment's use bounds; a
// segment's or table chunk's use that counts nothing; a chunk counting
// fewer than its active messages, or more than it has entries; and, all
// segments together and all chunks together, other than the active
// messages and the queues' stream counts. The caller holds useMu, or has
// not shared the index yet.
func (x *Index) checkHeld(h heldCounts) error {
	next := x.nextSeq.Load()
	for _, s := range slices.Sorted(maps.Keys(h.segs)) {
		if x.segs[s] == nil {
			held := h.segs[s]
			return fmt.Errorf("log segment %d holds %d messages and %d dedup keys, and counts none", s, held.Messages, held.Keys)
		}
	}
	// stream is what the segments count beyond their active messages: the
	// stream messages. Each count is bounded (see maxSegmentRecords), and
	// there are fewer segments than bytes in a checkpoint: no overflow.
	var stream uint64
	for _, s := range slices.Sorted(maps.Keys(x.segs)) {
		u := x.segs[s]
		held := h.segs[s]
		if held == nil {
			held = &SegmentUse{}
		}
		switch {
		case u.Messages <= 0 && u.Keys <= 0:
			return fmt.Errorf("log segment %d counts neither messages nor dedup keys (%d and %d)", s, u.Messages, u.Keys)
		case u.Keys != held.Keys || u.KeyBytes != held.KeyBytes:
			return fmt.Errorf("log segment %d counts %d dedup keys of %d bytes, and holds %d of %d", s, u.Keys, u.KeyBytes, held.Keys, held.KeyBytes)
		case u.StateBytes != held.StateBytes:
			return fmt.Errorf("log segment %d counts %d bytes restating its messages' state, and holds %d", s, u.StateBytes, held.StateBytes)
		case u.Messages < held.Messages || u.Bytes < held.Bytes:
			return fmt.Errorf("log segment %d counts %d messages of %d bytes, fewer than the %d active ones there, of %d", s, u.Messages, u.Bytes, held.Messages, held.Bytes)
		case u.Messages > 0 && (u.MinSeq == 0 || u.MinSeq > u.MaxSeq || u.MaxSeq >= next):
			return fmt.Errorf("log segment %d holds messages %d to %d, outside the sequences taken (below %d)", s, u.MinSeq, u.MaxSeq, next)
		case held.Messages > 0 && (held.MinSeq < u.MinSeq || held.MaxSeq > u.MaxSeq):
			return fmt.Errorf("log segment %d holds active messages %d to %d, outside the sequences it counts [%d, %d]", s, held.MinSeq, held.MaxSeq, u.MinSeq, u.MaxSeq)
		}
		stream += uint64(u.Messages - held.Messages)
	}
	if stream != h.fresh {
		return fmt.Errorf("the log segments count %d messages besides the active ones, and the queues' streams %d", stream, h.fresh)
	}
	stream = 0
	for _, c := range slices.Sorted(maps.Keys(x.chunks)) {
		n := x.chunks[c]
		if n <= 0 || n > ChunkEntries || n < h.chunks[c] {
			return fmt.Errorf("table chunk %d counts %d live messages, and holds %d active ones and room for %d", c, n, h.chunks[c], ChunkEntries)
		}
		stream += uint64(n - h.chunks[c])
	}
	for _, c := range slices.Sorted(maps.Keys(h.chunks)) {
		if _, ok := x.chunks[c]; !ok {
			return fmt.Errorf("table chunk %d holds %d active messages, and counts none", c, h.chunks[c])
		}
	}
	if stream != h.fresh {
		return fmt.Errorf("the table chunks count %d messages besides the active ones, and the queues' streams %d", stream, h.fresh)
	}
	return nil
}

// Verify counts the index again from what it holds — every queue's active
// messages, its stream (walked in the table) and its dedup keys — and
// returns an error naming the first count kept that disagrees: a queue's
// live, dead and stream counts, a log segment's use (SegmentUse: messages,
// bytes, restating bytes, dedup keys and their bytes, and the sequences it
// bounds), a table chunk's live count. It also checks that every message
// and key names a sequence handed out (below the next sequence), that no
// committed message lies at position 0, and that no message marked gone
// lies outside its queue's stream.
//
// Where the table's entries disagree with counts that agree with
// everything else (a stream holding other messages than it counts, or in
// other segments or chunks), the error wraps ErrDamaged: Load reads no
// entry, and such a disagreement shows only when a walk of the stream
// meets it, as damage to the index files. Any other error is the index
// contradicting itself, which Load refuses in a checkpoint.
//
// It is for tests and tools: it walks every stream, costing a read of each
// entry of the table, and changes nothing but what a walk of a stream
// does (damage found is recorded: see Damaged; damage a walk recorded
// before is returned at once). Not safe for concurrent
// use: the caller keeps every queue still.
func (x *Index) Verify() error {
	if x == nil {
		return errNilIndex
	}
	if err := x.Damaged(); err != nil {
		// A walk of a stream met damage already, and left the counts it
		// could not trust behind (a stream ending early stops counting
		// what it lost): that damage is the answer, not the counts.
		if !errors.Is(err, ErrDamaged) {
			err = fmt.Errorf("%w: %w", ErrDamaged, err)
		}
		return fmt.Errorf("index: verify: %w", err)
	}
	h, err := x.countHeld()
	if err == nil {
		x.useMu.Lock()
		err = x.checkHeld(h)
		x.useMu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("index: verify: %w", err)
	}

	table := func(format string, args ...any) error {
		return fmt.Errorf("index: verify: %w: the table disagrees: %s", ErrDamaged, fmt.Sprintf(format, args...))
	}
	for _, id := range slices.Sorted(maps.Keys(x.queues)) {
		q := x.queues[id]
		fresh := 0
		q.eachFresh(q.cursor, q.streamMax, func(ent Entry) bool {
			fresh++
			h.hold(ent.Seq, ent.Pos.Segment(), ent.Size, 0)
			return true
		})
		if err := x.Damaged(); err != nil {
			return fmt.Errorf("index: verify: queue %d: %w", id, err)
		}
		if fresh != q.fresh {
			return table("queue %d: %d messages in its stream [%d, %d], counted %d", id, fresh, q.cursor, q.streamMax, q.fresh)
		}
	}
	x.useMu.Lock()
	defer x.useMu.Unlock()
	for _, s := range slices.Sorted(maps.Keys(h.segs)) {
		u, found := x.segs[s], h.segs[s]
		if u == nil {
			return table("log segment %d holds %d messages, and counts none", s, found.Messages)
		}
		if u.Messages != found.Messages || u.Bytes != found.Bytes {
			return table("log segment %d counts %d messages of %d bytes, and holds %d of %d", s, u.Messages, u.Bytes, found.Messages, found.Bytes)
		}
		if found.Messages > 0 && (found.MinSeq < u.MinSeq || found.MaxSeq > u.MaxSeq) {
			return table("log segment %d holds messages %d to %d, outside the sequences it counts [%d, %d]", s, found.MinSeq, found.MaxSeq, u.MinSeq, u.MaxSeq)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(x.segs)) {
		if h.segs[s] == nil {
			return table("log segment %d counts %d messages, and holds none", s, x.segs[s].Messages)
		}
	}
	if !maps.Equal(h.chunks, x.chunks) {
		return table("the table chunks hold live messages %v, and count %v", h.chunks, x.chunks)
	}
	return nil
}
