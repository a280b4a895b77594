package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The benchmarks of this file show what the checkpoints and the reclaiming
// of old segments are for: a store with a large backlog opens fast and
// holds little heap, and a store whose messages come and go stays a few
// segments large however much passes through it. Their sizes come from
// the environment, so that the real figures (WALBROKER_BENCH_PENDING=
// 1000000, WALBROKER_BENCH_CYCLES=2000000) need no edit:
//
//	WALBROKER_BENCH_PENDING=1000000 go test ./broker -run XXX -bench Reopen -benchtime 5x
//	WALBROKER_BENCH_CYCLES=2000000 go test ./broker -run XXX -bench DiskBound -benchtime 1x -timeout 2h

// benchEnvInt is the positive integer in the environment variable name, or
// def when it is unset.
func benchEnvInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// reopenQueue and reopenPolicy are the one queue of BenchmarkReopen's store.
const reopenQueue = "backlog"

var reopenPolicy = broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}

// BenchmarkReopen opens a store holding N pending 1 KiB messages
// (WALBROKER_BENCH_PENDING, default 100000) and takes its first message:
// each iteration times broker.Open, Store.Queue and the first Receive(1)
// that returns a message, with the store's files evicted from the page
// cache beforehand, so that the open reads from the disk.
//
//   - checkpoint: the open loads the checkpoint Close wrote.
//   - rebuild: the index directory is removed first, so that the open
//     replays the whole log (and writes a new checkpoint).
//
// It reports ms/open (the mean) and median-ms; checkpoint also reports the
// heap in use with the store open (HeapInuse after runtime.GC, for the
// whole process, the most over the iterations): heap-MiB and
// heap-B/pending. The store is built once per run of BenchmarkReopen,
// untimed, and shared by every iteration of both sub-benchmarks; each
// iteration leases one more of its messages, which changes nothing
// measurable.
func BenchmarkReopen(b *testing.B) {
	n := benchEnvInt(b, "WALBROKER_BENCH_PENDING", 100_000)
	dir := b.TempDir()
	start := time.Now()
	buildBacklog(b, dir, n)
	b.Logf("built a store of %d pending messages in %v", n, time.Since(start).Round(time.Millisecond))

	b.Run("checkpoint", func(b *testing.B) { benchmarkReopen(b, dir, n, false) })
	b.Run("rebuild", func(b *testing.B) { benchmarkReopen(b, dir, n, true) })
}

