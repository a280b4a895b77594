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
// appenders (appenders=N) of 1 KiB records (size=N). b.N is the total
// number of appends, shared by the appenders. Beside ns/op it reports
// records/s and records/commit (records per fdatasync, the group-commit
// factor), so that benchstat can compare two commits:
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
			b.Run(fmt.Sprintf("appenders=%d/size=%d", appenders, size), func(b *testing.B) {
				benchmarkAppend(b, appenders, size)
			})
		}
	}
}

func benchmarkAppend(b *testing.B, appenders, size int) {
	l, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte(i)
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
