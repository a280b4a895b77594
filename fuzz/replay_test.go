package fuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// replayMaxSeq bounds the sequence numbers an input's events may name, so
// that an input's messages share table chunks and pages, where the
// interesting cases are.
const replayMaxSeq = 1 << 17

// replayMaxRecords bounds the records read from one input.
const replayMaxRecords = 500

// joinRecords encodes records as FuzzReplayCheckpoint reads them: each a
// uvarint length, then its bytes.
func joinRecords(evs ...index.Event) []byte {
	var b []byte
	for i := range evs {
		rec := evs[i].Append(nil)
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

// splitRecords is joinRecords' inverse; a length past the end takes the
// rest.
func splitRecords(b []byte) [][]byte {
	var recs [][]byte
	for len(b) > 0 && len(recs) < replayMaxRecords {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return recs
		}
		b = b[k:]
		if n > uint64(len(b)) {
			n = uint64(len(b))
		}
		recs = append(recs, b[:n])
		b = b[n:]
	}
	return recs
}

func replaySeeds() [][]byte {
	sec := int64(time.Second)
	now := seedClock.UnixNano()
	jobs := index.Policy{VisibilityTimeout: 10 * sec, RetryDelay: sec, MaxDeliveries: 2, MaxMessageBytes: 64, Capacity: 20, DedupWindow: 60 * sec}
	mail := index.Policy{VisibilityTimeout: 5 * sec, RetryDelay: sec, MaxRetryDelay: 3 * sec, MaxDeliveries: 4, MaxMessageBytes: 32, Capacity: 8, DedupWindow: 30 * sec}
	secret := make([]byte, index.SecretSize)
	meta := index.Event{Kind: index.KindMeta, Secret: secret}
	decl := []index.Event{meta,
		{Kind: index.KindDeclare, Queue: 1, Name: "jobs", Policy: jobs},
		{Kind: index.KindDeclare, Queue: 2, Name: "mail", Policy: mail}}
	pub := func(q uint32, seq uint64, at int64, key string) index.Event {
		return index.Event{Kind: index.KindPublish, Queue: q, Seq: seq, Time: at, Key: key, Payload: []byte("p")}
	}
	every := append(slices.Clone(decl),
		pub(1, 1, now+sec, ""), pub(1, 2, now+2*sec, "k2"), pub(1, 3, now+3*sec, ""), pub(2, 4, now+4*sec, "m"),
		pub(1, 5, now+5*sec, "k5"), pub(1, 6, now, ""), // out of EnqueuedAt order
		index.Event{Kind: index.KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: now + 20*sec, Nonce: 11},
		index.Event{Kind: index.KindNack, Queue: 1, Seq: 2, Deliveries: 1, Time: now + 12*sec},
		index.Event{Kind: index.KindLease, Queue: 1, Seq: 3, Deliveries: 2, Time: now + 9*sec, Nonce: 12},
		index.Event{Kind: index.KindDeadLetter, Queue: 1, Seq: 5, Deliveries: 2, Time: now + 10*sec, Code: 7, Reason: "R", Cause: "c"},
		index.Event{Kind: index.KindAck, Queue: 2, Seq: 4},
		index.Event{Kind: index.KindReplay, Queue: 1, Seq: 5},
		index.Event{Kind: index.KindExtend, Queue: 1, Seq: 1, Deliveries: 1, Time: now + 60*sec, Nonce: 14},
		index.Event{Kind: index.KindDelete, Queue: 1, Seq: 6},
		index.Event{Kind: index.KindEvict, Queue: 2, Time: now + 100*sec, Window: 30 * sec},
		index.Event{Kind: index.KindMark, Seq: 20},
		pub(1, 21, now+30*sec, ""), pub(1, 21, now+30*sec, ""), // a copy forward moves it
	)
	orphans := append(slices.Clone(decl[:2]),
		pub(3, 1, now, "x"), index.Event{Kind: index.KindAck, Queue: 1, Seq: 9},
		index.Event{Kind: index.KindDeclare, Queue: 1, Name: "renamed", Policy: mail},
		pub(1, 70000, now, ""), pub(1, 70001, now-1, "late"))
	// Every message gone again, acknowledged or deleted: nothing left to
	// pin the segment or a table chunk.
	settled := append(slices.Clone(decl),
		pub(1, 1, now, "k1"), index.Event{Kind: index.KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: now + 10*sec, Nonce: 1},
		index.Event{Kind: index.KindAck, Queue: 1, Seq: 1}, index.Event{Kind: index.KindEvict, Queue: 1, Time: now + 100*sec, Window: 60 * sec},
		pub(2, 2, now, ""), index.Event{Kind: index.KindDeadLetter, Queue: 2, Seq: 2, Time: now, Reason: "R"},
		index.Event{Kind: index.KindDelete, Queue: 2, Seq: 2})
	// Messages on the last slots of a table chunk and the first of the
	// next (index.ChunkEntries each), in two queues, so that a stream's
	// walk across the table files meets each edge: one queue's message on
	// the last slot between two of the other's.
	edge := uint64(index.ChunkEntries)
	edges := append(slices.Clone(decl),
		pub(2, edge-2, now, ""), pub(1, edge-1, now+sec, ""), pub(2, edge, now+2*sec, ""), pub(1, edge+1, now+3*sec, ""),
		pub(1, 2*edge-1, now+4*sec, ""), pub(2, 2*edge, now+5*sec, ""),
		index.Event{Kind: index.KindLease, Queue: 1, Seq: edge - 1, Deliveries: 1, Time: now + 20*sec, Nonce: 3},
		index.Event{Kind: index.KindAck, Queue: 2, Seq: edge})
	return [][]byte{joinRecords(decl...), joinRecords(every...), joinRecords(orphans...), joinRecords(settled...), joinRecords(edges...), nil}
}

// FuzzReplayCheckpoint applies arbitrary records, as a replay of a log
// whose every frame verified would (so the checksum is no defence), to a
// fresh index, then writes a checkpoint of it and loads that back. Apply
// must never panic and fail only with ErrBadEvent (Open then refuses the
// log as Corrupt); what the index counts per segment and table chunk must
// match the messages and keys it holds; an index that took every record
// must survive its own checkpoint unchanged: the same queues, dumps at
// several instants, latest clock readings, next sequence, orphan count,
// segment uses, live table chunks, and the order in which it then hands
// out its messages. A checkpoint that loads differently from the replay
// it was taken of is state an open quietly changes. An index that took
// every record twice in a row must hold the same as well.
func FuzzReplayCheckpoint(f *testing.F) {
	for _, s := range replaySeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := fastDir(t)
		x, err := index.Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		closed := false
		defer func() {
			if !closed {
				_ = x.Table.Close()
			}
		}()
		// twice takes every record twice in a row (see below).
		twice := index.New()
		off := 32
		var last wal.Position
		// The log's writer gives each message a sequence of its own across
		// the store; a record that publishes a sequence another queue
		// already holds cannot come from it, and for such a log the use
		// counts are not checked (Apply need only refuse or survive it).
		queueOf := map[uint64]uint32{}
		shared := false
		for _, rec := range splitRecords(data) {
			e, err := index.Decode(rec)
			if err != nil {
				require.ErrorIs(t, err, index.ErrBadEvent)
				return // the replay stops here: Open refuses the log
			}
			if e.Seq >= replayMaxSeq {
				continue
			}
			last = wal.MakePosition(1, off)
			off += 17 + len(rec)
			if e.Kind == index.KindPublish {
				if q, ok := queueOf[e.Seq]; ok && q != e.Queue {
					shared = true
				}
				queueOf[e.Seq] = e.Queue
			}
			if err := x.Apply(last, &e); err != nil {
				require.ErrorIs(t, err, index.ErrBadEvent)
				return
			}
			for range 2 {
				again, err := index.Decode(rec)
				require.NoError(t, err)
				require.NoError(t, twice.Apply(last, &again), "a %s event applied once, refused applied twice", e.Kind)
			}
		}
		require.NoError(t, x.Damaged())
		if !shared {
			requireUsesMatch(t, x)
		}
		end := last + 1
		snap, err := x.Snapshot(end, map[uint32]int{})
		require.NoError(t, err)
		_, err = x.Table.Flush(true)
		require.NoError(t, err)
		require.NoError(t, index.WriteCheckpoint(vfs.Default, dir, snap, x.Table.Chunks()))

		y, from, err := index.Load(vfs.Default, dir)
		if err != nil && errors.Is(err, index.ErrDamaged) {
			t.Fatalf("the checkpoint of a replayed index does not load: %v", err)
		}
		require.NoError(t, err)
		defer func() { _ = y.Table.Close() }()
		require.Equal(t, end, from)
		require.Equal(t, x.Orphans, y.Orphans, "orphans")
		require.Equal(t, x.Secret, y.Secret, "secret")

		// The index loaded from the checkpoint holds what the replayed one
		// does. So does the index that took every record twice in a row:
		// an event sets the state it names instead of stepping from the
		// one before (only an event about a message not held, as a second
		// ack is, counts as one more orphan). A copy forward restates a
		// message by its events, and a replay of a log holding a message's
		// events and later their copies depends on that.
		others := []struct {
			what string
			x    *index.Index
		}{{"the index loaded from the checkpoint", y}, {"the index that took every record twice", twice}}
		names := x.Queues()
		slices.Sort(names)
		for _, o := range others {
			got := o.x.Queues()
			slices.Sort(got)
			require.Equal(t, names, got, "%s: queues", o.what)
			require.Equal(t, x.PeekNextSeq(), o.x.PeekNextSeq(), "%s: next sequence", o.what)
			require.Equal(t, x.SegmentUses(), o.x.SegmentUses(), "%s: segment uses", o.what)
			require.Equal(t, x.LiveChunks(), o.x.LiveChunks(), "%s: live table chunks", o.what)
			for _, n := range names {
				require.Equal(t, x.Queue(n).LastEvicts(), o.x.Queue(n).LastEvicts(),
					"%s: queue %s: the latest clock reading, before which no dedup key is evicted", o.what, n)
			}
		}
		for _, now := range []int64{math.MinInt64, 0, seedClock.UnixNano() + int64(15*time.Second), math.MaxInt64} {
			for _, n := range names {
				want := x.Queue(n).Dump(now)
				for _, o := range others {
					require.Equal(t, want, o.x.Queue(n).Dump(now), "%s: queue %s at %d", o.what, n, now)
				}
			}
		}
		require.NoError(t, y.Damaged())
		if shared {
			return // see queueOf: handing out may find such an index damaged
		}

		// What a dump shows is not all a queue keeps: each goes on to hand
		// out the same messages in the same order, a message published
		// after the load included. That one is enqueued at instant 0,
		// before what the seeds publish (a clock set back), so it is
		// handed out before the messages enqueued later, wherever they are
		// kept.
		want := receiveAll(t, x, names, off)
		for _, o := range others {
			require.Equal(t, want, receiveAll(t, o.x, names, off), "%s hands out messages otherwise than the replayed one", o.what)
		}
		for _, ix := range []*index.Index{x, y, twice} {
			require.NoError(t, ix.Damaged(), "damage found while handing out the messages")
		}
	})
}

