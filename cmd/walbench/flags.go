package main

import (
	"bytes"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/wal"
)

// config is what one run of walbench does: the command, its workloads in
// order, and each workload's knobs. defaultConfig has every default; a
// command's flags change only the knobs of its own workloads.
type config struct {
	command    string
	args       []string
	parent     string // the temporary directory is made under it
	jsonFile   string
	cpuProfile string
	rounds     int
	probeTime  time.Duration // 0: no probe
	warmup     time.Duration

	workloads []string // of kindWAL, kindPublish, kindDrain, kindMixed, kindSweep, in order
	reopen    bool     // the reopen workload, after the rounds
	recommend bool
	// forceMemory: run every workload, however much memory it is
	// estimated to need (see memory.go).
	forceMemory bool

	probeProducers []int // probe alone: the ceilings to compute
	probeSizes     []int

	publish struct {
		producers    []int
		sizes        []int
		syncs        []broker.SyncMode
		segmentBytes int64
		duration     time.Duration
	}
	drain struct {
		method       string
		consumers    []int
		batches      []int
		prefetch     int
		syncs        []broker.SyncMode
		messages     int // 0: defaultDrainMessages, or quickDrainMessages with one round
		size         int
		segmentBytes int64
		limit        time.Duration
	}
	mixed      mixedLoad // all but its rate
	mixedRates []float64 // one mixed workload per target rate
	// sampleGiven: -sample was on the command line; otherwise the
	// default shrinks to fit a short -time window (see validate).
	sampleGiven bool

	sweep struct {
		producers        []int
		sizes            []int
		segments         []int64
		syncs            []broker.SyncMode
		duration         time.Duration
		consumers, batch int
	}
	wal struct {
		appenders    []int
		segments     []segmentSource
		size         int
		sync         wal.SyncMode
		segmentBytes int64
		duration     time.Duration
	}
	reopenLoad reopenLoad

	in, bench string // report: the JSON to read, the BENCH.md to rewrite
	markdown  bool   // report: print the markdown section instead of the tables
}

// The messages of each drain: as many as several rounds can afford, and
// fewer for the quick look of a single round, which must stay short.
const (
	defaultDrainMessages = 100_000
	quickDrainMessages   = 20_000
)

// Upper bounds of the flags whose values size what walbench allocates, so
// that a mistyped value is refused instead of exhausting the memory.
const (
	// maxProducers bounds -producers: each producer (appender) records its
	// latencies into an HdrHistogram of its own, 254,020 bytes (a mixed
	// producer has two; see histogramBytes), and holds a payload of -size
	// bytes.
	maxProducers = 1024
	// maxConsumers bounds -consumers: Consume's Concurrency, or the
	// Receive+Ack goroutines, each of which may wait in a commit holding
	// the buffers of a Receive of -batch.
	maxConsumers = 1024
	// maxBatch bounds -batch: a Receive of max deliveries, or Consume's
	// batch. A drain's backlog (-messages, 100,000 by default) may be
	// larger; a batch larger still is taken for a mistyped value.
	maxBatch = 10_000
	// maxSize bounds -size: the largest payload the queue of a walbench
	// store accepts (its policy leaves MaxMessageBytes at the default
	// wherever a segment holds more).
	maxSize = broker.DefaultMaxMessageBytes
	// minWindow bounds -time and -probe-time from below: a shorter window
	// measures the timers, not the disk.
	minWindow = 10 * time.Millisecond
	// maxWindow bounds -time, -probe-time, -warmup and a drain's -limit
	// from above, and maxRounds bounds -rounds: a run repeats each window
	// for every workload and round, so a mistyped value (-rounds 1000000,
	// -time 3000h, -limit 3000h) would run for ever; a longer run is
	// several runs.
	maxWindow = time.Hour
	maxRounds = 100
	// minSample bounds -sample from below: the backlog sampled oftener
	// measures the ticker, and its samples only fill the memory and the
	// JSON.
	minSample = 10 * time.Millisecond
	// maxBacklogSamples bounds the backlog samples one mixed window keeps
	// (-time ÷ -sample): each is kept in memory and written to the JSON,
	// once per round and once in the summary.
	maxBacklogSamples = 100_000
	// maxRatePerProducer bounds a mixed workload's -rate per producer:
	// no Publish returns in a microsecond, and the schedule's steps are
	// whole nanoseconds.
	maxRatePerProducer = 1e6
)

func defaultConfig() config {
	var c config
	c.command = "profile"
	c.parent = "."
	c.rounds = 1
	c.probeTime = 2 * time.Second
	c.warmup = 200 * time.Millisecond
	c.probeProducers = []int{1, 16, 64}
	c.probeSizes = []int{1024}

	c.publish.producers = []int{1, 16, 64}
	c.publish.sizes = []int{1024}
	c.publish.syncs = []broker.SyncMode{broker.SyncAll}
	c.publish.duration = 3 * time.Second

	c.drain.method = drainConsume
	c.drain.consumers = []int{64}
	c.drain.batches = []int{64}
	c.drain.syncs = []broker.SyncMode{broker.SyncAll, broker.SyncPublish}
	c.drain.size = 1024
	c.drain.limit = 10 * time.Second

	c.mixed = mixedLoad{
		producers: 16, consumers: 16, batch: 16, size: 1024, sync: broker.SyncAll,
		duration: 5 * time.Second, sample: 250 * time.Millisecond,
	}
	c.mixedRates = []float64{2000}

	c.sweep.producers = []int{1, 64}
	c.sweep.sizes = []int{1024, 16 << 10}
	c.sweep.segments = []int64{4 << 20, 64 << 20}
	c.sweep.syncs = []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}
	c.sweep.duration = time.Second
	c.sweep.consumers, c.sweep.batch = 64, 64

	c.wal.appenders = []int{1, 64}
	c.wal.segments = []segmentSource{newSegments, reusedSegments}
	c.wal.size = 1024
	c.wal.sync = wal.SyncAlways
	c.wal.duration = 3 * time.Second

	c.reopenLoad = reopenLoad{messages: 100_000, size: 1024}
	return c
}

