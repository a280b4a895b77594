package recovery_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The fault tests inject errors into the store's file operations with a
// vfs.FaultFS — a failed fdatasync, a failed or short write, a full disk
// when writing or when preparing the next segment, failures of the index
// files — and check what the store promises:
//
//   - a failed append stops the store: the calls waiting for it and every
//     later call fail, saying that the store failed and must be reopened,
//     and nothing is reported as done after the failure; an fdatasync is
//     never retried;
//   - reopened with a healthy file system, the store holds everything
//     acknowledged before the failure (the projection of every call that
//     returned, the failed call possibly included), and works again;
//   - a failure of the index files (checkpoints) does not stop the store:
//     the log is the source of truth.
//
// WALBROKER_RECOVERY_SEED replays the random choices (logged).

// failureText is what the error of every call made after a failure says.
const failureText = "must be reopened"

// faultRuns is how many workload runs each randomised fault test makes;
// -short makes a tenth.
func faultRuns() int {
	if testing.Short() {
		return 3
	}
	return 30
}

// checkFailStop makes every kind of call on a store that has failed and
// returns what did not fail as it should: every call must fail, with an
// error that contains text.
func checkFailStop(s *broker.Store, queues map[string]*broker.Queue, leases []held, text string) []string {
	var bad []string
	check := func(what string, err error) {
		switch {
		case err == nil:
			bad = append(bad, what+" succeeded after the store failed")
		case !strings.Contains(err.Error(), text):
			bad = append(bad, fmt.Sprintf("%s failed with %q, which does not say %q", what, err, text))
		}
	}
	receipt := broker.ReceiptValue("not-a-receipt")
	if len(leases) > 0 {
		receipt = leases[len(leases)-1].receipt
	}
	for _, name := range sortedKeys(queues) {
		q := queues[name]
		_, err := q.Publish(bg(), []byte("after the failure"))
		check(name+": Publish", err)
		_, err = q.PublishKeyed(bg(), "after-the-failure", []byte("x"))
		check(name+": PublishKeyed", err)
		_, err = q.PublishBatch(bg(), [][]byte{[]byte("a"), []byte("b")})
		check(name+": PublishBatch", err)
		_, err = q.Receive(bg(), 10)
		check(name+": Receive", err)
		_, err = q.DeadLetters(bg(), 10)
		check(name+": DeadLetters", err)
		check(name+": ReplayDeadLetter", q.ReplayDeadLetter(bg(), "0000000000000001"))
		check(name+": DeleteDeadLetter", q.DeleteDeadLetter(bg(), "0000000000000001"))
		check(name+": Ack", q.Ack(bg(), receipt))
		_, err = q.Nack(bg(), receipt, nil)
		check(name+": Nack", err)
		check(name+": Reject", q.Reject(bg(), receipt, nil))
		_, err = q.Extend(bg(), receipt, 1)
		check(name+": Extend", err)
	}
	_, err := s.Queue("orders", policyOf("orders"))
	check("Store.Queue", err)
	_, err = s.Queue("another", policyOf("orders"))
	check("Store.Queue of a new queue", err)
	return bad
}

// syncGate wraps a file system and holds the first fdatasync of the file
// whose name contains name, once armed, until released.
type syncGate struct {
	vfs.FS
	name     string
	armed    atomic.Bool
	held     chan struct{} // closed when the fdatasync is held
	release  chan struct{} // closed by the test
	once     sync.Once
	failed   func() bool  // whether an fdatasync has failed
	failedAt atomic.Int64 // fdatasyncs of the file tried after one failed
}

func newSyncGate(inner vfs.FS, name string, failed func() bool) *syncGate {
	return &syncGate{FS: inner, name: name, failed: failed, held: make(chan struct{}), release: make(chan struct{})}
}

type gateFile struct {
	vfs.File
	g     *syncGate
	match bool
}

func (g *syncGate) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &gateFile{File: f, g: g, match: strings.Contains(filepath.Base(name), g.name)}, nil
}

func (f *gateFile) Sync() error {
	if !f.match {
		return f.File.Sync()
	}
	if f.g.failed() {
		f.g.failedAt.Add(1)
	}
	hold := false
	if f.g.armed.Load() {
		f.g.once.Do(func() { hold = true })
	}
	if hold {
		close(f.g.held)
		<-f.g.release
	}
	return f.File.Sync()
}

