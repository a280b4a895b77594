package recovery_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/leakcheck"
)

// TestLongRun runs the store as an operator would, for as long as
// WALBROKER_LONGRUN says, and looks for what only time shows: goroutines,
// descriptors, mappings, heap or disk that grow with the run, Open that
// slows down, counters that drift from what the callers saw, and messages
// that go missing across many rotations, checkpoints, copies forward,
// reopens and backups.
//
// The workload runs on the real clock at a modest rate (about 2,000
// publishes a second) on segments of 1 MiB, so the log rotates every
// second or so and reclamation never rests:
//
//   - "work": eight publishers, consumed by Consume with handlers that
//     fail (nack), panic, or give up for good (DoNotRetry) now and then;
//     MaxDeliveries 3, so some messages die of their failures. Every few
//     seconds its dead letters are read, a few replayed and the old ones
//     deleted.
//   - "keyed": PublishKeyed over 2,500 keys with a DedupWindow of 3 s, so
//     about a third are duplicates and keys expire all the time.
//   - "capped": Capacity 200, published faster than its slow consumer
//     drains it, so publishes are shed.
//
// Every reopen interval the workload stops as a deploy would (publishers
// first, then Consume with a StopGrace) and the store is closed and opened
// again; halfway between two reopens the store is backed up, and the copy
// opened, checked and removed. Every 10 s a sample of the process and the
// store is taken; the table is logged at the end.
//
// At the end, with every queue drained and the store reopened, it asserts
// that the process holds no more goroutines, descriptors and mappings than
// just after the first Open (within a small constant); that the directory
// in the last third of the run is no larger than in the first; that every
// message a publish returned for was handled, is a dead letter, or was
// deleted as one; and that each queue's counters, epoch by epoch, are what
// the callers counted.
func TestLongRun(t *testing.T) {
	spec := os.Getenv("WALBROKER_LONGRUN")
	if spec == "" {
		t.Skip("a soak of many minutes on the real clock, skipped by default: run it with WALBROKER_LONGRUN=<duration>, e.g. " +
			"WALBROKER_LONGRUN=15m nice -n 10 go test ./recovery -run TestLongRun -v -timeout 30m " +
			"(WALBROKER_LONGRUN_REOPEN sets the interval between reopens, a sixth of the run by default)")
	}
	total, err := time.ParseDuration(spec)
	if err != nil || total < 30*time.Second {
		t.Fatalf("WALBROKER_LONGRUN=%q: want a duration of at least 30s (%v)", spec, err)
	}
	reopenEvery := max(total/6, 20*time.Second)
	if s := os.Getenv("WALBROKER_LONGRUN_REOPEN"); s != "" {
		if reopenEvery, err = time.ParseDuration(s); err != nil || reopenEvery < 5*time.Second {
			t.Fatalf("WALBROKER_LONGRUN_REOPEN=%q: want a duration of at least 5s (%v)", s, err)
		}
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("WALBROKER_LONGRUN_SEED"); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("WALBROKER_LONGRUN_SEED=%q: %v", s, err)
		}
	}
	t.Logf("long run: %v, reopen every %v, seed %d (WALBROKER_LONGRUN_SEED)", total, reopenEvery, seed)

	r := newLongRun(t, seed)
	// The per-message state, made at its full size now and every page of
	// it touched, so that its growth does not show as the process's.
	n := int(total.Seconds()*2500) + 1<<16
	r.state, r.queueOf = make([]uint8, n), make([]uint8, n)
	for i := 0; i < n; i += 1 << 10 {
		r.state[i], r.queueOf[i] = 1, 1
		r.state[i], r.queueOf[i] = 0, 0
	}
	r.run(total, reopenEvery)
	if path := os.Getenv("WALBROKER_LONGRUN_HEAPPROFILE"); path != "" {
		runtime.GC()
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	lrSegmentBytes = 1 << 20
	lrSample       = 10 * time.Second
	lrWindow       = 3 * time.Second // the keyed queue's DedupWindow
	lrKeys         = 2500
	lrCapacity     = 200
	lrMaxDeliver   = 3
)

var lrQueues = []string{"work", "keyed", "capped"}

func lrPolicy(name string) broker.PolicyValue {
	p := broker.PolicyValue{
		VisibilityTimeout: 30 * time.Second,
		MaxDeliveries:     lrMaxDeliver,
		RetryDelay:        20 * time.Millisecond,
		MaxRetryDelay:     200 * time.Millisecond,
		MaxMessageBytes:   4 << 10,
	}
	switch name {
	case "keyed":
		p.DedupWindow = lrWindow
	case "capped":
		p.Capacity = lrCapacity
	}
	return p
}