// commands are walbench's commands, in the order usage lists them.
var commands = []struct {
	name, summary string
}{
	{"profile", "probe + publish + drain, then the recommendation (the default: under a minute)"},
	{"probe", "the disk alone: fdatasync latency and rate, write bandwidth, durable-message ceilings"},
	{"publish", "producers × message size × sync mode: msgs/s, latency, commits, ratios to the probe"},
	{"drain", "a prefilled queue emptied by Consume or Receive+Ack consumers: msgs/s"},
	{"mixed", "producers at a target rate with Consume consumers: end-to-end latency, backlog over time"},
	{"reopen", "a store with a backlog reopened cold: from its checkpoint, rebuilt, heap"},
	{"sweep", "a grid of producers × size × segment size × sync mode, then the recommendation"},
	{"wal", "the log alone (package wal): appenders × new or reused segments"},
	{"full", "every workload above with its defaults, the mixed one at 2,000 and 20,000 msgs/s (what BENCH.md is made from)"},
	{"report", "read a -json file: print its tables, or rewrite BENCH.md's generated section"},
}

// parseConfig reads the command line: an optional command, then its flags.
// The help asked for (-h, walbench help) goes to stdout, and returns
// flag.ErrHelp; the usage printed after a bad flag goes to stderr.
func parseConfig(args []string, stdout, stderr io.Writer) (config, error) {
	c := defaultConfig()
	c.args = args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.command, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("walbench "+c.command, flag.ContinueOnError)
	var flagOut bytes.Buffer // stdout for -h, stderr after an error
	fs.SetOutput(&flagOut)
	v := &validator{}
	common := func(probe bool) {
		fs.StringVar(&c.parent, "dir", c.parent, "make the temporary directory under `DIR`, an existing directory on the disk to measure (other files in it are left alone); the temporary one is removed at the end")
		fs.StringVar(&c.jsonFile, "json", "", "also write the results as JSON to `FILE` (schema: walbench help doc): a regular file or a new one, replaced whole when the run ends, left as it was if nothing is measured")
		v.int(fs, &c.rounds, "rounds", fmt.Sprintf("run every workload `N` times, back to back, and report medians (at most %d)", maxRounds))
		fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof)")
		if probe {
			v.duration(fs, &c.probeTime, "probe-time", fmt.Sprintf("run the probe's fdatasync loop for `D` at the start of each round, and its other loops for half that (0: no probe, else %v to %v)", minWindow, maxWindow))
		}
	}
	forceMemory := func() {
		fs.BoolVar(&c.forceMemory, "force-memory", false, fmt.Sprintf("run each workload even when its estimated peak memory is above %.0f%% of what this machine has available (without it, such a workload is refused before anything runs, and such a point of a sweep is skipped and listed as not measured); the kernel may then kill the run for want of memory, and what it measured is lost", 100*memoryShare))
	}
	warmup := func() {
		v.duration(fs, &c.warmup, "warmup", fmt.Sprintf("run each publish, wal, mixed and sweep workload for `D` before measuring it (a drain measures its prefilled queue from the start; at most %v)", maxWindow))
	}
	switch c.command {
	case "profile":
		c.workloads, c.recommend = []string{kindPublish, kindDrain}, true
		common(true)
		forceMemory()
		warmup()
		v.ints(fs, &c.publish.producers, "producers", fmt.Sprintf("the publish workloads' concurrent producers, one workload per `count` (at most %d)", maxProducers))
		v.int(fs, &c.publish.sizes[0], "size", fmt.Sprintf("message size in `bytes` (at most %d)", maxSize))
		v.segmentBytes(fs, &c.publish.segmentBytes, "segment-bytes", "the stores' segment `size` (0: the store's default)")
		v.duration(fs, &c.publish.duration, "time", fmt.Sprintf("measure each publish workload for `D` (%v to %v)", minWindow, maxWindow))
		v.int(fs, &c.drain.messages, "messages", fmt.Sprintf("prefill each drain with `N` messages (0: %d, or %d with -rounds 1)", defaultDrainMessages, quickDrainMessages))
	case "probe":
		common(false)
		v.duration(fs, &c.probeTime, "time", fmt.Sprintf("run the fdatasync loop for `D`, the other loops for half that (%v to %v)", minWindow, maxWindow))
		v.ints(fs, &c.probeProducers, "producers", fmt.Sprintf("compute the durable-message ceiling for these producer `counts` (at most %d)", maxProducers))
		v.ints(fs, &c.probeSizes, "size", fmt.Sprintf("... and these message sizes in `bytes` (at most %d)", maxSize))
	case "publish":
		c.workloads = []string{kindPublish}
		common(true)
		forceMemory()
		warmup()
		v.ints(fs, &c.publish.producers, "producers", fmt.Sprintf("concurrent producers, one workload per `count` (at most %d)", maxProducers))
		v.ints(fs, &c.publish.sizes, "size", fmt.Sprintf("message sizes in `bytes`, one workload each (at most %d)", maxSize))
		v.syncs(fs, &c.publish.syncs, "sync", "store sync `modes` (all, publish, none), one workload each")
		v.segmentBytes(fs, &c.publish.segmentBytes, "segment-bytes", "the stores' segment `size` (0: the store's default)")
		v.duration(fs, &c.publish.duration, "time", fmt.Sprintf("measure each workload for `D` (%v to %v)", minWindow, maxWindow))
	case "drain":
		c.workloads, c.probeTime = []string{kindDrain}, 0
		common(false)
		forceMemory()
		fs.StringVar(&c.drain.method, "method", c.drain.method, "consume (broker.Consume) or receive-ack (goroutines calling Receive, then Ack for each)")
		v.ints(fs, &c.drain.consumers, "consumers", fmt.Sprintf("Consume's Concurrency, or the Receive+Ack goroutines: one workload per `count` (at most %d)", maxConsumers))
		v.ints(fs, &c.drain.batches, "batch", fmt.Sprintf("Consume's Batch, or Receive's max: one workload per `count` (at most %d)", maxBatch))
		v.int(fs, &c.drain.prefetch, "prefetch", fmt.Sprintf("Consume's Prefetch: `N` leased messages held beyond the running handlers (method consume; at most %d)", broker.MaxConsumeConcurrency))
		v.syncs(fs, &c.drain.syncs, "sync", "store sync `modes`, one workload each")
		v.int(fs, &c.drain.messages, "messages", fmt.Sprintf("prefill each drain with `N` messages (0: %d, or %d with -rounds 1)", defaultDrainMessages, quickDrainMessages))
		v.int(fs, &c.drain.size, "size", fmt.Sprintf("message size in `bytes` (at most %d)", maxSize))
		v.segmentBytes(fs, &c.drain.segmentBytes, "segment-bytes", "the stores' segment `size` (0: the store's default)")
		v.duration(fs, &c.drain.limit, "limit", fmt.Sprintf("stop a drain after `D` (%v to %v), with messages left; its rate is then of those handled", minWindow, maxWindow))
	case "mixed":
		c.workloads, c.probeTime = []string{kindMixed}, 0
		common(false)
		forceMemory()
		warmup()
		v.int(fs, &c.mixed.producers, "producers", fmt.Sprintf("`N` producers, sharing the target rate (at most %d)", maxProducers))
		v.rates(fs, &c.mixedRates, "rate", "target publish `rates` in msgs/s, all producers together, one workload per rate (each producer publishing at least once in -time, at most a million times a second)")
		v.int(fs, &c.mixed.consumers, "consumers", fmt.Sprintf("Consume's Concurrency: `N` handlers (at most %d)", maxConsumers))
		v.int(fs, &c.mixed.batch, "batch", fmt.Sprintf("Consume's Batch: `N` messages leased at once (at most %d)", maxBatch))
		v.int(fs, &c.mixed.size, "size", fmt.Sprintf("message size in `bytes` (%d to %d)", mixedHeaderBytes, maxSize))
		v.sync(fs, &c.mixed.sync, "sync", "store sync `mode` (all, publish, none)")
		v.segmentBytes(fs, &c.mixed.segmentBytes, "segment-bytes", "the store's segment `size` (0: the store's default)")
		v.duration(fs, &c.mixed.duration, "time", fmt.Sprintf("measure for `D` (%v to %v)", minWindow, maxWindow))
		v.duration(fs, &c.mixed.sample, "sample", fmt.Sprintf("sample the backlog every `D` (at least %v, shorter than -time, and at most %d samples in it; by default, half of a -time shorter than twice this)", minSample, maxBacklogSamples))
	case "reopen":
		c.reopen, c.probeTime = true, 0
		common(false)
		forceMemory()
		v.int(fs, &c.reopenLoad.messages, "messages", "fill the store with `N` pending messages")
		v.int(fs, &c.reopenLoad.size, "size", fmt.Sprintf("message size in `bytes` (at most %d)", maxSize))
		v.segmentBytes(fs, &c.reopenLoad.segmentBytes, "segment-bytes", "the store's segment `size` (0: the store's default)")
	case "sweep":
		c.workloads, c.recommend = []string{kindSweep}, true
		common(true)
		forceMemory()
		warmup()
		v.ints(fs, &c.sweep.producers, "producers", fmt.Sprintf("the grid's producer `counts` (at most %d)", maxProducers))
		v.ints(fs, &c.sweep.sizes, "size", fmt.Sprintf("the grid's message sizes in `bytes` (at most %d)", maxSize))
		v.byteList(fs, &c.sweep.segments, "segment-bytes", fmt.Sprintf("the grid's segment `sizes` (4MiB, 64MiB, ...; 0: the store's default, %s)", formatBytes(effectiveSegmentBytes(0))))
		v.syncs(fs, &c.sweep.syncs, "sync", "the grid's sync `modes` (all, publish, none)")
		v.duration(fs, &c.sweep.duration, "time", fmt.Sprintf("publish for `D` at each point, then drain for at most as long (%v to %v)", minWindow, maxWindow))
		v.int(fs, &c.sweep.consumers, "consumers", fmt.Sprintf("the drains' Consume Concurrency: `N` handlers (at most %d)", maxConsumers))
		v.int(fs, &c.sweep.batch, "batch", fmt.Sprintf("the drains' Consume Batch: `N` messages leased at once (at most %d)", maxBatch))
	case "wal":
		c.workloads = []string{kindWAL}
		common(true)
		forceMemory()
		warmup()
		v.ints(fs, &c.wal.appenders, "producers", fmt.Sprintf("concurrent appenders, one workload per `count` (at most %d)", maxProducers))
		v.segmentSources(fs, &c.wal.segments, "segments", "where each rotation's next segment comes from, one workload per `source`: new (written full of zeros, as a growing log's are) or reused (a file the log retired, as in a log whose reader keeps up)")
		v.int(fs, &c.wal.size, "size", fmt.Sprintf("record size in `bytes` (at most %d)", maxSize))
		v.walSync(fs, &c.wal.sync, "sync", "the log's sync `mode`: always, interval or never")
		v.segmentBytes(fs, &c.wal.segmentBytes, "segment-bytes", "the logs' segment `size` (0: the log's default)")
		v.duration(fs, &c.wal.duration, "time", fmt.Sprintf("measure each workload for `D` (%v to %v)", minWindow, maxWindow))
	case "full":
		c.workloads = []string{kindWAL, kindPublish, kindDrain, kindMixed, kindSweep}
		c.reopen, c.recommend = true, true
		// A light load, and one that fills a 64 MiB segment of 1 KiB
		// messages every three seconds, so that the window holds
		// rotations, the next segment's zero-fill, checkpoints and
		// reclamation: what a closed-loop publish hides (its callers are
		// all blocked in a stall, so few calls measure it), a steady
		// rate shows.
		c.mixedRates = []float64{2000, 20000}
		common(true)
		forceMemory()
	case "report":
		fs.StringVar(&c.in, "in", "", "read the results from `FILE`, written by -json")
		fs.StringVar(&c.bench, "bench", "", "rewrite the part of `FILE` between "+beginMarker+" and "+endMarker+" from them")
		fs.BoolVar(&c.markdown, "md", false, "print that part (markdown) instead of the tables")
	case "help":
		switch {
		case len(args) == 0 || len(args) == 1 && args[0] == "help":
			usage(stdout)
			return c, flag.ErrHelp
		case len(args) == 1 && args[0] == "doc":
			manual(stdout)
			return c, flag.ErrHelp
		case len(args) == 1 && isCommand(args[0]):
			// walbench help COMMAND is walbench COMMAND -h.
			return parseConfig([]string{args[0], "-h"}, stdout, stderr)
		case len(args) == 1 && !strings.HasPrefix(args[0], "-"):
			return c, fmt.Errorf("help %s: unknown command %q (walbench help lists them)", args[0], args[0])
		}
		return c, fmt.Errorf("help: unexpected argument %q (walbench help [COMMAND])", args[len(args)-1])
	default:
		return c, fmt.Errorf("unknown command %q (walbench help lists them)", c.command)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: walbench %s [flags]\n\n", c.command)
		for _, cmd := range commands {
			if cmd.name == c.command {
				fmt.Fprintf(fs.Output(), "%s\n\n", cmd.summary)
			}
		}
		if c.command == "profile" {
			// walbench -h lands here: the command a bare walbench runs.
			fmt.Fprintln(fs.Output(), "walbench with no command runs profile. Commands:")
			for _, cmd := range commands {
				fmt.Fprintf(fs.Output(), "  %-8s %s\n", cmd.name, cmd.summary)
			}
			fmt.Fprintln(fs.Output())
		}
		fmt.Fprintln(fs.Output(), "Flags:")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nwalbench help doc prints the manual: every workload, column, ratio, the recommendation and the -json schema.")
	}
	if err := fs.Parse(args); err != nil {
		out := stderr
		if errors.Is(err, flag.ErrHelp) {
			out = stdout
		}
		_, _ = flagOut.WriteTo(out)
		return c, err
	}
	if at := len(c.args) - fs.NArg(); fs.NArg() > 0 && at > 0 && isCommand(fs.Arg(0)) && strings.HasPrefix(c.args[0], "-") {
		// walbench -dir /data probe: the flags were read as the profile's,
		// and the command the operator meant comes after them.
		fixed := slices.Concat([]string{"walbench", fs.Arg(0)}, c.args[:at], c.args[at+1:])
		return c, fmt.Errorf("%q is a command: give it first (%s)", fs.Arg(0), strings.Join(fixed, " "))
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (see walbench %s -h)", fs.Arg(0), c.command)
	}
	// An empty name given to a flag that names a file to write is no
	// file, not the flag left out: taken so, a run of minutes would end
	// with no report, no profile, or BENCH.md as it was (-json "$OUT",
	// with OUT unset).
	var empty []error
	fs.Visit(func(f *flag.Flag) {
		c.sampleGiven = c.sampleGiven || f.Name == "sample"
		if want, ok := fileFlags[f.Name]; ok && f.Value.String() == "" {
			empty = append(empty, fmt.Errorf(`-%s "": %s`, f.Name, want))
		}
	})
	if c.command == "profile" {
		// One size and segment size for the whole profile.
		c.drain.size, c.drain.segmentBytes = c.publish.sizes[0], c.publish.segmentBytes
	}
	return c, errors.Join(errors.Join(empty...), c.validate())
}

