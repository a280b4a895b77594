// Command walbench measures how fast the write-ahead log (package wal) can
// make appends durable on this machine's disk, next to how fast the disk
// itself completes fdatasyncs, how fast the broker (package broker) built
// on that log publishes and drains messages, and, on request, how long a
// store with a backlog takes to reopen.
//
// Usage:
//
//	walbench [-dir DIR] [-rounds 1] [-time 3s] [-probe-time 2s] [-warmup 200ms]
//	         [-appenders 1,16,64] [-size 1024] [-sync always|interval|never]
//	         [-segment-bytes N] [-broker=true] [-drain-messages N]
//	         [-reopen-messages N] [-json FILE]
//
// It makes a temporary directory under DIR (default: the current
// directory) and removes it at the end, also after an error or Ctrl-C. In
// it, it runs -rounds rounds, back to back. Each round first probes the raw
// fdatasync rate, for -probe-time each (0 skips every raw probe):
//
//   - raw overwrite: pwrite 4 KiB over a 64 MiB file written full of zeros
//     and synced beforehand, sequentially, then fdatasync; again. This is
//     what the log's appends to its pre-written segments cost the disk.
//   - raw append: pwrite 4 KiB at the end of a growing file, then
//     fdatasync; again. Each fdatasync must commit a new size and extent.
//
// Then, for each count in -appenders, it opens a new log (wal.Open with
// -sync and -segment-bytes) in a new subdirectory, starts that many
// goroutines each calling Append with one record of -size bytes in a loop,
// lets them warm up for -warmup, and measures for -time. Rates come from
// the deltas of Log.Stats over the window, latencies from a histogram of
// every Append started in it. Under -sync always, right after each such
// run it probes once more for -probe-time:
//
//   - raw batch ceiling: like raw overwrite, but each pwrite writes B bytes,
//     the run's mean bytes per fdatasync (Stats().BytesWritten delta ÷
//     Stats().Syncs delta), at sequential offsets from 32, where a
//     segment's first frame goes. (B ÷ (record size + 17 bytes of frame
//     header)) × its fdatasyncs/s is the rate at which a writer that did
//     nothing but write and sync batches of that size would make records
//     durable on this disk, now.
//
// Then, unless -broker=false, come the broker workloads, each on a new
// store (broker.Open with -segment-bytes, in a new subdirectory) with one
// queue (VisibilityTimeout 1m, MaxDeliveries 5; MaxMessageBytes -size when
// -segment-bytes is under 2 MiB, too small for the default 1 MiB bound),
// messages of -size bytes:
//
//   - broker publish: for each count N in -appenders, a store under
//     SyncAll and N goroutines each calling Publish in a loop, warmed up
//     and measured as the WAL workloads are (-warmup, -time). Rates come
//     from the deltas of Store.Stats (Records, Commits) over the window,
//     latencies from every Publish started in it.
//   - broker drain via Consume, 64×64: a store under SyncAll, then one
//     under SyncPublish, whose queue is filled, untimed, with
//     -drain-messages messages (M: 100000 by default, 20000 with -rounds
//     1) by PublishBatch of 256; then broker.Consume with Batch 64 and
//     Concurrency 64 runs a handler that only counts, and the drain is
//     timed from the call until Consume returns, after the handler saw
//     the M-th message and cancelled it. Rates are M ÷ that time, and the
//     deltas of Store.Stats over it.
//   - broker drain via Receive+Ack, C consumers, batch 64, for C = 1 and
//     4, under SyncAll: filled likewise, then C goroutines each loop
//     Receive(64) and Ack each delivery in turn. Such a drain stops after
//     -time if messages are left (one consumer makes about one commit per
//     message): the rate is then of the messages acked by then.
//
// A drain in which no message is handled for 20 s fails, naming what the
// store and the queue hold.
//
// Then, only with -reopen-messages N (N > 0; -broker=false does not skip
// it), comes the reopen workload, once all the rounds above are done: it
// fills a new store (SyncAll, -segment-bytes, the same queue) with N
// pending messages of -size bytes by PublishBatch of 256, untimed, and
// closes it, which writes its checkpoint. Then, -rounds times:
//
//   - broker reopen from the checkpoint: every file of the store is
//     evicted from the page cache (posix_fadvise DONTNEED; the files are
//     clean after Close), then broker.Open + Store.Queue + the first
//     Receive(1) is timed, until it has returned a message; the heap in
//     use is read (runtime.MemStats.HeapInuse after runtime.GC, for the
//     whole process) with the store open; the store is closed, untimed.
//   - broker reopen rebuilding the index: the same, after removing the
//     store's index directory, so that Open replays the whole log.
//
// Each round leases one more message; its lease does not matter.
//
// The disk of a shared machine is noisy: its fdatasync rate can change by
// half within minutes. So every ratio is computed within a round, from
// figures measured minutes apart at most, and with more than one round each
// figure is summarized by its median over the rounds (the mean of the two
// middle values for an even count): a ratio's median is the median of the
// rounds' ratios, not the ratio of the medians.
//
// It prints one table, one row per workload:
//
//	appends/s             Stats().Records delta per second (one record per Append);
//	                      broker rows: messages per second (publish: one record
//	                      per Publish; drain: messages acked ÷ the drain's time)
//	MB/s                  payload bytes per second, 10^6 bytes (raw: the 4 KiB writes)
//	p50, p99              latency of one Append or Publish (raw: one pwrite +
//	                      fdatasync; drains: none)
//	fdatasyncs/s          Stats().Syncs (broker: Commits) delta per second (raw:
//	                      loop iterations)
//	records/fdatasync     Records delta / Syncs (Commits) delta: the group-commit
//	                      factor; a drain's records are its leases and acks
//	÷ raw overwrite fsync appends/s ÷ the same round's raw overwrite fdatasyncs/s
//	                      (wal and broker publish rows)
//	batch ceiling rec/s   the raw batch ceiling probe's records/s, as above
//	÷ batch ceiling       appends/s ÷ the same round's batch ceiling
//	÷ wal same N          broker publish rows: msgs/s ÷ the appends/s of the same
//	                      round's WAL row with as many appenders as producers,
//	                      under -sync always only (present with broker rows)
//
// With more than one round, a "min–max" column after each ratio gives its
// least and greatest value over the rounds, and a line under the table
// says the figures are medians. Under the table come the date, CPUs, OS,
// kernel, Go version, file system and directory. A column that does not
// apply shows "-". Measurements longer than two seconds, and the reopen
// workload's fill, print their progress on stderr each second; with more
// than one round, each round's start is printed there too.
//
// The reopen workload has a table of its own, of one row, after the
// machine facts:
//
//	from checkpoint       Open + Queue + first Receive from the checkpoint, cold
//	forced rebuild        the same with the index directory removed
//	rebuild ÷ checkpoint  the ratio of the two, within a round (with more than
//	                      one round, its min–max over the rounds beside it)
//	heap MiB              HeapInuse with the store open from its checkpoint, MiB
//	heap B/message        the same ÷ N
//
// and, under it, how long the fill took and the sizes of the store's
// segment files and index.
//
// Ctrl-C (or SIGTERM) stops the current measurement, prints what was
// measured (the cut row marked "interrupted", a row that fewer rounds
// measured "k of N rounds"), cleans up and exits 130; a second Ctrl-C
// removes the directory and exits at once. Any error names what failed
// and exits 1 after cleanup, after printing the rows measured until then;
// bad flags exit 2.
//
// # JSON
//
// -json FILE writes every figure of the table, and a few more, as one
// object:
//
//	{
//	  "machine": {
//	    "date":        string, RFC 3339 UTC, when the run started
//	    "num_cpu":     int, runtime.NumCPU()
//	    "goos", "goarch", "go_version": string
//	    "kernel":      string, uname sysname and release
//	    "filesystem":  string, "ext4", "xfs", "btrfs", "tmpfs", ... or "unknown"
//	    "fs_magic":    string, statfs f_type in hex, e.g. "0xef53"
//	    "dir":         string, the temporary directory used (removed)
//	  },
//	  "rounds": int, the -rounds given
//	  "rows": [{
//	    "workload":      string, as in the table
//	    "kind":          "raw-overwrite" | "raw-append" | "wal" |
//	                     "broker-publish" | "broker-drain"
//	    "sync":          "always" | "interval" | "never"   (wal),
//	                     "all" | "publish"                  (broker; absent for raw)
//	    "appenders":     int                                (wal only)
//	    "producers":     int                                (broker-publish only)
//	    "method":        "consume" | "receive-ack"          (broker-drain only)
//	    "consumers":     int, Consume's Concurrency, or the goroutines
//	                     calling Receive and Ack            (broker-drain only)
//	    "batch":         int, Consume's Batch, or Receive's max (broker-drain only)
//	    "messages":      int, M, the messages prefilled in each round (broker-drain only)
//	    "bytes_per_op":  int, record or message size (wal, broker) or 4096 (raw)
//	    "segment_bytes": int, the -segment-bytes given      (wal, broker; absent: wal default)
//	    "rounds":        int, how many rounds measured this row (fewer than
//	                     asked only after Ctrl-C or an error)
//	    "seconds":       float, length of the measured windows (drains: from
//	                     the start of the drain until its calls returned),
//	                     summed over the rounds
//	    "fill_seconds":  float, the untimed prefills, summed (broker-drain only)
//	    "interrupted":   bool, a window of the row (its run or its batch
//	                     ceiling probe) was cut short by Ctrl-C
//	    "ops":           int, records appended (wal), messages published
//	                     (broker-publish) or acked (broker-drain; fewer than
//	                     messages × rounds where a Receive+Ack drain reached
//	                     -time), or pwrite+fdatasync pairs (raw), summed over
//	                     the rounds
//	    "fdatasyncs":    int, fdatasyncs in the windows, summed
//	    "file_bytes":    int, bytes the log wrote, framing included, summed (wal only)
//	    "rotations":     int, segment rotations in the windows, summed (wal only; absent if none)
//	    "latency_samples": int, latencies in the histograms, summed
//	    "appends_per_sec":       float or null (raw); broker rows: messages per second
//	    "mb_per_sec":            float
//	    "p50_ns", "p99_ns", "mean_ns", "max_ns": int or null (no samples)
//	    "fdatasyncs_per_sec":    float
//	    "records_per_fdatasync": float or null (raw, or no fdatasync)
//	    "vs_raw_overwrite":      float or null (raw, broker-drain, or no overwrite probe)
//	    "vs_raw_overwrite_min", "vs_raw_overwrite_max": float, over the rounds
//	                             (absent where vs_raw_overwrite is null)
//	    "bytes_per_fdatasync":   float or null, file_bytes / fdatasyncs (raw, or no fdatasync)
//	    "batch_ceiling_fdatasyncs_per_sec": float or null, the batch ceiling probe's
//	                             (raw, sync other than always, or no probes)
//	    "batch_ceiling_records_per_sec":    float or null, as in the table
//	    "vs_batch_ceiling":      float or null, appends_per_sec / batch ceiling
//	    "vs_batch_ceiling_min", "vs_batch_ceiling_max": float, over the rounds
//	                             (absent where vs_batch_ceiling is null)
//	    "vs_wal_same_n":         float or null, broker-publish only: appends_per_sec /
//	                             the same round's wal row's with appenders = producers
//	                             (null: -sync other than always, or no such row)
//	    "vs_wal_same_n_min", "vs_wal_same_n_max": float, over the rounds
//	                             (absent where vs_wal_same_n is null)
//	    "notes": [string], what looked wrong in the log's or the store's counters, each
//	             prefixed "round K: " with more than one round (absent if nothing)
//	    "per_round": [{ each round's own figures, in round order: the fields
//	             above but "rounds", the "_min"/"_max" ranges and "per_round",
//	             with "round": int, 1-based, instead; figures of one window,
//	             not sums or medians. The batch ceiling probe writes
//	             round(bytes_per_fdatasync) bytes at a time. }, ...]
//	  }, ...],
//	  "reopen": {                  (only with -reopen-messages)
//	    "workload":      string, as in its table
//	    "sync":          "all"
//	    "messages":      int, N, the pending messages of the store
//	    "bytes_per_op":  int, their size
//	    "segment_bytes": int, the -segment-bytes given (absent: the default)
//	    "rounds":        int, how many rounds measured it (fewer than asked
//	                     only after Ctrl-C or an error)
//	    "interrupted":   bool, Ctrl-C cut a round short (that round is not counted)
//	    "fill_seconds":  float, the untimed fill, Close included
//	    "segments":      int, the store's segment files after the fill
//	    "segment_file_bytes": int, their total size
//	    "index_bytes":   int, the size of its index directory (the checkpoint)
//	    "checkpoint_open_ns": int, Open + Queue + first Receive from the checkpoint
//	    "rebuild_open_ns":    int, the same with the index directory removed
//	    "rebuild_vs_checkpoint": float, rebuild_open_ns / checkpoint_open_ns
//	    "rebuild_vs_checkpoint_min", "rebuild_vs_checkpoint_max": float, over
//	                     the rounds (absent with one round)
//	    "heap_before_open_bytes": int, HeapInuse after runtime.GC just before
//	                     the open from the checkpoint
//	    "heap_inuse_bytes":       int, HeapInuse after runtime.GC with the
//	                     store just opened from its checkpoint
//	    "heap_bytes_per_message": float, heap_inuse_bytes / messages
//	    "notes": [string], what looked wrong in the store's counters (absent if nothing)
//	    "per_round": [{ each round's own figures, in round order: those above
//	             but "rounds", the fill's, the "_min"/"_max" ranges and
//	             "per_round", with "round": int, 1-based, instead }, ...]
//	  }
//	}
//
// Of the reopen figures, the times, the heap and the ratio are medians
// over the rounds (the ratio's the median of the rounds' ratios).
//
// Of the figures of a row, the rates, latencies and ratios (every field
// from appends_per_sec to vs_wal_same_n) are medians over the rounds
// that have them; the counts are sums. With one round, both are that
// round's own figures.
//
// Percentiles are nearest-rank, from log-linear histograms accurate to
// 0.4% (stats.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130 // as a shell reports a SIGINT death
)

