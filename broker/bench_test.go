package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func benchQueue(b *testing.B, mode SyncMode) (*Store, *Queue) {
	b.Helper()
	s, err := Open(b.TempDir(), Options{Sync: mode})
	if err != nil {
		b.Fatal(err)
	}
	q, err := s.Queue("bench", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	if err != nil {
		b.Fatal(err)
	}
	return s, q
}

func benchPayload() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// BenchmarkPublish publishes 1 KiB messages under SyncAll with 1, 16 and 64
// concurrent producers; b.N is the total. It reports msgs/s and the events
// per fdatasync of the store's log.
func BenchmarkPublish(b *testing.B) {
	for _, producers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			s, q := benchQueue(b, SyncAll)
			defer s.Close()
			payload := benchPayload()
			before := s.Stats()
			var left atomic.Int64
			left.Store(int64(b.N))
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for p := 0; p < producers; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						if _, err := q.Publish(context.Background(), payload); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			reportRates(b, s, before, elapsed)
		})
	}
}

func reportRates(b *testing.B, s *Store, before StoreStats, elapsed time.Duration) {
	after := s.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	if c := after.Commits - before.Commits; c > 0 {
		b.ReportMetric(float64(after.Records-before.Records)/float64(c), "records/commit")
	}
}

// fill publishes n messages in batches.
func fill(b *testing.B, q *Queue, n int) {
	b.Helper()
	payload := benchPayload()
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = payload
	}
	for n > 0 {
		k := min(n, len(batch))
		if _, err := q.PublishBatch(context.Background(), batch[:k]); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

// BenchmarkDrain receives and acks a backlog of b.N messages with 1 and 4
// consumers, batch 64, under SyncAll and SyncPublish.
func BenchmarkDrain(b *testing.B) {
	for _, mode := range []SyncMode{SyncAll, SyncPublish} {
		for _, consumers := range []int{1, 4} {
			b.Run(fmt.Sprintf("sync=%s/consumers=%d", mode, consumers), func(b *testing.B) {
				s, q := benchQueue(b, mode)
				defer s.Close()
				fill(b, q, b.N)
				before := s.Stats()
				ctx := context.Background()
				var drained atomic.Int64
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for c := 0; c < consumers; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for drained.Load() < int64(b.N) {
							ds, err := q.Receive(ctx, 64)
							if err != nil {
								b.Error(err)
								return
							}
							if len(ds) == 0 {
								return
							}
							for _, d := range ds {
								if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
									b.Error(err)
									return
								}
							}
							drained.Add(int64(len(ds)))
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				reportRates(b, s, before, elapsed)
			})
		}
	}
}

// BenchmarkConsume drains a backlog of b.N messages through Consume with
// concurrency 64 and batch 64, under SyncAll and SyncPublish.
func BenchmarkConsume(b *testing.B) {
	for _, mode := range []SyncMode{SyncAll, SyncPublish} {
		b.Run(fmt.Sprintf("sync=%s/concurrency=64", mode), func(b *testing.B) {
			s, q := benchQueue(b, mode)
			defer s.Close()
			fill(b, q, b.N)
			before := s.Stats()
			ctx, cancel := context.WithCancel(context.Background())
			var handled atomic.Int64
			b.ResetTimer()
			start := time.Now()
			err := Consume(ctx, q, func(context.Context, DeliveryValue) error {
				if handled.Add(1) == int64(b.N) {
					cancel()
				}
				return nil
			}, ConsumeOptions{Batch: 64, Concurrency: 64})
			elapsed := time.Since(start)
			b.StopTimer()
			if err != context.Canceled {
				b.Fatal(err)
			}
			reportRates(b, s, before, elapsed)
		})
	}
}