// fileFlags are the flags that name a file walbench writes, each with
// what an empty name given to it is told.
var fileFlags = map[string]string{
	"json":       "want a file name (leave -json out to write no JSON)",
	"cpuprofile": "want a file name (leave -cpuprofile out to write no profile)",
	"bench":      "want the markdown file to rewrite (leave -bench out to print the tables)",
}

// isCommand reports whether name is one of walbench's commands.
func isCommand(name string) bool {
	return slices.ContainsFunc(commands, func(c struct{ name, summary string }) bool { return c.name == name })
}

// usage lists the commands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: walbench [command] [flags]\n\nMeasures what this disk can do for walbroker, and which settings to use.\nWith no command, runs profile. walbench COMMAND -h (or walbench help COMMAND)\nlists a command's flags; walbench help doc prints the manual (every\nworkload, column, ratio, the recommendation and the -json schema).\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

// docSource is this command's package documentation, so that a copied
// binary carries its manual (go doc needs the source).
//
//go:embed doc.go
var docSource string

// manual writes the package documentation as text: doc.go's comment,
// without its comment markers.
func manual(w io.Writer) {
	for line := range strings.Lines(docSource) {
		switch {
		case strings.HasPrefix(line, "// "):
			line = line[3:]
		case strings.HasPrefix(line, "//"):
			line = line[2:]
		default:
			continue // package clause, blank lines around it
		}
		fmt.Fprint(w, line)
	}
}