// waitingOnLog counts the goroutines blocked waiting for the log.
func waitingOnLog() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "wal.(*Pending).Wait(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestFaultFdatasyncEIOFailsEveryWaiter: while one publish's fdatasync is
// in flight, N more publishers queue behind it; the next fdatasync, the
// one that covers all N in one group commit, fails with EIO. Every one of
// the N gets an error saying the store must be reopened, every later call
// fails, the fdatasync is never retried, and a reopen holds everything
// acknowledged before.
func TestFaultFdatasyncEIOFailsEveryWaiter(t *testing.T) {
	const waiters = 16
	dir := fastDir(t)
	ffs := vfs.NewFaultFS(vfs.Default)
	gate := newSyncGate(ffs, "0000000001.seg", func() bool { return ffs.Injected(vfs.OpSync) > 0 })
	c := newClock(t0)
	s, q := openQueue(t, dir, broker.Options{Now: c.Now, SegmentBytes: 256 << 10, FS: gate}, "orders")
	acked := map[string]string{}
	for i := range 20 {
		p := fmt.Sprintf("before-%02d|%s", i, strings.Repeat("b", 200))
		m, err := q.Publish(bg(), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		acked[m.ID] = p
	}
	ds, err := q.Receive(bg(), 2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Receive: %v, %d messages", err, len(ds))
	}
	records := s.Stats().Records

	// The fdatasync of the first publish is held; the next one fails.
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: "0000000001.seg", Nth: 2, Err: syscall.EIO})
	gate.armed.Store(true)
	first := make(chan error, 1)
	firstPayload := "first|" + strings.Repeat("f", 200)
	var firstID string
	go func() {
		m, err := q.Publish(bg(), []byte(firstPayload))
		firstID = m.ID
		first <- err
	}()
	<-gate.held
	errs := make([]error, waiters)
	maybe := map[string]bool{}
	var wg sync.WaitGroup
	for i := range waiters {
		p := fmt.Sprintf("waiter-%02d|%s", i, strings.Repeat("w", 200))
		maybe[p] = true
		wg.Go(func() {
			_, errs[i] = q.Publish(bg(), []byte(p))
		})
	}
	// Let every publisher queue its record behind the held fdatasync.
	for range 100_000 {
		if waitingOnLog() >= waiters+1 {
			break
		}
		runtime.Gosched()
	}
	queued := waitingOnLog()
	close(gate.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("the publish whose fdatasync succeeded failed: %v", err)
	}
	acked[firstID] = firstPayload
	for i, err := range errs {
		if err == nil {
			t.Errorf("waiter %d: Publish succeeded although the fdatasync covering it failed", i)
		} else if !strings.Contains(err.Error(), failureText) || !errors.Is(err, syscall.EIO) {
			t.Errorf("waiter %d: %q does not say the store failed and must be reopened, or hides the EIO", i, err)
		}
	}
	if queued >= waiters+1 {
		if got := s.Stats().Records - records; got != waiters+1 {
			t.Errorf("%d waiters were queued behind the held fdatasync, yet %d records were written (want the first and one group of %d)", waiters, got, waiters)
		}
	} else {
		t.Logf("only %d of %d publishers had queued when the fdatasync was released", queued-1, waiters)
	}
	if n := ffs.Injected(vfs.OpSync); n != 1 {
		t.Errorf("%d fdatasyncs failed, want 1", n)
	}
	for _, b := range checkFailStop(s, map[string]*broker.Queue{"orders": q}, []held{{queue: "orders", receipt: ds[0].Lease.Receipt}}, failureText) {
		t.Error(b)
	}
	_ = s.Close()
	if n := gate.failedAt.Load(); n != 0 {
		t.Errorf("the segment was fdatasynced %d more times after its fdatasync failed: never retry one", n)
	}

	checkReopened(t, dir, c.Now().Add(checkDelay), acked, func(p string) bool { return maybe[p] }, "with a healthy file system")
}

// faultCase injects rules into a FaultFS under the workload and checks the
// store after: fail-stop if a call failed, then a healthy reopen that
// holds every call that returned.
type faultCase struct {
	name string
	// ops and match choose the operations counted in a dry run of the
	// workload; rules gets that count and returns the rules to inject.
	op    vfs.Op
	match func(dir string) func(string) bool
	rules func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule
	// stops: the workload stops on a failed call whose error wraps this
	// (when it stops: an injected failure no call waited for, such as the
	// preparation of a segment the run never needed, stops nothing); nil:
	// the store must run to the end unharmed.
	stops error
	// reopenWith reopens through the same FaultFS, rules cleared (the
	// disk was freed), and runs the workload again.
	reopenWith bool
}

