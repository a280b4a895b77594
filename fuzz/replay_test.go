package fuzz

import (
	"encoding/binary"
	"errors"
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
	for len(b) > 0 && len(recs) < 500 {
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
	return [][]byte{joinRecords(decl...), joinRecords(every...), joinRecords(orphans...), nil}
}

// FuzzReplayCheckpoint applies arbitrary records, as a replay of a log
// whose every frame verified would (so the checksum is no defence), to a
// fresh index, then writes a checkpoint of it and loads that back. Apply
// must never panic and fail only with ErrBadEvent (Open then refuses the
// log as Corrupt); an index that took every record must survive its own
// checkpoint unchanged: the same queues, dumps at several instants,
// next sequence, orphan count, segment uses and live table chunks. A
// checkpoint that loads differently from the replay it was taken of is
// state an open quietly changes.
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
		off := 32
		var last wal.Position
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
			if err := x.Apply(last, &e); err != nil {
				require.ErrorIs(t, err, index.ErrBadEvent)
				return
			}
		}
		require.NoError(t, x.Damaged())
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
		require.Equal(t, x.PeekNextSeq(), y.PeekNextSeq(), "next sequence")
		require.Equal(t, x.Orphans, y.Orphans, "orphans")
		require.Equal(t, x.Secret, y.Secret, "secret")
		require.Equal(t, x.SegmentUses(), y.SegmentUses(), "segment uses")
		require.Equal(t, x.LiveChunks(), y.LiveChunks(), "live table chunks")
		names := x.Queues()
		slices.Sort(names)
		got := y.Queues()
		slices.Sort(got)
		require.Equal(t, names, got, "queues")
		for _, now := range []int64{math.MinInt64, 0, seedClock.UnixNano() + int64(15*time.Second), math.MaxInt64} {
			for _, n := range names {
				require.Equal(t, x.Queue(n).Dump(now), y.Queue(n).Dump(now), "queue %s at %d", n, now)
			}
		}
		require.NoError(t, y.Damaged())
	})
}