// validate checks what the flags cannot.
func (c *config) validate() error {
	if c.command == "report" {
		switch {
		case c.in == "":
			return errors.New("report: -in FILE is required")
		case c.bench != "" && c.markdown:
			return fmt.Errorf("report: -bench %s and -md: choose one (-bench writes the markdown section into the file, -md prints it)", c.bench)
		}
		return nil
	}
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if ok {
			return
		}
		// The profile's one -size is its publishes' and its drains': say
		// what is wrong with it once.
		err := fmt.Errorf(format, args...)
		if !slices.ContainsFunc(errs, func(e error) bool { return e.Error() == err.Error() }) {
			errs = append(errs, err)
		}
	}
	check(c.parent != "", `-dir "": want a directory (. for the current one)`)
	check(c.cpuProfile == "" || c.jsonFile == "" || !samePath(c.cpuProfile, c.jsonFile),
		"-cpuprofile %s and -json %s: the same file; the profile would replace the report", c.cpuProfile, c.jsonFile)
	check(c.rounds >= 1, "-rounds %d: must be at least 1", c.rounds)
	check(c.rounds <= maxRounds, "-rounds %d: must be at most %d (run again for more)", c.rounds, maxRounds)
	check(c.warmup >= 0, "-warmup %v: must not be negative", c.warmup)
	check(c.warmup <= maxWindow, "-warmup %v: must be at most %v", c.warmup, maxWindow)
	for _, d := range []time.Duration{c.publish.duration, c.wal.duration, c.mixed.duration, c.sweep.duration} {
		check(d >= minWindow, "-time %v: must be at least %v", d, minWindow)
		check(d <= maxWindow, "-time %v: must be at most %v", d, maxWindow)
	}
	if c.command == "probe" {
		check(c.probeTime >= minWindow, "-time %v: must be at least %v", c.probeTime, minWindow)
		check(c.probeTime <= maxWindow, "-time %v: must be at most %v", c.probeTime, maxWindow)
	} else {
		check(c.probeTime == 0 || c.probeTime >= minWindow, "-probe-time %v: must be 0 (no probe) or at least %v", c.probeTime, minWindow)
		check(c.probeTime <= maxWindow, "-probe-time %v: must be at most %v", c.probeTime, maxWindow)
	}
	check(c.mixed.size >= mixedHeaderBytes, "-size %d: must be at least %d (a mixed payload starts with the instant it was scheduled for)", c.mixed.size, mixedHeaderBytes)
	for _, s := range slices.Concat(c.publish.sizes, c.sweep.sizes, c.probeSizes, []int{c.drain.size, c.wal.size, c.reopenLoad.size}) {
		check(s >= 1, "-size %d: must be at least 1", s)
	}
	for _, s := range slices.Concat(c.publish.sizes, c.sweep.sizes, c.probeSizes, []int{c.drain.size, c.wal.size, c.reopenLoad.size, c.mixed.size}) {
		check(s <= maxSize, "-size %d: must be at most %d (1 MiB, broker.DefaultMaxMessageBytes: the largest message a walbench queue accepts)", s, maxSize)
	}
	if slices.Contains(c.workloads, kindWAL) && (c.wal.segmentBytes == 0 || c.wal.segmentBytes >= broker.MinSegmentBytes) {
		// One Append must fit in one segment of the log, less its header
		// and the room kept for the seal frame.
		seg := effectiveSegmentBytes(c.wal.segmentBytes)
		largest := seg - segment.HeaderSize - int64(segment.Size(0)) - segment.FrameHeaderSize
		check(c.wal.size > maxSize || int64(c.wal.size) <= largest,
			"-size %d: a record must fit in one segment of the log: at most %d bytes with -segment-bytes %d", c.wal.size, largest, seg)
	}
	for _, n := range slices.Concat(c.publish.producers, c.sweep.producers, c.wal.appenders, c.probeProducers, []int{c.mixed.producers}) {
		check(n >= 1, "-producers %d: must be at least 1", n)
		check(n <= maxProducers, "-producers %d: must be at most %d (each producer has latency histograms of its own)", n, maxProducers)
	}
	for _, n := range slices.Concat(c.drain.consumers, []int{c.mixed.consumers, c.sweep.consumers}) {
		check(n >= 1, "-consumers %d: must be at least 1", n)
		check(n <= maxConsumers, "-consumers %d: must be at most %d", n, maxConsumers)
	}
	for _, n := range slices.Concat(c.drain.batches, []int{c.mixed.batch, c.sweep.batch}) {
		check(n >= 1, "-batch %d: must be at least 1", n)
		check(n <= maxBatch, "-batch %d: must be at most %d", n, maxBatch)
	}
	if slices.Contains(c.workloads, kindMixed) && c.mixed.producers >= 1 && c.mixed.producers <= maxProducers && c.mixed.duration >= minWindow {
		// Each producer publishes once every producers/rate seconds: at
		// least once in the window, and no oftener than a Publish can
		// return. Checked only with valid -producers and -time, which
		// the bounds are made of: an error about them would only repeat
		// theirs in other words.
		lowest := float64(c.mixed.producers) / c.mixed.duration.Seconds()
		highest := float64(c.mixed.producers) * maxRatePerProducer
		for _, r := range c.mixedRates {
			switch {
			case math.IsNaN(r) || math.IsInf(r, 0):
				check(false, "-rate %v: must be a finite number of msgs/s", r)
			case r <= 0:
				check(false, "-rate %v: must be positive", r)
			case r < lowest:
				check(false, "-rate %v: must be at least %v msgs/s, so that each of the %d producers publishes at least once in the -time %v window",
					r, lowest, c.mixed.producers, c.mixed.duration)
			case r > highest:
				check(false, "-rate %v: must be at most %v msgs/s (%v per producer, with %d producers)", r, highest, maxRatePerProducer, c.mixed.producers)
			}
		}
	}
	if !c.sampleGiven && c.mixed.duration >= minWindow {
		// The default samples a window shorter than twice itself at
		// half its length, so that the backlog is sampled in it, but
		// never oftener than minSample: a window under twice minSample
		// holds one sample at most, and one of minSample none.
		c.mixed.sample = min(c.mixed.sample, max(minSample, c.mixed.duration/2))
	}
	check(c.mixed.sample >= minSample, "-sample %v: must be at least %v (oftener samples the ticker, not the queue)", c.mixed.sample, minSample)
	if slices.Contains(c.workloads, kindMixed) && c.mixed.sample >= minSample && c.mixed.duration >= minWindow {
		// The first sample is taken -sample after the window opens: one
		// as long as the window, or longer, takes none in it.
		check(!c.sampleGiven || c.mixed.sample < c.mixed.duration, "-sample %v: must be shorter than the -time %v window, or no backlog sample is taken in it",
			c.mixed.sample, c.mixed.duration)
		n := int64(c.mixed.duration / c.mixed.sample)
		check(n <= maxBacklogSamples, "-sample %v: %d backlog samples in the -time %v window; at most %d (sample less often, or measure for less)",
			c.mixed.sample, n, c.mixed.duration, maxBacklogSamples)
	}
	check(c.drain.method == drainConsume || c.drain.method == drainReceiveAck, "-method %q: want consume or receive-ack", c.drain.method)
	check(c.drain.prefetch >= 0, "-prefetch %d: must not be negative", c.drain.prefetch)
	check(c.drain.prefetch <= broker.MaxConsumeConcurrency, "-prefetch %d: must be at most %d", c.drain.prefetch, broker.MaxConsumeConcurrency)
	check(c.drain.prefetch == 0 || c.drain.method == drainConsume, "-prefetch %d: only Consume holds messages; drop it or use -method consume", c.drain.prefetch)
	check(c.drain.messages >= 0, "-messages %d: must not be negative", c.drain.messages)
	check(c.drain.limit >= minWindow, "-limit %v: must be at least %v", c.drain.limit, minWindow)
	check(c.drain.limit <= maxWindow, "-limit %v: must be at most %v", c.drain.limit, maxWindow)
	check(c.reopenLoad.messages >= 1, "-messages %d: must be at least 1", c.reopenLoad.messages)
	for _, seg := range append([]int64{c.publish.segmentBytes, c.drain.segmentBytes, c.mixed.segmentBytes, c.wal.segmentBytes, c.reopenLoad.segmentBytes}, c.sweep.segments...) {
		check(seg == 0 || (seg >= broker.MinSegmentBytes && seg <= wal.MaxSegmentBytes),
			"-segment-bytes %d: want 0 (the default) or [%d, %d]", seg, broker.MinSegmentBytes, wal.MaxSegmentBytes)
	}
	// A store refuses a queue whose messages do not fit in one of its
	// segments: say so now, not after the workloads before it ran.
	fits := func(sizes []int, seg int64) {
		if seg != 0 && seg < broker.MinSegmentBytes || seg > wal.MaxSegmentBytes {
			return // refused above
		}
		most := broker.Options{SegmentBytes: seg}.MaxMessageBytes()
		for _, s := range sizes {
			check(s > maxSize || s <= most, "-size %d: a message must fit in one segment of the store: at most %d bytes with -segment-bytes %d", s, most, effectiveSegmentBytes(seg))
		}
	}
	for _, w := range c.workloads {
		switch w {
		case kindPublish:
			fits(c.publish.sizes, c.publish.segmentBytes)
		case kindDrain:
			fits([]int{c.drain.size}, c.drain.segmentBytes)
		case kindMixed:
			fits([]int{c.mixed.size}, c.mixed.segmentBytes)
		case kindSweep:
			for _, seg := range c.sweep.segments {
				fits(c.sweep.sizes, seg)
			}
		}
	}
	if c.reopen {
		fits([]int{c.reopenLoad.size}, c.reopenLoad.segmentBytes)
	}
	if c.drain.messages == 0 {
		c.drain.messages = defaultDrainMessages
		if c.rounds == 1 {
			c.drain.messages = quickDrainMessages
		}
	}
	return errors.Join(errs...)
}