// The messages of each broker drain: as many as -rounds 5 can afford, and
// fewer for the quick look of a single round, which must stay short.
const (
	defaultDrainMessages = 100_000
	quickDrainMessages   = 20_000
)

// errInterrupted is the cause of the run's context after Ctrl-C.
var errInterrupted = errors.New("interrupted")

type config struct {
	parent       string
	duration     time.Duration
	probeTime    time.Duration
	warmup       time.Duration
	appenders    []int
	recordBytes  int
	sync         wal.SyncMode
	segmentBytes int64
	jsonFile     string
	rounds       int

	broker        bool // run the broker workloads after the WAL ones
	drainMessages int  // messages each broker drain prefills and drains
	// reopenMessages, when positive, runs the reopen workload after the
	// others, on a store of that many pending messages.
	reopenMessages int

	fs vfs.FS // for tests: the logs' file system (nil: vfs.Default)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is walbench with arguments args; it returns the exit code. Every
// return path after the temporary directory is made passes its removal.
func run(args []string, stdout, stderr io.Writer) (code int) {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "walbench: %v\n", err)
		return exitUsage
	}

	// Catch signals before anything exists to clean up; they wait in the
	// channel until the handler below starts.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	tmp, err := os.MkdirTemp(cfg.parent, "walbench-")
	if err != nil {
		fmt.Fprintf(stderr, "walbench: make temporary directory: %v\n", err)
		return exitError
	}
	if abs, err := filepath.Abs(tmp); err == nil {
		tmp = abs
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(stderr, "walbench: remove %s: %v\n", tmp, err)
			code = max(code, exitError)
		}
	}()

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		<-sigs
		fmt.Fprintln(stderr, "walbench: interrupted: stopping the current measurement (Ctrl-C again to quit at once)")
		cancel(errInterrupted)
		<-sigs
		fmt.Fprintf(stderr, "walbench: interrupted again: removing %s and quitting\n", tmp)
		_ = os.RemoveAll(tmp)
		os.Exit(exitInterrupted)
	}()

	rep, measureErr := measure(ctx, stderr, tmp, cfg)
	var reopen *reopenRow
	if cfg.reopenMessages > 0 && measureErr == nil && ctx.Err() == nil {
		reopen, measureErr = measureReopen(ctx, stderr, tmp, cfg)
	}
	rep.Reopen = reopen
	if len(rep.Rows) > 0 || reopen != nil {
		if err := printTable(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "walbench: print table: %v\n", err)
			code = exitError
		}
	}
	if cfg.jsonFile != "" && (len(rep.Rows) > 0 || reopen != nil) {
		if err := writeJSON(cfg.jsonFile, rep); err != nil {
			fmt.Fprintf(stderr, "walbench: %v\n", err)
			code = exitError
		}
	}
	switch {
	case measureErr != nil:
		fmt.Fprintf(stderr, "walbench: %v\n", measureErr)
		code = exitError
	case ctx.Err() != nil && len(rep.Rows) == 0:
		fmt.Fprintln(stderr, "walbench: interrupted before anything was measured")
		code = max(code, exitInterrupted)
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "walbench: interrupted; the table has what was measured until then")
		code = max(code, exitInterrupted)
	}
	return code
}

