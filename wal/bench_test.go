package wal

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkAppend measures Append of 1 KiB records under SyncAlways with 1,
// 16 and 64 concurrent appenders, with real fdatasyncs in a temporary
// directory. b.N is the total number of appends; it reports appends/s and
// records per fdatasync so benchstat can compare commits.
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			l, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			rec := make([]byte, 1024)
			for i := range rec {
				rec[i] = byte(i)
			}
			before := l.Stats()
			b.SetBytes(int64(len(rec)))
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			var next sync.Mutex
			left := b.N
			for g := 0; g < appenders; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						if _, err := l.Append(rec); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			after := l.Stats()
			syncs := after.Syncs - before.Syncs
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			if syncs > 0 {
				b.ReportMetric(float64(after.Records-before.Records)/float64(syncs), "records/fdatasync")
			}
		})
	}
}
