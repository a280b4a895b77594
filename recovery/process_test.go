package recovery

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Environment variables of the process-crash test:
//
//	WALBROKER_CRASH_SEED=N    replays the plan of a run (cycle kinds, run
//	                          times, hooks, sync modes, workload choices);
//	                          the timing of the processes differs each run
//	WALBROKER_SOAK_CYCLES=N   runs N cycles (the soak): default 200, 20
//	                          under -short or the race detector
//	WALBROKER_SOAK_EPOCH=N    starts a fresh store every N cycles
//	                          (default 500)
//	WALBROKER_CRASH_KEEP=1    keeps the store and the journals of a failed
//	                          run, and logs where
const (
	seedEnv   = "WALBROKER_CRASH_SEED"
	cyclesEnv = "WALBROKER_SOAK_CYCLES"
	epochEnv  = "WALBROKER_SOAK_EPOCH"
	keepEnv   = "WALBROKER_CRASH_KEEP"
)

// childArgs re-execute the test binary as a child: only TestCrashChild.
var childArgs = []string{"-test.run=^TestCrashChild$", "-test.timeout=2h"}

// TestCrashChild is the child process of the crash tests: it runs only
// when a test re-executes the binary with ChildEnv set, and never returns
// normally (it is killed, or fails).
func TestCrashChild(t *testing.T) {
	cfg, ok, err := ChildConfigFromEnv()
	if !ok {
		t.Skip("the child process of the crash tests; they start it")
	}
	require.NoError(t, err)
	switch cfg.Role {
	case RoleWorkload:
		err = RunChild(cfg, os.Stdout)
	case roleHold:
		err = runHold(cfg)
	case roleTryOpen:
		err = runTryOpen(cfg)
	default:
		err = fmt.Errorf("unknown role %q", cfg.Role)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// testSeed returns the seed of a randomised test: seedEnv if set, else a
// random one; it is logged, and every failure names it.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv(seedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s=%q", seedEnv, v)
		t.Logf("seed %d (from %s)", seed, seedEnv)
		return seed
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	seed := binary.LittleEndian.Uint64(b[:]) >> 1
	t.Logf("seed %d (replay with %s=%d)", seed, seedEnv, seed)
	return seed
}

// envCount returns the positive number the environment variable name
// holds, or def when it is unset.
func envCount(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q", name, v)
	require.Positive(t, n, name)
	return n
}

// crashCycles is the number of process-crash cycles to run.
func crashCycles(t *testing.T) int {
	t.Helper()
	if testing.Short() || raceEnabled() {
		return envCount(t, cyclesEnv, 20)
	}
	return envCount(t, cyclesEnv, 200)
}

// soakEpoch is how many cycles one store lives through.
func soakEpoch(t *testing.T) int {
	t.Helper()
	return envCount(t, epochEnv, 500)
}

// fastDir returns a fresh directory on tmpfs when the machine has one (the
// crash tests fdatasync a great deal and check logic, not the disk), else
// under t.TempDir. With keepEnv set it is kept when the test fails.
func fastDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "walbroker-recovery-"); err == nil {
			t.Cleanup(func() {
				if t.Failed() && os.Getenv(keepEnv) != "" {
					t.Logf("kept %s", d)
					return
				}
				_ = os.RemoveAll(d)
			})
			return d
		}
	}
	return t.TempDir()
}

// TestProcessCrash kills a child process running the workload on one
// store, cycle after cycle, at random instants and at chosen points of
// rotation, checkpointing and segment removal, and checks after every kill
// that the store holds exactly what the child's journal says it must (see
// the package documentation for the invariants). A long soak runs its
// cycles on a fresh store every epochCycles cycles: the checks after each
// kill read the whole store and the whole journal, so one store living
// through thousands of kills would make each cycle slower than the last.
func TestProcessCrash(t *testing.T) {
	seed := testSeed(t)
	cycles := crashCycles(t)
	epoch := soakEpoch(t)
	start := time.Now()
	hookHits := map[string]int{}
	ran := 0
	for first := 1; first <= cycles && ran == first-1; first += epoch {
		n := min(epoch, cycles-first+1)
		f, done := crashEpoch(t, seed, first, n)
		ran += done
		for name, hits := range f.HookHits {
			hookHits[name] += hits
		}
	}
	if ran < cycles {
		t.Logf("cut short near the test binary's deadline: %d of %d cycles run", ran, cycles)
		cycles = ran
	}
	if cycles >= 200 {
		hit := 0
		for _, name := range Hooks {
			if hookHits[name] > 0 {
				hit++
			}
		}
		require.GreaterOrEqual(t, hit, len(Hooks)*3/4, "most hooks were reached: %v", hookHits)
	}
	t.Logf("%d cycles on %d stores in %v", cycles, (cycles+epoch-1)/epoch, time.Since(start).Round(time.Millisecond))
}