// inDir matches the files of the directory itself (segments, prepared
// segments, spares, the clean mark), not those of index/.
func inDir(dir string) func(string) bool {
	return func(name string) bool { return filepath.Dir(filepath.Clean(name)) == filepath.Clean(dir) }
}

// inIndex matches the index directory and its files.
func inIndex(string) func(string) bool {
	return func(name string) bool { return strings.Contains(filepath.ToSlash(name)+"/", "/index/") }
}

// ops is how many of the chosen operations a dry run of the workload
// made: in all, and by the time the store was open.
type ops struct{ total, atOpen int64 }

// pick returns a random operation number after the store was open and
// within the first 80% of the run.
func (o ops) pick(rng *rand.Rand) int64 {
	return o.atOpen + 1 + rng.Int64N(max(1, (o.total-o.atOpen)*4/5))
}

func runFaultCases(t *testing.T, cases []faultCase) {
	seed := testSeed(t)
	root := fastDir(t)
	for ci, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			runs, stopped, tornTails, openFailed, notInjected := 0, 0, 0, 0, 0
			for r := range faultRuns() {
				rng := rand.New(rand.NewPCG(seed, uint64(ci)<<32|uint64(r)))
				mode := syncModes[r%len(syncModes)]
				dir := filepath.Join(root, fmt.Sprintf("%d-%d", ci, r))
				wseed := rng.Uint64()

				// A dry run counts the operations the rules choose from.
				dry := vfs.NewFaultFS(vfs.Default)
				var count atomic.Int64
				dryMatch := fc.match(dir + "-dry")
				dry.Observe(func(e vfs.Event) {
					if e.Op == fc.op && (dryMatch(e.Name) || e.Op == vfs.OpRename && dryMatch(e.NewName)) {
						count.Add(1)
					}
				})
				var atOpen int64
				if j := (workload{seed: wseed, steps: 150, mode: mode, opened: func() { atOpen = count.Load() }}).run(dir+"-dry", dry, nil); j.failed != nil || j.openErr != nil {
					t.Fatalf("the workload fails without a fault: %v", j)
				}

				ffs := vfs.NewFaultFS(vfs.Default)
				rules := fc.rules(rng, fc.match(dir), ops{total: count.Load(), atOpen: atOpen})
				for _, rule := range rules {
					ffs.Inject(rule)
				}
				what := fmt.Sprintf("run %d (seed %d, mode %v, %d %v operations in a dry run, %d by Open; rules %s)", r, seed, mode, count.Load(), fc.op, atOpen, describeRules(rules))
				var stops []string
				w := workload{seed: wseed, steps: 150, mode: mode, onFailure: func(s *broker.Store, qs map[string]*broker.Queue, ls []held) {
					stops = checkFailStop(s, qs, ls, failureText)
				}}
				j := w.run(dir, ffs, nil)
				runs++
				switch {
				case j.openErr != nil && (fc.stops == nil || !errors.Is(j.openErr, fc.stops)):
					t.Errorf("%s: Open failed: %v", what, j.openErr)
				case j.openErr != nil:
					openFailed++
				case fc.stops == nil && j.failed != nil:
					t.Errorf("%s: a failure of the index stopped the store: %v", what, j.failed)
				case fc.stops != nil && j.failed != nil && !errors.Is(j.failed.err, fc.stops):
					t.Errorf("%s: %v failed with %v, want %v", what, j.failed, j.failed.err, fc.stops)
				case fc.stops != nil && j.failed != nil && !strings.Contains(j.failed.err.Error(), failureText):
					t.Errorf("%s: the error of the failed call does not say the store %s: %v", what, failureText, j.failed.err)
				}
				if totalInjected(ffs) == 0 {
					// The background maintenance runs on its own clock:
					// this run checkpointed less often than the dry run.
					notInjected++
				}
				if j.failed != nil {
					stopped++
				}
				for _, s := range stops {
					t.Errorf("%s: %s", what, s)
				}
				if t.Failed() {
					t.Logf("%v", j)
					return
				}
				var reopen broker.Options
				if fc.reopenWith {
					ffs.Clear()
					reopen.FS = ffs
				}
				obs, err := observe(dir, j.end.Add(checkDelay), j.keys, reopen)
				if err != nil {
					t.Fatalf("%s: reopen: %v", what, err)
				}
				if obs.recovery.TornTail {
					tornTails++
				}
				if n, d := match(j, obs, len(j.calls)); n < 0 {
					t.Fatalf("%s: after the reopen the store does not hold every call that returned:\n%s\n%v", what, d, j)
				}
				if fc.reopenWith {
					// The disk has room again: the store works, through
					// rotations, without another reopen.
					j2 := workload{seed: rng.Uint64(), steps: 150, mode: mode}.run(dir, ffs, nil)
					if j2.openErr != nil || j2.failed != nil || j2.closeErr != nil {
						t.Fatalf("%s: once space was freed the store does not work: open %v, %v, close %v", what, j2.openErr, j2.failed, j2.closeErr)
					}
				}
			}
			if fc.stops != nil && stopped == 0 && runs >= 10 {
				t.Errorf("no run was stopped by a failed call")
			}
			if notInjected > runs/2 && runs >= 10 {
				t.Errorf("in %d of %d runs the failure was never injected", notInjected, runs)
			}
			t.Logf("%d runs: %d stopped by a failed call, %d failed to open, %d never reached the failing operation, %d reopens cut a torn tail",
				runs, stopped, openFailed, notInjected, tornTails)
		})
	}
}

