package index

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// While the checkpointer's Flushes write entries out and create and map new
// chunk files, readers (Get, NextStream) on
// other goroutines always find every entry put, in memory or in the
// files, with its fields, and never one failing its checksum: the
// mappings they read are never unmapped or written under them. Run it
// with -race.
func TestReadersSeeEveryEntryWhileTheTableGrows(t *testing.T) {
	tbl, err := OpenTable(vfs.Default, t.TempDir(), nil)
	require.NoError(t, err)
	defer tbl.Close()
	entry := func(seq uint64) Entry {
		return Entry{Seq: seq, Pos: wal.MakePosition(1, int(seq)), EnqueuedAt: int64(seq), Queue: 1, Stream: true, Size: uint32(seq % 1000)}
	}
	const step, total = 20_000, 3*ChunkEntries + 5_000
	var high atomic.Uint64 // readers ask for sequences in [1, high)
	high.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				lo, hi := uint64(1), high.Load()
				if hi <= lo {
					continue
				}
				seq := lo + rng.Uint64N(hi-lo)
				e, ok, err := tbl.Get(seq)
				if err != nil || !ok || e != entry(seq) {
					bad.Store(fmt.Sprintf("Get(%d) = %+v, %v, %v", seq, e, ok, err))
					return
				}
				next, ok, err := tbl.NextStream(1, seq, hi-1)
				if err != nil || !ok || next != seq {
					bad.Store(fmt.Sprintf("NextStream(1, %d, %d) = %d, %v, %v", seq, hi-1, next, ok, err))
					return
				}
			}
		}()
	}
	for seq := uint64(1); seq < total; {
		end := min(seq+step, total)
		for s := seq; s < end; s++ {
			tbl.Put(entry(s))
		}
		high.Store(end)
		tbl.Detach()
		_, err := tbl.Flush(true)
		require.NoError(t, err)
		seq = end
	}
	close(stop)
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	require.Equal(t, []uint64{0, 1, 2, 3}, tbl.Chunks())
}