// samePath reports whether the paths a and b name the same file: the same
// absolute path, the same file where both exist, or, for a file not made
// yet, the same name in the same directory however each path reaches it
// (a symbolic link to the directory, or a bind mount of it). A new file
// is made under the name given, in the directory that name resolves to,
// so two spellings of one new file would be renamed over each other.
func samePath(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if errA == nil && errB == nil && absA == absB {
		return true
	}
	if sameFile(a, b) {
		return true
	}
	return filepath.Base(a) == filepath.Base(b) && sameFile(filepath.Dir(a), filepath.Dir(b))
}

// sameFile reports whether a and b both exist and are the same file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// validator defines the flags whose values are parsed from text.
type validator struct{}

// listFlag is a flag.Value that parses a comma-separated list with parse.
type listFlag struct {
	text  string
	parse func(string) error
}

func (l *listFlag) String() string     { return l.text }
func (l *listFlag) Set(s string) error { l.text = s; return l.parse(s) }

func (v *validator) list(fs *flag.FlagSet, name, usage, def string, parse func(items []string) error) {
	fs.Var(&listFlag{text: def, parse: func(s string) error {
		return parse(strings.Split(s, ","))
	}}, name, usage)
}

func (v *validator) ints(fs *flag.FlagSet, dst *[]int, name, usage string) {
	distinctList(v, fs, dst, name, usage, strconv.Itoa, func(it string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(it))
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			// Atoi saturates: n is MaxInt for a count too large.
			return 0, fmt.Errorf("%q is too large a count", it)
		}
		if err != nil {
			return 0, fmt.Errorf("%q is not a positive count", it)
		}
		// A count below 1 is validate's to refuse, in the words every
		// command uses for it whether the flag takes a list or one value
		// ("-size 0: must be at least 1").
		return n, nil
	})
}

