// Command walbench measures how fast the write-ahead log (package wal) can
// make appends durable on this machine's disk, next to how fast the disk
// itself completes fdatasyncs.
//
// Usage:
//
//	walbench [-dir DIR] [-time 3s] [-probe-time 2s] [-warmup 200ms]
//	         [-appenders 1,16,64] [-size 1024] [-sync always|interval|never]
//	         [-segment-bytes N] [-json FILE]
//
// It makes a temporary directory under DIR (default: the current
// directory) and removes it at the end, also after an error or Ctrl-C. In
// it, it first probes the raw fdatasync rate for -probe-time each (0
// skips the probes):
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
// every Append started in it.
//
// It prints one table, one row per workload:
//
//	appends/s             Stats().Records delta per second (one record per Append)
//	MB/s                  payload bytes per second, 10^6 bytes (raw: the 4 KiB writes)
//	p50, p99              latency of one Append (raw: one pwrite + fdatasync)
//	fdatasyncs/s          Stats().Syncs delta per second (raw: loop iterations)
//	records/fdatasync     Records delta / Syncs delta: the group-commit factor
//	÷ raw overwrite fsync appends/s ÷ the raw overwrite probe's fdatasyncs/s
//
// and under it the date, CPUs, OS, kernel, Go version, file system and
// directory. A column that does not apply shows "-". Measurements longer
// than two seconds print their progress on stderr each second.
//
// Ctrl-C (or SIGTERM) stops the current measurement, prints what was
// measured (the cut row marked "interrupted"), cleans up and exits 130; a
// second Ctrl-C removes the directory and exits at once. Any error names
// what failed and exits 1 after cleanup; bad flags exit 2.
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
//	  "rows": [{
//	    "workload":      string, as in the table
//	    "kind":          "raw-overwrite" | "raw-append" | "wal"
//	    "sync":          "always" | "interval" | "never"   (wal only)
//	    "appenders":     int                                (wal only)
//	    "bytes_per_op":  int, record size (wal) or 4096 (raw)
//	    "segment_bytes": int, the -segment-bytes given      (wal only; absent: wal default)
//	    "seconds":       float, length of the measured window
//	    "interrupted":   bool, the window was cut short by Ctrl-C
//	    "ops":           int, records appended (wal) or pwrite+fdatasync pairs (raw)
//	    "fdatasyncs":    int, fdatasyncs in the window
//	    "file_bytes":    int, bytes the log wrote, framing included (wal only)
//	    "rotations":     int, segment rotations in the window (wal only; absent if none)
//	    "latency_samples": int, latencies in the histogram
//	    "appends_per_sec":       float or null (raw)
//	    "mb_per_sec":            float
//	    "p50_ns", "p99_ns", "mean_ns", "max_ns": int or null (no samples)
//	    "fdatasyncs_per_sec":    float
//	    "records_per_fdatasync": float or null (raw, or no fdatasync)
//	    "vs_raw_overwrite":      float or null (raw, or no overwrite probe)
//	    "notes": [string], what looked wrong in the log's counters (absent if nothing)
//	  }, ...]
//	}
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
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/walbroker/walbroker/wal"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130 // as a shell reports a SIGINT death
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
	if len(rep.Rows) > 0 {
		if err := printTable(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "walbench: print table: %v\n", err)
			code = exitError
		}
		if cfg.jsonFile != "" {
			if err := writeJSON(cfg.jsonFile, rep); err != nil {
				fmt.Fprintf(stderr, "walbench: %v\n", err)
				code = exitError
			}
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

// measure runs the probes and then the WAL workloads in dir, in order,
// until ctx ends or one fails. It returns the rows measured so far with
// the error.
func measure(ctx context.Context, progress io.Writer, dir string, cfg config) (report, error) {
	rep := report{Machine: describeMachine(dir, time.Now())}
	var overwriteRate float64
	if cfg.probeTime > 0 {
		for _, mode := range []probeMode{probeOverwrite, probeAppend} {
			if ctx.Err() != nil {
				return rep, nil
			}
			p, err := probe(ctx, progress, dir, mode, cfg.probeTime)
			if p.window.opened {
				r := probeRow(p)
				rep.Rows = append(rep.Rows, r)
				if mode == probeOverwrite {
					overwriteRate = r.FdatasyncsPerSec
				}
			}
			if err != nil {
				return rep, err
			}
		}
	}
	for _, n := range cfg.appenders {
		if ctx.Err() != nil {
			return rep, nil
		}
		w, err := runWAL(ctx, progress, dir, walLoad{
			appenders:    n,
			recordBytes:  cfg.recordBytes,
			sync:         cfg.sync,
			segmentBytes: cfg.segmentBytes,
			warmup:       cfg.warmup,
			duration:     cfg.duration,
		})
		if w.window.opened && err == nil {
			rep.Rows = append(rep.Rows, walRow(w, overwriteRate))
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
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
	fs.DurationVar(&cfg.duration, "time", 3*time.Second, "measure each WAL workload for `D`")
	fs.DurationVar(&cfg.probeTime, "probe-time", 2*time.Second, "run each raw fdatasync probe for `D` (0 skips them)")
	fs.DurationVar(&cfg.warmup, "warmup", 200*time.Millisecond, "run each WAL workload for `D` before measuring")
	fs.StringVar(&appenders, "appenders", "1,16,64", "comma-separated `counts` of concurrent appenders, one workload each")
	fs.IntVar(&cfg.recordBytes, "size", 1024, "record size in `bytes`")
	fs.StringVar(&syncMode, "sync", "always", "wal sync `mode`: always, interval or never")
	fs.Int64Var(&segmentBytes, "segment-bytes", 0, "wal segment size in `bytes` (0: the wal default, 64 MiB)")
	fs.StringVar(&cfg.jsonFile, "json", "", "also write the results as JSON to `FILE`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: walbench [flags]\n\nMeasures the raw fdatasync rate of the disk and the WAL's append rate.\n\nFlags:")
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
	if cfg.probeTime < 0 {
		return cfg, fmt.Errorf("-probe-time %v: must not be negative", cfg.probeTime)
	}
	if cfg.warmup < 0 {
		return cfg, fmt.Errorf("-warmup %v: must not be negative", cfg.warmup)
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
