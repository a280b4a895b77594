package fuzz

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// replayMaxSeq bounds the sequence numbers an input's events may name, so
// that an input's messages share table chunks and pages, where the
// interesting cases are.
const replayMaxSeq = 1 << 17

// replayMaxRecords bounds the records read from one input.
const replayMaxRecords = 500

// What FuzzReplayCheckpoint does before a record, as the byte of its plan
// at the record's index says: the steps set, in this order.
const (
	// planTick moves the clock on by replayTicks[b>>4] and promotes every
	// queue to it, as a running store does between events: delays end,
	// leases lapse, last deliveries' leases lapse into the exhausted list.
	planTick byte = 1 << 0
	// planCheckpoint checkpoints the index as the store does (snapshot,
	// table flush, checkpoint file, then the removal of the table files
	// that neither a live message nor a later sequence needs), after
	// checking the checkpoint before it (see requireLoadsAsReplayed).
	planCheckpoint byte = 1 << 1
	// planRotate seals the log segment and starts the next with the
	// record.
	planRotate byte = 1 << 2
)

// replayTicks are the steps of the clock a plan's byte names (its high
// four bits): around the delays, lease times and instants of the seeds.
var replayTicks = [16]time.Duration{0, 1, time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second,
	5 * time.Second, 9 * time.Second, 10 * time.Second, 11 * time.Second, 20 * time.Second, 30 * time.Second,
	time.Minute, 100 * time.Second, time.Hour, 24 * time.Hour}

// replayMaxCheckpoints bounds the checkpoints taken before the last
// record of one input: each is loaded back and checked, the dearest step
// of an input.
const replayMaxCheckpoints = 4

// replayMaxSegments bounds the log segments of one input: the use counts
// are checked segment by segment.
const replayMaxSegments = 8

// tick is the plan byte that moves the clock on by d, one of replayTicks,
// and promotes every queue.
func tick(d time.Duration) byte {
	i := slices.Index(replayTicks[:], d)
	if i < 0 {
		panic(fmt.Sprintf("tick: %v is not one of replayTicks", d))
	}
	return planTick | byte(i)<<4
}

// replayRecord is a record the index took, at its position in the log.
type replayRecord struct {
	pos wal.Position
	rec []byte
}

// replayCheckpoint is a checkpoint taken in the middle of an input: its
// log position, and how many of the records taken it holds.
type replayCheckpoint struct {
	pos wal.Position
	n   int
}

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

// replaySeed is one input of FuzzReplayCheckpoint.
type replaySeed struct {
	records []index.Event
	// plan maps a record's index to what is done before it (see
	// planTick).
	plan map[int]byte
}

// input is the seed as the target's arguments.
func (s replaySeed) input() (data, plan []byte) {
	if len(s.plan) > 0 {
		plan = make([]byte, slices.Max(slices.Collect(maps.Keys(s.plan)))+1)
		for i, b := range s.plan {
			plan[i] = b
		}
	}
	return joinRecords(s.records...), plan
}