// crashEpoch runs cycles first to first+n-1 of the plan of seed on a fresh
// store, finishes its poison message, drains the store and checks it; it
// returns what the cycles did, and how many of the n it ran: after the
// first 20, none starts once the test binary's deadline is near
// (NearDeadline).
func crashEpoch(t *testing.T, seed uint64, first, n int) (HarnessFigures, int) {
	t.Helper()
	work := fastDir(t)
	defer func() {
		if !t.Failed() { // a failed one is fastDir's to keep or remove
			_ = os.RemoveAll(work)
		}
	}()
	h, err := NewHarness(os.Args[0], childArgs, filepath.Join(work, "store"), work)
	require.NoError(t, err)
	start := time.Now()
	last := first + n - 1
	returnedDue := 0
	for cycle := first; cycle <= last; cycle++ {
		if cycle-first >= 20 && NearDeadline(t) {
			last, n = cycle-1, cycle-first
			break
		}
		plan := PlanCycle(seed, cycle)
		if returnsSettles(plan) {
			returnedDue++
		}
		res, err := h.RunCycle(plan)
		if err != nil {
			t.Fatalf("seed %d (replay with %s=%d), cycle %d (%s %s, sync %s):\n%v\n%s",
				seed, seedEnv, seed, cycle, plan.Kind, plan.Hook, plan.Sync, err, h.Summary())
		}
		if testing.Verbose() && (cycle%50 == 0 || cycle == last) {
			t.Logf("cycle %d after %v: last %s %s ended %s, %d journal entries", cycle,
				time.Since(start).Round(time.Millisecond), plan.Kind, plan.Hook, res.Ended, res.Entries)
		}
	}
	// A poison message still on its way gets the kills it needs.
	extra, err := h.FinishPoison(seed, last+1, 4*PoisonDeliveries)
	if err != nil {
		t.Fatalf("seed %d (replay with %s=%d), poison cycles after cycle %d:\n%v\n%s", seed, seedEnv, seed, last, err, h.Summary())
	}
	// The end: the store itself, drained with a clock an hour ahead.
	if err := h.Checker.CheckDrain(h.Dir); err != nil {
		var verr *ViolationError
		require.True(t, errors.As(err, &verr), "%v", err)
		t.Fatalf("seed %d (replay with %s=%d), final drain after cycle %d:\n%v\n%s", seed, seedEnv, seed, last, err, h.Summary())
	}
	t.Logf("cycles %d to %d (and %d more to finish a poison message) in %v\n%s", first, last, extra, time.Since(start).Round(time.Millisecond), h.Summary())

	f, cf := h.Figures, h.Checker.Figures
	require.Equal(t, n+extra, f.Cycles)
	require.Positive(t, cf.Published, "the workload published")
	require.Positive(t, cf.Deliveries, "the workload received")
	require.Positive(t, cf.Acks, "the workload acked")
	require.Positive(t, cf.Drains, "stores were drained and compared")
	if n >= 20 {
		require.Positive(t, cf.PoisonRounds, "a poison message reached the dead-letter store after %d killed deliveries", PoisonDeliveries)
		hits := 0
		for _, k := range f.HookHits {
			hits += k
		}
		require.Positive(t, hits, "some child paused at its hook")
		requireRulesMet(t, cf, returnedDue)
	}
	if n >= 100 {
		require.Positive(t, f.PowerLosses, "some child lost power")
	}
	if f.PowerLosses >= 20 {
		require.Positive(t, f.MetadataPowerLosses, "some child's power loss kept unsynced names and sizes apart from the data")
	}
	return f, n
}

// requireRulesMet fails the test unless the cycles met each checker rule
// that only some of the workload's doings trigger: a soak that stopped
// meeting one would prove nothing about it, and say nothing. returnedDue
// counts the cycles planned so that their settles are journaled as they
// return (see returnsSettles); the rule they meet is required only of a
// run that had one.
func requireRulesMet(t *testing.T, cf CheckFigures, returnedDue int) {
	t.Helper()
	for _, r := range []struct {
		n    int
		what string
		due  bool
	}{
		{cf.DelaysAcrossKill, "a nack's retry delay was pending when a later process received on its queue", true},
		{cf.SettlesLapsed, "a settle was refused as LeaseExpired", true},
		{cf.LapsesRead, "the janitor read a LEASE_EXPIRED dead letter", true},
		{cf.FlowAcks, "an Ack of Consume's was journaled", true},
		{cf.FlowNacks + cf.FlowRejects, "a Nack or Reject of Consume's was journaled", true},
		{cf.FlowExtends, "a lease extension of Consume's was journaled", true},
		{cf.SettlesReturned, fmt.Sprintf("a settle journaled as it returned, maybe not durable, was held to its promises in its process (%d cycles lost power under SyncPublish after 100 ms or more of their workload)", returnedDue),
			returnedDue > 0},
	} {
		if r.due {
			require.Positive(t, r.n, "the workload met the rule that %s:\n%s", r.what, cf)
		}
	}
}

