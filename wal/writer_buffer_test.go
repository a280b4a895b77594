package wal

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheWritersBufferGivesBackTheRoomOfALargeBatch: the writer encodes
// each batch in one buffer, which grows to the batch. Once a batch of a
// quarter of its size or less is written, the room a large one took is
// given back, not held until Close (a copy forward writes up to a
// segment's worth in one batch: a store kept that much on the heap after
// it).
func TestTheWritersBufferGivesBackTheRoomOfALargeBatch(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 16 << 20, Sync: SyncNever})
	defer l.Close()
	_, err := l.Append([]byte("small"))
	require.NoError(t, err)
	base := heapAlloc()

	const size = 8 << 20
	func() {
		recs := make([][]byte, size/(64<<10))
		for i := range recs {
			recs[i] = make([]byte, 64<<10)
		}
		_, err := l.Append(recs...)
		require.NoError(t, err)
	}()
	_, err = l.Append([]byte("small again"))
	require.NoError(t, err)
	left := heapAlloc() - base
	t.Logf("after a batch of %d bytes and a small one: %d bytes more on the heap than before", size, left)
	require.Less(t, left, int64(size/8), "the writer holds the room of a batch of %d bytes", size)
}

func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