// Per message state, indexed by the sequence number its ID spells.
const (
	lrPublished = 1 << iota // a publish returned it
	lrOK                    // a handler returned nil for it
	lrAgain                 // delivered again after lrOK
	lrDeleted               // deleted as a dead letter
	lrDelivered             // delivered at least once
)

// lrCounts is what the callers saw in one epoch (one open of the store) of
// one queue, to hold its QueueStats to.
type lrCounts struct {
	published, duplicates, shed                      atomic.Int64
	delivered, acked, nacked, rejected, deadLettered atomic.Int64
	replayed                                         atomic.Int64
}

type lrSampleRow struct {
	at                     time.Duration
	goroutines, fds, maps  int
	heapInuse, heapLive    int64 // HeapInuse as found, and HeapAlloc just after a GC
	rss, rssFile           int64 // resident, and of that what maps files
	diskBytes, diskFiles   int64
	segments               int
	storeDisk, storeIndex  int64
	checkpoints, copied    int64
	reclaimed              int64
	ready, leased, delayed int
	dead                   int
	published, shed, dups  int64
	commits                int64
	storeFiles             int // descriptors and mappings of the store's files
	records, ownRecords    int64
	maintenanceStopped     string
	planExceeded           bool
}

type longRun struct {
	t    *testing.T
	dir  string
	opts broker.Options
	seed int64

	mu     sync.RWMutex // held to write while the store is swapped
	store  *broker.Store
	queues map[string]*broker.Queue

	stateMu sync.Mutex
	state   []uint8 // by sequence
	queueOf []uint8 // by sequence: index in lrQueues, plus one

	keyMu   sync.Mutex
	keySeq  map[string]uint64    // the sequence a key last enqueued
	keyTime map[string]time.Time // its EnqueuedAt

	counts   [3]*lrCounts
	problems atomic.Int64 // unexpected things seen; each logged once it happens
	logged   sync.Map     // Consume's log messages → *atomic.Int64

	start   time.Time
	samples []lrSampleRow
	opens   []time.Duration
	replays []int // records each Open replayed
	backups int
	epochs  int
}

func newLongRun(t *testing.T, seed int64) *longRun {
	root := t.TempDir()
	r := &longRun{
		t: t, seed: seed,
		dir:     filepath.Join(root, "store"),
		opts:    broker.Options{SegmentBytes: lrSegmentBytes},
		keySeq:  map[string]uint64{},
		keyTime: map[string]time.Time{},
	}
	return r
}

func (r *longRun) problem(format string, args ...any) {
	if r.problems.Add(1) <= 20 {
		r.t.Errorf(format, args...)
	}
}

// mark sets bits on the message id names, in queue q.
func (r *longRun) mark(id string, q int, bits uint8) uint8 {
	seq, err := strconv.ParseUint(id, 16, 64)
	if err != nil || seq == 0 || seq > 1<<32 {
		r.problem("message ID %q is not one this store hands out", id)
		return 0
	}
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	if int(seq) >= len(r.state) {
		n := max(int(seq)+1, 2*len(r.state))
		r.state = slices.Grow(r.state, n-len(r.state))[:n]
		r.queueOf = slices.Grow(r.queueOf, n-len(r.queueOf))[:n]
	}
	if r.queueOf[seq] == 0 {
		r.queueOf[seq] = uint8(q + 1)
	} else if int(r.queueOf[seq]) != q+1 {
		r.problem("message %s seen in %s and %s", id, lrQueues[r.queueOf[seq]-1], lrQueues[q])
	}
	old := r.state[seq]
	r.state[seq] |= bits
	return old
}

func lrPayload(rng *rand.Rand) []byte {
	p := make([]byte, 100+rng.IntN(1900))
	for i := 4; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], rng.Uint64()) // every other eight bytes stay zero
		if len(p)-i < 16 {
			break
		}
	}
	binary.LittleEndian.PutUint32(p, crc32.ChecksumIEEE(p[4:]))
	return p
}

func lrIntact(p []byte) bool {
	return len(p) >= 4 && binary.LittleEndian.Uint32(p) == crc32.ChecksumIEEE(p[4:])
}

