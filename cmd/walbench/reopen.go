package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/walbroker/walbroker/broker"
)

// The reopen workload shows what a large backlog costs a store's Open, and
// what a checkpoint saves: a store is filled once with -reopen-messages
// pending messages and closed; then each round opens it twice, cold, and
// times it until the first message is in hand — once from the checkpoint
// Close wrote, once with the index directory removed, so that Open
// rebuilds the queues' state from the whole log. It runs after every
// other workload's rounds, on the store of its own that they leave alone.

// reopenLoad is the reopen workload.
type reopenLoad struct {
	messages     int
	payloadBytes int
	segmentBytes int64 // zero: the broker's default

	hangTimeout time.Duration // for tests; zero: hangTimeout
}

func (l reopenLoad) String() string {
	return fmt.Sprintf("broker reopen, %d pending, %d B, sync=all", l.messages, l.payloadBytes)
}

// reopenFill is the filled store every round opens, as the fill left it.
type reopenFill struct {
	st           *brokerStore // closed; its directory stays until release
	elapsed      time.Duration
	segments     int   // segment files
	segmentBytes int64 // their total size
	indexBytes   int64 // the checkpoint's files
}

// fillReopen opens a new store under SyncAll in a new subdirectory of
// parent, fills its queue with l.messages pending messages and closes it,
// which writes its checkpoint. It prints its progress on progress each
// second once it has run for two. The caller defers fill.st.release, also
// after an error; ctx ending stops the fill, and then interrupted is set.
func fillReopen(ctx context.Context, progress io.Writer, parent string, l reopenLoad) (fill reopenFill, interrupted bool, err error) {
	hang := orHangTimeout(l.hangTimeout)
	fill.st, err = openBrokerStore(l, hang, parent, "broker-reopen-", broker.SyncAll, l.segmentBytes, l.payloadBytes)
	if err != nil {
		return fill, false, err
	}
	// In steps, to say how far it got: each a few MiB.
	const step = 16 * fillBatch
	start, lastPrint := time.Now(), time.Now()
	for done := 0; done < l.messages; {
		k := min(step, l.messages-done)
		interrupted, err := fillQueue(ctx, fill.st.q, k, l.payloadBytes)
		if err != nil || interrupted {
			if err != nil {
				err = fmt.Errorf("%v: fill: %w", l, err)
			}
			return fill, interrupted, err
		}
		done += k
		if now := time.Now(); now.Sub(start) >= 2*time.Second && now.Sub(lastPrint) >= time.Second {
			lastPrint = now
			fmt.Fprintf(progress, "%v: filled %d/%d messages after %v\n", l, done, l.messages, now.Sub(start).Round(time.Second))
		}
	}
	s := fill.st.s
	fill.st.s = nil // closed here, not by release
	if err := closeWithin(s, hang, l); err != nil {
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

// openCold evicts the files of the store in dir from the page cache, then
// opens it, declares its queue and receives one message, timed, reads the
// heap in use, and closes the store. It adds to notes what looks wrong in
// the store's counters.
func openCold(dir string, l reopenLoad, notes *[]string, rebuild bool) (t openTiming, err error) {
	if err := evictPageCache(dir); err != nil {
		return t, err
	}
	t.heapBefore = heapInUse()
	start := time.Now()
	s, err := broker.Open(dir, broker.Options{Sync: broker.SyncAll, SegmentBytes: l.segmentBytes})
	if err != nil {
		return t, fmt.Errorf("broker.Open: %w", err)
	}
	defer func() { err = errors.Join(err, closeWithin(s, orHangTimeout(l.hangTimeout), l)) }()
	q, err := s.Queue(brokerQueue, brokerPolicy(l.segmentBytes, l.payloadBytes))
	if err != nil {
		return t, fmt.Errorf("Queue: %w", err)
	}
	ds, err := q.Receive(context.Background(), 1)
	if err != nil {
		return t, fmt.Errorf("Receive: %w", err)
	}
	t.elapsed = time.Since(start)
	if len(ds) != 1 {
		return t, fmt.Errorf("the first Receive returned %d messages, want 1 of %d pending", len(ds), l.messages)
	}
	t.first = ds[0].Message
	t.heapInUse = heapInUse()

	how := "from the checkpoint"
	if rebuild {
		how = "rebuilding the index"
	}
	if n := len(t.first.Payload); n != l.payloadBytes {
		*notes = append(*notes, fmt.Sprintf("open %s: the first message has %d bytes, want %d", how, n, l.payloadBytes))
	}
	// Each round leases one message (and a lease may lapse): none is gone.
	if qs := q.Stats(); qs.Ready+qs.Leased+qs.Delayed != l.messages || qs.DeadLetters != 0 {
		*notes = append(*notes, fmt.Sprintf("open %s: queue Stats: %d ready, %d leased, %d delayed, %d dead letters; want %d messages, none dead",
			how, qs.Ready, qs.Leased, qs.Delayed, qs.DeadLetters, l.messages))
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

// evictPageCache asks the kernel to drop every file under dir from the
// page cache. It drops only clean pages, which are all there are once the
// store is closed: Close makes everything durable.
func evictPageCache(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return &os.PathError{Op: "fadvise", Path: path, Err: err}
		}
		return nil
	})
}

// measureReopen fills the reopen workload's store in a new subdirectory
// of dir, then runs cfg.rounds rounds on it, until ctx ends or one fails,
// and removes it. It returns the summary of the rounds measured, nil if
// none was, with the error.
func measureReopen(ctx context.Context, progress io.Writer, dir string, cfg config) (sum *reopenRow, err error) {
	l := reopenLoad{messages: cfg.reopenMessages, payloadBytes: cfg.recordBytes, segmentBytes: cfg.segmentBytes}
	fill, interrupted, err := fillReopen(ctx, progress, dir, l)
	defer fill.st.release(&err)
	if err != nil || interrupted {
		return nil, err
	}
	var rounds []reopenRow
	for i := range cfg.rounds {
		if ctx.Err() != nil {
			break
		}
		if cfg.rounds > 1 {
			fmt.Fprintf(progress, "%v: round %d/%d\n", l, i+1, cfg.rounds)
		}
		var res reopenResult
		res, interrupted, err = reopenRound(ctx, fill.st.dir, l)
		if err != nil || interrupted {
			break
		}
		rounds = append(rounds, reopenRoundRow(l, res, i+1))
	}
	if len(rounds) == 0 {
		return nil, err
	}
	return summarizeReopen(fill, rounds, interrupted), err
}

// reopenRow is the reopen workload's figures: one round's (Round set) or
// the summary of its rounds (Rounds and PerRound set), as for a row. Its
// JSON form is documented in main.go.
type reopenRow struct {
	Workload     string `json:"workload"`
	Sync         string `json:"sync"`
	Messages     int    `json:"messages"`
	BytesPerOp   int    `json:"bytes_per_op"`
	SegmentBytes int64  `json:"segment_bytes,omitempty"`
	Round        int    `json:"round,omitempty"`  // 1-based; one round's only
	Rounds       int    `json:"rounds,omitempty"` // rounds summarized; a summary only
	Interrupted  bool   `json:"interrupted"`

	// The fill, once for every round: a summary only.
	FillSeconds      float64 `json:"fill_seconds,omitempty"`
	Segments         int     `json:"segments,omitempty"`
	SegmentFileBytes int64   `json:"segment_file_bytes,omitempty"`
	IndexBytes       int64   `json:"index_bytes,omitempty"`

	// The opens: one round's figures, or the medians of the rounds'.
	CheckpointOpenNs       int64    `json:"checkpoint_open_ns"`
	RebuildOpenNs          int64    `json:"rebuild_open_ns"`
	RebuildVsCheckpoint    float64  `json:"rebuild_vs_checkpoint"`
	RebuildVsCheckpointMin *float64 `json:"rebuild_vs_checkpoint_min,omitempty"`
	RebuildVsCheckpointMax *float64 `json:"rebuild_vs_checkpoint_max,omitempty"`
	HeapBeforeBytes        int64    `json:"heap_before_open_bytes"`
	HeapInUseBytes         int64    `json:"heap_inuse_bytes"`
	HeapBytesPerMessage    float64  `json:"heap_bytes_per_message"`

	Notes    []string    `json:"notes,omitempty"`
	PerRound []reopenRow `json:"per_round,omitempty"`
}

// reopenRoundRow makes the row of one round.
func reopenRoundRow(l reopenLoad, res reopenResult, round int) reopenRow {
	r := reopenRow{
		Workload:            l.String(),
		Sync:                broker.SyncAll.String(),
		Messages:            l.messages,
		BytesPerOp:          l.payloadBytes,
		SegmentBytes:        l.segmentBytes,
		Round:               round,
		CheckpointOpenNs:    int64(res.checkpoint.elapsed),
		RebuildOpenNs:       int64(res.rebuild.elapsed),
		HeapBeforeBytes:     int64(res.checkpoint.heapBefore),
		HeapInUseBytes:      int64(res.checkpoint.heapInUse),
		HeapBytesPerMessage: float64(res.checkpoint.heapInUse) / float64(l.messages),
		Notes:               res.notes,
	}
	if r.CheckpointOpenNs > 0 {
		r.RebuildVsCheckpoint = float64(r.RebuildOpenNs) / float64(r.CheckpointOpenNs)
	}
	return r
}

// summarizeReopen makes the summary of the rounds: the medians of their
// figures, the median and range of their ratios (a median of ratios, not
// a ratio of medians), and their notes.
func summarizeReopen(fill reopenFill, rounds []reopenRow, interrupted bool) *reopenRow {
	first := rounds[0]
	s := &reopenRow{
		Workload:         first.Workload,
		Sync:             first.Sync,
		Messages:         first.Messages,
		BytesPerOp:       first.BytesPerOp,
		SegmentBytes:     first.SegmentBytes,
		Rounds:           len(rounds),
		Interrupted:      interrupted,
		FillSeconds:      fill.elapsed.Seconds(),
		Segments:         fill.segments,
		SegmentFileBytes: fill.segmentBytes,
		IndexBytes:       fill.indexBytes,
		PerRound:         rounds,
	}
	medianInt := func(field func(reopenRow) int64) int64 {
		var xs []float64
		for _, r := range rounds {
			xs = append(xs, float64(field(r)))
		}
		m, _ := median(xs)
		return int64(math.Round(m))
	}
	s.CheckpointOpenNs = medianInt(func(r reopenRow) int64 { return r.CheckpointOpenNs })
	s.RebuildOpenNs = medianInt(func(r reopenRow) int64 { return r.RebuildOpenNs })
	s.HeapBeforeBytes = medianInt(func(r reopenRow) int64 { return r.HeapBeforeBytes })
	s.HeapInUseBytes = medianInt(func(r reopenRow) int64 { return r.HeapInUseBytes })
	s.HeapBytesPerMessage = float64(s.HeapInUseBytes) / float64(s.Messages)
	var ratios []float64
	for _, r := range rounds {
		ratios = append(ratios, r.RebuildVsCheckpoint)
		for _, n := range r.Notes {
			if len(rounds) > 1 {
				n = fmt.Sprintf("round %d: %s", r.Round, n)
			}
			s.Notes = append(s.Notes, n)
		}
	}
	s.RebuildVsCheckpoint, _ = median(ratios)
	if len(rounds) > 1 {
		s.RebuildVsCheckpointMin, s.RebuildVsCheckpointMax = ptr(slices.Min(ratios)), ptr(slices.Max(ratios))
	}
	return s
}

// printReopen writes the reopen workload's figures as a table of one row,
// in the style of the main table, with what they are and its notes. rounds
// is the -rounds asked for.
func printReopen(out io.Writer, r *reopenRow, rounds int) error {
	multi := rounds > 1
	name := r.Workload
	if r.Interrupted {
		name += " (interrupted)"
	}
	if multi && r.Rounds < rounds {
		name += fmt.Sprintf(" (%d of %d rounds)", r.Rounds, rounds)
	}
	header := []string{"from checkpoint", "forced rebuild", "rebuild ÷ checkpoint"}
	cells := []string{latency(&r.CheckpointOpenNs), latency(&r.RebuildOpenNs), fmt.Sprintf("%.1f", r.RebuildVsCheckpoint)}
	if multi {
		spread := "-" // one round measured
		if r.RebuildVsCheckpointMin != nil && r.RebuildVsCheckpointMax != nil {
			spread = fmt.Sprintf("%.1f–%.1f", *r.RebuildVsCheckpointMin, *r.RebuildVsCheckpointMax)
		}
		header = append(header, "min–max")
		cells = append(cells, spread)
	}
	header = append(header, "heap MiB", "heap B/message")
	cells = append(cells, fmt.Sprintf("%.1f", float64(r.HeapInUseBytes)/(1<<20)), fmt.Sprintf("%.1f", r.HeapBytesPerMessage))

	fmt.Fprintln(out)
	width := max(len("workload"), len([]rune(name)))
	// As in the main table: the workload column padded, left-aligned, the
	// numbers right-aligned, each cell after the gap.
	tw := tabwriter.NewWriter(out, 0, 0, 0, ' ', tabwriter.AlignRight)
	for _, line := range []struct {
		first string
		cells []string
	}{{"workload", header}, {name, cells}} {
		fmt.Fprintf(tw, "%-*s\t", width, line.first)
		for _, c := range line.cells {
			fmt.Fprintf(tw, "  %s\t", c)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	files := "files"
	if r.Segments == 1 {
		files = "file"
	}
	fmt.Fprintln(out, "times: broker.Open + Queue + the first Receive(1), the store's files evicted from the page cache before each")
	fmt.Fprintln(out, "heap: HeapInuse after runtime.GC, the store just opened from its checkpoint (the whole process's heap)")
	fmt.Fprintf(out, "store: filled in %.1fs; %d segment %s, %.1f MiB; index %.1f MiB\n",
		r.FillSeconds, r.Segments, files, float64(r.SegmentFileBytes)/(1<<20), float64(r.IndexBytes)/(1<<20))
	if multi {
		fmt.Fprintf(out, "medians of %d rounds; the ÷ is the median of the ratios within a round, min–max over the rounds beside it\n", r.Rounds)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s: %s\n", r.Workload, n)
	}
	return nil
}