// returnsSettles reports whether a cycle of plan journals settles as they
// return (OpReturned), surely: it loses power under SyncPublish, where
// only a publish waits for an fdatasync, and runs its workload 100 ms or
// more first. (A hooked cycle may lose its power inside Open, at a
// checkpoint, before anything was received; a timed one 20 ms after its
// start may, on a loaded machine, before anything was settled.)
func returnsSettles(plan CyclePlan) bool {
	return plan.PowerLoss && plan.Sync == broker.SyncPublish && plan.Kind == Timed && plan.RunFor >= 100*time.Millisecond
}

// TestAPowerLossCycleLeavesWhatTheDeviceHeld: a cycle planned to lose
// power ends with the child's report of it, not with a kill at its time;
// the store the checks read and the next child opens is the clone the child
// made (the scratch directory is gone, moved into place), and it holds what
// the journal says, timed or at a hook. A child whose timed power loss
// never comes is killed after its guard like any other.
func TestAPowerLossCycleLeavesWhatTheDeviceHeld(t *testing.T) {
	work := fastDir(t)
	h, err := NewHarness(os.Args[0], childArgs, filepath.Join(work, "store"), work)
	require.NoError(t, err)
	h.NoPoison = true // a poison delivery would end a cycle before its power loss
	// Every cycle below must end in its power loss: the rotation of the
	// hooked one, or the clone of a timed one, can take longer than
	// HookWait on a loaded machine under -race (seen: "no hook", "timer").
	// A cycle that loses its power reports it and does not wait this out.
	h.HookWaitFor = time.Minute
	plans := []CyclePlan{
		{Kind: Timed, RunFor: 100 * time.Millisecond, Sync: broker.SyncAll},
		{Kind: Hooked, Hook: HookRotateSealWrite, Sync: broker.SyncAll},
		{Kind: Timed, RunFor: 100 * time.Millisecond, Sync: broker.SyncPublish},
		{Kind: Timed, RunFor: 50 * time.Millisecond, Sync: broker.SyncAll, InPlace: true},
	}
	for i, plan := range plans {
		plan.Cycle, plan.ChildSeed, plan.PowerLoss = i+1, uint64(i+1), true
		res, err := h.RunCycle(plan)
		require.NoError(t, err, "cycle %d", plan.Cycle)
		require.Equal(t, "power lost", res.Ended, "cycle %d", plan.Cycle)
		require.NotEmpty(t, res.PowerLossState, "cycle %d: the child names the state it left the store in", plan.Cycle)
		require.Positive(t, res.Entries, "cycle %d: the child journaled its calls", plan.Cycle)
		_, err = os.Stat(filepath.Join(work, "powerloss"))
		require.ErrorIs(t, err, os.ErrNotExist, "cycle %d: the clone became the store", plan.Cycle)
		// Under SyncPublish a delivery is journaled as a maybe first, and
		// a settle as returned; under SyncAll every result returned is
		// certain.
		entries, _, err := ReadJournal(h.JournalPath(plan.Cycle))
		require.NoError(t, err)
		maybes, returned := 0, 0
		for _, e := range entries {
			switch e.Op {
			case OpMaybe:
				maybes++
			case OpReturned:
				returned++
			}
		}
		if plan.Sync == broker.SyncPublish {
			require.Positive(t, maybes, "cycle %d: deliveries journaled as maybes", plan.Cycle)
			require.Positive(t, returned, "cycle %d: settles journaled as they returned", plan.Cycle)
		} else {
			require.Zero(t, maybes, "cycle %d", plan.Cycle)
			require.Zero(t, returned, "cycle %d", plan.Cycle)
		}
	}
	require.Equal(t, len(plans), h.Figures.PowerLosses)
	require.Equal(t, 1, h.Figures.HookHits[HookRotateSealWrite])
	require.Positive(t, h.Checker.Figures.Drains)
	require.NoError(t, h.Checker.CheckDrain(h.Dir), "the store after three power losses")
}

