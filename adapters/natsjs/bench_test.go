package natsjs_test

// BenchmarkCompare runs the same workloads against the file-backed store
// (broker.Open, SyncAll) and against the adapter on one embedded server
// whose JetStream syncs every write (sync_interval: always), side by side,
// on the same disk (the test's temporary directory):
//
//	publish-1, publish-64  1 and 64 goroutines each publishing 1 KiB
//	                       messages in a loop (closed loop)
//	keyed-1                1 goroutine publishing 1 KiB messages with
//	                       PublishKeyed, each under a new key
//	keyed-dup-1            1 goroutine publishing one key again and again:
//	                       every call after the first is a duplicate
//	drain                  a queue filled, untimed, with b.N messages of
//	                       1 KiB (PublishBatch of 256), then emptied by
//	                       broker.Consume (batch 64, concurrency 64)
//
// Each reports msgs/s. Run from adapters/natsjs:
//
//	go test -run '^$' -bench Compare -benchtime 3s -count 3

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

var benchPolicy = broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}

// benchQueue is what the workloads need of a queue.
type benchQueue interface {
	broker.Broker
	PublishBatch(ctx context.Context, payloads [][]byte) ([]broker.MessageValue, error)
	PublishKeyed(ctx context.Context, key string, payload []byte) (broker.MessageValue, error)
}

// openFile opens a file-backed store under SyncAll in a new temporary
// directory.
func openFile(b *testing.B) benchQueue {
	s, err := broker.Open(b.TempDir(), broker.Options{Sync: broker.SyncAll})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	q, err := s.Queue("bench", benchPolicy)
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// openNATS starts an embedded server that syncs every write, with its
// files in a new temporary directory, and opens the adapter on it.
func openNATS(b *testing.B) benchQueue {
	srv := runServer(b, b.TempDir(), func(o *server.Options) { o.SyncAlways = true })
	nc := connect(b, srv.ClientURL())
	s, err := natsjs.Open(nc, natsjs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	q, err := s.Queue("bench", benchPolicy)
	if err != nil {
		b.Fatal(err)
	}
	return q
}

func BenchmarkCompare(b *testing.B) {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	impls := []struct {
		name string
		open func(*testing.B) benchQueue
	}{{"file", openFile}, {"natsjs", openNATS}}
	// Workload first, then implementation: the two runs of one workload
	// are neighbours in time, so the disk's mood changes little between
	// them.
	for _, producers := range []int{1, 64} {
		for _, impl := range impls {
			b.Run("publish-"+itoa(producers)+"/"+impl.name, func(b *testing.B) {
				benchPublish(b, impl.open(b), producers, payload)
			})
		}
	}
	for _, dup := range []bool{false, true} {
		name := "keyed-1/"
		if dup {
			name = "keyed-dup-1/"
		}
		for _, impl := range impls {
			b.Run(name+impl.name, func(b *testing.B) {
				benchKeyed(b, impl.open(b), dup, payload)
			})
		}
	}
	for _, impl := range impls {
		b.Run("drain/"+impl.name, func(b *testing.B) {
			benchDrain(b, impl.open(b), payload)
		})
	}
}

// benchPublish publishes b.N messages from producers goroutines.
func benchPublish(b *testing.B, q benchQueue, producers int, payload []byte) {
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	start := time.Now()
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := q.Publish(ctx, payload); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatalf("Publish: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// benchKeyed publishes b.N keyed messages from one goroutine: each under
// a key of its own, or all under one key.
func benchKeyed(b *testing.B, q benchQueue, dup bool, payload []byte) {
	ctx := context.Background()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	start := time.Now()
	var first broker.MessageValue
	for i := range b.N {
		key := "key"
		if !dup {
			key = "key-" + itoa(i)
		}
		m, err := q.PublishKeyed(ctx, key, payload)
		if err != nil {
			b.Fatalf("PublishKeyed: %v", err)
		}
		// A new key enqueues (the answer carries the payload); a repeat
		// answers the first message, with a nil Payload, and enqueues
		// nothing.
		switch {
		case i == 0 || !dup:
			if m.Payload == nil {
				b.Fatalf("PublishKeyed %d of key %q, never published before, answered %s as a duplicate", i, key, m.ID)
			}
			first = m
		case m.ID != first.ID || m.Payload != nil:
			b.Fatalf("PublishKeyed %d of key %q answered %s (payload %v), want the duplicate of %s", i, key, m.ID, m.Payload != nil, first.ID)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// benchDrain fills q with b.N messages, untimed, then times Consume
// emptying it.
func benchDrain(b *testing.B, q benchQueue, payload []byte) {
	ctx := context.Background()
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = payload
	}
	for left := b.N; left > 0; left -= len(batch) {
		if _, err := q.PublishBatch(ctx, batch[:min(left, len(batch))]); err != nil {
			b.Fatalf("PublishBatch: %v", err)
		}
	}
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	start := time.Now()
	err := broker.Consume(cctx, q, func(context.Context, broker.DeliveryValue) error {
		if handled.Add(1) == int64(b.N) {
			cancel()
		}
		return nil
	}, broker.ConsumeOptions{Batch: 64, Concurrency: 64})
	elapsed := time.Since(start)
	b.StopTimer()
	if !errors.Is(err, context.Canceled) {
		b.Fatalf("Consume: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
