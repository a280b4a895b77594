package index

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// NextStream finds what a walk through Get finds: the first entry of the
// queue's stream in a range, wherever the entries are (chunk files, a
// flush under way, the overlay), whatever other queues' entries and
// non-stream entries lie between, and over ranges spanning far more chunk
// numbers than there are chunks.
func TestNextStreamFindsWhatAWalkThroughGetFinds(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		tbl, err := OpenTable(vfs.Default, t.TempDir(), nil)
		require.NoError(t, err)
		span := uint64(3*ChunkEntries + rng.IntN(ChunkEntries))
		var seqs []uint64
		put := func(n int) {
			for range n {
				seq := 1 + uint64(rng.Int64N(int64(span)))
				if rng.IntN(8) == 0 {
					seq += 1 << 30 // a chunk far away
				}
				// A message's queue and stream bit never change; a later
				// entry of it moves only its position.
				h := seq * 0x9e3779b97f4a7c15 >> 59
				tbl.Put(Entry{Seq: seq, Pos: wal.Position(seq<<8 | uint64(rng.IntN(200))), EnqueuedAt: int64(seq), Queue: uint32(1 + h%3), Stream: h%4 != 0, Size: 1})
				seqs = append(seqs, seq)
			}
		}
		put(300) // to the files
		tbl.Detach()
		_, err = tbl.Flush(false)
		require.NoError(t, err)
		put(200) // being flushed
		tbl.Detach()
		put(200) // the overlay
		last := span + 1<<30 + 10
		walk := func(q uint32, from, to uint64) (uint64, bool) {
			for seq := from; seq <= to; seq++ {
				if seq > span && seq < 1<<30 {
					seq = 1 << 30 // nothing between: the walk would only take long
				}
				e, ok, err := tbl.Get(seq)
				require.NoError(t, err)
				if ok && e.Queue == q && e.Stream {
					return seq, true
				}
			}
			return 0, false
		}
		for range 300 {
			q := uint32(1 + rng.IntN(3))
			from := seqs[rng.IntN(len(seqs))] - uint64(rng.IntN(3))
			to := from + uint64(rng.IntN(2*ChunkEntries))
			if rng.IntN(4) == 0 {
				to = last
			}
			wantSeq, wantOK := walk(q, from, to)
			gotSeq, gotOK, err := tbl.NextStream(q, from, to)
			require.NoError(t, err)
			require.Equal(t, wantOK, gotOK, "seed %d: queue %d in [%d, %d]", seed, q, from, to)
			require.Equal(t, wantSeq, gotSeq, "seed %d: queue %d in [%d, %d]", seed, q, from, to)
		}
		require.NoError(t, tbl.Close())
	}
}

// NextStream checks every entry of the files it steps over: one bit
// flipped anywhere in an entry of another queue between two of the
// queue's stream messages (in its queue field, it may read as any queue's,
// or as the queue's own outside the stream) ends the search with
// ErrDamaged, naming the file and the entry's offset, rather than passing
// it unseen. A stream message of the queue in memory before the damage is
// still found first, and an entry in memory of the damaged sequence takes
// the files' one's place: that one is not judged.
func TestNextStreamStopsAtADamagedEntryItStepsOver(t *testing.T) {
	dir := t.TempDir()
	tbl, err := OpenTable(vfs.Default, dir, nil)
	require.NoError(t, err)
	defer tbl.Close()
	put := func(seq uint64, q uint32) Entry {
		e := Entry{Seq: seq, Pos: wal.MakePosition(1, int(seq*100)), EnqueuedAt: int64(seq), Queue: q, Stream: true, Size: 40}
		tbl.Put(e)
		return e
	}
	put(1, 1)
	for seq := uint64(2); seq < 10; seq++ {
		put(seq, 2)
	}
	put(10, 1)
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	path := filepath.Join(dir, chunkName(0))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	flip := func(off int64, bit uint) {
		var one [1]byte
		_, err := f.ReadAt(one[:], off)
		require.NoError(t, err)
		one[0] ^= 1 << bit
		_, err = f.WriteAt(one[:], off)
		require.NoError(t, err)
	}

	const damaged = 5
	for at := int64(0); at < EntrySize; at++ {
		for _, bit := range []uint{0, 7} {
			flip(damaged*EntrySize+at, bit)
			_, ok, err := tbl.NextStream(1, 2, 10)
			require.ErrorIs(t, err, ErrDamaged, "byte %d, bit %d", at, bit)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, fmt.Sprintf("message %d, at offset %d", damaged, damaged*EntrySize))
			require.False(t, ok)
			seq, ok, err := tbl.NextStream(1, damaged+1, 10)
			require.NoError(t, err, "past the damage")
			require.True(t, ok)
			require.Equal(t, uint64(10), seq)
			flip(damaged*EntrySize+at, bit)
		}
	}

	flip(damaged*EntrySize+16, 0) // queue 2 reads as queue 3
	put(11, 1)                    // in memory only
	seq, ok, err := tbl.NextStream(1, 11, 11)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(11), seq)
	tbl.Put(Entry{Seq: 4, Pos: wal.MakePosition(1, 7), EnqueuedAt: 4, Queue: 1, Stream: true, Size: 40})
	seq, ok, err = tbl.NextStream(1, 2, 10)
	require.NoError(t, err, "the stream message in memory comes before the damage")
	require.True(t, ok)
	require.Equal(t, uint64(4), seq)
	_, _, err = tbl.NextStream(1, 5, 10)
	require.ErrorIs(t, err, ErrDamaged)
	put(damaged, 2) // a moved position, say: in memory
	seq, ok, err = tbl.NextStream(1, 5, 10)
	require.NoError(t, err, "the files' entry is not the one that counts")
	require.True(t, ok)
	require.Equal(t, uint64(10), seq)
}