// countingHandler counts Consume's log records by level and message.
type countingHandler struct{ r *longRun }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, rec slog.Record) error {
	key := rec.Level.String() + " " + rec.Message
	v, _ := h.r.logged.LoadOrStore(key, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

func (r *longRun) open() time.Duration {
	r.t.Helper()
	began := time.Now()
	s, err := broker.Open(r.dir, r.opts)
	took := time.Since(began)
	if err != nil {
		r.t.Fatalf("open: %v", err)
	}
	// Every Close here was clean and wrote a checkpoint: a reopen loads it
	// and replays what little came after.
	rec := s.Recovery()
	r.replays = append(r.replays, rec.Replayed)
	if len(r.opens) > 0 && (rec.IndexRebuilt || rec.TornTail || rec.SalvagedSpans != 0) {
		r.problem("open %d after a clean Close: %+v", len(r.opens), rec)
	}
	qs := map[string]*broker.Queue{}
	for _, name := range lrQueues {
		q, err := s.Queue(name, lrPolicy(name))
		if err != nil {
			r.t.Fatalf("queue %s: %v", name, err)
		}
		qs[name] = q
	}
	r.mu.Lock()
	r.store, r.queues = s, qs
	r.mu.Unlock()
	return took
}

func (r *longRun) close() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.store.Close(); err != nil {
		r.t.Fatalf("close: %v", err)
	}
}

func (r *longRun) run(total, reopenEvery time.Duration) {
	t := r.t
	before := leakcheck.Running()
	r.start = time.Now()
	r.opens = append(r.opens, r.open())
	base := r.process()
	t.Logf("baseline after the first Open: %d goroutines, %d descriptors, %d mappings", base.goroutines, base.fds, base.maps)

	sampleCtx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(lrSample)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
				r.sample()
			}
		}
	}()

	end := r.start.Add(total)
	var reopened lrProcess
	for epoch := 0; ; epoch++ {
		last := time.Until(end) <= reopenEvery
		until := time.Now().Add(reopenEvery)
		if last {
			until = end
		}
		r.epoch(epoch, until, last)
		r.epochs++
		if r.problems.Load() > 0 || t.Failed() {
			break
		}
		r.close()
		r.opens = append(r.opens, r.open())
		if epoch == 0 {
			// A store with content holds its table and checkpoint files
			// too, which the empty one of the first Open did not have.
			reopened = r.process()
		}
		if last {
			break
		}
	}
	stopSampling()
	<-sampled
	r.sample()

	// The last reopen, with every queue drained: no more goroutines,
	// descriptors and mappings than after the first Open.
	end1 := r.process()
	r.report(base, end1)
	t.Logf("after the first reopen: %d goroutines, %d descriptors, %d mappings, %d of the store's files held", reopened.goroutines, reopened.fds, reopened.maps, reopened.storeFiles)
	if r.problems.Load() > 0 || t.Failed() {
		r.close()
		return
	}
	r.mu.RLock()
	for name, q := range r.queues {
		st := q.Stats()
		if st.Ready+st.Leased+st.Delayed != 0 {
			t.Errorf("queue %s after the last reopen: %d ready, %d leased, %d delayed; want it drained", name, st.Ready, st.Leased, st.Delayed)
		}
	}
	r.mu.RUnlock()
	const slackGoroutines, slackFDs, slackMaps = 4, 4, 32
	if d := end1.goroutines - base.goroutines; d > slackGoroutines {
		t.Errorf("goroutines: %d after the last reopen, %d after the first Open", end1.goroutines, base.goroutines)
	}
	if d := end1.fds - base.fds; d > slackFDs {
		t.Errorf("descriptors: %d after the last reopen, %d after the first Open", end1.fds, base.fds)
	}
	if d := end1.maps - base.maps; d > slackMaps {
		t.Errorf("mappings: %d after the last reopen, %d after the first Open", end1.maps, base.maps)
	}
	// The store holds a descriptor and a mapping per table file, and a
	// table file lives while one of its messages does: a dead letter kept
	// 20 s pins one file more, two at most.
	if end1.storeFiles > reopened.storeFiles+4 {
		t.Errorf("descriptors and mappings of the store's files: %d after the last reopen, %d after the first", end1.storeFiles, reopened.storeFiles)
	}
	r.close()
	if err := leakcheck.Check(before, r.dir); err != nil {
		t.Errorf("after the last Close: %v", err)
	}
	r.checkDisk()
	r.checkOpens()
}

type lrProcess struct {
	goroutines, fds, maps, storeFiles int
}

