package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The reopen workload shows what a large backlog costs a store's Open, and
// what a checkpoint saves: a store is filled once with -messages
// pending messages and closed; then each round opens it twice, cold, and
// times it until the first message is in hand — once from the checkpoint
// Close wrote, once with the index directory removed, so that Open
// rebuilds the queues' state from the whole log. It runs after every
// other workload's rounds, on the store of its own that they leave alone.

// reopenLoad is the reopen workload.
type reopenLoad struct {
	messages     int
	size         int
	segmentBytes int64 // zero: the broker's default

	hangTimeout time.Duration // for tests; zero: hangTimeout
}

func (l reopenLoad) String() string {
	return fmt.Sprintf("reopen, %d pending, %d B", l.messages, l.size)
}

// storeOptions is what the reopen workload's store is opened with, by
// the fill and by every open. Each open leases the oldest message and
// hands it back (see openCold), one delivery more each time: the queue
// allows more deliveries than any run makes, so that none is ever
// dead-lettered and every open finds the store as the fill left it.
func (l reopenLoad) storeOptions() storeOptions {
	return storeOptions{sync: broker.SyncAll, segmentBytes: l.segmentBytes, size: l.size, maxDeliveries: math.MaxInt32}
}

// reopenFill is the filled store every round opens, as the fill left it.
type reopenFill struct {
	st           *benchStore // closed; its directory stays until release
	elapsed      time.Duration
	segments     int   // segment files
	segmentBytes int64 // their total size
	indexBytes   int64 // the checkpoint's files
}

// fillReopen opens a new store under SyncAll in a new subdirectory of
// parent, fills its queue with l.messages pending messages and closes it,
// which writes its checkpoint. The caller defers fill.st.release, also
// after an error; ctx ending stops the fill, and then interrupted is set.
func fillReopen(ctx context.Context, env *env, parent string, l reopenLoad) (fill reopenFill, interrupted bool, err error) {
	fill.st, err = openStore(l, l.hangTimeout, parent, "reopen-", l.storeOptions())
	if err != nil {
		return fill, false, err
	}
	start := time.Now()
	var done atomic.Int64
	stop := env.progress.track(l.String()+": fill", int64(l.messages), done.Load,
		func(n int64) string { return fmt.Sprintf("%d/%d messages", n, l.messages) })
	err = fillQueue(ctx, fill.st.q, l.messages, l.size, &done)
	stop()
	if err != nil {
		return fill, false, fmt.Errorf("%v: fill: %w", l, err)
	}
	if ctx.Err() != nil {
		return fill, true, nil
	}
	s := fill.st.s
	fill.st.s = nil // closed here, not by release
	if err := closeWithin(s, fill.st.hang, l); err != nil {
		return fill, false, err
	}
	fill.elapsed = time.Since(start)
	fill.segments, fill.segmentBytes, fill.indexBytes, err = storeFiles(fill.st.dir)
	if err != nil {
		return fill, false, fmt.Errorf("%v: %w", l, err)
	}
	return fill, false, nil
}

// storeFiles counts the segment files in a store's directory and sums
// their sizes and those of its index directory.
func storeFiles(dir string) (segments int, segmentBytes, indexBytes int64, err error) {
	index := filepath.Join(dir, "index")
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(path, index+string(filepath.Separator)):
			indexBytes += info.Size()
		case filepath.Dir(path) == dir && strings.HasSuffix(path, ".seg"):
			segments++
			segmentBytes += info.Size()
		}
		return nil
	})
	return segments, segmentBytes, indexBytes, err
}

// reopenResult is what one round of the reopen workload measured.
type reopenResult struct {
	checkpoint openTiming // from the checkpoint
	rebuild    openTiming // with the index directory removed
	notes      []string   // what looked wrong in the store's counters
}

