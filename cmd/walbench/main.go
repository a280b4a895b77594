package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// Exit codes. A run a signal stopped exits with 128 + the signal's
// number, as a shell reports a death by that signal: 130 for SIGINT
// (Ctrl-C), 143 for SIGTERM, 129 for SIGHUP.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 128 + int(syscall.SIGINT) // stopped, by what is not known
)

// errInterrupted is what the cause of the run's context is, checked with
// errors.Is, once a signal stopped the run.
var errInterrupted = errors.New("interrupted")

// interruption is the cause of the run's context after a signal.
type interruption struct{ sig syscall.Signal }

func (i interruption) Error() string        { return "interrupted by " + signalName(i.sig) }
func (i interruption) Is(target error) bool { return target == errInterrupted }

// stopSignals are the signals that stop a run: Ctrl-C, kill, and the
// closing of its terminal.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// signalName is "SIGINT", "SIGTERM", ...
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// stoppedBy says how ctx was stopped: the signal's name ("" when ctx
// ended otherwise, as tests end it), and the exit code.
func stoppedBy(ctx context.Context) (signal string, code int) {
	var i interruption
	if errors.As(context.Cause(ctx), &i) {
		return signalName(i.sig), 128 + int(i.sig)
	}
	return "", exitInterrupted
}

// byWhom is " by Ctrl-C", " by SIGTERM", ..., or "" for an unknown
// signal: how the messages name what stopped a run.
func byWhom(signal string) string {
	switch signal {
	case "":
		return ""
	case "SIGINT":
		return " by Ctrl-C"
	}
	return " by " + signal
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is walbench with arguments args, stopped by Ctrl-C, SIGTERM or
// SIGHUP; it returns the exit code. The first signal stops the current
// measurement and lets the run print what it measured; a second removes
// the temporary directory (and the -json report's temporary file) and
// exits at once.
func run(args []string, stdout, stderr io.Writer) int {
	// Catch signals before anything exists to clean up; they wait in the
	// channel until the goroutine below takes them.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	// A stdout closed early (walbench ... | head) must not kill the run
	// before it removed its directory: with SIGPIPE caught, a write to it
	// fails with EPIPE instead, which the run reports.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	finished := make(chan struct{})
	defer close(finished)
	left := &leftovers{}
	e := &env{progress: newProgress(stderr)}
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-finished:
			return
		}
		first, firstAt := interruption{sig.(syscall.Signal)}, time.Now()
		if first.sig == syscall.SIGINT {
			e.progress.printf("walbench: interrupted: stopping the current measurement (Ctrl-C again to quit at once)")
		} else {
			e.progress.printf("walbench: %s: stopping the current measurement (a second signal quits at once)", signalName(first.sig))
		}
		cancel(first)
		// The same signal again at once is the first one delivered twice
		// (timeout(1) and kill -- -PGID signal the process and its group),
		// not a person asking to quit: it is ignored.
		for {
			select {
			case sig = <-sigs:
			case <-finished:
				return
			}
			if sig != first.sig || time.Since(firstAt) >= repeatedSignal {
				break
			}
		}
		sayRemovals(e.progress, left.removeAll())
		e.progress.printf("walbench: quitting")
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	return runContext(ctx, args, stdout, stderr, e, left.add)
}

// repeatedSignal is how soon after the first signal the same one counts as
// a second delivery of it rather than a second signal.
const repeatedSignal = 200 * time.Millisecond

// leftovers are the paths a forced quit (a second Ctrl-C) removes: what
// walbench made and has not completed or removed itself. Never a file
// walbench did not make. Safe for concurrent use.
type leftovers struct {
	mu    sync.Mutex      // guards paths
	paths map[string]bool // made and not yet completed or removed
}

// add records path, and returns the function that withdraws it (the run
// completed it: a forced quit leaves it).
func (l *leftovers) add(path string) (keep func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paths == nil {
		l.paths = map[string]bool{}
	}
	l.paths[path] = true
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.paths, path)
	}
}

// removal is what removeAll did with one path: err is nil when it is gone.
type removal struct {
	path string
	err  error
}

// removeAll removes every path recorded and not withdrawn, and returns
// what became of each that was there. It holds the lock until the end, so
// a keep that comes meanwhile waits, and a path is never both kept and
// removed.
func (l *leftovers) removeAll() []removal {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []removal
	for _, p := range slices.Sorted(maps.Keys(l.paths)) {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue // removed by the run already
		}
		out = append(out, removal{path: p, err: removeTree(p)})
	}
	l.paths = nil
	return out
}

// removeTree removes the file or directory tree p. A directory a store
// is still writing into may gain a file while it is being removed: it is
// tried a few times.
func removeTree(p string) error {
	var err error
	for range 3 {
		if err = os.RemoveAll(p); err == nil {
			return nil
		}
	}
	return err
}

// sayRemovals says on p what a forced quit removed, and what it could not.
func sayRemovals(p *progress, removals []removal) {
	for _, r := range removals {
		if r.err != nil {
			p.printf("walbench: interrupted again: could not remove %s, left behind: %v", r.path, r.err)
			continue
		}
		p.printf("walbench: interrupted again: removed %s", r.path)
	}
}