func describeRules(rules []vfs.Rule) string {
	var parts []string
	for _, r := range rules {
		s := fmt.Sprintf("%v", r.Op)
		if r.NameContains != "" {
			s += " of *" + r.NameContains + "*"
		}
		if r.Nth > 0 {
			s += fmt.Sprintf(" #%d", r.Nth)
		}
		if r.After > 0 {
			s += fmt.Sprintf(" after %d", r.After)
		}
		if r.ShortFraction > 0 {
			s += fmt.Sprintf(" short %.2f", r.ShortFraction)
		}
		parts = append(parts, fmt.Sprintf("%s: %v", s, r.Err))
	}
	return strings.Join(parts, "; ")
}

func totalInjected(f *vfs.FaultFS) int64 {
	var n int64
	for op := vfs.OpOpen; op <= vfs.OpUnlock; op++ {
		n += f.Injected(op)
	}
	return n
}

// TestFaultLogAppends fails one write or fdatasync of the log's files
// (chosen at random among those a dry run made): with EIO, with ENOSPC (the
// disk stays full until the rule is cleared), or as a short write; and a
// full disk when the next segment is prepared.
func TestFaultLogAppends(t *testing.T) {
	runFaultCases(t, []faultCase{
		{name: "fdatasync EIO", op: vfs.OpSync, match: inDir, stops: syscall.EIO,
			rules: func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
				return []vfs.Rule{{Op: vfs.OpSync, Match: match, Nth: n.pick(rng), Err: syscall.EIO}}
			}},
		{name: "write EIO", op: vfs.OpWrite, match: inDir, stops: syscall.EIO,
			rules: func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
				return []vfs.Rule{{Op: vfs.OpWrite, Match: match, Nth: n.pick(rng), Err: syscall.EIO}}
			}},
		{name: "write ENOSPC", op: vfs.OpWrite, match: inDir, stops: syscall.ENOSPC, reopenWith: true,
			rules: func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
				return []vfs.Rule{{Op: vfs.OpWrite, Match: match, After: n.pick(rng), Err: syscall.ENOSPC}}
			}},
		{name: "short write", op: vfs.OpWrite, match: inDir, stops: io.ErrShortWrite,
			rules: func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
				return []vfs.Rule{{Op: vfs.OpWrite, Match: match, Nth: n.pick(rng), ShortFraction: 0.1 + 0.8*rng.Float64(), Err: io.ErrShortWrite}}
			}},
		{name: "ENOSPC preparing a segment", op: vfs.OpOpen, stops: syscall.ENOSPC, reopenWith: true,
			// The preparer creates the next segment under a .seg.tmp name,
			// or renames a spare to that name and opens it.
			match: func(string) func(string) bool {
				return func(name string) bool { return strings.HasSuffix(name, ".seg.tmp") }
			},
			rules: func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
				return []vfs.Rule{{Op: vfs.OpOpen, Match: match, After: n.atOpen + rng.Int64N(max(1, n.total-n.atOpen-1)), Err: syscall.ENOSPC}}
			}},
	})
}