func replaySeeds() []replaySeed {
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
	lease := func(q uint32, seq uint64, deliveries uint32, expires int64) index.Event {
		return index.Event{Kind: index.KindLease, Queue: q, Seq: seq, Deliveries: deliveries, Time: expires, Nonce: seq*10 + uint64(deliveries)}
	}
	ack := func(q uint32, seq uint64) index.Event { return index.Event{Kind: index.KindAck, Queue: q, Seq: seq} }
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
		index.Event{Kind: index.KindMark, Seq: 20}, index.Event{Kind: index.KindSalvaged},
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

	// Leases that lapse while the store runs, with deliveries left (jobs
	// allows 2) and on the last one, and a retry delay that ends, around
	// checkpoints: a checkpoint holds no lapse, and the records after it
	// act on the messages the lapses moved (a new lease, a dead letter,
	// an ack).
	lapses := append(slices.Clone(decl),
		pub(1, 1, now, "a"), pub(1, 2, now+sec, ""), pub(1, 3, now+2*sec, "c"), pub(1, 4, now+3*sec, ""),
		lease(1, 1, 1, now+10*sec), lease(1, 2, 2, now+10*sec),
		index.Event{Kind: index.KindNack, Queue: 1, Seq: 3, Deliveries: 1, Time: now + 5*sec},
		lease(1, 4, 1, now+30*sec), // 10: lapses only at the second tick
		lease(1, 1, 2, now+40*sec),
		index.Event{Kind: index.KindDeadLetter, Queue: 1, Seq: 2, Deliveries: 2, Time: now + 11*sec, Reason: "LEASE_EXPIRED"},
		ack(1, 3),
		lease(1, 4, 2, now+31*sec),
		pub(1, 5, now+32*sec, "a"), ack(1, 1),
		index.Event{Kind: index.KindEvict, Queue: 1, Time: now + 100*sec, Window: 60 * sec})
	lapsesPlan := map[int]byte{
		10: tick(11*time.Second) | planCheckpoint,
		11: planRotate,
		13: tick(20*time.Second) | planCheckpoint,
		14: planRotate,
		15: tick(time.Second) | planCheckpoint,
		17: tick(100*time.Second) | planRotate | planCheckpoint,
	}
	// A table chunk whose messages are all gone, and a later sequence
	// taken: the checkpoint drops its file. Then a segment of its own for
	// each step, keys pinning old segments after their messages went,
	// and a copy forward of the last live message into the newest.
	dropped := append(slices.Clone(decl),
		pub(1, 1, now, "k1"), pub(2, 2, now, ""), pub(1, edge+5, now+sec, "k2"),
		ack(1, 1), ack(2, 2), // 6, 7: chunk 0 holds nothing live
		pub(2, edge+6, now+2*sec, ""),
		lease(1, edge+5, 1, now+10*sec),
		index.Event{Kind: index.KindNack, Queue: 1, Seq: edge + 5, Deliveries: 1, Time: now + 15*sec, Code: 3, Reason: "busy", Cause: "try later"},
		pub(1, edge+5, now+sec, "k2"), // 11: copied forward into segment 3, its state beside it
		index.Event{Kind: index.KindNack, Queue: 1, Seq: edge + 5, Deliveries: 1, Time: now + 15*sec, Code: 3, Reason: "busy", Cause: "try later"},
		ack(2, edge+6),
		index.Event{Kind: index.KindEvict, Queue: 1, Time: now + 70*sec, Window: 60 * sec})
	droppedPlan := map[int]byte{
		6:  planRotate,
		8:  planCheckpoint,
		9:  planRotate | tick(time.Second),
		11: planCheckpoint | planRotate | tick(5*time.Second),
		13: tick(10 * time.Second),
		14: planCheckpoint | tick(time.Minute),
	}
	// A backlog published in order (the stream, in the table), taken from
	// the stream at its head and ahead of it between checkpoints.
	stream := slices.Clone(decl)
	for seq := uint64(1); seq <= 12; seq++ {
		stream = append(stream, pub(uint32(1+seq%2), seq, now+int64(seq)*sec, ""))
	}
	stream = append(stream, // 15
		lease(2, 2, 1, now+5*sec), lease(1, 5, 1, now+6*sec), ack(2, 2), ack(1, 1),
		lease(1, 3, 1, now+50*sec), ack(2, 8), ack(1, 5), pub(1, 13, now+13*sec, ""), ack(1, 7))
	streamPlan := map[int]byte{
		9:  planCheckpoint,
		13: planRotate,
		16: planCheckpoint | tick(5*time.Second),
		18: tick(2 * time.Second),
		19: planCheckpoint | planRotate,
		22: planCheckpoint | tick(time.Hour),
	}
	// The lapses of every with the clock, checkpoints and segments moving
	// through it.
	everyPlan := map[int]byte{
		5:  planRotate,
		9:  planCheckpoint,
		12: tick(10 * time.Second),
		13: tick(3*time.Second) | planCheckpoint,
		15: tick(9 * time.Second),
		16: planRotate,
		19: planRotate | planCheckpoint,
		20: planRotate | tick(time.Minute),
	}
	// A lease seen lapsed with deliveries left, then a redeclaration
	// that makes it the last: the running index keeps it receivable (the
	// store dead-letters it, see Queue.Spent), a replay judges it by the
	// new policy.
	lowered := jobs
	lowered.MaxDeliveries = 1
	redeclared := append(slices.Clone(decl),
		pub(1, 1, now, ""), lease(1, 1, 1, now+10*sec),
		index.Event{Kind: index.KindDeclare, Queue: 1, Name: "jobs", Policy: lowered},
		pub(1, 2, now+sec, ""))
	redeclaredPlan := map[int]byte{5: tick(11*time.Second) | planCheckpoint, 6: planRotate}

	// A last delivery's lease that lapses while the store runs, then
	// another given at an instant already past, seen lapsing at the next
	// tick: the running index lists them in the order it saw them, a
	// replay by expiry (see exhaustedAsSet).
	lapseOrder := append(slices.Clone(decl),
		pub(1, 1, now, ""), pub(1, 2, now+sec, ""), lease(1, 1, 2, now+40*sec),
		lease(1, 2, 2, now+31*sec), pub(1, 3, now+2*sec, ""))
	lapseOrderPlan := map[int]byte{6: tick(time.Minute) | planCheckpoint, 7: tick(time.Second)}

	var seeds []replaySeed
	for _, recs := range [][]index.Event{decl, every, orphans, settled, edges, nil} {
		seeds = append(seeds, replaySeed{records: recs})
	}
	return append(seeds,
		replaySeed{every, everyPlan}, replaySeed{lapses, lapsesPlan}, replaySeed{dropped, droppedPlan},
		replaySeed{stream, streamPlan}, replaySeed{redeclared, redeclaredPlan}, replaySeed{lapseOrder, lapseOrderPlan})
}