func (v *validator) rates(fs *flag.FlagSet, dst *[]float64, name, usage string) {
	format := func(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }
	distinctList(v, fs, dst, name, usage, format, func(it string) (float64, error) {
		r, err := strconv.ParseFloat(strings.TrimSpace(it), 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a rate in msgs/s", it)
		}
		return r, nil
	})
}

// segmentBytes defines a flag holding one segment size, its default
// *dst. The help gives as the default the size the stores use for it, not
// the 0 that stands for the store's default: "(default 0)" reads as
// segments of no bytes.
func (v *validator) segmentBytes(fs *flag.FlagSet, dst *int64, name, usage string) {
	v.list(fs, name, usage, formatBytesFlag(effectiveSegmentBytes(*dst)), func(items []string) error {
		if len(items) != 1 {
			return errors.New("one size, not a list")
		}
		n, err := parseBytes(items[0])
		*dst = n
		return err
	})
}

// int defines a flag holding one whole number, its default *dst. Unlike
// flag.Int, whose error is "parse error" whatever the value, it says what
// is wrong: a list given to it (several values are for the flags that
// take lists), no whole number, or one too large. A number below the
// flag's bound is validate's to refuse, in the words every command uses.
func (v *validator) int(fs *flag.FlagSet, dst *int, name, usage string) {
	fs.Var(intFlag{dst}, name, usage)
}

