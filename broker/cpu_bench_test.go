package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// BenchmarkConsumeCPU drains a backlog of b.N messages of 1 KiB through
// Consume (batch 64, concurrency 64) and reports, beside msgs/s, the CPU
// time the whole process spent per message while it drained (user + system,
// from getrusage). On a shared machine the rate moves with the neighbours;
// the CPU per message moves much less, so it is the figure to compare
// between two commits of the hot path:
//
//	go test ./broker -run XXX -bench ConsumeCPU -benchtime 200000x -count 5
func BenchmarkConsumeCPU(b *testing.B) {
	for _, mode := range []broker.SyncMode{broker.SyncPublish, broker.SyncAll} {
		b.Run(fmt.Sprintf("sync=%s", mode), func(b *testing.B) {
			s, err := broker.Open(b.TempDir(), broker.Options{Sync: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			q, err := s.Queue("cpu", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			batch := make([][]byte, 256)
			for i := range batch {
				batch[i] = payload
			}
			for n := b.N; n > 0; n -= len(batch) {
				if _, err := q.PublishBatch(context.Background(), batch[:min(n, len(batch))]); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var handled atomic.Int64
			cpu := broker.ProcessCPU(b)
			b.ResetTimer()
			start := time.Now()
			err = broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error {
				if handled.Add(1) == int64(b.N) {
					cancel()
				}
				return nil
			}, broker.ConsumeOptions{Batch: 64, Concurrency: 64})
			elapsed := time.Since(start)
			cpu = broker.ProcessCPU(b) - cpu
			b.StopTimer()
			if !errors.Is(err, context.Canceled) {
				b.Fatalf("Consume returned %v, want context.Canceled after %d messages", err, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
		})
	}
}