// runContext is walbench with arguments args, until ctx ends; it returns
// the exit code. made, when not nil, is told each path walbench creates
// and removes unless the run completes it (the temporary directory, the
// -json report's temporary file), and returns the function to call once
// it is gone or to be kept. Every return path after a path is made passes
// its removal. The -json file itself is never made this way, nor removed:
// it is replaced, by a rename, only once the report is whole.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer, e *env, made func(path string) (keep func())) (code int) {
	if made == nil {
		made = func(string) func() { return func() {} }
	}
	cfg, err := parseConfig(args, stdout, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "walbench: %v\n", err)
		return exitUsage
	}
	if cfg.command == "report" {
		if err := runReport(cfg, e.outputFS(), stdout); err != nil {
			fmt.Fprintf(stderr, "walbench report: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if err := checkRoom(cfg, e); err != nil {
		fmt.Fprintf(stderr, "walbench: %v\n", err)
		return exitError
	}
	if err := checkMemory(cfg, e); err != nil {
		fmt.Fprintf(stderr, "walbench: %v\n", err)
		return exitError
	}
	var jsonOut *pendingFile
	if cfg.jsonFile != "" {
		var finish func() bool
		jsonOut, finish, err = prepareJSON(e.outputFS(), cfg.jsonFile, stderr, made)
		if err != nil {
			fmt.Fprintf(stderr, "walbench: -json %s: %v\n", cfg.jsonFile, err)
			return exitError
		}
		defer func() {
			if !finish() {
				code = max(code, exitError)
			}
		}()
	}
	// The profile is of the measuring: it is kept unless that failed,
	// whatever became of the report, the tables or the directory.
	measuringFailed := false
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(e.outputFS(), cfg.cpuProfile, stderr, made)
		if err != nil {
			fmt.Fprintf(stderr, "walbench: -cpuprofile %s: %v\n", cfg.cpuProfile, err)
			return exitError
		}
		defer func() {
			if !stop(measuringFailed) {
				code = max(code, exitError)
			}
		}()
	}

	tmp, err := os.MkdirTemp(cfg.parent, "walbench-")
	if err != nil {
		measuringFailed = true
		fmt.Fprintf(stderr, "walbench: -dir %s: cannot make the temporary directory there (want an existing directory): %v\n", cfg.parent, err)
		return exitError
	}
	if abs, err := filepath.Abs(tmp); err == nil {
		tmp = abs
	}
	tmpMade := made(tmp)
	tmpRemoved := false
	removeTmp := func() error {
		tmpRemoved = true
		defer tmpMade()
		if err := removeTree(tmp); err != nil {
			fmt.Fprintf(stderr, "walbench: remove %s: %v\n", tmp, err)
			code = max(code, exitError)
			return err
		}
		return nil
	}
	defer func() {
		if !tmpRemoved {
			_ = removeTmp() // said on stderr
		}
	}()

	start := time.Now()
	rep, measureErr := measure(ctx, e, tmp, cfg)
	rep.Seconds = time.Since(start).Seconds()
	rep.Interrupted = ctx.Err() != nil
	stopSignal, stopCode := stoppedBy(ctx)
	if rep.Interrupted {
		rep.InterruptedBy = stopSignal
	}
	if measureErr != nil {
		rep.Error = measureErr.Error()
		measuringFailed = true
	}
	// Removed before anything is printed or written, so that both say what
	// became of it.
	if err := removeTmp(); err != nil {
		rep.Machine.DirLeft = err.Error()
	}
	measured := probeMeasured(rep.Probe) || len(rep.Rows) > 0 || rep.Reopen != nil
	if measured {
		// The report first: it does not depend on stdout, which may be
		// closed (walbench ... | head).
		if jsonOut != nil {
			b, err := marshalReport(rep)
			if err == nil {
				err = jsonOut.commit(b)
			}
			switch {
			case err != nil:
				fmt.Fprintf(stderr, "walbench: -json %s: %v%s\n", cfg.jsonFile, err, jsonOut.untouched())
				code = exitError
			case jsonOut.existed:
				fmt.Fprintf(stderr, "walbench: -json %s: replaced by this run's report\n", cfg.jsonFile)
			}
		}
		if err := printReport(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "walbench: print the tables: %v\n", err)
			code = exitError
		}
	}
	// The exit code and the message follow rep.Interrupted, what the report
	// and the tables say: a signal that came once the measuring had ended
	// (while the directory was removed, the report written or the tables
	// printed) cut nothing short, and a script must not take a whole run
	// for one that was.
	switch {
	case measureErr != nil:
		fmt.Fprintf(stderr, "walbench: %v\n", measureErr)
		code = exitError
	case rep.Interrupted && !measured:
		fmt.Fprintf(stderr, "walbench: interrupted%s before anything was measured\n", byWhom(stopSignal))
		code = max(code, stopCode)
	case rep.Interrupted:
		fmt.Fprintf(stderr, "walbench: interrupted%s; the tables have what was measured until then\n", byWhom(stopSignal))
		code = max(code, stopCode)
	case ctx.Err() != nil:
		late, _ := stoppedBy(ctx)
		fmt.Fprintf(stderr, "walbench: interrupted%s after everything was measured: the run is whole, as its tables say\n", byWhom(late))
	}
	return code
}

