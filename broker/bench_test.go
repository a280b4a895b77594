package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The benchmarks of the broker's hot paths: publish, receive+ack, and
// Consume. Each names its parameters as sub-benchmarks (producers=64,
// size=1024, sync=all, ...) and reports, beside ns/op, msgs/s and
// records/commit (log records per fdatasync: the group-commit factor), so
// that benchstat can compare two commits:
//
//	go test ./broker -run XXX -bench 'Publish|ReceiveAck|Consume$' -count 10 > new.txt
//	benchstat old.txt new.txt
//
// They fdatasync for real, in a temporary directory: on a shared machine
// the rates move with the neighbours' use of the disk, so compare runs
// made side by side, and prefer records/commit, which moves less.
// cmd/walbench measures the same paths against the disk's own figures.

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

func benchPayload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// reportRates reports msgs/s, b.N messages in elapsed, and the records
// per commit of s since before.
func reportRates(b *testing.B, s *Store, before StoreStats, elapsed time.Duration) {
	after := s.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	if c := after.Commits - before.Commits; c > 0 {
		b.ReportMetric(float64(after.Records-before.Records)/float64(c), "records/commit")
	}
}

// BenchmarkPublish publishes 1 KiB messages under SyncAll with 1, 16 and
// 64 concurrent producers; b.N is the total, shared by the producers.
// Beside the rates it reports the CPU time the whole process spent per
// message (user + system, the log's writer and background work included):
// it moves little with the neighbours' use of the disk, so it is the
// figure to compare when changing the publish path (see DESIGN.md, "What
// limits a publish at 64 producers").
func BenchmarkPublish(b *testing.B) {
	for _, producers := range []int{1, 16, 64} {
		for _, size := range []int{1 << 10} {
			b.Run(fmt.Sprintf("producers=%d/size=%d", producers, size), func(b *testing.B) {
				s, q := benchQueue(b, SyncAll)
				defer s.Close()
				payload := benchPayload(size)
				before := s.Stats()
				var left atomic.Int64
				left.Store(int64(b.N))
				b.SetBytes(int64(size))
				cpu := ProcessCPU(b)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range producers {
					wg.Go(func() {
						for left.Add(-1) >= 0 {
							if _, err := q.Publish(context.Background(), payload); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				cpu = ProcessCPU(b) - cpu
				b.StopTimer()
				reportRates(b, s, before, elapsed)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
			})
		}
	}
}

// fill publishes n messages of 1 KiB in batches of 256.
func fill(b *testing.B, q *Queue, n int) {
	b.Helper()
	payload := benchPayload(1 << 10)
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

// BenchmarkReceiveAck drains a backlog of b.N messages of 1 KiB, filled
// untimed, with 1 and 4 consumers that each Receive up to 64 messages and
// Ack them one by one, under SyncAll and SyncPublish. Like
// BenchmarkPublish it reports the CPU time the process spent per message.
func BenchmarkReceiveAck(b *testing.B) {
	for _, mode := range []SyncMode{SyncAll, SyncPublish} {
		for _, consumers := range []int{1, 4} {
			const batch = 64
			b.Run(fmt.Sprintf("sync=%s/consumers=%d/batch=%d", mode, consumers, batch), func(b *testing.B) {
				s, q := benchQueue(b, mode)
				defer s.Close()
				fill(b, q, b.N)
				before := s.Stats()
				ctx := context.Background()
				var received atomic.Int64
				cpu := ProcessCPU(b)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range consumers {
					wg.Go(func() {
						for received.Load() < int64(b.N) {
							ds, err := q.Receive(ctx, batch)
							if err != nil {
								b.Error(err)
								return
							}
							if len(ds) == 0 {
								return // the others hold the rest
							}
							received.Add(int64(len(ds)))
							for _, d := range ds {
								if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
									b.Error(err)
									return
								}
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				cpu = ProcessCPU(b) - cpu
				b.StopTimer()
				if got := received.Load(); got != int64(b.N) {
					b.Fatalf("received %d of %d messages", got, b.N)
				}
				reportRates(b, s, before, elapsed)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
			})
		}
	}
}

// BenchmarkConsume drains a backlog of b.N messages of 1 KiB, filled
// untimed, through Consume with batch 64 and a handler that only counts,
// under SyncAll and SyncPublish: with 64 handlers, and with 4, holding
// none or 252 more (as many as four consumers that each Receive 64 hold).
func BenchmarkConsume(b *testing.B) {
	type shape struct{ concurrency, prefetch int }
	for _, mode := range []SyncMode{SyncAll, SyncPublish} {
		for _, sh := range []shape{{64, 0}, {4, 0}, {4, 252}} {
			benchConsume(b, mode, 64, sh.concurrency, sh.prefetch)
		}
	}
}

// benchConsume is one sub-benchmark of BenchmarkConsume.
func benchConsume(b *testing.B, mode SyncMode, batch, concurrency, prefetch int) {
	name := fmt.Sprintf("sync=%s/batch=%d/concurrency=%d", mode, batch, concurrency)
	if prefetch > 0 {
		name += fmt.Sprintf("/prefetch=%d", prefetch)
	}
	b.Run(name, func(b *testing.B) {
		s, q := benchQueue(b, mode)
		defer s.Close()
		fill(b, q, b.N)
		before := s.Stats()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var handled atomic.Int64
		b.ResetTimer()
		start := time.Now()
		err := Consume(ctx, q, func(context.Context, DeliveryValue) error {
			if handled.Add(1) == int64(b.N) {
				cancel()
			}
			return nil
		}, ConsumeOptions{Batch: batch, Concurrency: concurrency, Prefetch: prefetch})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != context.Canceled {
			b.Fatal(err)
		}
		// Each message is acked once: a message handled twice would make
		// up for one never handled.
		if acked := q.Stats().Acked; acked != int64(b.N) {
			b.Fatalf("%d of the %d messages handled were acked", acked, b.N)
		}
		reportRates(b, s, before, elapsed)
	})
}

// ProcessCPU is the CPU time the process has used so far (user + system).
func ProcessCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