// openTiming is one cold open of the filled store.
type openTiming struct {
	// elapsed is from the call of broker.Open until the first Receive(1)
	// returned a message, Store.Queue between them.
	elapsed time.Duration
	first   broker.MessageValue // what that Receive returned
	// heapBefore and heapInUse are runtime.MemStats.HeapInuse after a
	// runtime.GC just before the open and with the store just opened.
	heapBefore, heapInUse uint64
	// warm: the store's files could not be evicted from the page cache
	// (only Linux lets a process ask), so the open was timed warm.
	warm bool
}

// reopenRound opens the store in dir cold twice, from its checkpoint and
// then rebuilding its index, each until its first message, and closes it
// after each. ctx ending between the two opens cuts the round short: it
// is then not measured, and interrupted is set.
func reopenRound(ctx context.Context, dir string, l reopenLoad) (res reopenResult, interrupted bool, err error) {
	res.checkpoint, err = openCold(dir, l, &res.notes, false)
	if err != nil {
		return res, false, fmt.Errorf("%v: open from the checkpoint: %w", l, err)
	}
	if ctx.Err() != nil {
		return res, true, nil
	}
	// After a rebuild, Open writes a checkpoint, and Close another: remove
	// the directory that holds them before each rebuild.
	if err := os.RemoveAll(filepath.Join(dir, "index")); err != nil {
		return res, false, fmt.Errorf("%v: %w", l, err)
	}
	res.rebuild, err = openCold(dir, l, &res.notes, true)
	if err != nil {
		return res, false, fmt.Errorf("%v: open rebuilding the index: %w", l, err)
	}
	return res, false, nil
}

// openHow names an open from the checkpoint, or rebuilding the index.
func openHow(rebuild bool) string {
	if rebuild {
		return "rebuilding the index"
	}
	return "from the checkpoint"
}

// evictPageCache is vfs.EvictPageCache; tests replace it.
var evictPageCache = vfs.EvictPageCache

// openCold evicts the files of the store in dir from the page cache (where
// the system allows it: see openTiming.warm), then
// opens it, declares its queue and receives one message, timed, reads the
// heap in use, hands the message back and closes the store. It adds to
// notes what looks wrong in the store's counters.
//
// The message is handed back (a Nack: the policy's RetryDelay is zero, so
// it is ready again at once) rather than left leased, or every open
// would take one more message out of the backlog for the lease's minute,
// and with fewer messages than opens one would find none ready. The next
// open then finds the same messages pending, the same one first; its log
// is longer by the lease and the nack, two records of a few bytes.
func openCold(dir string, l reopenLoad, notes *[]string, rebuild bool) (t openTiming, err error) {
	if err := evictPageCache(dir); errors.Is(err, errors.ErrUnsupported) {
		t.warm = true // macOS: timed with the files in the page cache, and said so
	} else if err != nil {
		return t, err
	}
	t.heapBefore = heapInUse()
	start := time.Now()
	o := l.storeOptions()
	s, err := broker.Open(dir, broker.Options{Sync: o.sync, SegmentBytes: o.segmentBytes})
	if err != nil {
		return t, fmt.Errorf("broker.Open: %w", err)
	}
	defer func() { err = errors.Join(err, closeWithin(s, orHangTimeout(l.hangTimeout), l)) }()
	q, err := s.Queue(benchQueue, queuePolicy(o))
	if err != nil {
		return t, fmt.Errorf("store.Queue: %w", err)
	}
	ds, err := q.Receive(context.Background(), 1)
	if err != nil {
		return t, fmt.Errorf("queue.Receive: %w", err)
	}
	t.elapsed = time.Since(start)
	if len(ds) != 1 {
		return t, fmt.Errorf("the first Receive returned %d messages, want 1 of %d pending", len(ds), l.messages)
	}
	t.first = ds[0].Message
	t.heapInUse = heapInUse()

	how := openHow(rebuild)
	if n := len(t.first.Payload); n != l.size {
		*notes = append(*notes, fmt.Sprintf("open %s: the first message has %d bytes, want %d", how, n, l.size))
	}
	// Every open before this one handed its message back: all are ready
	// but the one in hand.
	if qs := q.Stats(); qs.Ready != l.messages-1 || qs.Leased != 1 || qs.Delayed != 0 || qs.DeadLetters != 0 {
		*notes = append(*notes, fmt.Sprintf("open %s: queue Stats: %d ready, %d leased, %d delayed, %d dead letters; want %d ready, the 1 received leased, none dead",
			how, qs.Ready, qs.Leased, qs.Delayed, qs.DeadLetters, l.messages-1))
	}
	if _, err := q.Nack(context.Background(), ds[0].Lease.Receipt, nil); err != nil {
		return t, fmt.Errorf("queue.Nack of the message received: %w", err)
	}
	// Open writes a checkpoint when it replayed any record: always after
	// a rebuild, never right after a Close that wrote one.
	switch c := s.Stats().Checkpoints; {
	case rebuild && c == 0:
		*notes = append(*notes, "open rebuilding the index: Open wrote no checkpoint, as if it had replayed nothing")
	case !rebuild && c > 0:
		*notes = append(*notes, "open from the checkpoint: Open wrote a checkpoint, as if it had replayed records after the one Close wrote")
	}
	return t, nil
}

