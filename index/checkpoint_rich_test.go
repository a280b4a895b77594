package index

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

type historyStep struct {
	pos wal.Position
	e   *Event
}

// richHistory makes a plausible history over two queues: publishes (some
// out of order, some keyed), every message event kind, evictions, policy
// changes and copies forward (a publish of a held message at a new
// position, followed by its StateEvent), generated against a reference
// index so that copies are only of held messages.
func richHistory(rng *rand.Rand, n int) []historyStep {
	ref := New()
	var steps []historyStep
	seg, off := uint32(1), 32
	pos := func() wal.Position {
		off += 50 + rng.IntN(50)
		if off > 20000 {
			seg++
			off = 32
		}
		return wal.MakePosition(seg, off)
	}
	add := func(p wal.Position, e *Event) {
		if err := ref.Apply(p, e); err != nil {
			panic(err)
		}
		steps = append(steps, historyStep{p, e})
	}
	pol := func() Policy {
		return Policy{VisibilityTimeout: 10, MaxDeliveries: int64(1 + rng.IntN(3)), DedupWindow: int64(rng.IntN(100))}
	}
	add(0, &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)})
	add(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: pol()})
	add(0, &Event{Kind: KindDeclare, Queue: 2, Name: "r", Policy: pol()})
	pubs := map[uint64]*Event{}
	next := uint64(1)
	clock := int64(0)
	for len(steps) < n {
		switch r := rng.IntN(20); {
		case r < 7:
			clock += int64(rng.IntN(10))
			at := clock
			if rng.IntN(5) == 0 {
				at -= int64(rng.IntN(30))
			}
			key := ""
			if rng.IntN(2) == 0 {
				key = fmt.Sprintf("k%d", rng.IntN(6))
			}
			e := &Event{Kind: KindPublish, Queue: uint32(1 + rng.IntN(2)), Seq: next, Time: at, Key: key, Payload: []byte("payload")}
			pubs[next] = e
			next++
			add(pos(), e)
		case r == 7:
			add(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: pol()})
		case r == 8:
			q := uint32(1 + rng.IntN(2))
			add(pos(), &Event{Kind: KindEvict, Queue: q, Time: clock, Window: int64(rng.IntN(40))})
		case r < 12 && next > 1:
			// A copy forward of a held message.
			seq := 1 + uint64(rng.IntN(int(next-1)))
			p := pubs[seq]
			if !ref.Holds(seq) {
				continue
			}
			cp := *p
			add(pos(), &cp)
			if m := ref.QueueByID(p.Queue).Get(seq); m != nil {
				if se, ok := StateEvent(p.Queue, m); ok {
					add(pos(), &se)
				}
			}
		default:
			if next == 1 {
				continue
			}
			seq := 1 + uint64(rng.IntN(int(next-1)))
			kinds := []Kind{KindLease, KindAck, KindNack, KindDeadLetter, KindExtend, KindReplay, KindDelete}
			e := &Event{Kind: kinds[rng.IntN(len(kinds))], Queue: pubs[seq].Queue, Seq: seq,
				Deliveries: uint32(rng.IntN(4)), Time: clock + int64(rng.IntN(40)) - 10, Nonce: rng.Uint64()}
			if rng.IntN(2) == 0 {
				e.Reason, e.Cause, e.Code = "R", "c", 3
			}
			if e.Kind == KindNack && rng.IntN(3) == 0 {
				e.Time = AtOnce
			}
			add(pos(), e)
		}
	}
	return steps
}

// stateText is what x holds and would hand out at now, as text to compare.
func stateText(x *Index, now int64) string {
	s := dumpAll(x, now)
	for id := uint32(1); x.QueueByID(id) != nil; id++ {
		q := x.QueueByID(id)
		s += fmt.Sprintf("q%d active-or-not lastEvicts=%d seen=%d live=%d\n", id, q.LastEvicts(), q.SeenCount(), q.Live())
	}
	s += fmt.Sprintf("uses=%v chunks=%v next=%d\n", x.SegmentUses(), x.LiveChunks(), x.PeekNextSeq())
	id, _ := x.NextQueueID()
	s += fmt.Sprintf("nextQueue=%d\n", id)
	return s
}