// buildBacklog fills a new store in dir with n pending 1 KiB messages, by
// PublishBatch of 256, and closes it.
func buildBacklog(b *testing.B, dir string, n int) {
	b.Helper()
	s, err := broker.Open(dir, broker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	q, err := s.Queue(reopenQueue, reopenPolicy)
	if err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64)
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = payload
	}
	for left := n; left > 0; {
		k := min(left, len(batch))
		if _, err := q.PublishBatch(context.Background(), batch[:k]); err != nil {
			b.Fatal(err)
		}
		left -= k
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

func benchmarkReopen(b *testing.B, dir string, n int, rebuild bool) {
	ctx := context.Background()
	var (
		times     []time.Duration
		heapInUse uint64
	)
	b.StopTimer()
	for range b.N {
		if rebuild {
			// Open writes a checkpoint after a rebuild, and Close another.
			if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
				b.Fatal(err)
			}
		}
		if err := vfs.EvictPageCache(dir); err != nil {
			b.Fatal(err)
		}
		runtime.GC() // nothing left over from the build or the last iteration
		b.StartTimer()
		start := time.Now()
		s, err := broker.Open(dir, broker.Options{})
		if err != nil {
			b.Fatal(err)
		}
		q, err := s.Queue(reopenQueue, reopenPolicy)
		if err != nil {
			b.Fatal(err)
		}
		ds, err := q.Receive(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if len(ds) != 1 {
			b.Fatalf("the first Receive after the open returned %d messages, want 1 of the %d pending", len(ds), n)
		}
		times = append(times, elapsed)
		if !rebuild {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heapInUse = max(heapInUse, ms.HeapInuse)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	var sum time.Duration
	for _, t := range times {
		sum += t
	}
	slices.Sort(times)
	median := times[len(times)/2]
	if len(times)%2 == 0 {
		median = (times[len(times)/2-1] + median) / 2
	}
	b.ReportMetric(sum.Seconds()*1e3/float64(len(times)), "ms/open")
	b.ReportMetric(median.Seconds()*1e3, "median-ms")
	if !rebuild {
		b.ReportMetric(float64(heapInUse)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(heapInUse)/float64(n), "heap-B/pending")
	}
}

// diskBoundSegmentBytes is the segment size of BenchmarkDiskBound's store:
// the default, named because the figures are reported in segments.
const diskBoundSegmentBytes = 64 << 20

// diskBoundLive bounds the messages published and not yet acked.
const diskBoundLive = 1000

// diskBoundSampleEvery is how many cycles pass between two samples of the
// store directory's size.
const diskBoundSampleEvery = 1000

// BenchmarkDiskBound runs many more messages through a store than its disk
// could hold were nothing reclaimed: one producer publishes 1 KiB messages
// and one consumer receives them (64 at a time) and acks each, at most
// 1000 of them live at once, for WALBROKER_BENCH_CYCLES cycles (default
// 200000; a cycle is one message published, received and acked), under
// SyncAll with 64 MiB segments. Beside that queue, 10 messages published
// first to a second queue are never received, and 5 published first to a
// third (MaxDeliveries 1) are nacked once into dead letters: they pin the
// first segment until they are copied forward. At the end, all 15 must
// still be there, with their IDs and payloads.
//
// Every 1000 cycles it sums the sizes of every file under the store's
// directory (segments, prepared segments, index). It reports the largest
// sum (max-dir-MiB, and max-dir-segments in segments' worth), the sum at
// the end, once the background reclaiming has settled (final-dir-MiB),
// Store.Stats' Segments then (final-segments), BytesReclaimed
// (reclaimed-MiB) and CopiedForward (copied-records), and cycles/s. It
// runs its whole workload, on a new store, once per b.N: run it with
// -benchtime 1x. With more, each figure is the worst (or, for the counts
// and rates, the mean) over the runs.
func BenchmarkDiskBound(b *testing.B) {
	cycles := benchEnvInt(b, "WALBROKER_BENCH_CYCLES", 200_000)
	var (
		worst               diskBoundResult
		reclaimed, copied   int64
		totalCycles, totalS float64
	)
	b.StopTimer()
	for range b.N {
		r := runDiskBound(b, cycles)
		worst.maxDirBytes = max(worst.maxDirBytes, r.maxDirBytes)
		worst.finalDirBytes = max(worst.finalDirBytes, r.finalDirBytes)
		worst.finalSegments = max(worst.finalSegments, r.finalSegments)
		reclaimed += r.reclaimed
		copied += r.copied
		totalCycles += float64(cycles)
		totalS += r.elapsed.Seconds()
	}
	const mib = 1 << 20
	b.ReportMetric(float64(worst.maxDirBytes)/mib, "max-dir-MiB")
	b.ReportMetric(float64(worst.maxDirBytes)/diskBoundSegmentBytes, "max-dir-segments")
	b.ReportMetric(float64(worst.finalDirBytes)/mib, "final-dir-MiB")
	b.ReportMetric(float64(worst.finalSegments), "final-segments")
	b.ReportMetric(float64(reclaimed)/float64(b.N)/mib, "reclaimed-MiB")
	b.ReportMetric(float64(copied)/float64(b.N), "copied-records")
	b.ReportMetric(totalCycles/totalS, "cycles/s")
}

// diskBoundResult is what one run of BenchmarkDiskBound's workload saw.
type diskBoundResult struct {
	elapsed       time.Duration // of the cycles
	maxDirBytes   int64
	finalDirBytes int64
	finalSegments int
	reclaimed     int64 // Stats().BytesReclaimed
	copied        int64 // Stats().CopiedForward
}

// diskBoundPayload is the payload of message i of BenchmarkDiskBound: 1
// KiB, different for each i.
func diskBoundPayload(i int) []byte {
	p := bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(i >> 16), '.'}, 256)
	copy(p, fmt.Sprintf("message %d", i))
	return p
}

func runDiskBound(b *testing.B, cycles int) diskBoundResult {
	b.Helper()
	dir, err := os.MkdirTemp(b.TempDir(), "diskbound-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir) // the next run's disk
	s, err := broker.Open(dir, broker.Options{Sync: broker.SyncAll, SegmentBytes: diskBoundSegmentBytes})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	policy := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5}
	work, err := s.Queue("work", policy)
	if err != nil {
		b.Fatal(err)
	}
	kept, err := s.Queue("kept", policy)
	if err != nil {
		b.Fatal(err)
	}
	policy.MaxDeliveries = 1
	dead, err := s.Queue("dead", policy)
	if err != nil {
		b.Fatal(err)
	}

	// The messages that must survive every reclaim, by ID.
	keptWant := map[string][]byte{}
	for i := range 10 {
		p := diskBoundPayload(i)
		m, err := kept.Publish(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		keptWant[m.ID] = p
	}
	deadWant := map[string][]byte{}
	for i := range 5 {
		p := diskBoundPayload(100 + i)
		m, err := dead.Publish(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		deadWant[m.ID] = p
	}
	ds, err := dead.Receive(ctx, 5)
	if err != nil {
		b.Fatal(err)
	}
	if len(ds) != 5 {
		b.Fatalf("received %d of the 5 messages to dead-letter", len(ds))
	}
	for _, d := range ds {
		nv, err := dead.Nack(ctx, d.Lease.Receipt, errors.New("bench: dead on arrival"))
		if err != nil {
			b.Fatal(err)
		}
		if !nv.DeadLettered {
			b.Fatalf("the nack of %s on its only delivery did not dead-letter it", d.Message.ID)
		}
	}

	var (
		res      diskBoundResult
		maxAt    int // cycles at the largest sample
		maxUsage dirUsage
		over4    bool // a sample was above four segments' worth
		failed   atomic.Pointer[error]
		live     = make(chan struct{}, diskBoundLive) // a token per message published and not yet acked
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		failed.CompareAndSwap(nil, &err)
		cancel()
	}
	sample := func(at int) {
		u, err := dirSizes(dir)
		if err != nil {
			fail(err)
			return
		}
		if n := u.total(); n > res.maxDirBytes {
			res.maxDirBytes, maxAt, maxUsage = n, at, u
		}
		if !over4 && u.total() > 4*diskBoundSegmentBytes {
			over4 = true
			b.Logf("after %d cycles the store directory holds more than four segments' worth, %v; Stats: %+v", at, u, s.Stats())
		}
	}

	payload := diskBoundPayload(-1)
	producerDone := make(chan struct{})
	b.StartTimer()
	start := time.Now()
	go func() {
		defer close(producerDone)
		for range cycles {
			select {
			case live <- struct{}{}:
			case <-runCtx.Done():
				return
			}
			if _, err := work.Publish(runCtx, payload); err != nil {
				fail(fmt.Errorf("Publish: %w", err))
				return
			}
		}
	}()
	for acked := 0; acked < cycles && runCtx.Err() == nil; {
		w := work.Wake() // before the Receive that may come back empty
		ds, err := work.Receive(runCtx, 64)
		if err != nil {
			fail(fmt.Errorf("Receive: %w", err))
			break
		}
		if len(ds) == 0 {
			select {
			case <-w.Signal:
			case <-runCtx.Done():
			}
			continue
		}
		for _, d := range ds {
			if err := work.Ack(runCtx, d.Lease.Receipt); err != nil {
				fail(fmt.Errorf("Ack: %w", err))
				break
			}
			<-live
			acked++
			if acked%diskBoundSampleEvery == 0 {
				sample(acked)
			}
		}
	}
	res.elapsed = time.Since(start)
	b.StopTimer()
	cancel()
	<-producerDone
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}

	// The background maintenance reclaims after each rotation and each
	// second: let it finish before the last sample.
	settle := time.NewTicker(100 * time.Millisecond)
	defer settle.Stop()
	segments, fell := s.Stats().Segments, time.Now()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && time.Since(fell) < 1500*time.Millisecond; {
		<-settle.C
		if n := s.Stats().Segments; n < segments {
			segments, fell = n, time.Now()
		}
	}
	sample(cycles)
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	st := s.Stats()
	final, err := dirSizes(dir)
	if err != nil {
		b.Fatal(err)
	}
	res.finalDirBytes = final.total()
	res.finalSegments = st.Segments
	res.reclaimed = st.BytesReclaimed
	res.copied = st.CopiedForward
	b.Logf("%d cycles in %v; the store directory at its largest, after %d cycles: %v; at the end: %v; Stats: %+v",
		cycles, res.elapsed.Round(time.Millisecond), maxAt, maxUsage, final, st)

	ds, err = kept.Receive(ctx, 10)
	if err != nil {
		b.Fatal(err)
	}
	if len(ds) != len(keptWant) {
		b.Fatalf("the never-received queue gave %d of its %d messages", len(ds), len(keptWant))
	}
	for _, d := range ds {
		if want, ok := keptWant[d.Message.ID]; !ok || !bytes.Equal(d.Message.Payload, want) {
			b.Fatalf("never-received message %s came back different (known ID: %v)", d.Message.ID, ok)
		}
	}
	dls, err := dead.DeadLetters(ctx, 10)
	if err != nil {
		b.Fatal(err)
	}
	if len(dls) != len(deadWant) {
		b.Fatalf("%d dead letters left, want %d", len(dls), len(deadWant))
	}
	for _, dl := range dls {
		if want, ok := deadWant[dl.Message.ID]; !ok || !bytes.Equal(dl.Message.Payload, want) {
			b.Fatalf("dead letter %s came back different (known ID: %v)", dl.Message.ID, ok)
		}
	}
	return res
}

// dirUsage is what the files under a store's directory take, by kind.
type dirUsage struct {
	segments int64 // *.seg: the log
	spare    int64 // *.tmp: the next segment being prepared, retired ones kept for reuse
	index    int64 // under index/: the checkpoint and the table
	other    int64
}

func (u dirUsage) total() int64 { return u.segments + u.spare + u.index + u.other }

func (u dirUsage) String() string {
	const mib = 1 << 20
	return fmt.Sprintf("%.1f MiB (segments %.1f, spare %.1f, index %.1f, other %.1f)",
		float64(u.total())/mib, float64(u.segments)/mib, float64(u.spare)/mib, float64(u.index)/mib, float64(u.other)/mib)
}

// dirSizes sums the sizes of the regular files under dir, by kind. A file
// removed while it walks counts for nothing.
func dirSizes(dir string) (dirUsage, error) {
	var u dirUsage
	index := filepath.Join(dir, "index") + string(filepath.Separator)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		switch n := info.Size(); {
		case strings.HasPrefix(path, index):
			u.index += n
		case strings.HasSuffix(path, ".seg"):
			u.segments += n
		case strings.HasSuffix(path, ".tmp"):
			u.spare += n
		default:
			u.other += n
		}
		return nil
	})
	return u, err
}
