package recovery

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// Hooks: the file operations a child can pause after, so that the parent's
// SIGKILL lands exactly there. Each is observed through a vfs.FaultFS
// wrapped around the real file system; the child blocks the goroutine that
// made the call, after the call completed and before it returned.
const (
	// Rotation: the prepared segment renamed into place, the directory
	// synced, the seal written to the old segment, the seal fdatasynced.
	HookRotateInstall   = "rotate-install"
	HookRotateDirSync   = "rotate-dirsync"
	HookRotateSealWrite = "rotate-seal-write"
	HookRotateSealed    = "rotate-sealed"
	// Preparing the next segment: a new one written and fdatasynced under
	// its temporary name, or a retired one renamed for reuse.
	HookPrepareSynced = "prepare-synced"
	HookRecycleRename = "recycle-rename"
	// Checkpoint: the checkpoint written, fdatasynced or renamed into
	// place; the table files written or fdatasynced before it.
	HookCheckpointWrite  = "checkpoint-write"
	HookCheckpointSynced = "checkpoint-synced"
	HookCheckpointRename = "checkpoint-rename"
	HookTableWrite       = "table-write"
	HookTableSynced      = "table-synced"
	// The checkpoint Open writes after replaying the log.
	HookOpenCheckpoint = "open-checkpoint"
	// Segment removal: a segment renamed aside as a spare, deleted, and
	// the directory synced after it.
	HookRemoveToSpare = "remove-to-spare"
	HookRemoveDelete  = "remove-delete"
	HookRemoveDirSync = "remove-dirsync"
	// The checkpoint that follows a copy forward (before the segment the
	// copies freed is removed).
	HookAfterCopyForward = "after-copy-forward"
)

// Hooks lists every hook.
var Hooks = []string{
	HookRotateInstall, HookRotateDirSync, HookRotateSealWrite, HookRotateSealed,
	HookPrepareSynced, HookRecycleRename,
	HookCheckpointWrite, HookCheckpointSynced, HookCheckpointRename, HookTableWrite, HookTableSynced,
	HookOpenCheckpoint,
	HookRemoveToSpare, HookRemoveDelete, HookRemoveDirSync,
	HookAfterCopyForward,
}

// hookState watches a child's file operations for its hook. Safe for
// concurrent use: observers run in whichever goroutine made the call.
type hookState struct {
	name  string
	skip  int64
	dir   string
	pause func()

	// installed holds the temporary names of the segments renamed into
	// place: a File keeps the name it was opened with, so the writes and
	// fdatasyncs of a segment created by this process carry that name.
	installed sync.Map
	opening   atomic.Bool  // Open has not returned yet
	stage     atomic.Int32 // progress through a hook of several steps
	copied    atomic.Bool  // a copy forward happened
	seen      atomic.Int64 // matching operations so far
	fired     atomic.Bool
}

func newHookState(name string, skip int, dir string, pause func()) (*hookState, error) {
	known := false
	for _, h := range Hooks {
		known = known || h == name
	}
	if !known {
		return nil, fmt.Errorf("recovery: unknown hook %q", name)
	}
	return &hookState{name: name, skip: int64(skip), dir: filepath.Clean(dir), pause: pause}, nil
}

// observe is the FaultFS observer. The first matching operation after
// skip others pauses its goroutine for good.
func (h *hookState) observe(e vfs.Event) {
	if h.fired.Load() || !h.match(e) || h.seen.Add(1) <= h.skip {
		return
	}
	if !h.fired.CompareAndSwap(false, true) {
		return
	}
	h.pause()
	select {} // until the parent's SIGKILL
}

// Stages of the hooks that follow a sequence of operations.
const (
	stageNone int32 = iota
	stageInstalled
	stageDirSynced
	stageSealWritten
	stageRemoved
)

