package compare_test

// BenchmarkQueues runs the same workloads against walbroker (broker.Open,
// SyncAll, one queue), pebbleq and boltq, on the same disk (the test's
// temporary directory), each workload on each implementation in turn:
//
//	publish-1, publish-64  1 and 64 goroutines each publishing 1 KiB
//	                       messages in a loop (closed loop)
//	drain, drain-4         a queue filled, untimed, with b.N messages of
//	                       1 KiB (PublishBatch of 256), then emptied by 64
//	                       or 4 consumers: for walbroker broker.Consume
//	                       (batch 64, concurrency 64 or 4); for pebbleq and
//	                       boltq as many goroutines each calling
//	                       Receive(64) and then Ack with the IDs received,
//	                       until a Receive finds nothing
//
// Four rows add context. publish-1 also runs boltq with no batching delay
// (bolt-nodelay): with bbolt's default, a lone producer waits 10 ms in
// db.Batch for company that never comes. publish-64 also runs boltq with
// a MaxBatchDelay of 1 ms (bolt-1ms): 64 producers never fill a batch
// (MaxBatchSize 1000), so with the default each batch waits out its 10
// ms and the rate cannot pass 64 per 10 ms, 6,400 msgs/s, whatever the
// disk. drain-4 also runs walbroker with
// 4 Consume calls of 64 handlers each (walbroker-4x64): one Consume with
// Concurrency 4 and no Prefetch never holds more than 4 messages, while each of 4 pebbleq
// or boltq consumers holds the 64 of its Receive; and with one Consume of
// 4 handlers holding as many (walbroker-prefetch: Prefetch 252). Each row
// reports msgs/s and the process's CPU time per message.
// Run from compare/:
//
//	go test -run '^$' -bench Queues -benchtime 3s -count 3

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/compare"
	"github.com/walbroker/walbroker/compare/boltq"
	"github.com/walbroker/walbroker/compare/pebbleq"
)

// benchPolicy is the walbroker queue's policy; its visibility timeout is
// also the lease of pebbleq and boltq.
var benchPolicy = broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}

// target is one implementation as the workloads drive it.
type target interface {
	publish(ctx context.Context, payload []byte) error
	publishBatch(ctx context.Context, payloads [][]byte) error
	// drain receives and acknowledges n messages, the whole queue, with
	// consumers concurrent consumers, and returns once all are
	// acknowledged.
	drain(ctx context.Context, n, consumers int) error
}

// walbrokerTarget is a queue of a file-backed walbroker store.
type walbrokerTarget struct{ q *broker.Queue }

func openWalbroker(b *testing.B) target {
	s, err := broker.Open(b.TempDir(), broker.Options{Sync: broker.SyncAll})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	q, err := s.Queue("bench", benchPolicy)
	if err != nil {
		b.Fatal(err)
	}
	return walbrokerTarget{q}
}

func (w walbrokerTarget) publish(ctx context.Context, payload []byte) error {
	_, err := w.q.Publish(ctx, payload)
	return err
}

func (w walbrokerTarget) publishBatch(ctx context.Context, payloads [][]byte) error {
	_, err := w.q.PublishBatch(ctx, payloads)
	return err
}

// drain runs broker.Consume as walbroker's consumers do: Concurrency
// handlers, each Receive asking for at most 64 (and never for more than
// there are idle handlers).
func (w walbrokerTarget) drain(ctx context.Context, n, consumers int) error {
	return consumeN(ctx, w.q, n, broker.ConsumeOptions{Batch: 64, Concurrency: consumers})
}