// FuzzReplayCheckpoint applies arbitrary records, as a replay of a log
// whose every frame verified would (so the checksum is no defence), to an
// index, as a running store does: the plan, a byte per record, spreads
// them over log segments, moves the clock on and promotes every queue
// between them, and takes checkpoints between them (see planTick). Apply
// must never panic and fail only with ErrBadEvent (Open then refuses the
// log as Corrupt), or, decoding a kind above the last one, ErrLaterKind
// (Open refuses it as a later build's); what the index counts per segment and table chunk must
// match the messages and keys it holds. Each checkpoint, loaded and given
// the records after it, and the one taken after the last record, loaded,
// must hold what a replay of every record into a fresh index holds,
// however the clock moved before it was taken: the same queues, dumps at
// several instants, latest clock readings, next sequence and queue
// number, orphan count, segment uses, live table chunks, and the order in
// which it then hands out its messages. A checkpoint that loads
// differently from the replay of the log it was taken of is state an open
// quietly changes. An index that took every record twice in a row must
// hold the same as well, and so must the running index from the latest
// clock reading on.
func FuzzReplayCheckpoint(f *testing.F) {
	for _, s := range replaySeeds() {
		data, plan := s.input()
		f.Add(data, plan)
	}
	f.Fuzz(func(t *testing.T, data, plan []byte) {
		dir := fastDir(t)
		x, err := index.Rebuild(vfs.Default, dir)
		require.NoError(t, err)
		defer func() { _ = x.Table.Close() }()
		// twice takes every record twice in a row (see below).
		twice := index.New()
		var taken []replayRecord
		seg, off := uint32(1), segment.HeaderSize
		sealed := map[uint32]int{}
		// now is the running store's clock; ticked says it promoted.
		now, ticked := seedClock.UnixNano(), false
		// redelivery says that a queue's MaxDeliveries changed after the
		// clock promoted: a lease the running index saw lapse stays where
		// it put it, receivable or exhausted (the store then dead-letters
		// what has no delivery left, see index.Queue.Spent), where a
		// replay judges it by the new policy. The running index's dumps
		// and hand-outs are not compared then.
		redelivery := false
		var last *replayCheckpoint
		checkpoints := 0
		// The log's writer gives each message a sequence of its own across
		// the store; a record that publishes a sequence another queue
		// already holds cannot come from it, and for such a log the use
		// counts are not checked (Apply need only refuse or survive it),
		// nor are table files dropped by them.
		queueOf := map[uint64]uint32{}
		shared := false
		for i, rec := range splitRecords(data) {
			var step byte
			if i < len(plan) {
				step = plan[i]
			}
			if step&planTick != 0 {
				now += int64(replayTicks[step>>4])
				for _, n := range x.Queues() {
					x.Queue(n).Promote(now)
				}
				ticked = true
			}
			if step&planCheckpoint != 0 && checkpoints < replayMaxCheckpoints {
				if last != nil {
					requireLoadsAsReplayed(t, dir, *last, taken, now)
				}
				last = &replayCheckpoint{pos: wal.MakePosition(seg, off), n: len(taken)}
				checkpoint(t, dir, x, last.pos, sealed, !shared)
				checkpoints++
			}
			if step&planRotate != 0 && seg < replayMaxSegments {
				sealed[seg] = off
				seg, off = seg+1, segment.HeaderSize
			}
			e, err := index.Decode(rec)
			if err != nil {
				// A kind above the last is a later build's; any other
				// failure is damage.
				if len(rec) > 0 && index.Kind(rec[0]) > index.LastKind {
					require.ErrorIs(t, err, index.ErrLaterKind)
				} else {
					require.ErrorIs(t, err, index.ErrBadEvent)
				}
				return // the replay stops here: Open refuses the log
			}
			if e.Seq >= replayMaxSeq {
				continue
			}
			pos := wal.MakePosition(seg, off)
			off += segment.Size(len(rec))
			if e.Kind == index.KindPublish {
				if q, ok := queueOf[e.Seq]; ok && q != e.Queue {
					shared = true
				}
				queueOf[e.Seq] = e.Queue
			}
			if q := x.QueueByID(e.Queue); ticked && e.Kind == index.KindDeclare && q != nil && q.Policy.MaxDeliveries != e.Policy.MaxDeliveries {
				redelivery = true
			}
			if err := x.Apply(pos, &e); err != nil {
				require.ErrorIs(t, err, index.ErrBadEvent)
				return
			}
			for range 2 {
				again, err := index.Decode(rec)
				require.NoError(t, err)
				require.NoError(t, twice.Apply(pos, &again), "a %s event applied once, refused applied twice", e.Kind)
			}
			taken = append(taken, replayRecord{pos, rec})
		}
		require.NoError(t, x.Damaged())
		if !shared {
			requireUsesMatch(t, x, seg)
		}
		if last != nil && last.n < len(taken) {
			requireLoadsAsReplayed(t, dir, *last, taken, now)
		}
		end := wal.MakePosition(seg, off)
		checkpoint(t, dir, x, end, sealed, !shared)
		cl, ok := index.ReadCheckpointLog(vfs.Default, dir)
		require.True(t, ok, "the checkpoint's log hints do not read")
		require.Equal(t, end, cl.Pos, "the checkpoint's log position")
		require.Equal(t, sealed, cl.Sealed, "the checkpoint's sealed segments")

		y, from, err := index.Load(vfs.Default, dir)
		if err != nil && errors.Is(err, index.ErrDamaged) {
			t.Fatalf("the checkpoint of a replayed index does not load: %v", err)
		}
		require.NoError(t, err)
		defer func() { _ = y.Table.Close() }()
		require.Equal(t, end, from)

		// The index loaded from the checkpoint holds what a replay of the
		// whole log does, whatever the running index it was taken of saw
		// of the clock. So does the index that took every record twice in
		// a row: an event sets the state it names instead of stepping from
		// the one before (only an event about a message not held, as a
		// second ack is, counts as one more orphan). A copy forward
		// restates a message by its events, and a replay of a log holding
		// a message's events and later their copies depends on that. The
		// running index holds the same from its clock's last reading on,
		// when the lapses it saw earlier are seen by the others too (its
		// exhausted messages taken as a set, see exhaustedAsSet), unless
		// a MaxDeliveries changed after one of them (see redelivery).
		r := replayed(t, taken)
		at := max(now, seedClock.UnixNano()+int64(15*time.Second))
		others := []replayOther{
			{what: "the index loaded from the checkpoint", x: y, orphans: true, from: math.MinInt64, lapseOrder: true},
			{what: "the index that took every record twice", x: twice, from: math.MinInt64, lapseOrder: true},
		}
		running := replayOther{what: "the running index", x: x, orphans: true, from: math.MinInt64, noDumps: redelivery}
		if ticked {
			running.from = now
		}
		others = append(others, running)
		requireSameIndex(t, r, others, replayInstants(now))
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
		names := slices.Sorted(slices.Values(r.Queues()))
		want := receiveAll(t, r, names, end, at)
		for _, o := range others {
			if !o.noDumps {
				require.Equal(t, want, receiveAll(t, o.x, names, end, at), "%s hands out messages otherwise than the replayed one", o.what)
			}
		}
		for _, ix := range []*index.Index{r, x, y, twice} {
			require.NoError(t, ix.Damaged(), "damage found while handing out the messages")
		}
	})
}

