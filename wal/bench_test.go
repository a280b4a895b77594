package wal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures Append of one record under SyncAlways, with
// real fdatasyncs in a temporary directory, for 1, 16 and 64 concurrent
// appenders (appenders=N) of 1 KiB records (size=N), on a log that only
// grows (segments=new: every rotation takes a segment written full of
// zeros in the background) and on one whose old segments are retired as
// it goes (segments=reused: a goroutine removes every segment but the
// active one every 2 ms, as a reader that keeps up would, and the log is
// filled untimed until its rotations reuse the retired files). b.N is the
// total number of appends, shared by the appenders. Beside ns/op it
// reports records/s and records/commit (records per fdatasync, the
// group-commit factor), so that benchstat can compare two commits:
//
//	go test ./wal -run XXX -bench Append -count 10 > new.txt
//	benchstat old.txt new.txt
//
// Every Append waits for an fdatasync: on a shared machine the figures
// move with the neighbours' use of the disk, so compare runs made side by
// side (-count, interleaved), and prefer records/commit, which moves less.
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 16, 64} {
		for _, size := range []int{1 << 10} {
			for _, reuse := range []bool{false, true} {
				segments := map[bool]string{false: "new", true: "reused"}[reuse]
				b.Run(fmt.Sprintf("appenders=%d/size=%d/segments=%s", appenders, size, segments), func(b *testing.B) {
					benchmarkAppend(b, appenders, size, reuse)
				})
			}
		}
	}
}

// trimBehind removes, every 2 ms until stop is closed, every segment of l
// but the active one, and reports the first error of RemoveBelow on errc.
func trimBehind(l *Log, stop <-chan struct{}, errc chan<- error) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			errc <- nil
			return
		case <-t.C:
		}
		if end := l.End().Segment(); end > 1 {
			if _, err := l.RemoveBelow(MakePosition(end, 0)); err != nil {
				errc <- err
				return
			}
		}
	}
}

func benchmarkAppend(b *testing.B, appenders, size int, reuse bool) {
	l, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte(i)
	}
	if reuse {
		stop, errc := make(chan struct{}), make(chan error, 1)
		go trimBehind(l, stop, errc)
		defer func() {
			close(stop)
			if err := <-errc; err != nil {
				b.Error(err)
			}
		}()
		batch := make([][]byte, (1<<20)/(size+64))
		for i := range batch {
			batch[i] = rec
		}
		for l.Stats().RecycledSegments < 2 {
			if _, err := l.Append(batch...); err != nil {
				b.Fatal(err)
			}
		}
	}
	before := l.Stats()
	var left atomic.Int64
	left.Store(int64(b.N))
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range appenders {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, err := l.Append(rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after := l.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	if syncs := after.Syncs - before.Syncs; syncs > 0 {
		b.ReportMetric(float64(after.Records-before.Records)/float64(syncs), "records/commit")
	}
}