// intFlag is the flag.Value of validator.int.
type intFlag struct{ n *int }

func (f intFlag) String() string {
	if f.n == nil {
		return "0" // the zero Value flag.PrintDefaults makes
	}
	return strconv.Itoa(*f.n)
}

func (f intFlag) Set(s string) error {
	text := strings.TrimSpace(s)
	if strings.Contains(text, ",") {
		return errors.New("one whole number, not a list")
	}
	n, err := strconv.Atoi(text)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return fmt.Errorf("%q is too large a number", text)
	case err != nil:
		return fmt.Errorf("%q is not a whole number", text)
	}
	*f.n = n
	return nil
}

// duration defines a flag holding a duration, its default *dst. Unlike
// flag.Duration, whose error is "parse error" whatever the value, it says
// what is wrong: a number given without its unit (-time 3, seconds to
// many tools) or no duration at all.
func (v *validator) duration(fs *flag.FlagSet, dst *time.Duration, name, usage string) {
	fs.Var(durationFlag{dst}, name, usage)
}

// durationFlag is the flag.Value of validator.duration.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return time.Duration(0).String() // the zero Value flag.PrintDefaults makes
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	text := strings.TrimSpace(s)
	d, err := time.ParseDuration(text)
	if _, nerr := strconv.ParseFloat(text, 64); err != nil && nerr == nil {
		return fmt.Errorf("%q has no unit: give one, as in 3s, 500ms or 2m", text)
	}
	if err != nil {
		return fmt.Errorf("%q is not a duration (3s, 500ms, 1m30s, ...)", text)
	}
	*f.d = d
	return nil
}

