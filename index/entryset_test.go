package index

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// The entry set agrees with a map at every step of random puts (streams
// of consecutive sequences, scattered ones, replacements), and gives its
// entries back in order, in runs that never cross a gap or a chunk.
func TestEntrySetAgreesWithAMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		s, model := newEntrySet(), map[uint64]Entry{}
		next := uint64(ChunkEntries - 300 + rng.IntN(200)) // streams cross a chunk
		for step := range 3000 {
			var seq uint64
			switch rng.IntN(10) {
			case 0, 1:
				seq = uint64(rng.IntN(4 * ChunkEntries)) // scattered
			case 2:
				if len(model) > 0 {
					keys := slices.Collect(func(yield func(uint64) bool) {
						for k := range model {
							if !yield(k) {
								return
							}
						}
					})
					seq = keys[rng.IntN(len(keys))] // replaced
				}
			default:
				seq = next                      // the stream
				next += 1 + uint64(rng.IntN(2)) // now and then a gap
			}
			e := Entry{Seq: seq, Pos: wal.Position(rng.Uint64()), EnqueuedAt: int64(step), Queue: uint32(rng.IntN(4)), Stream: rng.IntN(2) == 0, Size: uint32(rng.IntN(5000))}
			s.put(e)
			model[seq] = e
			probe := uint64(rng.IntN(4 * ChunkEntries))
			got, ok := s.get(probe)
			want, wantOK := model[probe]
			require.Equal(t, wantOK, ok, "seed %d step %d: get(%d)", seed, step, probe)
			require.Equal(t, want, got)
			got, ok = s.get(seq)
			require.True(t, ok)
			require.Equal(t, e, got)
			require.Equal(t, len(model), s.len())
		}
		var all []Entry
		prevLen := 0
		require.NoError(t, s.runs(func(run []Entry) error {
			require.NotEmpty(t, run)
			require.LessOrEqual(t, len(run), maxRun)
			for i := 1; i < len(run); i++ {
				require.Equal(t, run[i-1].Seq+1, run[i].Seq, "a run is consecutive")
				require.Equal(t, ChunkOf(run[0].Seq), ChunkOf(run[i].Seq), "a run is in one chunk")
			}
			if len(all) > 0 {
				last := all[len(all)-1].Seq
				require.Less(t, last, run[0].Seq, "runs come in order")
				require.True(t, run[0].Seq != last+1 || ChunkOf(run[0].Seq) != ChunkOf(last) || prevLen == maxRun, "runs are as long as they can be")
			}
			prevLen = len(run)
			all = append(all, run...)
			return nil
		}))
		require.Len(t, all, len(model))
		for _, e := range all {
			require.Equal(t, model[e.Seq], e)
		}
	}
}

func TestEntrySetPutAllKeepsItsOwn(t *testing.T) {
	older, newer := newEntrySet(), newEntrySet()
	for seq := uint64(10); seq < 200; seq++ {
		older.put(Entry{Seq: seq, Size: 1})
	}
	for seq := uint64(150); seq < 300; seq++ {
		newer.put(Entry{Seq: seq, Size: 2})
	}
	newer.putAll(older)
	require.Equal(t, 290, newer.len())
	for seq := uint64(10); seq < 300; seq++ {
		e, ok := newer.get(seq)
		require.True(t, ok, seq)
		want := uint32(1)
		if seq >= 150 {
			want = 2
		}
		require.Equal(t, want, e.Size, "seq %d: the newer entry wins", seq)
	}
}

func TestEntrySetRunsAreBoundedAndAllocateOnce(t *testing.T) {
	s := newEntrySet()
	const n = 2*maxRun + 100
	for seq := uint64(1); seq <= n; seq++ {
		s.put(Entry{Seq: seq})
	}
	var lens []int
	next := uint64(1)
	require.NoError(t, s.runs(func(run []Entry) error {
		lens = append(lens, len(run))
		for _, e := range run {
			require.Equal(t, next, e.Seq)
			next++
		}
		return nil
	}))
	require.Equal(t, []int{maxRun, maxRun, 100}, lens)
	// The sorted page keys and one run, however many entries: a slice
	// grown to hold them all allocated at each doubling.
	allocs := testing.AllocsPerRun(5, func() {
		_ = s.runs(func([]Entry) error { return nil })
	})
	require.LessOrEqual(t, allocs, 3.0)
}

func TestEntrySetRunsStopAtAnError(t *testing.T) {
	s := newEntrySet()
	for _, seq := range []uint64{1, 2, 5, 6, 9} {
		s.put(Entry{Seq: seq})
	}
	boom := errors.New("boom")
	calls := 0
	err := s.runs(func([]Entry) error { calls++; return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, calls)
	var nilSet *entrySet
	_, ok := nilSet.get(1)
	require.False(t, ok)
	require.Zero(t, nilSet.len())
}

// A flush that fails keeps what it did not write: those entries stay
// readable, the next Detach puts them behind the entries Put since, and
// the next Flush writes them all.
func TestFailedFlushKeepsItsEntriesBehindNewerOnes(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	tbl, err := OpenTable(ffs, t.TempDir(), nil)
	require.NoError(t, err)
	defer tbl.Close()
	entry := func(seq uint64, size uint32) Entry {
		return Entry{Seq: seq, Pos: wal.Position(seq<<8 | uint64(size)), EnqueuedAt: int64(seq), Queue: 1, Stream: true, Size: size}
	}
	// Two chunks, so that the flush fails after writing part of them.
	for seq := uint64(1); seq < 200; seq++ {
		tbl.Put(entry(seq, 1))
		tbl.Put(entry(ChunkEntries+seq, 1))
	}
	tbl.Detach()
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: chunkName(1)})
	_, err = tbl.Flush(true)
	require.Error(t, err, "the write of the second chunk fails")
	ffs.Clear()

	for seq := uint64(100); seq < 300; seq++ {
		tbl.Put(entry(seq, 2))
		tbl.Put(entry(ChunkEntries+seq, 2))
	}
	check := func(when string) {
		for _, base := range []uint64{0, ChunkEntries} {
			for seq := uint64(1); seq < 300; seq++ {
				want := uint32(1)
				if seq >= 100 {
					want = 2
				}
				e, ok, err := tbl.Get(base + seq)
				require.NoError(t, err)
				require.True(t, ok, "%s: entry %d", when, base+seq)
				require.Equal(t, entry(base+seq, want), e, "%s: entry %d", when, base+seq)
			}
		}
	}
	check("before the retry")
	tbl.Detach()
	_, err = tbl.Flush(true)
	require.NoError(t, err)
	require.Zero(t, tbl.Unflushed())
	check("from the files")
}