func (h *hookState) match(e vfs.Event) bool {
	base, newBase := filepath.Base(e.Name), filepath.Base(e.NewName)
	isSeg := strings.HasSuffix(base, ".seg")
	isTmp := strings.HasSuffix(base, ".seg.tmp")
	storeDir := filepath.Clean(e.Name) == h.dir
	install := e.Op == vfs.OpRename && isTmp && strings.HasSuffix(newBase, ".seg")
	if install {
		h.installed.Store(base, true)
	}
	_, wasInstalled := h.installed.Load(base)
	// A segment in place: opened under its own name, or created by this
	// process under a temporary name and installed since.
	inPlace := isSeg || isTmp && wasInstalled
	toSpare := e.Op == vfs.OpRename && isSeg && strings.HasPrefix(newBase, "spare-")
	deleted := e.Op == vfs.OpRemove && isSeg
	checkpoint := base == "checkpoint.tmp"
	table := strings.HasPrefix(base, "tbl-")
	switch h.name {
	case HookRotateInstall:
		return install
	case HookRotateDirSync, HookRotateSealWrite, HookRotateSealed:
		switch st := h.stage.Load(); {
		case install:
			h.stage.Store(stageInstalled)
		case e.Op == vfs.OpSyncDir && storeDir && st == stageInstalled:
			h.stage.Store(stageDirSynced)
			return h.name == HookRotateDirSync
		case e.Op == vfs.OpWrite && inPlace && st == stageDirSynced:
			h.stage.Store(stageSealWritten)
			return h.name == HookRotateSealWrite
		case e.Op == vfs.OpSync && inPlace && st == stageSealWritten:
			h.stage.Store(stageNone)
			return h.name == HookRotateSealed
		}
	case HookPrepareSynced:
		return e.Op == vfs.OpSync && isTmp && !wasInstalled
	case HookRecycleRename:
		return e.Op == vfs.OpRename && strings.HasPrefix(base, "spare-") && strings.HasSuffix(newBase, ".seg.tmp")
	case HookCheckpointWrite:
		return e.Op == vfs.OpWrite && checkpoint
	case HookCheckpointSynced:
		return e.Op == vfs.OpSync && checkpoint
	case HookCheckpointRename:
		return e.Op == vfs.OpRename && checkpoint
	case HookTableWrite:
		return e.Op == vfs.OpWrite && table
	case HookTableSynced:
		return e.Op == vfs.OpSync && table
	case HookOpenCheckpoint:
		return h.opening.Load() && e.Op == vfs.OpWrite && checkpoint
	case HookRemoveToSpare:
		return toSpare
	case HookRemoveDelete:
		return deleted
	case HookRemoveDirSync:
		if toSpare || deleted {
			h.stage.Store(stageRemoved)
		} else if e.Op == vfs.OpSyncDir && storeDir && h.stage.CompareAndSwap(stageRemoved, stageNone) {
			return true
		}
	case HookAfterCopyForward:
		return h.copied.Load() && e.Op == vfs.OpWrite && checkpoint
	}
	return false
}