// byteList defines a flag holding a list of distinct segment sizes. Two
// sizes are the same when a store opens with the same segment size for
// them: 0 is the default, 64 MiB, so 0,64MiB would measure it twice.
func (v *validator) byteList(fs *flag.FlagSet, dst *[]int64, name, usage string) {
	distinctListBy(v, fs, dst, name, usage, formatBytesFlag, parseBytes, effectiveSegmentBytes)
}

func (v *validator) syncs(fs *flag.FlagSet, dst *[]broker.SyncMode, name, usage string) {
	format := func(m broker.SyncMode) string { return m.String() }
	distinctList(v, fs, dst, name, usage, format, func(it string) (broker.SyncMode, error) {
		return parseSync(strings.TrimSpace(it))
	})
}

func (v *validator) sync(fs *flag.FlagSet, dst *broker.SyncMode, name, usage string) {
	v.list(fs, name, usage, dst.String(), func(items []string) error {
		if len(items) != 1 {
			return errors.New("one mode, not a list")
		}
		m, err := parseSync(strings.TrimSpace(items[0]))
		*dst = m
		return err
	})
}

func (v *validator) walSync(fs *flag.FlagSet, dst *wal.SyncMode, name, usage string) {
	v.list(fs, name, usage, dst.String(), func(items []string) error {
		for _, m := range []wal.SyncMode{wal.SyncAlways, wal.SyncInterval, wal.SyncNever} {
			if len(items) == 1 && strings.TrimSpace(items[0]) == m.String() {
				*dst = m
				return nil
			}
		}
		return errors.New("want always, interval or never")
	})
}

func (v *validator) segmentSources(fs *flag.FlagSet, dst *[]segmentSource, name, usage string) {
	format := func(src segmentSource) string { return src.String() }
	distinctList(v, fs, dst, name, usage, format, func(it string) (segmentSource, error) {
		switch strings.TrimSpace(it) {
		case newSegments.String():
			return newSegments, nil
		case reusedSegments.String():
			return reusedSegments, nil
		}
		return 0, fmt.Errorf("%q: want new or reused", it)
	})
}

// distinctList defines a flag holding a comma-separated list of distinct
// values, each read from its item by parse; its default is *dst, each
// value written by format. A list with a bad item or a repeat (see
// firstRepeat) is refused and leaves *dst as it was.
func distinctList[T comparable](v *validator, fs *flag.FlagSet, dst *[]T, name, usage string, format func(T) string, parse func(item string) (T, error)) {
	distinctListBy(v, fs, dst, name, usage, format, parse, func(x T) T { return x })
}

// distinctListBy is distinctList whose values are the same when their
// effective values, as effective says, are: a repeat is of what the
// workloads would use, not of how it was spelled.
func distinctListBy[T comparable](v *validator, fs *flag.FlagSet, dst *[]T, name, usage string, format func(T) string, parse func(item string) (T, error), effective func(T) T) {
	var def []string
	for _, x := range *dst {
		def = append(def, format(x))
	}
	v.list(fs, name, usage, strings.Join(def, ","), func(items []string) error {
		var out, effectives []T
		for _, it := range items {
			x, err := parse(it)
			if err != nil {
				return err
			}
			out = append(out, x)
			effectives = append(effectives, effective(x))
		}
		if err := firstRepeat(items, effectives); err != nil {
			return err
		}
		*dst = out
		return nil
	})
}

// firstRepeat names the first of items whose value, in vals, an earlier
// one has: a list's values each make a workload (or a ceiling), and one
// given twice would be measured twice, or hide a typing mistake.
func firstRepeat[T comparable](items []string, vals []T) error {
	for i, v := range vals {
		j := slices.Index(vals[:i], v)
		if j < 0 {
			continue
		}
		a, b := strings.TrimSpace(items[j]), strings.TrimSpace(items[i])
		if a == b {
			return fmt.Errorf("%q given twice", b)
		}
		return fmt.Errorf("%q and %q are the same value, given twice", a, b)
	}
	return nil
}

// parseBytes reads a size: a number of bytes, or one followed by B, KiB,
// MiB, GiB or TiB (K, M, G and T too), so that a size too large is told
// so by the flag's own bound rather than as no size at all.
func parseBytes(text string) (int64, error) {
	s := strings.TrimSpace(text)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if errors.Is(err, strconv.ErrRange) || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large a size (at most %d bytes)", text, int64(math.MaxInt64))
	}
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size in bytes (1024, 4MiB, ...)", text)
	}
	return n * mult, nil
}

// formatBytesFlag writes a size as parseBytes reads it.
func formatBytesFlag(n int64) string {
	return strings.ReplaceAll(formatBytes(n), " ", "")
}