// A journal cut anywhere decodes to the entries wholly before the cut, and
// reports the rest as torn; so does one whose last frame is damaged.
// TestKilledBeforeTheStoreExists: a child killed before it made its store
// leaves no store directory, which the checks take for an empty store
// (nothing was acknowledged), not for an error. A soak met it when the
// first cycle of a fresh store was an early kill.
func TestKilledBeforeTheStoreExists(t *testing.T) {
	// A kill at once lands before the child made its store, unless the
	// machine is so loaded that the child ran first: then try again on a
	// new directory, a few times.
	var h *Harness
	for attempt := 1; ; attempt++ {
		work := fastDir(t)
		var err error
		h, err = NewHarness(os.Args[0], childArgs, filepath.Join(work, "store"), work)
		require.NoError(t, err)
		_, err = h.RunCycle(CyclePlan{Cycle: 1, Kind: Early, RunFor: 0, Sync: broker.SyncAll, ChildSeed: 1})
		require.NoError(t, err)
		_, err = os.Stat(h.Dir)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		require.Less(t, attempt, 10, "the child was killed at its start, and made its store first every time: %v", err)
	}

	// The next child makes the store, and the checks of it (of a copy,
	// then in place) pass.
	res, err := h.RunCycle(CyclePlan{Cycle: 2, Kind: Timed, RunFor: 50 * time.Millisecond, Sync: broker.SyncAll, ChildSeed: 2, InPlace: true})
	require.NoError(t, err)
	require.Positive(t, res.Entries, "the second child's journal")
}

func TestJournalTornTail(t *testing.T) {
	var buf []byte
	var ends []int
	for i := range 5 {
		var err error
		buf, err = AppendJournalFrame(buf, &Entry{Op: OpAcked, Who: "con0", ID: fmt.Sprintf("%016x", i+1), Del: i + 1})
		require.NoError(t, err)
		ends = append(ends, len(buf))
	}
	for cut := 0; cut <= len(buf); cut++ {
		entries, tail, err := DecodeJournal(buf[:cut])
		require.NoError(t, err, "cut at %d", cut)
		whole := 0
		for _, end := range ends {
			if end <= cut {
				whole++
			}
		}
		require.Len(t, entries, whole, "cut at %d", cut)
		last := 0
		if whole > 0 {
			last = ends[whole-1]
		}
		require.Equal(t, cut-last, tail.TornBytes, "cut at %d", cut)
		for i, e := range entries {
			require.Equal(t, fmt.Sprintf("%016x", i+1), e.ID)
		}
	}
	damaged := append([]byte(nil), buf...)
	damaged[len(damaged)-3] ^= 0x20
	entries, tail, err := DecodeJournal(damaged)
	require.NoError(t, err)
	require.Len(t, entries, 4, "a damaged last frame is a torn write")
	require.Equal(t, len(buf)-ends[3], tail.TornBytes)

	// A kill damages only the last write: a frame that verifies after a
	// bad one means the journal was damaged in the middle, and its later
	// entries are not dropped as a torn tail.
	for what, at := range map[string]int{"body": ends[1] - 3, "length": ends[1], "checksum": ends[1] + 5} {
		damaged := append([]byte(nil), buf...)
		damaged[at] ^= 0x20
		_, _, err := DecodeJournal(damaged)
		require.ErrorContains(t, err, "a frame that verifies follows", "damaged %s of a middle frame", what)
	}
}

func TestPayloadIsItsReference(t *testing.T) {
	for _, r := range []Ref{
		{Queue: QueueWork, Cycle: 3, Who: "pub1", N: 17, Index: 2, Key: "pub1-k04"},
		{Queue: QueueFlow, Cycle: 4, Who: "pub2", N: 9, Index: 4, Of: 5},
		{Queue: QueueFlow, Cycle: 120, Who: "pub0", N: 1},
	} {
		ref := MakeRef(r)
		back, err := ParseRef(ref)
		require.NoError(t, err)
		require.Equal(t, r, back)
		p := Payload(ref)
		got, err := CheckPayload(p)
		require.NoError(t, err)
		require.Equal(t, ref, got)
		for _, i := range []int{len(ref) + 1, len(p) / 2, len(p) - 1} {
			bad := append([]byte(nil), p...)
			bad[i] ^= 1
			_, err := CheckPayload(bad)
			require.Error(t, err, "a byte flipped at %d of %d", i, len(p))
		}
		_, err = CheckPayload(p[:len(p)-1])
		require.Error(t, err, "a payload cut short")
	}
	for _, bad := range []string{"", "work/c1/pub0/n1.0", "work/cX/pub0/n1.0/", "work/c1/pub0/n1/", "work/c01/pub0/n1.0/",
		"work/c1/pub0/n1.2of2/", "work/c1/pub0/n1.0of/", "work/c1/pub0/n1.0of0/", "work/c1/pub0/n1.0of03/"} {
		_, err := ParseRef(bad)
		require.Error(t, err, "%q", bad)
	}
}