// pollCopyForward notes the first copy forward of the store.
func (h *hookState) pollCopyForward(s *broker.Store) {
	start := s.Stats().CopiedForward
	for !h.fired.Load() {
		if s.Stats().CopiedForward > start {
			h.copied.Store(true)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// CycleKind says how a cycle's child is killed.
type CycleKind int

const (
	// Timed: killed a random short time after it started its workload.
	Timed CycleKind = iota
	// Hooked: killed when it reports that it paused at its hook (or, if
	// the hook never comes, after HookWait).
	Hooked
	// Early: killed a random short time after it was started, often while
	// it is still opening (recovering) the store.
	Early
)

func (k CycleKind) String() string {
	switch k {
	case Timed:
		return "timed"
	case Hooked:
		return "hooked"
	case Early:
		return "early"
	}
	return fmt.Sprintf("CycleKind(%d)", int(k))
}

// PoisonEvery is how often the harness publishes a poison message: the
// first child publishes one, and a later one publishes the next once the
// last has reached the dead-letter store and PoisonEvery cycles have
// passed since it was published. Each takes
// PoisonDeliveries kills to get there.
const PoisonEvery = 50

// poisonDue says whether cycle's child publishes a poison message.
func (h *Harness) poisonDue(cycle int) bool {
	last := h.Checker.LastPoisonCycle()
	return !h.NoPoison && !h.Checker.PoisonOutstanding() && (last == 0 || cycle-last >= PoisonEvery)
}

// FinishPoison runs timed cycles, at most max, until no poison message is
// on its way to the dead-letter store, and returns how many it ran.
func (h *Harness) FinishPoison(seed uint64, next, max int) (int, error) {
	n := 0
	for ; n < max && h.Checker.PoisonOutstanding(); n++ {
		plan := PlanCycle(seed, next+n)
		// No power loss: under SyncPublish or SyncNone one takes the lease
		// of the delivery it kills, so that a run of them may never let
		// the poison message's count reach the dead-letter store.
		plan.Kind, plan.RunFor, plan.Hook, plan.PowerLoss = Timed, 300*time.Millisecond, "", false
		if _, err := h.RunCycle(plan); err != nil {
			return n, err
		}
	}
	return n, nil
}

// HookWait bounds how long a hooked cycle waits for its hook.
const HookWait = 2 * time.Second

// CyclePlan is what one cycle does. PlanCycle derives it from the run's
// seed, so a seed replays the same plan (the timing of the processes, and
// so what they did, differs from run to run).
type CyclePlan struct {
	Cycle     int
	Kind      CycleKind
	RunFor    time.Duration // Timed: after RUNNING; Early: after the start
	Hook      string
	HookSkip  int
	Sync      broker.SyncMode
	ChildSeed uint64
	// InPlace: after the checks on a copy, open the store itself in this
	// process and check it (its dead letters and counts), then close it,
	// so that the next child opens a cleanly closed store.
	InPlace bool
	// PowerLoss (Timed and Hooked cycles under SyncAll or SyncPublish):
	// the power fails in the child where the kill would have landed, and
	// the store the next cycle opens and the checks read is what the
	// device held (see ChildConfig.PowerLoss). Under SyncAll every call
	// that returned is durable, so the checks after a kill hold after a
	// power loss too; under SyncPublish the child journals only what is
	// certain (see the package documentation).
	PowerLoss bool
}

// PlanCycle returns cycle's plan under seed, for any cycle, a negative
// one included. The cycle before one hooked
// at HookOpenCheckpoint is never checked in place: that check closes the
// store cleanly, and the next Open, with nothing to replay, would write no
// checkpoint for the hook to stop.
func PlanCycle(seed uint64, cycle int) CyclePlan {
	p := planCycle(seed, cycle)
	if p.InPlace && planCycle(seed, cycle+1).Hook == HookOpenCheckpoint {
		p.InPlace = false
	}
	return p
}

// planCycle is PlanCycle drawn for cycle alone.
func planCycle(seed uint64, cycle int) CyclePlan {
	rng := rand.New(rand.NewPCG(seed, uint64(cycle)))
	p := CyclePlan{Cycle: cycle, Sync: broker.SyncMode(rng.IntN(3)), ChildSeed: rng.Uint64(), InPlace: rng.IntN(3) == 0}
	switch r := rng.IntN(20); {
	case r < 2:
		p.Kind, p.RunFor = Early, time.Duration(rng.IntN(80))*time.Millisecond
	case r < 11:
		p.Kind, p.RunFor = Timed, time.Duration(20+rng.IntN(281))*time.Millisecond
	default:
		// Every hook in turn, in an order of the seed's, so that a run of
		// n hooked cycles visits each hook about n/len(Hooks) times.
		order := rand.New(rand.NewPCG(seed, 0x686f6f6b)).Perm(len(Hooks))
		i := cycle % len(Hooks)
		if i < 0 {
			i += len(Hooks) // a negative cycle: a plan all the same
		}
		p.Kind, p.Hook, p.HookSkip = Hooked, Hooks[order[i]], rng.IntN(3)
		if p.Hook == HookOpenCheckpoint {
			p.HookSkip = 0 // one checkpoint per Open
		}
	}
	p.PowerLoss = p.Sync != broker.SyncNone && p.Kind != Early && rng.IntN(2) == 0
	return p
}

// CycleResult is what happened in one cycle.
type CycleResult struct {
	Plan     CyclePlan
	Ended    string // why the child was killed: "timer", "paused", "poison", "no hook", "power lost"
	Poison   bool   // the child reported a poison delivery
	Entries  int    // journal entries
	Torn     int    // bytes of a torn last journal write
	Duration time.Duration
	// PowerLossState is the state a power loss left the store in, as the
	// child named it (see ChildConfig.PowerLoss).
	PowerLossState string
}

// Harness runs process-crash cycles: a child process runs the workload on
// the store until it is killed with SIGKILL, then the harness checks the
// store against the journal the child kept.
//
// A Harness is not safe for concurrent use.
type Harness struct {
	Exe  string   // the test binary
	Args []string // its arguments to run only the child test
	Dir  string   // the store
	Work string   // journals and scratch copies
	// Publishers and Consumers per child.
	Publishers, Consumers int
	// NoPoison: no child publishes a poison message (for tests of the
	// harness that need a cycle to end its own way).
	NoPoison bool
	// HookWaitFor, if not zero, replaces HookWait for this harness's
	// cycles: for tests that require every cycle to reach its hook or its
	// power loss, which a loaded machine (-race, other test binaries) can
	// delay past HookWait. A cycle that ends by its own report does not
	// wait it out.
	HookWaitFor time.Duration

	Checker *Checker
	Figures HarnessFigures
}

// HarnessFigures count what the cycles did.
type HarnessFigures struct {
	Cycles    int
	ByKind    map[string]int
	HookHits  map[string]int
	HookMiss  map[string]int
	Ended     map[string]int
	PoisonHit int
	TornTails int // journals that ended in a torn write
	InPlace   int
	// PowerLosses counts the cycles whose power failed (and whose store
	// was replaced by what the device held).
	PowerLosses int
	// MetadataPowerLosses counts those whose store kept unsynced names
	// and sizes apart from the data.
	MetadataPowerLosses int
	// ChildTime is the time from each start to its kill; CheckTime the
	// time spent checking after the kills.
	ChildTime, CheckTime time.Duration
}

// NewHarness prepares a harness over the store dir, keeping its journals
// and scratch copies in work.
func NewHarness(exe string, args []string, dir, work string) (*Harness, error) {
	if err := os.MkdirAll(filepath.Join(work, "journal"), 0o700); err != nil {
		return nil, err
	}
	h := &Harness{Exe: exe, Args: args, Dir: dir, Work: work, Publishers: 3, Consumers: 2}
	h.Checker = NewChecker(h.JournalPath)
	h.Figures = HarnessFigures{ByKind: map[string]int{}, HookHits: map[string]int{}, HookMiss: map[string]int{}, Ended: map[string]int{}}
	return h, nil
}

// JournalPath is where cycle's child keeps its journal.
func (h *Harness) JournalPath(cycle int) string {
	return filepath.Join(h.Work, "journal", fmt.Sprintf("c%05d.jnl", cycle))
}

// boundedBuffer keeps the last bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const boundedBufferSize = 16 << 10

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - boundedBufferSize; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// StartChild starts the test binary as a child with cfg, and returns it
// with a channel of the lines it writes on its standard output (closed
// when it closes it) and the last 16 KiB of its standard error.
func StartChild(exe string, args []string, cfg ChildConfig) (*exec.Cmd, <-chan string, fmt.Stringer, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), cfg.Env())
	stderr := &boundedBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("recovery: start child: %w", err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return cmd, lines, stderr, nil
}

// Kill SIGKILLs a child and waits for it and for its output to end.
func Kill(cmd *exec.Cmd, lines <-chan string) {
	_ = cmd.Process.Kill()
	for range lines {
	}
	_ = cmd.Wait()
}

// RunCycle runs one child to its kill and checks the store: the journal is
// added to the checker, a copy of the store is opened with a clock an hour
// ahead and drained, and, if the plan says so, the store itself is opened
// and checked. Violations are returned in the error (see *ViolationError);
// any other error is a failure of the harness itself.
func (h *Harness) RunCycle(plan CyclePlan) (CycleResult, error) {
	start := time.Now()
	res := CycleResult{Plan: plan}
	cfg := ChildConfig{
		Role: RoleWorkload, Dir: h.Dir, Journal: h.JournalPath(plan.Cycle), Cycle: plan.Cycle, Seed: plan.ChildSeed,
		Sync: plan.Sync, Poison: h.poisonDue(plan.Cycle), ParentPID: os.Getpid(),
		Publishers: h.Publishers, Consumers: h.Consumers,
	}
	if plan.Kind == Hooked {
		cfg.Hook, cfg.HookSkip = plan.Hook, plan.HookSkip
	}
	lost := filepath.Join(h.Work, "powerloss")
	if plan.PowerLoss {
		if err := os.RemoveAll(lost); err != nil {
			return res, err
		}
		cfg.PowerLoss, cfg.PowerLossAfter = lost, plan.RunFor
	}
	cmd, lines, stderr, err := StartChild(h.Exe, h.Args, cfg)
	if err != nil {
		return res, err
	}
	var timer <-chan time.Time
	if plan.Kind == Early {
		timer = time.After(plan.RunFor)
	}
	hookWait := HookWait
	if h.HookWaitFor != 0 {
		hookWait = h.HookWaitFor
	}
	startup := time.After(time.Minute)
	var fatal string
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				return res, fmt.Errorf("recovery: cycle %d: the child ended by itself (%s): %s\nstderr:\n%s", plan.Cycle, cmd.ProcessState, fatal, stderr)
			}
			switch {
			case line == LineRunning:
				startup = nil
				switch {
				case plan.Kind == Hooked:
					timer = time.After(hookWait)
				case plan.PowerLoss:
					// The child fails its power after RunFor itself.
					timer = time.After(plan.RunFor + hookWait)
				case plan.Kind == Timed:
					timer = time.After(plan.RunFor)
				}
			case strings.HasPrefix(line, LinePaused):
				res.Ended = "paused"
				break wait
			case strings.HasPrefix(line, LinePowerLost):
				res.Ended, res.PowerLossState = "power lost", strings.TrimPrefix(line, LinePowerLost)
				break wait
			case strings.HasPrefix(line, LinePoison):
				res.Ended, res.Poison = "poison", true
				break wait
			case strings.HasPrefix(line, LineFatal):
				fatal = line
			}
		case <-timer:
			res.Ended = "timer"
			if plan.Kind == Hooked {
				res.Ended = "no hook"
			}
			break wait
		case <-startup:
			Kill(cmd, lines)
			return res, fmt.Errorf("recovery: cycle %d: the child did not start its workload within a minute\nstderr:\n%s", plan.Cycle, stderr)
		}
	}
	Kill(cmd, lines) // SIGKILL: no Close, no deferred code, the page cache survives
	killed := time.Now()
	h.Figures.ChildTime += killed.Sub(start)
	defer func() { h.Figures.CheckTime += time.Since(killed) }()
	if fatal != "" {
		return res, fmt.Errorf("recovery: cycle %d: %s\nstderr:\n%s", plan.Cycle, fatal, stderr)
	}
	h.count(&res)
	if res.Ended == "power lost" {
		// The machine boots again: the store is what the device held.
		if err := os.RemoveAll(h.Dir); err != nil {
			return res, err
		}
		if err := os.Rename(lost, h.Dir); err != nil {
			return res, err
		}
	}

	entries, tail, err := ReadJournal(h.JournalPath(plan.Cycle))
	if errors.Is(err, os.ErrNotExist) {
		err = nil // killed before it created its journal
	}
	if err != nil {
		return res, err
	}
	res.Entries, res.Torn = len(entries), tail.TornBytes
	if tail.TornBytes > 0 {
		h.Figures.TornTails++
	}
	h.Checker.AddCycle(plan.Cycle, entries)
	if err := h.CheckCopy(plan.Cycle); err != nil {
		return res, err
	}
	if plan.InPlace {
		h.Figures.InPlace++
		if err := h.Checker.CheckInPlace(h.Dir); err != nil {
			return res, err
		}
	}
	res.Duration = time.Since(start)
	return res, h.Checker.Err()
}