// settleBytes is about what a drain appends to the log for each message
// it takes, a lease and an ack record, frames included: they take room
// until the segments they settle are removed.
const settleBytes = 64

// storeBytes is about what a store prefilled with messages of size bytes
// in segments of segmentBytes takes on disk, at most, as
// broker.StoreStats says to plan for it, while a drain takes them: its
// segments, as the prefill fills them (fillQueue: batches of fillBatch
// records that must each fit in one segment, so that a segment's tail
// that cannot hold the next batch stays empty: in segments of a few
// batches, a large share of each), the three segments the store keeps
// beside its log, the index table, which grows by whole chunks of
// index.ChunkEntries entries, one a message, and the drain's leases and
// acks (settleBytes). ok is false when that does not fit in an int64,
// more than any disk holds: -messages is bounded only by the free space,
// so a mistyped one must not wrap around to a size that fits.
func storeBytes(messages, size int, segmentBytes int64) (n int64, ok bool) {
	if messages < 0 || size < 0 {
		return 0, false
	}
	seg := effectiveSegmentBytes(segmentBytes)
	record := recordBytes(size)
	// A segment holds a record of the largest message its store takes:
	// at least that much of a prefill's. Of it, the last batch that did
	// not fit leaves less than one batch empty, and less than half: one
	// that fits once and no more is larger than the other half.
	room := max(int64(broker.Options{SegmentBytes: seg}.MaxMessageBytes())+recordBytes(0), record)
	perSegment := max(1, (room-min(room/2, fillBatch*record))/record)
	segments := (int64(messages)+perSegment-1)/perSegment + 3
	chunks := int64(messages)/index.ChunkEntries + 2 // rounded up, and a spare
	const chunkBytes = index.ChunkEntries * index.EntrySize
	// In floating point first: a figure near 2^63 would wrap around.
	if f := float64(segments)*float64(seg) + float64(chunks)*chunkBytes + float64(messages)*settleBytes; f >= math.MaxInt64/2 {
		return 0, false
	}
	return segments*seg + chunks*chunkBytes + int64(messages)*settleBytes, true
}

// free is the free space of the file system dir is on (see freeBytes).
func (e *env) free(dir string) (int64, error) {
	if e.freeSpace != nil {
		return e.freeSpace(dir)
	}
	return freeBytes(dir)
}

// roomUnknown is the largest prefilled store walbench makes where the
// free space of -dir cannot be read: the one its defaults make
// (defaultDrainMessages of 1 KiB, in 64 MiB segments), so that the
// profile and full still run there, while a larger -messages, which could
// be a mistyped one that fills the disk, is refused.
var roomUnknown, _ = storeBytes(defaultDrainMessages, 1024, 0)

// checkRoom refuses a run whose prefilled stores (drain, reopen) would not
// fit in the free space of -dir: aimed at a store's own disk, a large
// -messages would fill it. Each such store is removed before the next is
// made, so the largest is what must fit, with the segments a store keeps
// beside its log. A store too large to count in 64 bits fits on no disk,
// and is refused whatever the free space. When the free space cannot be
// read, a store larger than the defaults make (roomUnknown) is refused:
// whether it fits cannot be told. A -dir that is not there is left to
// its own check, which says so.
func checkRoom(c config, e *env) error {
	var need int64
	var what string
	var overflows []error
	take := func(name string, messages, size int, segmentBytes int64) {
		w := fmt.Sprintf("%s -messages %d of %d B", name, messages, size)
		n, ok := storeBytes(messages, size, segmentBytes)
		if !ok {
			overflows = append(overflows, fmt.Errorf("%s needs more than %d bytes on disk, more than any disk has: lower -messages or -size", w, int64(math.MaxInt64)))
			return
		}
		if n > need {
			need, what = n, w
		}
	}
	if slices.Contains(c.workloads, kindDrain) {
		take("drain", c.drain.messages, c.drain.size, c.drain.segmentBytes)
	}
	if c.reopen {
		take("reopen", c.reopenLoad.messages, c.reopenLoad.size, c.reopenLoad.segmentBytes)
	}
	if len(overflows) > 0 {
		return errors.Join(overflows...)
	}
	if need == 0 {
		return nil
	}
	gib := func(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
	free, err := e.free(c.parent)
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return nil // -dir's own check reports a directory that is not there
	case err != nil && need > roomUnknown:
		return fmt.Errorf("%s needs about %s on disk, and the free space of %s cannot be read (%v): walbench makes no store larger than its defaults' (%s) where it cannot tell that one fits: lower -messages or -size",
			what, gib(need), c.parent, err, gib(roomUnknown))
	case err != nil:
		return nil
	}
	if need > free {
		return fmt.Errorf("%s needs about %s on disk, and %s has %s free: lower -messages or -size, or free space", what, gib(need), c.parent, gib(free))
	}
	return nil
}