// measure runs cfg.rounds rounds in dir, until ctx ends or a measurement
// fails, and summarizes them. It returns what was measured so far with the
// error.
func measure(ctx context.Context, progress io.Writer, dir string, cfg config) (report, error) {
	rep := report{Machine: describeMachine(dir, time.Now()), Rounds: cfg.rounds}
	var (
		rounds [][]row
		err    error
	)
	for i := range cfg.rounds {
		if ctx.Err() != nil {
			break
		}
		if cfg.rounds > 1 {
			fmt.Fprintf(progress, "round %d/%d\n", i+1, cfg.rounds)
		}
		var rows []row
		rows, err = measureRound(ctx, progress, dir, cfg)
		for j := range rows {
			rows[j].Round = i + 1
		}
		if len(rows) > 0 {
			rounds = append(rounds, rows)
		}
		if err != nil {
			break
		}
	}
	rep.Rows = summarize(rounds)
	return rep, err
}

// measureRound runs the raw probes, then, for each count of appenders, the
// WAL workload and its batch ceiling probe, then the broker workloads
// (unless cfg.broker is false), in order, until ctx ends or one fails. It
// returns the rows measured so far with the error; each ratio in them is
// to a figure of this round.
func measureRound(ctx context.Context, progress io.Writer, dir string, cfg config) ([]row, error) {
	var (
		rows          []row
		overwriteRate float64
	)
	if cfg.probeTime > 0 {
		for _, spec := range []probeSpec{overwriteProbe, appendProbe} {
			if ctx.Err() != nil {
				return rows, nil
			}
			p, err := probe(ctx, progress, dir, spec, cfg.probeTime)
			if p.window.opened {
				r := probeRow(p)
				rows = append(rows, r)
				if spec.mode == probeOverwrite {
					overwriteRate = r.FdatasyncsPerSec
				}
			}
			if err != nil {
				return rows, err
			}
		}
	}
	for _, n := range cfg.appenders {
		if ctx.Err() != nil {
			return rows, nil
		}
		w, err := runWAL(ctx, progress, dir, walLoad{
			appenders:    n,
			recordBytes:  cfg.recordBytes,
			sync:         cfg.sync,
			segmentBytes: cfg.segmentBytes,
			warmup:       cfg.warmup,
			duration:     cfg.duration,
			fs:           cfg.fs,
		})
		if err != nil {
			return rows, err
		}
		if !w.window.opened {
			continue // interrupted in the warm-up: ctx is done
		}
		rows = append(rows, walRow(w, overwriteRate))
		// Only under sync=always does every Append wait for an fdatasync,
		// so that the disk's rate for such batches bounds the log's.
		if cfg.probeTime <= 0 || cfg.sync != wal.SyncAlways || w.syncs == 0 || ctx.Err() != nil {
			continue
		}
		batchBytes := int(math.Round(float64(w.fileBytes) / float64(w.syncs)))
		p, err := probe(ctx, progress, dir, batchCeilingProbe(batchBytes), cfg.probeTime)
		if p.window.opened {
			rows[len(rows)-1].setBatchCeiling(p)
		}
		if err != nil {
			return rows, err
		}
	}
	if !cfg.broker {
		return rows, nil
	}
	return measureBroker(ctx, progress, dir, cfg, rows, overwriteRate)
}