func (r *longRun) process() lrProcess {
	r.t.Helper()
	var p lrProcess
	// Goroutines that have just ended may still be counted a moment.
	deadline := time.Now().Add(2 * time.Second)
	p.goroutines = runtime.NumGoroutine()
	for prev := -1; p.goroutines != prev && time.Now().Before(deadline); {
		prev = p.goroutines
		time.Sleep(100 * time.Millisecond)
		p.goroutines = runtime.NumGoroutine()
	}
	p.fds, p.maps = fdsAndMaps()
	held, err := leakcheck.Files(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	p.storeFiles = len(held)
	return p
}

func fdsAndMaps() (fds, maps int) {
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		maps = strings.Count(string(b), "\n")
	}
	return fds, maps
}

func rssBytes(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// dirUsage returns the bytes the directory's files take on the device and
// their apparent size, and how many files it holds.
func dirUsage(dir string) (onDisk, apparent, files int64) {
	_ = filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed while walking
		}
		if de.IsDir() {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return nil
		}
		files++
		apparent += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			onDisk += st.Blocks * 512
		}
		return nil
	})
	return onDisk, apparent, files
}

func (r *longRun) sample() {
	var row lrSampleRow
	row.at = time.Since(r.start).Round(time.Second)
	row.goroutines = runtime.NumGoroutine()
	row.fds, row.maps = fdsAndMaps()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	row.heapInuse = int64(ms.HeapInuse)
	runtime.GC() // what lives, not what waits to be collected
	runtime.ReadMemStats(&ms)
	row.heapLive = int64(ms.HeapAlloc)
	row.rss, row.rssFile = rssBytes("VmRSS:"), rssBytes("RssFile:")
	r.mu.RLock()
	st := r.store.Stats()
	var apparent int64
	row.diskBytes, apparent, row.diskFiles = dirUsage(r.dir)
	for _, q := range r.queues {
		qs := q.Stats()
		row.ready += qs.Ready
		row.leased += qs.Leased
		row.delayed += qs.Delayed
		row.dead += qs.DeadLetters
		row.published += qs.Published
		row.shed += qs.Shed
		row.dups += qs.Duplicates
	}
	r.mu.RUnlock()
	row.segments = st.Segments
	row.storeDisk, row.storeIndex = st.DiskBytes, st.IndexBytes
	row.checkpoints, row.copied, row.reclaimed = st.Checkpoints, st.CopiedForward, st.BytesReclaimed
	row.records, row.ownRecords, row.commits = st.Records, st.OwnRecords, st.Commits
	if held, err := leakcheck.Files(r.dir); err == nil {
		row.storeFiles = len(held)
	}
	row.maintenanceStopped = st.MaintenanceStopped
	// The README's room to keep: DiskBytes + IndexBytes + 3 × SegmentBytes.
	// (Read apart from Stats, so a rotation in between may put one
	// segment more on either side.)
	row.planExceeded = apparent > st.DiskBytes+st.IndexBytes+4*lrSegmentBytes
	if row.maintenanceStopped != "" {
		r.problem("maintenance stopped at %v: %s", row.at, row.maintenanceStopped)
	}
	r.stateMu.Lock() // samples are appended by one goroutine at a time, but read at the end
	r.samples = append(r.samples, row)
	r.stateMu.Unlock()
}