// TestACheckpointAnywhereInARichHistoryEqualsAFullReplay: a checkpoint taken
// anywhere in a history mixing every event kind, two queues, evictions,
// policy changes and copies forward, then the rest of the log, gives the
// state of a full replay; and so does applying every event twice.
func TestACheckpointAnywhereInARichHistoryEqualsAFullReplay(t *testing.T) {
	rng := newRand(t, 17)
	for round := 0; round < 60; round++ {
		steps := richHistory(rng, 150)
		cut := 1 + rng.IntN(len(steps)-1)
		for steps[cut-1].pos == 0 && cut < len(steps)-1 {
			cut++
		}
		dir := t.TempDir()
		live, err := Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		for _, s := range steps[:cut] {
			require.NoError(t, live.Apply(s.pos, s.e))
		}
		cpos := steps[cut-1].pos
		checkpointAt(t, live, dir, cpos)
		require.NoError(t, live.Table.Close())
		loaded, from, err := Load(vfs.Default, dir)
		require.NoError(t, err)
		require.Equal(t, cpos, from)
		full, twice := New(), New()
		for _, s := range steps {
			require.NoError(t, full.Apply(s.pos, s.e))
			require.NoError(t, twice.Apply(s.pos, s.e))
			if s.e.Kind != KindPublish || s.pos != 0 {
				require.NoError(t, twice.Apply(s.pos, s.e))
			}
		}
		for _, s := range steps[cut:] {
			require.NoError(t, loaded.Apply(s.pos, s.e))
		}
		now := int64(1 << 20)
		want := stateText(full, now)
		require.Equal(t, want, stateText(loaded, now), "round %d: checkpoint at step %d of %d then the rest of the log", round, cut, len(steps))
		require.Equal(t, dumpAll(full, now), dumpAll(twice, now), "round %d: every event applied twice", round)
		for _, now := range []int64{0, 100, 300} {
			require.Equal(t, drain(full, now), drain(loaded, now), "round %d: receive order at %d", round, now)
		}
		require.NoError(t, loaded.Table.Close())
	}
}

// drain receives every receivable message of every queue at now (leasing
// each), and lists them in order; it restores nothing, so callers pass
// clocks in increasing order.
func drain(x *Index, now int64) string {
	s := ""
	for id := uint32(1); x.QueueByID(id) != nil; id++ {
		q := x.QueueByID(id)
		q.Promote(now)
		for m := q.NextReady(); m != nil; m = q.NextReady() {
			s += fmt.Sprintf("q%d:%d@%d/%d ", id, m.Seq, m.EnqueuedAt, m.Deliveries)
			if _, err := q.Apply(0, &Event{Kind: KindLease, Queue: id, Seq: m.Seq, Deliveries: m.Deliveries + 1, Time: now + 5, Nonce: 1}); err != nil {
				return s + err.Error()
			}
		}
		s += "\n"
	}
	return s
}

// TestTheLastSequencesRoundTripThroughTheTableFiles: messages at the top
// of the sequence range go through the table files and a checkpoint like
// any other.
func TestTheLastSequencesRoundTripThroughTheTableFiles(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 2, Name: "r", Policy: Policy{MaxDeliveries: 2}}))
	seqs := []uint64{LastSeq - 3*ChunkEntries - 1, LastSeq - 2, LastSeq - 1, LastSeq}
	for i, s := range seqs {
		require.NoError(t, x.Apply(wal.MakePosition(math32(i), 100), &Event{Kind: KindPublish, Queue: uint32(1 + i%2), Seq: s, Time: int64(i), Payload: []byte("p")}))
	}
	want := stateText(x, 10)
	checkpointAt(t, x, dir, wal.MakePosition(9, 100))
	require.NoError(t, x.Table.Close())
	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	require.Equal(t, want, stateText(y, 10))
	require.NoError(t, y.Damaged())
	require.Equal(t, "q1:"+fmt.Sprint(seqs[0])+"@0/0 q1:"+fmt.Sprint(seqs[2])+"@2/0 \nq2:"+fmt.Sprint(seqs[1])+"@1/0 q2:"+fmt.Sprint(seqs[3])+"@3/0 \n", drain(y, 10))
}

func math32(i int) uint32 { return uint32(1 + i) }
