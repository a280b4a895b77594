package wal

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// A View's callback holds its record, which aliases the segment's mapping,
// for as long as it runs: RemoveBelow and Close, on other goroutines, wait
// for it before they unmap the segment, however many readers come and go
// and however they interleave with the closing bit. Each callback reads its
// record again after yielding (an unmapped page would end the process;
// under -race an unmap not ordered after the read is reported), and a
// nested Read from inside it is either the record or refused, never
// something else. Run it with -race.
func TestAViewsRecordStaysMappedWhileSegmentsAreRemovedAndTheLogCloses(t *testing.T) {
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 1 << 13})
		var es []entry
		for i := range 60 {
			rec := bytes.Repeat([]byte{byte('a' + (round+i)%26)}, 200+i)
			pos, err := l.Append(rec)
			require.NoError(t, err)
			es = append(es, entry{pos[0], rec})
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var viewed, refused atomic.Int64
		var bad atomic.Value
		for g := range 8 {
			wg.Go(func() {
				for i := g; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					e := es[i%len(es)]
					err := l.View(e.pos, func(rec []byte) error {
						runtime.Gosched()
						if !bytes.Equal(rec, e.rec) {
							bad.CompareAndSwap(nil, "a View's record changed while its callback ran")
						}
						if again, err := l.Read(e.pos); err == nil && !bytes.Equal(again, e.rec) {
							bad.CompareAndSwap(nil, "a Read inside a View's callback read another record")
						}
						runtime.Gosched()
						if !bytes.Equal(rec, e.rec) {
							bad.CompareAndSwap(nil, "a View's record changed while its callback ran")
						}
						return nil
					})
					switch {
					case err == nil:
						viewed.Add(1)
					case errors.Is(err, ErrNotFound) || errors.Is(err, ErrClosed):
						refused.Add(1)
					default:
						bad.CompareAndSwap(nil, "View: "+err.Error())
					}
				}
			})
		}
		for viewed.Load() < 50 { // the readers are under way
			runtime.Gosched()
		}
		for _, e := range es[len(es)/3 : 2*len(es)/3] {
			_, err := l.RemoveBelow(e.pos)
			require.NoError(t, err)
		}
		require.NoError(t, l.Close())
		close(stop)
		wg.Wait()
		if b := bad.Load(); b != nil {
			t.Fatal(b)
		}
		require.Positive(t, viewed.Load())
	}
}