// heapInUse is runtime.MemStats.HeapInuse after a runtime.GC.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// measureReopen fills the reopen workload's store in a new subdirectory
// of dir, then runs rounds rounds on it, until ctx ends or one fails, and
// removes it. It returns the summary of the rounds measured, nil if none
// was, with the error.
func measureReopen(ctx context.Context, env *env, dir string, l reopenLoad, rounds int) (sum *Reopen, err error) {
	fill, interrupted, err := fillReopen(ctx, env, dir, l)
	defer fill.st.release(&err)
	if err != nil || interrupted {
		return nil, err
	}
	var rows []Reopen
	for i := range rounds {
		if ctx.Err() != nil {
			break
		}
		if rounds > 1 {
			env.progress.printf("%v: round %d/%d", l, i+1, rounds)
		}
		var res reopenResult
		res, interrupted, err = reopenRound(ctx, fill.st.dir, l)
		if err != nil || interrupted {
			break
		}
		rows = append(rows, reopenRoundRow(l, res, i+1))
	}
	if len(rows) == 0 {
		return nil, err
	}
	s := summarize(rows, len(rows) > 1)
	s.Interrupted = s.Interrupted || interrupted
	s.FillSeconds = fill.elapsed.Seconds()
	s.Segments = fill.segments
	s.SegmentFileBytes = fill.segmentBytes
	s.IndexBytes = fill.indexBytes
	// The heap per message is of the median heap, not a median of its own.
	if s.HeapInUseBytes != nil {
		s.HeapBytesPerMessage = ptr(float64(*s.HeapInUseBytes) / float64(l.messages))
	}
	return &s, err
}

// reopenRoundRow makes the figures of one round.
func reopenRoundRow(l reopenLoad, res reopenResult, round int) Reopen {
	r := Reopen{
		Workload:            l.String(),
		Messages:            l.messages,
		Size:                l.size,
		SegmentBytes:        effectiveSegmentBytes(l.segmentBytes),
		Round:               round,
		CheckpointOpenNs:    ptr(int64(res.checkpoint.elapsed)),
		RebuildOpenNs:       ptr(int64(res.rebuild.elapsed)),
		HeapBeforeBytes:     ptr(int64(res.checkpoint.heapBefore)),
		HeapInUseBytes:      ptr(int64(res.checkpoint.heapInUse)),
		HeapBytesPerMessage: ptr(float64(res.checkpoint.heapInUse) / float64(l.messages)),
		Warm:                res.checkpoint.warm || res.rebuild.warm,
		Notes:               res.notes,
	}
	r.RebuildVsCheckpoint = ratioNs(r.RebuildOpenNs, r.CheckpointOpenNs)
	return r
}