// epoch runs the workload on the open store until the given instant, then
// stops it as a deploy would; the last one waits for the queues to drain.
func (r *longRun) epoch(n int, until time.Time, last bool) {
	t := r.t
	for i := range r.counts {
		r.counts[i] = new(lrCounts)
	}
	r.mu.RLock()
	qs := r.queues
	store := r.store
	r.mu.RUnlock()
	rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(n)))

	// Calls run on a context that does not end: one canceled midway may or
	// may not have taken effect, and the accounting needs to know which.
	bg := context.Background()
	pubCtx, stopPublishing := context.WithCancel(bg)
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	var publishers, consumers sync.WaitGroup
	log := slog.New(countingHandler{r})

	// Publishers: eight on "work" at 150/s, two on "keyed" at 200/s (each
	// its half of the keys, so that no two race for one key), two on
	// "capped" at 200/s.
	startPublisher := func(every time.Duration, publish func(rng *rand.Rand)) {
		prng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		publishers.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-pubCtx.Done():
					return
				case <-tick.C:
					publish(prng)
				}
			}
		})
	}
	work, keyed, capped := qs["work"], qs["keyed"], qs["capped"]
	for range 8 {
		startPublisher(time.Second/150, func(prng *rand.Rand) {
			m, err := work.Publish(bg, lrPayload(prng))
			if err != nil {
				r.problem("publish on work: %v", err)
				return
			}
			r.counts[0].published.Add(1)
			r.mark(m.ID, 0, lrPublished)
		})
	}
	for half := range 2 {
		startPublisher(time.Second/200, func(prng *rand.Rand) {
			key := "key-" + strconv.Itoa(2*prng.IntN(lrKeys/2)+half)
			called := time.Now()
			m, err := keyed.PublishKeyed(bg, key, lrPayload(prng))
			if err != nil {
				r.problem("keyed publish: %v", err)
				return
			}
			seq, _ := strconv.ParseUint(m.ID, 16, 64)
			r.keyMu.Lock()
			prev, seen := r.keySeq[key]
			prevAt := r.keyTime[key]
			dup := seen && prev == seq
			if !dup {
				r.keySeq[key], r.keyTime[key] = seq, m.EnqueuedAt
			}
			r.keyMu.Unlock()
			// The broker clock is the real one: a publish takes its
			// instant after it was called, and the window runs from the
			// instant the key's message was enqueued (EnqueuedAt).
			if dup {
				r.counts[1].duplicates.Add(1)
				if !m.EnqueuedAt.Equal(prevAt) {
					r.problem("key %s answered with %s enqueued at %v, which was enqueued at %v", key, m.ID, m.EnqueuedAt, prevAt)
				}
				// A key is forgotten once strictly older than the window.
				if age := called.Sub(prevAt); age > lrWindow+10*time.Millisecond {
					r.problem("key %s answered as a duplicate of %s, called %v after it was enqueued (window %v)", key, m.ID, age, lrWindow)
				}
				return
			}
			if seen {
				if age := m.EnqueuedAt.Sub(prevAt); age <= lrWindow {
					r.problem("key %s enqueued again as %s, %v after %016x was (window %v)", key, m.ID, age, prev, lrWindow)
				}
			}
			r.counts[1].published.Add(1)
			r.mark(m.ID, 1, lrPublished)
		})
	}
	for range 2 {
		startPublisher(time.Second/200, func(prng *rand.Rand) {
			m, err := capped.Publish(bg, lrPayload(prng))
			if errors.Is(err, broker.QueueFull) {
				r.counts[2].shed.Add(1)
				return
			}
			if err != nil {
				r.problem("publish on capped: %v", err)
				return
			}
			r.counts[2].published.Add(1)
			r.mark(m.ID, 2, lrPublished)
		})
	}

	// Consumers.
	var hmu sync.Mutex
	hrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	roll := func() float64 {
		hmu.Lock()
		defer hmu.Unlock()
		return hrng.Float64()
	}
	deliver := func(qi int, d broker.DeliveryValue) {
		c := r.counts[qi]
		c.delivered.Add(1)
		if !lrIntact(d.Message.Payload) {
			r.problem("queue %s: message %s delivered with a damaged payload (%d bytes)", lrQueues[qi], d.Message.ID, len(d.Message.Payload))
		}
		if old := r.mark(d.Message.ID, qi, lrDelivered); old&lrOK != 0 {
			r.mark(d.Message.ID, qi, lrAgain)
		}
	}
	errFailed := broker.NewError("HANDLER_FAILED", 1, "the handler failed", "")
	consume := func(qi int, q *broker.Queue, opts broker.ConsumeOptions, h broker.Handler) {
		opts.Logger = log
		opts.StopGrace = 10 * time.Second
		consumers.Go(func() {
			if err := broker.Consume(consumeCtx, q, h, opts); !errors.Is(err, context.Canceled) {
				r.problem("Consume on %s returned %v", lrQueues[qi], err)
			}
		})
	}
	consume(0, work, broker.ConsumeOptions{Batch: 16, Concurrency: 16}, func(ctx context.Context, d broker.DeliveryValue) error {
		deliver(0, d)
		c := r.counts[0]
		lastTry := d.Deliveries >= lrMaxDeliver
		switch x := roll(); {
		case x < 0.003:
			c.rejected.Add(1)
			c.deadLettered.Add(1)
			return broker.DoNotRetry(errFailed)
		case x < 0.08:
			c.nacked.Add(1)
			if lastTry {
				c.deadLettered.Add(1)
			}
			return errFailed
		case x < 0.1:
			c.nacked.Add(1)
			if lastTry {
				c.deadLettered.Add(1)
			}
			panic("a handler that panics now and then")
		}
		c.acked.Add(1)
		r.mark(d.Message.ID, 0, lrOK)
		return nil
	})
	consume(1, keyed, broker.ConsumeOptions{Batch: 8, Concurrency: 8}, func(ctx context.Context, d broker.DeliveryValue) error {
		deliver(1, d)
		r.counts[1].acked.Add(1)
		r.mark(d.Message.ID, 1, lrOK)
		return nil
	})
	// The slow consumer: about 150 a second against 400 published.
	consume(2, capped, broker.ConsumeOptions{Batch: 1, Concurrency: 1}, func(ctx context.Context, d broker.DeliveryValue) error {
		deliver(2, d)
		time.Sleep(5 * time.Millisecond) // the work it stands for
		r.counts[2].acked.Add(1)
		r.mark(d.Message.ID, 2, lrOK)
		return nil
	})

	// Dead letters: every 5 s, those that failed more than 20 s ago are
	// deleted, and one in five of the others replayed (once per epoch each).
	dlCtx, stopDL := context.WithCancel(context.Background())
	dlDone := make(chan struct{})
	go func() {
		defer close(dlDone)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		replayed := map[string]bool{}
		for {
			select {
			case <-dlCtx.Done():
				return
			case <-tick.C:
			}
			dls, err := work.DeadLetters(bg, 10000)
			if err != nil {
				r.problem("dead letters: %v", err)
				return
			}
			for _, dl := range dls {
				if !lrIntact(dl.Message.Payload) {
					r.problem("dead letter %s with a damaged payload", dl.Message.ID)
				}
				switch {
				case time.Since(dl.FailedAt) > 20*time.Second:
					if err := work.DeleteDeadLetter(bg, dl.Message.ID); err != nil {
						r.problem("delete dead letter %s: %v", dl.Message.ID, err)
						continue
					}
					r.mark(dl.Message.ID, 0, lrDeleted)
				case !replayed[dl.Message.ID] && rng.IntN(5) == 0:
					if err := work.ReplayDeadLetter(bg, dl.Message.ID); err != nil {
						r.problem("replay dead letter %s: %v", dl.Message.ID, err)
						continue
					}
					replayed[dl.Message.ID] = true
					r.counts[0].replayed.Add(1)
				}
			}
		}
	}()

	// A backup halfway through the epoch, opened, checked and removed.
	time.Sleep(time.Until(until) / 2) // the workload runs on the real clock
	r.backup(store, n)
	time.Sleep(time.Until(until))

	stopPublishing()
	publishers.Wait()
	stopDL()
	<-dlDone
	if last {
		// Drain: consumers go on until nothing is ready, leased or delayed.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			left := 0
			for _, q := range qs {
				st := q.Stats()
				left += st.Ready + st.Leased + st.Delayed
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				r.problem("the queues did not drain within 2 minutes: %d messages left", left)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stopConsuming()
	consumers.Wait()

	// Each queue's counters since this Open are what the callers counted.
	for qi, name := range lrQueues {
		st, c := qs[name].Stats(), r.counts[qi]
		want := broker.QueueStats{
			Ready: st.Ready, Leased: st.Leased, Delayed: st.Delayed, DeadLetters: st.DeadLetters, OldestReady: st.OldestReady,
			Published: c.published.Load(), Duplicates: c.duplicates.Load(), Shed: c.shed.Load(),
			Delivered: c.delivered.Load(), Acked: c.acked.Load(), Nacked: c.nacked.Load(),
			Rejected: c.rejected.Load(), DeadLettered: c.deadLettered.Load(), Replayed: c.replayed.Load(),
		}
		if st != want {
			r.problem("epoch %d, queue %s: Stats %+v, the callers counted %+v", n, name, st, want)
		}
		if st.Leased != 0 {
			r.problem("epoch %d, queue %s: %d leased once Consume returned", n, name, st.Leased)
		}
	}
	t.Logf("epoch %d ended at %v: work %+v", n, time.Since(r.start).Round(time.Second), qs["work"].Stats())
	if last {
		r.account(work)
	}
}

// account checks, the queues drained, that every message a publish returned
// for was handled, is a dead letter now, or was deleted as one.
func (r *longRun) account(work *broker.Queue) {
	dls, err := work.DeadLetters(context.Background(), 1<<20)
	if err != nil {
		r.problem("dead letters at the end: %v", err)
		return
	}
	dead := map[uint64]bool{}
	for _, dl := range dls {
		seq, _ := strconv.ParseUint(dl.Message.ID, 16, 64)
		dead[seq] = true
	}
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	var published, ok, again, deleted, deadNow, lost, unknown [3]int64
	for seq, st := range r.state {
		if st == 0 {
			continue
		}
		qi := int(r.queueOf[seq]) - 1
		if st&lrPublished == 0 {
			unknown[qi]++
			if unknown[qi] <= 5 {
				r.problem("queue %s: message %016x delivered, but no publish returned it", lrQueues[qi], seq)
			}
			continue
		}
		published[qi]++
		if st&lrAgain != 0 {
			again[qi]++
		}
		switch {
		case st&lrDeleted != 0:
			deleted[qi]++
			if dead[uint64(seq)] {
				r.problem("message %016x deleted, and still a dead letter", seq)
			}
		case dead[uint64(seq)]:
			deadNow[qi]++
		case st&lrOK != 0:
			ok[qi]++
		default:
			lost[qi]++
			if lost[qi] <= 5 {
				r.problem("queue %s: message %016x published (state %05b) is neither handled, a dead letter nor deleted", lrQueues[qi], seq, st)
			}
		}
	}
	for qi, name := range lrQueues {
		r.t.Logf("accounting %s: %d published = %d handled + %d dead letters + %d deleted + %d lost; %d handled again after success; %d delivered unknown",
			name, published[qi], ok[qi], deadNow[qi], deleted[qi], lost[qi], again[qi], unknown[qi])
		if again[qi] != 0 {
			// Every stop was clean: an ack that Consume made must hold.
			r.problem("queue %s: %d messages delivered again after their handler succeeded", name, again[qi])
		}
	}
}

// backup copies the running store, opens the copy, checks it and removes it.
func (r *longRun) backup(s *broker.Store, n int) {
	dir := filepath.Join(filepath.Dir(r.dir), fmt.Sprintf("backup-%d", n))
	began := time.Now()
	if err := s.Backup(context.Background(), dir); err != nil {
		r.problem("backup %d: %v", n, err)
		return
	}
	took := time.Since(began)
	b, err := broker.Open(dir, r.opts)
	if err != nil {
		r.problem("open backup %d: %v", n, err)
		return
	}
	names := b.Queues()
	slices.Sort(names)
	if want := slices.Sorted(slices.Values(lrQueues)); !slices.Equal(names, want) {
		r.problem("backup %d holds queues %v, want %v", n, names, want)
	}
	live := 0
	for _, name := range lrQueues {
		q, err := b.Queue(name, lrPolicy(name))
		if err != nil {
			r.problem("backup %d, queue %s: %v", n, name, err)
			continue
		}
		st := q.Stats()
		live += st.Ready + st.Leased + st.Delayed + st.DeadLetters
		if name == "work" {
			if _, err := q.DeadLetters(context.Background(), 10000); err != nil {
				r.problem("backup %d: dead letters: %v", n, err)
			}
		}
		if name == "capped" && st.Ready+st.Leased+st.Delayed > lrCapacity {
			r.problem("backup %d: capped holds %d messages, capacity %d", n, st.Ready+st.Leased+st.Delayed, lrCapacity)
		}
	}
	if err := b.Close(); err != nil {
		r.problem("close backup %d: %v", n, err)
	}
	if held, err := leakcheck.Files(dir); err != nil || len(held) > 0 {
		r.problem("backup %d still held after Close: %v %v", n, held, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		r.problem("remove backup %d: %v", n, err)
	}
	r.backups++
	r.t.Logf("backup %d at %v: %v, %d messages live in the copy", n, time.Since(r.start).Round(time.Second), took.Round(time.Millisecond), live)
}

func (r *longRun) report(base, end lrProcess) {
	t := r.t
	r.stateMu.Lock()
	rows := slices.Clone(r.samples)
	r.stateMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%6s %5s %4s %5s %4s %6s %6s %6s %5s %7s %5s %4s %7s %6s %5s %8s %8s %6s %8s %6s %5s %5s %5s %9s %6s %6s\n",
		"t", "gor", "fd", "maps", "held", "heapMB", "liveMB", "rssMB", "file", "diskMB", "files", "segs", "statsMB", "idxKB", "ckpts", "commits", "records", "own%", "copied", "reclMB",
		"ready", "lease", "delay", "published", "shed", "dups")
	for _, s := range rows {
		own := 0.0
		if s.records > 0 {
			own = 100 * float64(s.ownRecords) / float64(s.records)
		}
		plan := ""
		if s.planExceeded {
			plan = " >plan"
		}
		fmt.Fprintf(&b, "%6v %5d %4d %5d %4d %6.1f %6.1f %6.1f %5.1f %7.1f %5d %4d %7.1f %6d %5d %8d %8d %6.1f %8d %6.0f %5d %5d %5d %9d %6d %6d%s\n",
			s.at, s.goroutines, s.fds, s.maps, s.storeFiles, mb(s.heapInuse), mb(s.heapLive), mb(s.rss), mb(s.rssFile), mb(s.diskBytes), s.diskFiles, s.segments,
			mb(s.storeDisk), s.storeIndex>>10, s.checkpoints, s.commits, s.records, own, s.copied, mb(s.reclaimed),
			s.ready, s.leased, s.delayed, s.published, s.shed, s.dups, plan)
	}
	t.Logf("samples (counters since the last Open):%s", b.String())
	var opens []string
	for _, d := range r.opens {
		opens = append(opens, d.Round(time.Millisecond).String())
	}
	t.Logf("open times: %s; records replayed: %v", strings.Join(opens, " "), r.replays)
	t.Logf("%d epochs, %d backups; process after the last reopen: %d goroutines, %d descriptors, %d mappings, %d of the store's files held (after the first Open: %d, %d, %d, %d)",
		r.epochs, r.backups, end.goroutines, end.fds, end.maps, end.storeFiles, base.goroutines, base.fds, base.maps, base.storeFiles)
	var logs []string
	r.logged.Range(func(k, v any) bool {
		logs = append(logs, fmt.Sprintf("%s: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(logs)
	t.Logf("Consume's log: %s", strings.Join(logs, "; "))
	exceeded := 0
	for _, s := range rows {
		if s.planExceeded {
			exceeded++
		}
	}
	if exceeded > 0 {
		t.Errorf("%d samples found the directory above DiskBytes + IndexBytes + 3 segments (the README's room to keep)", exceeded)
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// checkDisk holds the directory of the last third of the run to that of the
// first (after its first minute, when the windows have filled): a store
// whose consumers keep up does not grow with the run.
func (r *longRun) checkDisk() {
	rows := r.samples
	if len(rows) < 9 {
		r.t.Logf("disk: %d samples, too few to compare thirds", len(rows))
		return
	}
	third := len(rows) / 3
	peak := func(rs []lrSampleRow) (disk, files int64) {
		for _, s := range rs {
			disk, files = max(disk, s.diskBytes), max(files, s.diskFiles)
		}
		return disk, files
	}
	firstStart := 0
	for firstStart < third && rows[firstStart].at < time.Minute {
		firstStart++
	}
	firstStart = min(firstStart, third-1) // a short run compares what it has
	d1, f1 := peak(rows[firstStart:third])
	d3, f3 := peak(rows[len(rows)-third:])
	r.t.Logf("disk: peak %.1f MB in %d files in the first third, %.1f MB in %d files in the last", mb(d1), f1, mb(d3), f3)
	if d3 > d1+2*lrSegmentBytes {
		r.t.Errorf("the directory grew with the run: peak %.1f MB in the last third, %.1f MB in the first", mb(d3), mb(d1))
	}
	live := func(rs []lrSampleRow) (peak int64) {
		for _, s := range rs {
			peak = max(peak, s.heapLive)
		}
		return peak
	}
	h1, h3 := live(rows[firstStart:third]), live(rows[len(rows)-third:])
	r.t.Logf("heap after GC: peak %.1f MB in the first third, %.1f MB in the last", mb(h1), mb(h3))
	if h3 > h1+h1/2+4<<20 {
		r.t.Errorf("the live heap grew with the run: peak %.1f MB in the last third, %.1f MB in the first", mb(h3), mb(h1))
	}
	if f3 > f1+2 {
		r.t.Errorf("the directory's files grew with the run: peak %d in the last third, %d in the first", f3, f1)
	}
}

// checkOpens holds the last reopens to the first: Open replays the log
// after the last checkpoint, which a store that checkpoints keeps short.
func (r *longRun) checkOpens() {
	if len(r.opens) < 3 {
		return
	}
	first := slices.Max(r.opens[1:2])
	lastOpen := r.opens[len(r.opens)-1]
	if lastOpen > 3*first+500*time.Millisecond {
		r.t.Errorf("Open slowed down: %v at the last reopen, %v at the first", lastOpen, first)
	}
}