// receiveAll publishes a message enqueued at instant 0 to each queue of x
// (names, in order), then leases every receivable message, one at a time,
// as Receive would, and lists them in the order handed out. Its events are
// at positions from off on in segment 1.
func receiveAll(t *testing.T, x *index.Index, names []string, off int) []string {
	t.Helper()
	now := seedClock.UnixNano() + int64(15*time.Second)
	var out []string
	apply := func(e index.Event) {
		t.Helper()
		require.NoError(t, x.Apply(wal.MakePosition(1, off), &e))
		off += 64
	}
	for _, n := range names {
		q := x.Queue(n)
		apply(index.Event{Kind: index.KindPublish, Queue: q.ID, Seq: x.PeekNextSeq(), Time: 0, Payload: []byte("late")})
		for i := 0; ; i++ {
			require.LessOrEqual(t, i, replayMaxRecords, "queue %s hands out more messages than were published", n)
			q.Promote(now)
			m := q.NextReady()
			if m == nil {
				break
			}
			out = append(out, fmt.Sprintf("%s %d enqueued %d, delivery %d", n, m.Seq, m.EnqueuedAt, m.Deliveries+1))
			apply(index.Event{Kind: index.KindLease, Queue: q.ID, Seq: m.Seq, Deliveries: m.Deliveries + 1, Time: now + int64(time.Hour), Nonce: 1})
		}
	}
	return out
}