// The checker is not vacuous: each journal below breaks one invariant, and
// the checker names it.
func TestCheckerFlagsBrokenInvariants(t *testing.T) {
	ref := func(n int64, key string) string {
		return MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: n, Key: key})
	}
	const sec = int64(time.Second)
	base := int64(1_900_000_000) * sec
	pub := func(id string, n int64, key string, at int64) Entry {
		return Entry{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: n, IDs: []string{id}, Refs: []string{ref(n, key)},
			Key: key, Enq: at, T0: at, T1: at}
	}
	del := func(id string, n int64, d int, at int64, intent Intent) Entry {
		return Entry{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: id, Ref: ref(n, ""), Enq: base, Del: d,
			Exp: at + sec, Intent: intent, T0: at, T1: at}
	}
	ack := func(id string, d int, at int64) Entry {
		return Entry{Op: OpAcked, Who: "con0", Queue: QueueWork, ID: id, Del: d, T0: at, T1: at}
	}
	const a, b = "000000000000000a", "000000000000000b"
	cases := []struct {
		name    string
		cycles  [][]Entry
		violate string
	}{
		{"delivered after ack", [][]Entry{
			{pub(a, 1, "", base), del(a, 1, 1, base, IntentAck), ack(a, 1, base+1)},
			{del(a, 1, 2, base+2*sec, IntentAck)},
		}, "after it was acked"},
		{"count went back", [][]Entry{
			{pub(a, 1, "", base), del(a, 1, 2, base, IntentHold)},
			{del(a, 1, 2, base+2*sec, IntentHold)},
		}, "an earlier delivery already counted 2"},
		{"redelivered within its lease", [][]Entry{
			{pub(a, 1, "", base), del(a, 1, 1, base, IntentHold)},
			{del(a, 1, 2, base+sec/2, IntentHold)},
		}, "before the previous lease expired"},
		{"unknown message", [][]Entry{
			{pub(a, 1, "", base), del(a, 1, 1, base, IntentHold)},
			{{Op: OpDelivered, Who: "con0", Queue: QueueWork, ID: b, Ref: ref(7, ""), Enq: base, Del: 1, Exp: base + 3*sec, T0: base + 2*sec, T1: base + 2*sec}},
		}, "not the publish its goroutine had in flight"},
		{"ID handed out twice", [][]Entry{
			{pub(a, 1, "", base)},
			{{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{a}, Refs: []string{MakeRef(Ref{Queue: QueueWork, Cycle: 2, Who: "pub0", N: 1})}, Enq: base, T0: base, T1: base}},
		}, "ID handed out twice"},
		{"key forgotten within the window", [][]Entry{
			{pub(a, 1, "k", base)},
			{pub(b, 2, "k", base+sec)},
		}, "within the 2s window"},
		{"settled after the lease lapsed", [][]Entry{
			{pub(a, 1, "", base), del(a, 1, 1, base, IntentAck), ack(a, 1, base+sec)},
		}, "at or after the lease's ExpiresAt"},
		{"dead letter delivered", [][]Entry{
			{pub(a, 1, "", base), del(a, 1, 1, base, IntentReject), {Op: OpRejected, Queue: QueueWork, ID: a, Del: 1, T0: base + 1, T1: base + 1}},
			{del(a, 1, 2, base+2*sec, IntentAck)},
		}, "after it was dead-lettered"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewChecker(func(int) string { return filepath.Join(t.TempDir(), "none") })
			for i, entries := range tc.cycles {
				c.AddCycle(i+1, entries)
			}
			err := c.Err()
			var verr *ViolationError
			require.ErrorAs(t, err, &verr)
			require.Contains(t, err.Error(), tc.violate)
		})
	}
	c := NewChecker(func(int) string { return "" })
	// Journaled out of order: the nack's result after the next delivery,
	// which the nack made possible; the order of the calls decides.
	nacked := Entry{Op: OpNacked, Who: "con0", Queue: QueueWork, ID: a, Del: 1, Exp: base + 2 + int64(20*time.Millisecond), T0: base + 1, T1: base + 2}
	c.AddCycle(1, []Entry{pub(a, 1, "", base), del(a, 1, 1, base, IntentNack), del(a, 1, 2, base+sec/10, IntentAck), nacked, ack(a, 2, base+sec/5)})
	require.NoError(t, c.Err(), "a journal that breaks nothing")
}