// consumeN runs one broker.Consume on q with opts until its handler,
// which only counts, has run n times.
func consumeN(ctx context.Context, q *broker.Queue, n int, opts broker.ConsumeOptions) error {
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := broker.Consume(cctx, q, func(context.Context, broker.DeliveryValue) error {
		if handled.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, opts)
	if !errors.Is(err, context.Canceled) {
		return fmt.Errorf("Consume: %w", err)
	}
	return nil
}

// walbrokerCallsTarget drains a walbroker queue with one Consume call per
// consumer, each with 64 handlers, so that each consumer holds up to 64
// messages at once, as a consumer of pebbleq or boltq holds the 64 of its
// Receive; a single Consume with Concurrency 4 holds at most 4.
type walbrokerCallsTarget struct{ walbrokerTarget }

func openWalbrokerCalls(b *testing.B) target {
	return walbrokerCallsTarget{openWalbroker(b).(walbrokerTarget)}
}

func (w walbrokerCallsTarget) drain(ctx context.Context, n, consumers int) error {
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, consumers)
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			err := broker.Consume(cctx, w.q, func(context.Context, broker.DeliveryValue) error {
				if handled.Add(1) == int64(n) {
					cancel()
				}
				return nil
			}, broker.ConsumeOptions{Batch: 64, Concurrency: 64})
			if !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("Consume: %w", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// walbrokerPrefetchTarget drains a walbroker queue with one Consume call
// of consumers handlers that holds up to 64 messages per handler, as
// many as consumers pebbleq or boltq consumers hold after each Receive,
// through ConsumeOptions.Prefetch.
type walbrokerPrefetchTarget struct{ walbrokerTarget }

func openWalbrokerPrefetch(b *testing.B) target {
	return walbrokerPrefetchTarget{openWalbroker(b).(walbrokerTarget)}
}

func (w walbrokerPrefetchTarget) drain(ctx context.Context, n, consumers int) error {
	return consumeN(ctx, w.q, n, broker.ConsumeOptions{Batch: 64, Concurrency: consumers, Prefetch: 63 * consumers})
}

// queueTarget is a compare.Queue: pebbleq or boltq.
type queueTarget struct{ q compare.Queue }

func openPebble(b *testing.B) target {
	q, err := pebbleq.Open(b.TempDir(), pebbleq.Options{Lease: benchPolicy.VisibilityTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return queueTarget{q}
}

func openBolt(b *testing.B) target {
	return openBoltDelay(b, 0)
}

func openBoltNoDelay(b *testing.B) target {
	return openBoltDelay(b, -1)
}

func openBolt1ms(b *testing.B) target {
	return openBoltDelay(b, time.Millisecond)
}

func openBoltDelay(b *testing.B, delay time.Duration) target {
	q, err := boltq.Open(b.TempDir(), boltq.Options{Lease: benchPolicy.VisibilityTimeout, MaxBatchDelay: delay})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return queueTarget{q}
}

func (t queueTarget) publish(ctx context.Context, payload []byte) error {
	_, err := t.q.Publish(ctx, payload)
	return err
}

func (t queueTarget) publishBatch(ctx context.Context, payloads [][]byte) error {
	_, err := t.q.PublishBatch(ctx, payloads)
	return err
}

// drain runs consumers goroutines, each receiving up to 64 messages and
// acknowledging them in one Ack, until a Receive finds nothing: with the
// queue filled beforehand and no lease lapsing, that means every message
// left is leased by another consumer, which will acknowledge it.
func (t queueTarget) drain(ctx context.Context, n, consumers int) error {
	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for range consumers {
		wg.Go(func() {
			for {
				msgs, err := t.q.Receive(ctx, 64)
				if err != nil {
					errs <- err
					return
				}
				if len(msgs) == 0 {
					return
				}
				ids := make([]uint64, len(msgs))
				for i, m := range msgs {
					ids[i] = m.ID
				}
				if err := t.q.Ack(ctx, ids); err != nil {
					errs <- err
					return
				}
				acked.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if got := acked.Load(); got != int64(n) {
		return fmt.Errorf("acknowledged %d messages of %d", got, n)
	}
	return nil
}

func BenchmarkQueues(b *testing.B) {
	// Random bytes, as an encrypted or compressed payload is: Pebble
	// compresses the tables it flushes, and a payload that compresses
	// well would spare it most of those writes and no one else any.
	payload := make([]byte, 1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	type impl struct {
		name string
		open func(*testing.B) target
	}
	impls := []impl{{"walbroker", openWalbroker}, {"pebble", openPebble}, {"bolt", openBolt}}
	// Workload first, then implementation: the runs of one workload are
	// neighbours in time, so the disk's mood changes little between them.
	// COMPARE_ROUND rotates each workload's row, so that over rounds
	// 0, 1, 2 ... each implementation also runs first, right after the
	// previous workload's, and last.
	round, err := compareRound()
	if err != nil {
		b.Fatal(err)
	}
	rotate := func(row []impl) []impl {
		k := round % len(row)
		return append(append([]impl(nil), row[k:]...), row[:k]...)
	}
	for _, producers := range []int{1, 64} {
		row := impls
		switch producers {
		case 1:
			row = append(row[:len(row):len(row)], impl{"bolt-nodelay", openBoltNoDelay})
		case 64:
			row = append(row[:len(row):len(row)], impl{"bolt-1ms", openBolt1ms})
		}
		for _, im := range rotate(row) {
			b.Run("publish-"+strconv.Itoa(producers)+"/"+im.name, func(b *testing.B) {
				benchPublish(b, im.open(b), producers, payload)
			})
		}
	}
	for _, consumers := range []int{64, 4} {
		name := "drain/"
		if consumers != 64 {
			name = "drain-" + strconv.Itoa(consumers) + "/"
		}
		row := impls
		if consumers != 64 {
			row = append(row[:len(row):len(row)],
				impl{"walbroker-" + strconv.Itoa(consumers) + "x64", openWalbrokerCalls},
				impl{"walbroker-prefetch", openWalbrokerPrefetch})
		}
		for _, im := range rotate(row) {
			b.Run(name+im.name, func(b *testing.B) {
				benchDrain(b, im.open(b), consumers, payload)
			})
		}
	}
}

// compareRound reads COMPARE_ROUND: a round number, 0 when unset.
func compareRound() (int, error) {
	v := os.Getenv("COMPARE_ROUND")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("COMPARE_ROUND %q is not a round number (0, 1, 2, ...)", v)
	}
	return n, nil
}

// benchPublish publishes b.N messages from producers goroutines.
func benchPublish(b *testing.B, t target, producers int, payload []byte) {
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	err := publishN(context.Background(), t, producers, int64(b.N), payload)
	elapsed := time.Since(start)
	cpu = processCPU(b) - cpu
	b.StopTimer()
	if err != nil {
		b.Fatalf("publish: %v", err)
	}
	reportRates(b, elapsed, cpu)
}

// publishN publishes n messages from producers goroutines, each stopping
// at its first failure, and returns the first failure any met. The
// failures are kept as errors, whatever their types: an atomic.Value
// would panic on a second one of another type than the first.
func publishN(ctx context.Context, t target, producers int, n int64, payload []byte) error {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for next.Add(1) <= n {
				if err := t.publish(ctx, payload); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// benchDrain fills t with b.N messages, untimed, then times consumers
// emptying it.
func benchDrain(b *testing.B, t target, consumers int, payload []byte) {
	ctx := context.Background()
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = payload
	}
	for left := b.N; left > 0; left -= len(batch) {
		if err := t.publishBatch(ctx, batch[:min(left, len(batch))]); err != nil {
			b.Fatalf("publishBatch: %v", err)
		}
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := processCPU(b)
	start := time.Now()
	err := t.drain(ctx, b.N, consumers)
	elapsed := time.Since(start)
	cpu = processCPU(b) - cpu
	b.StopTimer()
	if err != nil {
		b.Fatalf("drain: %v", err)
	}
	reportRates(b, elapsed, cpu)
}

// reportRates reports msgs/s and the CPU time the whole process spent per
// message (user + system, background work of the store included). On two
// cores shared with the disk's waits, a queue whose callers need more CPU
// between two commits than the commit takes is bound by the CPU, not the
// disk: this figure says which is which.
func reportRates(b *testing.B, elapsed, cpu time.Duration) {
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
}

// processCPU is the CPU time the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