func (h *Harness) count(res *CycleResult) {
	p := res.Plan
	h.Figures.Cycles++
	h.Figures.ByKind[p.Kind.String()]++
	h.Figures.Ended[res.Ended]++
	if res.Poison {
		h.Figures.PoisonHit++
	}
	if res.Ended == "power lost" {
		h.Figures.PowerLosses++
		if isMetadataPowerLossState(res.PowerLossState) {
			h.Figures.MetadataPowerLosses++
		}
	}
	if p.Kind == Hooked {
		if res.Ended == "paused" || res.Ended == "power lost" {
			h.Figures.HookHits[p.Hook]++
		} else {
			h.Figures.HookMiss[p.Hook]++
		}
	}
}

// CheckCopy copies the store (as the killed process left it) to a scratch
// directory and checks the copy with Checker.CheckDrain. A child killed
// before it made the store left none, and acknowledged nothing: the copy
// is then an empty directory.
func (h *Harness) CheckCopy(cycle int) error {
	dst := filepath.Join(h.Work, "copy")
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	_, err := os.Lstat(h.Dir)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(dst, 0o700)
	} else {
		err = CopyTree(h.Dir, dst)
	}
	if err != nil {
		return err
	}
	err = h.Checker.CheckDrain(dst)
	if rerr := os.RemoveAll(dst); err == nil {
		err = rerr
	}
	return err
}