// BenchmarkNextStream: the step from one message of a quiet queue to its
// next over a million messages of a busy one, in the chunk files and in
// memory. A walk through Get took about 110 ns a message (110 ms a step).
// Beside the time it reports the CPU time the process spent per message
// stepped over, which moves less with the neighbours' use of a shared
// machine.
func BenchmarkNextStream(b *testing.B) {
	const gap = 1 << 20
	for _, where := range []string{"files", "overlay"} {
		b.Run("in="+where, func(b *testing.B) {
			tbl, err := OpenTable(vfs.Default, b.TempDir(), nil)
			require.NoError(b, err)
			defer tbl.Close()
			for seq := uint64(1); seq <= 2*gap; seq++ {
				q := uint32(2)
				if seq%gap == 0 {
					q = 1
				}
				tbl.Put(Entry{Seq: seq, Pos: wal.Position(seq << 8), EnqueuedAt: int64(seq), Queue: q, Stream: true, Size: 1})
			}
			if where == "files" {
				tbl.Detach()
				_, err := tbl.Flush(false)
				require.NoError(b, err)
			}
			cpu := processCPU(b)
			for b.Loop() {
				seq, ok, err := tbl.NextStream(1, 1, 2*gap)
				if err != nil || !ok || seq != gap {
					b.Fatalf("NextStream = %d, %v, %v; want %d", seq, ok, err, gap)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/gap, "ns/skipped")
			b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N)/gap, "cpu-ns/skipped")
		})
	}
}

// processCPU is the CPU time the process has used so far (user + system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A walk over a queue's stream (eachFresh, under Pinning and Dump) ends at
// a damaged entry, as its doc says, and marks the index damaged: an entry
// whose queue field still names the queue, damaged elsewhere, is one the
// table hands back unjudged (Get judges it), and the walk used to step
// over it and list the messages behind it as if nothing were wrong.
func TestAStreamWalkEndsAtADamagedEntry(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{MaxDeliveries: 2}}))
	for i := int64(1); i <= 6; i++ {
		require.NoError(t, x.Apply(wal.MakePosition(1, int(100*i)), pub(uint64(i), i, "")))
	}
	checkpointAt(t, x, dir, wal.MakePosition(1, 700))
	require.NoError(t, x.Table.Close())

	const damaged = 3
	path := filepath.Join(dir, chunkName(0))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	var one [1]byte
	off := int64(damaged*EntrySize + 8) // in the entry's fields, not its queue's
	_, err = f.ReadAt(one[:], off)
	require.NoError(t, err)
	one[0] ^= 1
	_, err = f.WriteAt(one[:], off)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	y, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer y.Table.Close()
	msgs, _ := y.Queue("q").Pinning(1, 1, 6)
	var seqs []uint64
	for _, m := range msgs {
		seqs = append(seqs, m.Seq)
	}
	require.Equal(t, []uint64{1, 2}, seqs, "the walk ends at the damaged entry %d", damaged)
	require.ErrorIs(t, y.Damaged(), ErrDamaged)
}