// checkpoint checkpoints x into dir as of pos, as the store does: the
// table files that no live message needs, and no sequence still to be
// handed out, are left out of it and removed (unless drop is false).
func checkpoint(t *testing.T, dir string, x *index.Index, pos wal.Position, sealed map[uint32]int, drop bool) {
	t.Helper()
	require.NoError(t, x.Damaged())
	var dropped []uint64
	if live, next := x.LiveChunks(), x.PeekNextSeq(); drop {
		for _, c := range x.Table.Chunks() {
			if !slices.Contains(live, c) && (c+1)*index.ChunkEntries <= next {
				dropped = append(dropped, c)
			}
		}
	}
	snap, err := x.Snapshot(pos, sealed)
	require.NoError(t, err)
	_, err = x.Table.Flush(true)
	require.NoError(t, err)
	var chunks []uint64
	for _, c := range x.Table.Chunks() {
		if !slices.Contains(dropped, c) {
			chunks = append(chunks, c)
		}
	}
	require.NoError(t, index.WriteCheckpoint(vfs.Default, dir, snap, chunks))
	for _, c := range dropped {
		require.NoError(t, x.Table.Remove(c))
	}
}

// requireLoadsAsReplayed loads dir's checkpoint, taken at ck, gives it the
// records taken after it, and requires it to hold what a replay of every
// record taken does, at every instant up to now and past it. The table
// files are still those of the checkpoint: the running index writes them
// only when it takes the next.
func requireLoadsAsReplayed(t *testing.T, dir string, ck replayCheckpoint, taken []replayRecord, now int64) {
	t.Helper()
	y, from, err := index.Load(vfs.Default, dir)
	require.NoError(t, err, "the checkpoint taken at %v does not load", ck.pos)
	defer func() { _ = y.Table.Close() }()
	require.Equal(t, ck.pos, from)
	for _, r := range taken[ck.n:] {
		require.NoError(t, y.ApplyRecord(r.pos, r.rec), "the index loaded from the checkpoint taken at %v refuses the record at %v", ck.pos, r.pos)
	}
	what := fmt.Sprintf("the index loaded from the checkpoint taken at %v, given the %d records after it", ck.pos, len(taken)-ck.n)
	requireSameIndex(t, replayed(t, taken), []replayOther{{what: what, x: y, orphans: true, from: math.MinInt64, lapseOrder: true}}, replayInstants(now))
	require.NoError(t, y.Damaged(), "%s: damage found", what)
}