// CopyTree copies the regular files of src into dst (created), except the
// lock file. A file removed after the walk listed it and before it is
// read is left out: tests copy stores that are still open, whose
// maintenance removes spare and reclaimed segments, files the store no
// longer needs, at any moment. (Such a copy is not one instant's image
// of the directory either way.) A dst that is src or lies inside it is
// refused: the walk would copy the copy.
func CopyTree(src, dst string) error {
	if inside, err := within(src, dst); err != nil {
		return fmt.Errorf("recovery: copy %s to %s: %w", src, dst, err)
	} else if inside {
		// The walk would copy the copy as it grows it.
		return fmt.Errorf("recovery: copy %s to %s: the target is inside the directory copied", src, dst)
	}
	return filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			if path != src && errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if rel == "LOCK" || !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	})
}

// within reports whether path is dir or lies inside it, by their absolute
// names.
func within(dir, path string) (bool, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	p, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(d, p)
	if err != nil {
		return false, nil // on another volume
	}
	return rel == "." || rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)), nil
}

// Summary renders the figures of a run.
func (h *Harness) Summary() string {
	var b strings.Builder
	f := h.Figures
	fmt.Fprintf(&b, "cycles %d: %s; ended: %s; poison kills %d; power losses %d (%d kept unsynced names and sizes apart from the data); torn journal tails %d; in-place checks %d; %v in children, %v checking\n",
		f.Cycles, formatCounts(f.ByKind), formatCounts(f.Ended), f.PoisonHit, f.PowerLosses, f.MetadataPowerLosses, f.TornTails, f.InPlace,
		f.ChildTime.Round(time.Millisecond), f.CheckTime.Round(time.Millisecond))
	b.WriteString("hooks (hit/missed):")
	for _, name := range Hooks {
		fmt.Fprintf(&b, " %s %d/%d", name, f.HookHits[name], f.HookMiss[name])
	}
	b.WriteString("\n")
	b.WriteString(h.Checker.Figures.String())
	return b.String()
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