// requireUsesMatch checks what x counts per log segment and per table
// chunk against the messages (dead letters included) and dedup keys its
// queues hold, every one published in segment 1. Reclamation removes a
// segment, and a checkpoint drops a table file, on these counts: a count
// too high keeps them for ever, one too low loses messages.
func requireUsesMatch(t *testing.T, x *index.Index) {
	t.Helper()
	var msgs, keys int
	var bytes int64
	var seqs []uint64
	chunks := map[uint64]bool{}
	for _, n := range x.Queues() {
		q := x.Queue(n)
		held, _ := q.Pinning(1, 0, math.MaxUint64)
		for _, m := range held {
			msgs++
			bytes += int64(m.Size)
			seqs = append(seqs, m.Seq)
			chunks[index.ChunkOf(m.Seq)] = true
		}
		keys += q.SeenCount()
	}
	uses := x.SegmentUses()
	u, ok := uses[1]
	require.Equal(t, msgs > 0 || keys > 0, ok, "segment 1 listed as used: %v, with %d messages and %d keys held", ok, msgs, keys)
	for s := range uses {
		require.Equal(t, uint32(1), s, "segment %d counted as used; the replay wrote only segment 1", s)
	}
	require.Equal(t, fmt.Sprintf("%d messages, %d bytes, %d keys", msgs, bytes, keys), fmt.Sprintf("%d messages, %d bytes, %d keys", u.Messages, u.Bytes, u.Keys),
		"what segment 1's use counts (actual) is not what the queues hold there (expected)")
	for _, seq := range seqs {
		require.True(t, seq >= u.MinSeq && seq <= u.MaxSeq, "message %d held in segment 1 outside the bounds its use records, [%d, %d]", seq, u.MinSeq, u.MaxSeq)
	}
	require.Equal(t, slices.Sorted(maps.Keys(chunks)), x.LiveChunks(), "the table chunks counted live are not those of the messages held")
}