// replayed is the index an open with no checkpoint rebuilds from taken.
func replayed(t *testing.T, taken []replayRecord) *index.Index {
	t.Helper()
	r := index.New()
	for _, rec := range taken {
		require.NoError(t, r.ApplyRecord(rec.pos, rec.rec), "the record at %v is refused on a second replay", rec.pos)
	}
	return r
}

// replayInstants are the instants at which requireSameIndex compares
// dumps, in order: before and after every instant the seeds use, and the
// running store's clock, now.
func replayInstants(now int64) []int64 {
	at := []int64{math.MinInt64, 0, seedClock.UnixNano() + int64(15*time.Second), now, math.MaxInt64}
	slices.Sort(at)
	return slices.Compact(at)
}

// replayOther is an index requireSameIndex compares with another: its
// orphan count too if orphans is set, its dumps at the instants from
// from on unless noDumps is set, and, if lapseOrder is not set, its
// exhausted messages as a set.
type replayOther struct {
	what       string
	x          *index.Index
	orphans    bool
	from       int64
	noDumps    bool
	lapseOrder bool
}

// exhaustedAsSet returns dump with its list of exhausted messages sorted.
// That list is in the order Promote saw the lapses: by expiry in one
// call, by call across several. A running store may see a lapse before a
// lease that lapsed earlier is applied (a lease given at an instant
// already past), which a replay, promoting once, sees first; the store
// dead-letters the whole list at once, each message failed at its own
// expiry, so the order changes nothing.
func exhaustedAsSet(dump string) string {
	lines := strings.Split(dump, "\n")
	for i, l := range lines {
		if seqs, ok := strings.CutPrefix(l, "  exhausted"); ok {
			f := strings.Fields(seqs)
			slices.SortFunc(f, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
			lines[i] = strings.Join(append([]string{"  exhausted"}, f...), " ")
		}
	}
	return strings.Join(lines, "\n")
}

// requireSameIndex requires each of others to hold what want does: the
// same queues, secret, next sequence and queue number, segment uses, live
// table chunks, latest clock readings, and dumps at each of instants (in
// order: a dump promotes). want and others are dumped in step.
func requireSameIndex(t *testing.T, want *index.Index, others []replayOther, instants []int64) {
	t.Helper()
	names := slices.Sorted(slices.Values(want.Queues()))
	for _, o := range others {
		require.Equal(t, names, slices.Sorted(slices.Values(o.x.Queues())), "%s: queues", o.what)
		require.Equal(t, want.Secret, o.x.Secret, "%s: secret", o.what)
		if o.orphans {
			require.Equal(t, want.Orphans, o.x.Orphans, "%s: orphans", o.what)
		}
		require.Equal(t, want.PeekNextSeq(), o.x.PeekNextSeq(), "%s: next sequence", o.what)
		wantID, wantOK := want.NextQueueID()
		id, ok := o.x.NextQueueID()
		require.Equal(t, fmt.Sprint(wantID, wantOK), fmt.Sprint(id, ok), "%s: next queue number", o.what)
		require.Equal(t, want.SegmentUses(), o.x.SegmentUses(), "%s: segment uses", o.what)
		require.Equal(t, want.LiveChunks(), o.x.LiveChunks(), "%s: live table chunks", o.what)
		for _, n := range names {
			require.Equal(t, want.Queue(n).LastEvicts(), o.x.Queue(n).LastEvicts(),
				"%s: queue %s: the latest clock reading, before which no dedup key is evicted", o.what, n)
		}
	}
	for _, at := range instants {
		for _, n := range names {
			dump := want.Queue(n).Dump(at)
			for _, o := range others {
				if o.noDumps || at < o.from {
					continue
				}
				got, want := o.x.Queue(n).Dump(at), dump
				if !o.lapseOrder {
					got, want = exhaustedAsSet(got), exhaustedAsSet(want)
				}
				require.Equal(t, want, got, "%s: queue %s at %d", o.what, n, at)
			}
		}
	}
}

// receiveAll publishes a message enqueued at instant 0 to each queue of x
// (names, in order), then, at now, leases every receivable message, one
// at a time, as Receive would, and lists them in the order handed out.
// Its events are at positions from pos on, in pos's segment.
func receiveAll(t *testing.T, x *index.Index, names []string, pos wal.Position, now int64) []string {
	t.Helper()
	off := pos.Offset()
	var out []string
	apply := func(e index.Event) {
		t.Helper()
		require.NoError(t, x.Apply(wal.MakePosition(pos.Segment(), off), &e))
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

// requireUsesMatch checks what x counts per log segment (1 to segs) and
// per table chunk against the messages (dead letters included) and dedup
// keys its queues hold: the messages, their publish records' bytes and
// their state events' bytes of each segment, and the keys over all of
// them. Reclamation removes a segment, and a checkpoint drops a table
// file, on these counts: a count too high keeps them for ever, one too
// low loses messages.
func requireUsesMatch(t *testing.T, x *index.Index, segs uint32) {
	t.Helper()
	uses := x.SegmentUses()
	for s := range uses {
		require.True(t, s >= 1 && s <= segs, "segment %d counted as used; the replay wrote segments 1 to %d", s, segs)
	}
	var keys, counted int
	chunks := map[uint64]bool{}
	for _, n := range x.Queues() {
		keys += x.Queue(n).SeenCount()
	}
	for s := uint32(1); s <= segs; s++ {
		var msgs, goneKeys int
		var bytes, state int64
		var seqs []uint64
		for _, n := range x.Queues() {
			q := x.Queue(n)
			held, gone := q.Pinning(s, 1, math.MaxUint64)
			for _, m := range held {
				msgs++
				bytes += int64(m.Size)
				if e, ok := index.StateEvent(q.ID, m); ok {
					state += int64(segment.Size(len(e.Append(nil))))
				}
				seqs = append(seqs, m.Seq)
				chunks[index.ChunkOf(m.Seq)] = true
			}
			goneKeys += len(gone)
		}
		u, ok := uses[s]
		require.True(t, ok || msgs == 0 && goneKeys == 0, "segment %d is not listed as used, with %d messages and %d keys of messages gone held there", s, msgs, goneKeys)
		if !ok {
			continue
		}
		require.True(t, u.Messages > 0 || u.Keys > 0, "segment %d is listed as used, with no message or key: %+v", s, u)
		require.Equal(t, fmt.Sprintf("%d messages, %d bytes, %d state bytes", msgs, bytes, state),
			fmt.Sprintf("%d messages, %d bytes, %d state bytes", u.Messages, u.Bytes, u.StateBytes),
			"what segment %d's use counts (actual) is not what the queues hold there (expected)", s)
		require.GreaterOrEqual(t, u.Keys, goneKeys, "segment %d counts fewer keys than those of messages gone it holds", s)
		for _, seq := range seqs {
			require.True(t, seq >= u.MinSeq && seq <= u.MaxSeq, "message %d held in segment %d outside the bounds its use records, [%d, %d]", seq, s, u.MinSeq, u.MaxSeq)
		}
		counted += u.Keys
	}
	require.Equal(t, keys, counted, "the dedup keys the segments count (actual) are not those the queues remember (expected)")
	require.Equal(t, slices.Sorted(maps.Keys(chunks)), x.LiveChunks(), "the table chunks counted live are not those of the messages held")
}