// TestFaultIndexFiles fails writes, fdatasyncs, renames and directory
// syncs of the index files (checkpoint, table files): checkpoints stop,
// the store goes on, and a reopen holds everything.
func TestFaultIndexFiles(t *testing.T) {
	one := func(op vfs.Op, errno error) func(*rand.Rand, func(string) bool, ops) []vfs.Rule {
		return func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
			return []vfs.Rule{{Op: op, Match: match, Nth: n.pick(rng), Err: errno}}
		}
	}
	runFaultCases(t, []faultCase{
		{name: "index fdatasync EIO", op: vfs.OpSync, match: inIndex, rules: one(vfs.OpSync, syscall.EIO)},
		{name: "index write EIO", op: vfs.OpWrite, match: inIndex, rules: one(vfs.OpWrite, syscall.EIO)},
		{name: "index write ENOSPC", op: vfs.OpWrite, match: inIndex,
			rules: func(rng *rand.Rand, match func(string) bool, n ops) []vfs.Rule {
				return []vfs.Rule{{Op: vfs.OpWrite, Match: match, After: n.pick(rng) - 1, Err: syscall.ENOSPC}}
			}},
		{name: "checkpoint rename EIO", op: vfs.OpRename, match: inIndex, rules: one(vfs.OpRename, syscall.EIO)},
		{name: "index directory sync EIO", op: vfs.OpSyncDir, match: inIndex, rules: one(vfs.OpSyncDir, syscall.EIO)},
	})
}

// TestFaultUnreadableCheckpointFailsOpenAndIsKept: a checkpoint that
// cannot be read at open (EIO) is not taken for damage. The store used to
// rebuild its index from the log, which removed the checkpoint, and with
// it what only the checkpoint knows (the messages a later Salvage names
// lost, when the log turns out damaged where the checkpoint vouched for
// it). Open fails naming the checkpoint and the cause, leaves the
// checkpoint as it was, and once it reads, opens from it with everything.
func TestFaultUnreadableCheckpointFailsOpenAndIsKept(t *testing.T) {
	seed := testSeed(t)
	for r := range faultRuns() {
		dir := fastDir(t)
		mode := syncModes[r%len(syncModes)]
		j := workload{seed: seed + uint64(r), steps: 150, mode: mode}.run(dir, nil, nil)
		if j.failed != nil || j.openErr != nil || j.closeErr != nil {
			t.Fatalf("the workload failed without a fault: %v", j)
		}
		ckpt := filepath.Join(dir, "index", "checkpoint")
		before, err := os.ReadFile(ckpt)
		if err != nil {
			t.Fatalf("Close wrote no checkpoint: %v", err)
		}
		ffs := vfs.NewFaultFS(vfs.Default)
		for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpRead, vfs.OpSize} {
			ffs.Inject(vfs.Rule{Op: op, Match: func(name string) bool { return filepath.Base(name) == "checkpoint" }, Err: syscall.EIO})
		}
		if _, err := observe(dir, j.end.Add(checkDelay), j.keys, broker.Options{FS: ffs}); err == nil {
			t.Fatalf("run %d (seed %d, %v): a checkpoint that cannot be read was taken for damage: Open succeeded", r, seed, mode)
		} else if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), ckpt) {
			t.Fatalf("run %d (seed %d, %v): the error does not name the checkpoint and the cause: %v", r, seed, mode, err)
		}
		if totalInjected(ffs) == 0 {
			t.Fatalf("run %d: the checkpoint was never read", r)
		}
		if after, err := os.ReadFile(ckpt); err != nil || !bytes.Equal(before, after) {
			t.Fatalf("run %d (seed %d, %v): the failed Open removed or changed the checkpoint: %v", r, seed, mode, err)
		}
		obs, err := observe(dir, j.end.Add(checkDelay), j.keys, broker.Options{})
		if err != nil {
			t.Fatalf("run %d (seed %d, %v): once the checkpoint reads, Open fails: %v", r, seed, mode, err)
		}
		if obs.recovery.IndexRebuilt {
			t.Errorf("run %d: Recovery().IndexRebuilt: the checkpoint was not kept", r)
		}
		if n, d := match(j, obs, len(j.calls)); n < 0 {
			t.Fatalf("run %d (seed %d, %v): the store does not hold every call:\n%s", r, seed, mode, d)
		}
	}
}