// measureBroker runs the broker workloads of a round after its rows so
// far: a publish workload for each count of appenders, then the drains,
// until ctx ends or one fails. It returns rows with the new rows appended,
// with the error.
func measureBroker(ctx context.Context, progress io.Writer, dir string, cfg config, rows []row, overwriteRate float64) ([]row, error) {
	for _, n := range cfg.appenders {
		if ctx.Err() != nil {
			return rows, nil
		}
		b, err := runBrokerPublish(ctx, progress, dir, brokerPublishLoad{
			producers:    n,
			payloadBytes: cfg.recordBytes,
			segmentBytes: cfg.segmentBytes,
			warmup:       cfg.warmup,
			duration:     cfg.duration,
		})
		if err != nil {
			return rows, err
		}
		if !b.window.opened {
			continue // interrupted in the warm-up: ctx is done
		}
		rows = append(rows, brokerPublishRow(b, overwriteRate))
		setVsWALSameN(rows)
	}
	for _, d := range brokerDrains(cfg) {
		if ctx.Err() != nil {
			return rows, nil
		}
		res, err := runBrokerDrain(ctx, progress, dir, d)
		if res.opened {
			rows = append(rows, brokerDrainRow(res))
		}
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// brokerDrains are the drain workloads of a round, in order.
func brokerDrains(cfg config) []brokerDrainLoad {
	d := brokerDrainLoad{
		method:       drainConsume,
		sync:         broker.SyncAll,
		consumers:    64,
		batch:        64,
		messages:     cfg.drainMessages,
		payloadBytes: cfg.recordBytes,
		segmentBytes: cfg.segmentBytes,
	}
	loads := []brokerDrainLoad{d}
	d.sync = broker.SyncPublish
	loads = append(loads, d)
	// One consumer acks one message per commit: draining the whole
	// backlog would take minutes. These drains stop after -time.
	d.method, d.sync, d.limit = drainReceiveAck, broker.SyncAll, cfg.duration
	for _, c := range []int{1, 4} {
		d.consumers = c
		loads = append(loads, d)
	}
	return loads
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("walbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg          config
		appenders    string
		syncMode     string
		segmentBytes int64
	)
	fs.StringVar(&cfg.parent, "dir", ".", "make the temporary directory under `DIR`")
	fs.DurationVar(&cfg.duration, "time", 3*time.Second, "measure each WAL and broker publish workload for `D`; also the longest a broker Receive+Ack drain runs")
	fs.DurationVar(&cfg.probeTime, "probe-time", 2*time.Second, "run each raw fdatasync probe for `D` (0 skips them)")
	fs.DurationVar(&cfg.warmup, "warmup", 200*time.Millisecond, "run each WAL and broker publish workload for `D` before measuring")
	fs.StringVar(&appenders, "appenders", "1,16,64", "comma-separated `counts` of concurrent appenders (and broker producers), one workload each")
	fs.IntVar(&cfg.recordBytes, "size", 1024, "record size, and broker message size, in `bytes`")
	fs.StringVar(&syncMode, "sync", "always", "wal sync `mode` of the WAL workloads: always, interval or never")
	fs.Int64Var(&segmentBytes, "segment-bytes", 0, "wal and broker segment size in `bytes` (0: the wal default, 64 MiB)")
	fs.StringVar(&cfg.jsonFile, "json", "", "also write the results as JSON to `FILE`")
	fs.IntVar(&cfg.rounds, "rounds", 1, "run the probes and the workloads `N` times, back to back, and report medians")
	fs.BoolVar(&cfg.broker, "broker", true, "run the broker workloads after the WAL ones (-broker=false skips them)")
	fs.IntVar(&cfg.drainMessages, "drain-messages", 0,
		fmt.Sprintf("prefill each broker drain's queue with `N` messages (0: %d, or %d with -rounds 1)", defaultDrainMessages, quickDrainMessages))
	fs.IntVar(&cfg.reopenMessages, "reopen-messages", 0,
		"after the other workloads, fill a store with `N` pending messages and time its reopen, from its checkpoint and rebuilt from its log (0: skip)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: walbench [flags]\n\nMeasures the raw fdatasync rate of the disk, the WAL's append rate, the\nbroker's publish and drain rates, and (with -reopen-messages) how long a\nstore with a backlog takes to reopen.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	if cfg.duration <= 0 {
		return cfg, fmt.Errorf("-time %v: must be positive", cfg.duration)
	}
	if cfg.rounds < 1 {
		return cfg, fmt.Errorf("-rounds %d: must be at least 1", cfg.rounds)
	}
	if cfg.probeTime < 0 {
		return cfg, fmt.Errorf("-probe-time %v: must not be negative", cfg.probeTime)
	}
	if cfg.warmup < 0 {
		return cfg, fmt.Errorf("-warmup %v: must not be negative", cfg.warmup)
	}
	switch {
	case cfg.drainMessages < 0:
		return cfg, fmt.Errorf("-drain-messages %d: must not be negative", cfg.drainMessages)
	case cfg.drainMessages == 0 && cfg.rounds == 1:
		cfg.drainMessages = quickDrainMessages
	case cfg.drainMessages == 0:
		cfg.drainMessages = defaultDrainMessages
	}
	if cfg.reopenMessages < 0 {
		return cfg, fmt.Errorf("-reopen-messages %d: must not be negative", cfg.reopenMessages)
	}
	if cfg.recordBytes < 0 {
		return cfg, fmt.Errorf("-size %d: must not be negative", cfg.recordBytes)
	}
	if segmentBytes < 0 {
		return cfg, fmt.Errorf("-segment-bytes %d: must not be negative", segmentBytes)
	}
	if segmentBytes != 0 && (segmentBytes < wal.MinSegmentBytes || segmentBytes > wal.MaxSegmentBytes) {
		// wal.Open would refuse it too, but only after the probes.
		return cfg, fmt.Errorf("-segment-bytes %d: want 0 (the wal default) or [%d, %d]", segmentBytes, wal.MinSegmentBytes, wal.MaxSegmentBytes)
	}
	cfg.segmentBytes = segmentBytes
	for f := range strings.SplitSeq(appenders, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("-appenders %q: %q is not a positive count", appenders, f)
		}
		cfg.appenders = append(cfg.appenders, n)
	}
	switch syncMode {
	case "always":
		cfg.sync = wal.SyncAlways
	case "interval":
		cfg.sync = wal.SyncInterval
	case "never":
		cfg.sync = wal.SyncNever
	default:
		return cfg, fmt.Errorf("-sync %q: want always, interval or never", syncMode)
	}
	return cfg, nil
}
