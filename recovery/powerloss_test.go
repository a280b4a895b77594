package recovery_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
)

// The power-loss tests run the workload of helpers_ext_test.go — three
// queues, plain, keyed and batch publishes, receives, acks, nacks,
// rejects, extends, dead-letter replays and deletions, in one goroutine
// with a fake clock — over a store of the smallest segments, so that it
// rotates, checkpoints in the background and at Close, copies live records
// forward and removes old segments. The file system is a vfs.CrashFS that
// loses power after its k-th mutating operation. The directory is then
// cloned to what the device could hold — synced bytes only; a random half
// of the unsynced 4 KiB blocks with the last write torn; every written
// byte, in the files the durable names give; half the unsynced 512-byte
// sectors; and, as file systems that commit names and sizes apart from
// the data may leave it, every unsynced name or a prefix of them, with
// every unsynced size change or a prefix of each file's, and none, half
// or all of the unsynced data (cloneKinds) — and each clone is opened with
// the real file system and checked:
//
//   - it opens: a power loss is never corruption;
//   - what it holds is exactly the projection of a prefix of the calls
//     (the call that failed counting as a possible last one): no message
//     no call put there, no delivery count from nowhere, no state of a
//     later call without the earlier ones;
//   - that prefix holds every call a completed fdatasync of the log
//     covered and, by the sync mode's promise, every call that waited for
//     one: under SyncAll every call that returned; under SyncPublish every
//     publish that returned (other events may go); under SyncNone what
//     the last completed fdatasync covered. A clone that kept every
//     written byte holds every call that returned. That clone is not a
//     process crash: at KeepUnsyncedFraction 1 it keeps none of the
//     creations, renames and removals no directory sync made durable
//     (vfs.CrashOptions), so it holds every call that returned only if the
//     store syncs a name change before it writes anything a call returns
//     for into the file that name gives.
//     The fdatasync the power loss interrupts fails only after a moment
//     (crashedSyncHold), so that a call released before its fdatasync
//     completed has returned and is held to this;
//   - no message ID is handed out twice: a new message the inspection
//     publishes gets an ID no call of the workload was given, also one a
//     power loss took;
//   - a checkpoint in place with no mark that it was being written loads:
//     Open does not fall back to rebuilding the index from the log.
//
// Some clones are also opened from their log alone (the index removed),
// which must show the same state, and some are opened through another
// CrashFS that loses power during that recovery; the clone of that is
// opened and must show the same state again. Last, the crashed run's own
// directory is opened again on the page cache the crash left (a process
// that died and restarted) and the power lost at once: what the reopened
// store builds on must be durable, so that clone, of any of the kinds
// above (the kill left unsynced writes and names a power loss may keep
// in part), holds every call that returned.
//
// A quarter of the runs (a third of the soak's cases) also boot the
// machine again on one of the clones, untouched, and run a second
// workload there that loses power after a random operation: the
// reopened store rotates, checkpoints, copies forward and reclaims the
// segments the first life wrote, so what its recovery left undone
// (a segment preamble the power loss took, a half-written checkpoint)
// shows. The clone of that second life must hold what the inspection of
// the first clone showed and a prefix of the second life's calls, by the
// same rules, hand out no ID the first life was handed, and show the same
// state when rebuilt from its log alone.
//
// Environment:
//
//	WALBROKER_RECOVERY_SEED=n   replay a run (the seed is logged)
//	WALBROKER_POWERLOSS_K=k     only the crash after operation k (with the seed of the run to replay)
//	WALBROKER_SOAK_CASES=n      instead of the sweep of k, n cases with a random
//	                            mode, workload seed and k each (the long soak):
//	                            WALBROKER_SOAK_CASES=10000 go test ./recovery -run TestPowerLoss -timeout 2h -v

const (
	soakCasesEnv = "WALBROKER_SOAK_CASES"
	onlyKEnv     = "WALBROKER_POWERLOSS_K"
	// plSteps is the length of the power-loss workload: about 260 calls
	// and 350 to 550 file operations, over four segments.
	plSteps = 250
	// plShortCases is about how many clones -short checks; the default
	// run crashes at every operation (about 4,000 clones).
	plShortCases = 200
)

var syncModes = []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}

// plWorkload is the workload of mode: under SyncNone the background
// fdatasync runs every 2 ms, several times in a run.
func plWorkload(seed uint64, mode broker.SyncMode) workload {
	w := workload{seed: seed, steps: plSteps, mode: mode}
	if mode == broker.SyncNone {
		w.syncInterval = 2 * time.Millisecond
	}
	return w
}

// cloneKind is one way a clone treats unsynced data, names and sizes.
type cloneKind struct {
	name string
	keep float64
	tear bool
	// keepAll says that the clone holds every call that returned: it
	// keeps every written byte, and every size change with it.
	keepAll      bool
	block        int              // vfs.CrashOptions.BlockSize
	names, sizes vfs.KeepUnsynced // vfs.CrashOptions.KeepUnsyncedNames, KeepUnsyncedSizes
}

// options returns the options of a clone of root of this kind.
func (k *cloneKind) options(root string, rng *rand.Rand) vfs.CrashOptions {
	return vfs.CrashOptions{Root: root, KeepUnsyncedFraction: k.keep, TearLastWrite: k.tear, BlockSize: k.block,
		KeepUnsyncedNames: k.names, KeepUnsyncedSizes: k.sizes, Rand: rng}
}

// cloneKinds are the ways a clone treats unsynced data. The fourth keeps
// whole writes with holes before them, and pages of which only some
// sectors reached the device. From the fifth on (metadataKinds) they keep
// the unsynced changes of names and of sizes apart from the data, as file
// systems that commit metadata on their own may: every name and every
// size with no unsynced block (a file that grew comes back longer, the
// rest zeros), every name with every byte (as the page cache holds the
// tree: every call that returned), and prefixes of them, with some or all
// of the data (a size change lost takes the blocks past it); the last two
// keep any subset of the unsynced names, as a file system that may make a
// later change of names durable without an earlier one (btrfs's log of a
// file synced meanwhile) may.
var cloneKinds = []cloneKind{
	{name: "synced only"},
	{name: "half the unsynced blocks, last write torn", keep: 0.5, tear: true},
	{name: "every written byte", keep: 1, keepAll: true},
	{name: "half the unsynced 512-byte sectors, none torn", keep: 0.5, block: 512},
	{name: "every unsynced name and size, no unsynced block", names: vfs.KeepAll, sizes: vfs.KeepAll},
	{name: "every unsynced name and every written byte", keep: 1, keepAll: true, names: vfs.KeepAll},
	{name: "a prefix of the unsynced names and of each file's sizes, half the unsynced blocks, last write torn", keep: 0.5, tear: true, names: vfs.KeepPrefix, sizes: vfs.KeepPrefix},
	{name: "a prefix of the unsynced names, every written byte", keep: 1, keepAll: true, names: vfs.KeepPrefix},
	{name: "a prefix of the unsynced names and of each file's sizes, every written byte", keep: 1, names: vfs.KeepPrefix, sizes: vfs.KeepPrefix},
	{name: "any subset of the unsynced names, a prefix of each file's sizes, half the unsynced blocks, last write torn", keep: 0.5, tear: true, names: vfs.KeepSubset, sizes: vfs.KeepPrefix},
	{name: "any subset of the unsynced names, every written byte", keep: 1, keepAll: true, names: vfs.KeepSubset},
}

// metadataKinds is where the kinds that keep names and sizes apart from
// the data begin in cloneKinds.
const metadataKinds = 4

// sweepClones is how many clones each case of the sweep checks: the
// first three kinds, with the fourth in place of the second in every
// other case; every other case checks a fourth clone, of one of the
// metadataKinds in turn.
const sweepClones = 3

// plCase is one run of the workload that loses power after operation k,
// and the checks of its clones.
type plCase struct {
	mode  broker.SyncMode
	wseed uint64 // the workload's seed
	k     int64
	rng   *rand.Rand // the clones' choices
	// kinds are the indexes into cloneKinds of the clones to check;
	// crashRecovery and rebuild index into kinds, -1 for none.
	kinds         []int
	crashRecovery int
	rebuild       int
	// restart: after the clones, the process is restarted on the page
	// cache the crash left (vfs.CrashFS.Restart), the store opened, and
	// the power lost before anything else: what the reopened store built
	// on must be durable, so that clone holds every call that returned.
	restart bool
	// secondLife indexes into kinds (-1: none): the machine boots again
	// on that clone and runs a second workload, which loses power after
	// a random operation of up to about total (see plCase.liveAgain).
	secondLife int
	total      int64
}

func (c *plCase) String() string {
	return fmt.Sprintf("mode %v, workload seed %d, power lost after operation %d", c.mode, c.wseed, c.k)
}

// plCounts counts what a power-loss test checked.
type plCounts struct {
	runs, clones    int
	recoveryCrashes int
	rebuilds        int
	restarts        int
	secondLives     int
	tornTails       int
	indexRebuilt    int
	noCrash         int
	prefixShort     int // clones that lost calls no promise covered
	metadata        int // clones, of every stage, of the metadataKinds
}

func (c *plCounts) add(o *plCounts) {
	c.runs += o.runs
	c.clones += o.clones
	c.recoveryCrashes += o.recoveryCrashes
	c.rebuilds += o.rebuilds
	c.restarts += o.restarts
	c.secondLives += o.secondLives
	c.tornTails += o.tornTails
	c.indexRebuilt += o.indexRebuilt
	c.noCrash += o.noCrash
	c.prefixShort += o.prefixShort
	c.metadata += o.metadata
}

func (c *plCounts) String() string {
	return fmt.Sprintf("%d workload runs, %d power-loss clones checked (%d of them lost calls that no promise covered), "+
		"%d recoveries crashed and checked again, %d rebuilt from the log alone and compared, "+
		"%d restarted on the page cache and then lost power, %d booted again for a second life that lost power too; "+
		"%d opens repaired a torn tail, %d rebuilt the index; %d runs ended before the crash; "+
		"%d clones (of every stage) kept unsynced names and sizes apart from the data",
		c.runs, c.clones, c.prefixShort, c.recoveryCrashes, c.rebuilds, c.restarts, c.secondLives, c.tornTails, c.indexRebuilt, c.noCrash, c.metadata)
}

// run runs the case in a fresh directory under root and returns what
// failed (nil if nothing did).
func (c *plCase) run(root string, counts *plCounts) []string {
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	dir := filepath.Join(root, "run")
	defer func() { _ = os.RemoveAll(root) }()
	if err := os.MkdirAll(dir, 0o700); err != nil { // so that a crash before Open makes it still leaves a directory to clone
		return []string{err.Error()}
	}
	cfs := vfs.NewCrashFS(vfs.Default)
	cfs.CrashAfter(c.k)
	watch := newSyncWatchFS(cfs)
	j := plWorkload(c.wseed, c.mode).run(dir, watch, watch)
	counts.runs++
	if !cfs.Crashed() {
		counts.noCrash++
		if j.failed != nil || j.openErr != nil || j.closeErr != nil {
			fail("%v: no power loss, yet the workload failed: open %v, close %v\n%v", c, j.openErr, j.closeErr, j)
		}
	}
	at := j.end.Add(checkDelay)
	for i, kind := range c.kinds {
		ck := cloneKinds[kind]
		what := fmt.Sprintf("%v, clone of %s", c, ck.name)
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", i))
		opts := ck.options(dir, rand.New(rand.NewPCG(c.rng.Uint64(), 1)))
		if err := cfs.CrashClone(clone, opts); err != nil {
			fail("%s: CrashClone: %v", what, err)
			continue
		}
		var again, rebuilt, life2 string
		if c.secondLife == i {
			life2 = clone + "-life2"
			if err := recovery.CopyTree(clone, life2); err != nil {
				fail("%s: %v", what, err)
				life2 = ""
			}
		}
		if c.crashRecovery == i {
			again = clone + "-again"
			if err := recovery.CopyTree(clone, again); err != nil {
				fail("%s: %v", what, err)
				again = ""
			}
		}
		if c.rebuild == i {
			rebuilt = clone + "-rebuilt"
			if err := copyLogOnly(clone, rebuilt); err != nil {
				fail("%s: %v", what, err)
				rebuilt = ""
			}
		}
		counts.clones++
		if kind >= metadataKinds {
			counts.metadata++
		}
		lo := lowerBound(j, ck.keepAll)
		ckpt := finishedCheckpoint(clone)
		obs := checkClone(clone, at, j, lo, what, fail)
		if obs == nil {
			continue
		}
		if ckpt && obs.recovery.IndexRebuilt {
			fail("%s: the power loss left a checkpoint and no mark that one was being written (index/CHECKPOINTING), yet Open rebuilt the index from the log: "+
				"a checkpoint must be durable, with the table files it names, before it is in place, and the mark must stand while they disagree", what)
		}
		if obs.recovery.TornTail {
			counts.tornTails++
		}
		if obs.recovery.IndexRebuilt {
			counts.indexRebuilt++
		}
		if rebuilt != "" {
			counts.rebuilds++
			if obsR, err := observe(rebuilt, at, j.keys, broker.Options{}); err != nil {
				fail("%s: with its index removed it does not open: %v", what, err)
			} else if d := sameObservation(obs, obsR); d != "" {
				fail("%s: opened from its checkpoint and rebuilt from its log alone, the store differs:\n%s", what, d)
			}
		}
		if again != "" {
			counts.recoveryCrashes++
			rk := c.rng.Int64N(40)
			rfs := vfs.NewCrashFS(vfs.Default)
			rfs.CrashAfter(rk)
			if s, err := broker.Open(again, broker.Options{Now: newClock(j.end).Now, SegmentBytes: broker.MinSegmentBytes, FS: rfs}); err == nil {
				_ = s.Close()
			}
			rkind := c.rng.IntN(len(cloneKinds))
			if rkind >= metadataKinds {
				counts.metadata++
			}
			rck := cloneKinds[rkind]
			what2 := fmt.Sprintf("%s, then power lost after operation %d of its recovery, clone of %s", what, rk, rck.name)
			clone2 := again + "-clone"
			if err := rfs.CrashClone(clone2, rck.options(again, rand.New(rand.NewPCG(c.rng.Uint64(), 2)))); err != nil {
				fail("%s: CrashClone: %v", what2, err)
			} else if obs2 := checkClone(clone2, at, j, lo, what2, fail); obs2 != nil {
				if d := sameObservation(obs, obs2); d != "" {
					fail("%s: the store differs from what the uninterrupted recovery found:\n%s", what2, d)
				}
			}
		}
		if diff(obs, project(j, len(j.calls)), j.failed) != "" {
			counts.prefixShort++
		}
		if life2 != "" {
			counts.secondLives++
			c.liveAgain(life2, j, obs, at, what, counts, fail)
		}
	}
	if c.restart && cfs.Crashed() {
		counts.restarts++
		c.restartThenLosePower(root, dir, cfs, j, at, counts, fail)
	}
	if len(fails) > 0 {
		fails[0] += "\n" + j.String()
	}
	return fails
}

// restartThenLosePower opens the store in dir again on the page cache the
// crash left, loses power before anything else happens, and checks the
// clone of that, of a kind drawn from cloneKinds (what the kill left
// unsynced, names included, may survive in part): it must hold every call
// that returned before the crash, as the page cache did, since the
// reopened store builds on them.
func (c *plCase) restartThenLosePower(root, dir string, cfs *vfs.CrashFS, j *journal, at time.Time, counts *plCounts, fail func(string, ...any)) {
	what := fmt.Sprintf("%v, restarted on the page cache, then power lost", c)
	cfs.Restart()
	s, err := broker.Open(dir, broker.Options{Now: newClock(j.end).Now, SegmentBytes: broker.MinSegmentBytes, FS: cfs})
	if err != nil {
		fail("%s: the restart does not open: %v", what, err)
		return
	}
	// The kill left unsynced writes and names in the page cache, and a
	// power loss may keep any of them the device could: every kind of
	// clone, not only the one of synced bytes, drawn from a stream of
	// its own so that a seed's other draws stay as they were.
	rng := rand.New(rand.NewPCG(c.wseed^uint64(c.k), 0x72657374617274))
	kind := rng.IntN(len(cloneKinds))
	if kind >= metadataKinds {
		counts.metadata++
	}
	ck := cloneKinds[kind]
	what = fmt.Sprintf("%s, clone of %s", what, ck.name)
	clone := filepath.Join(root, "clone-restart")
	err = cfs.CrashClone(clone, ck.options(dir, rng))
	_ = s.Close()
	if err != nil {
		fail("%s: CrashClone: %v", what, err)
		return
	}
	checkClone(clone, at, j, lowerBound(j, true), what, fail)
}

// liveAgain boots the machine again on life2, an untouched copy of a
// clone that obs showed, and runs a second workload there that loses
// power after a random operation. What that store builds on is what the
// first power loss left, torn tails, lost preambles, half-written
// checkpoints and all; its own clone (of a random kind) must hold the
// state obs showed with a prefix of the second life's calls, by the same
// rules as the first, and show the same when rebuilt from its log alone.
// Segments reclaimed, checkpoints written and tails repaired in the
// second life are what make this differ from the first: a recovery that
// left something not durable, or maintenance that relies on what the
// first life wrote, shows only here.
func (c *plCase) liveAgain(life2 string, j *journal, obs *observation, at time.Time, what string, counts *plCounts, fail func(string, ...any)) {
	// The state the second life starts from is what the inspection showed
	// (with the failed call's effect, if it took one); every ID the first
	// life was handed or left stays taken.
	base, prior := newState(), map[string]bool{}
	for i := range j.calls {
		for _, id := range j.calls[i].ids {
			prior[id] = true
		}
	}
	for id, v := range obs.msgs {
		base.msgs[id] = v
		prior[id] = true
	}
	for k, id := range obs.dedup {
		if prior[id] {
			base.seen[k] = id // remembered; otherwise the probe made a new message
		}
	}
	w := plWorkload(c.rng.Uint64(), c.mode)
	w.start, w.base, w.prior = at, base, prior
	k2 := c.rng.Int64N(c.total*11/10 + 1)
	cfs := vfs.NewCrashFS(vfs.Default)
	cfs.CrashAfter(k2)
	watch := newSyncWatchFS(cfs)
	j2 := w.run(life2, watch, watch)
	what = fmt.Sprintf("%s; booted again on it, workload seed %d, power lost after operation %d", what, w.seed, k2)
	if !cfs.Crashed() {
		if j2.failed != nil || j2.openErr != nil || j2.closeErr != nil {
			fail("%s: no power loss, yet the second life failed: open %v, close %v\n%v", what, j2.openErr, j2.closeErr, j2)
			return
		}
	}
	kind := c.rng.IntN(len(cloneKinds))
	if kind >= metadataKinds {
		counts.metadata++
	}
	ck := cloneKinds[kind]
	what = fmt.Sprintf("%s, clone of %s", what, ck.name)
	clone := life2 + "-clone"
	if err := cfs.CrashClone(clone, ck.options(life2, rand.New(rand.NewPCG(c.rng.Uint64(), 4)))); err != nil {
		fail("%s: CrashClone: %v", what, err)
		return
	}
	rebuilt := clone + "-rebuilt"
	if err := copyLogOnly(clone, rebuilt); err != nil {
		fail("%s: %v", what, err)
		return
	}
	at2 := j2.end.Add(checkDelay)
	ckpt := finishedCheckpoint(clone)
	obs2 := checkClone(clone, at2, j2, lowerBound(j2, ck.keepAll), what, fail)
	if obs2 == nil {
		fail("(the second life's journal)\n%v", j2)
		return
	}
	if ckpt && obs2.recovery.IndexRebuilt {
		fail("%s: the power loss left a checkpoint and no mark that one was being written, yet Open rebuilt the index from the log", what)
	}
	if obsR, err := observe(rebuilt, at2, j2.keys, broker.Options{}); err != nil {
		fail("%s: with its index removed it does not open: %v", what, err)
	} else if d := sameObservation(obs2, obsR); d != "" {
		fail("%s: opened from its checkpoint and rebuilt from its log alone, the store differs:\n%s\n(the second life's journal)\n%v", what, d, j2)
	}
}

// copyLogOnly copies the store in src to dst without its index, so that
// opening dst rebuilds the index from the log alone.
func copyLogOnly(src, dst string) error {
	if err := recovery.CopyTree(src, dst); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(dst, "index"))
}

// finishedCheckpoint reports whether the store in dir holds a checkpoint
// file and no mark that a checkpoint was being written or found suspect
// (index/CHECKPOINTING, index/SUSPECT): Open must then load it.
func finishedCheckpoint(dir string) bool {
	index := filepath.Join(dir, "index")
	if _, err := os.Stat(filepath.Join(index, "checkpoint")); err != nil {
		return false
	}
	for _, mark := range []string{"CHECKPOINTING", "SUSPECT"} {
		if _, err := os.Stat(filepath.Join(index, mark)); err == nil {
			return false
		}
	}
	return true
}

// checkClone opens the clone and checks it against the journal: it must
// open and show the projection of a prefix of at least lo calls. It
// returns the observation, or nil after reporting through fail.
func checkClone(clone string, at time.Time, j *journal, lo int, what string, fail func(string, ...any)) *observation {
	obs, err := observe(clone, at, append(slices.Clip(j.keys), unusedKey), broker.Options{})
	if err != nil {
		if errors.Is(err, broker.Corrupt) {
			fail("%s: a power loss was read as corruption: %v", what, err)
		} else {
			fail("%s: the clone does not open: %v", what, err)
		}
		return nil
	}
	if n, d := match(j, obs, lo); n < 0 {
		fail("%s: the store is not what any prefix of at least %d of the %d calls made (the failed call: %v);\n%s", what, lo, len(j.calls), j.failed, d)
		return nil
	}
	if d := reissuedIDs(j, obs); d != "" {
		fail("%s: %s", what, d)
		return nil
	}
	return obs
}

// unusedKey is a dedup key no workload uses: the inspection of a clone
// publishes with it (observe), so that at least one of its probes is a new
// message, whatever keys the workload left remembered.
const unusedKey = "never-used-by-the-workload"

// reissuedIDs returns what is wrong when a probe of the inspection that
// published a new message got an ID the journal's calls were handed: an
// ID names one message for the life of the store, also when a power loss
// took that message (SyncNone may lose publishes that returned, never
// hand their IDs to others). A probe may return an ID of the journal only
// as the original of its own key.
func reissuedIDs(j *journal, obs *observation) string {
	handed := maps.Clone(j.prior)
	if handed == nil {
		handed = map[string]bool{}
	}
	originals := map[string]string{} // ID → the key a keyed publish returned it for
	for id, k := range invert(j.base) {
		originals[id] = k
	}
	var out []string
	for i := range j.calls {
		c := &j.calls[i]
		for _, id := range c.ids {
			if c.newPublish() && j.prior[id] {
				out = append(out, fmt.Sprintf("%v: message ID %s was handed out by the store's earlier life already", c, id))
			}
			handed[id] = true
		}
		if c.op == opKeyed && c.err == nil && len(c.ids) > 0 {
			originals[c.ids[0]] = c.key
		}
	}
	for _, k := range sortedKeys(obs.dedup) {
		if id := obs.dedup[k]; handed[id] && originals[id] != k {
			out = append(out, fmt.Sprintf("PublishKeyed %s got message ID %s, which the workload's calls were handed already: an ID was handed out twice", k, id))
		}
	}
	return strings.Join(out, "\n")
}

// invert returns the dedup keys a state remembers, by original ID.
func invert(st *state) map[string]string {
	out := map[string]string{}
	if st != nil {
		for k, id := range st.seen {
			out[id] = k
		}
	}
	return out
}

// TestPowerLoss crashes the workload at every file operation (with
// -short, at every stride-th, so that about plShortCases clones are
// checked), under each
// sync mode, and checks each clone; see the comment at the top of this
// file. With WALBROKER_SOAK_CASES set it runs that many random cases
// instead.
func TestPowerLoss(t *testing.T) {
	seed := testSeed(t)
	if v := os.Getenv(soakCasesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number of cases", soakCasesEnv, v)
		}
		powerLossSoak(t, seed, n)
		return
	}
	onlyK := int64(-1)
	if v := os.Getenv(onlyKEnv); v != "" {
		k, err := strconv.ParseInt(v, 10, 64)
		if err != nil || k < 0 {
			t.Fatalf("%s=%q: want an operation number", onlyKEnv, v)
		}
		onlyK = k
	}
	root := fastDir(t)
	var (
		countsMu sync.Mutex
		counts   plCounts
	)
	start := time.Now()
	for mi, mode := range syncModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			wseed := seed + uint64(mi)
			dry := vfs.NewCrashFS(vfs.Default)
			j := plWorkload(wseed, mode).run(filepath.Join(root, mode.String()+"-dry"), dry, nil)
			if j.failed != nil || j.openErr != nil || j.closeErr != nil {
				t.Fatalf("the workload fails without a crash:\n%v", j)
			}
			total := dry.Ops()
			// Each run checks three clones of its crash; by default every
			// operation is a crash point.
			stride := int64(1)
			if testing.Short() {
				stride = max(1, int64(len(syncModes)*sweepClones)*total/plShortCases)
			}
			t.Logf("workload seed %d: %d calls, %d file operations (%d checkpoints, %d bytes reclaimed, %d records copied forward); crashing at every %d-th",
				wseed, len(j.calls), total, j.stats.Checkpoints, j.stats.BytesReclaimed, j.stats.CopiedForward, stride)
			rng := rand.New(rand.NewPCG(seed, uint64(mi)))
			var mine plCounts
			failures := 0
			for n, k := 0, rng.Int64N(stride); k <= total+stride; n, k = n+1, k+stride {
				if onlyK >= 0 && k != onlyK {
					continue
				}
				if n >= 20 && recovery.NearDeadline(t) {
					t.Logf("%s: cut short near the test binary's deadline: crash points up to %d of %d", mode, k-stride, total)
					break
				}
				c := &plCase{mode: mode, wseed: wseed, k: k, rng: rand.New(rand.NewPCG(seed^uint64(k), uint64(mi))),
					kinds: []int{0, []int{1, 3}[n%2], 2}, crashRecovery: -1, rebuild: -1, secondLife: -1, total: total}
				if n%2 == 1 {
					c.kinds = append(c.kinds, metadataKinds+n/2%(len(cloneKinds)-metadataKinds))
				}
				if n%4 == 0 {
					c.secondLife = n / 4 % 3
				}
				if n%3 == 0 {
					c.crashRecovery = n / 3 % 3
				}
				if n%5 == 0 {
					c.rebuild = n / 5 % 3
				}
				c.restart = true // cheap, and its windows (a seal not yet synced, a rename) are single operations
				for _, f := range c.run(filepath.Join(root, fmt.Sprintf("%s-%d", mode, k)), &mine) {
					failures++
					if failures <= 3 {
						t.Errorf("%s\n(replay: %s=%d %s=%d)", f, seedEnv, seed, onlyKEnv, k)
					}
				}
			}
			if failures > 3 {
				t.Errorf("%d more failures not shown", failures-3)
			}
			t.Logf("%s: %v", mode, &mine)
			countsMu.Lock()
			counts.add(&mine)
			countsMu.Unlock()
		})
	}
	t.Cleanup(func() {
		t.Logf("power loss: %v, in %v", &counts, time.Since(start).Round(time.Millisecond))
	})
}

// powerLossSoak runs n random cases: a random mode, workload seed and k,
// and one clone of a random kind each; a third of them also crash the
// recovery of the clone, and a fifth compare it with a rebuild. (The kind
// is drawn from all of cloneKinds: a seed of a soak run before the
// metadataKinds were added draws the same modes, workload seeds and
// operations, save for a rare redraw, but other kinds.)
func powerLossSoak(t *testing.T, seed uint64, n int) {
	root := fastDir(t)
	rng := rand.New(rand.NewPCG(seed, 0x50a6))
	// The number of file operations of a run, by mode, from one dry run
	// each: k is drawn up to a little past it.
	totals := map[broker.SyncMode]int64{}
	for _, mode := range syncModes {
		dry := vfs.NewCrashFS(vfs.Default)
		plWorkload(seed, mode).run(filepath.Join(root, mode.String()+"-dry"), dry, nil)
		totals[mode] = dry.Ops()
	}
	var counts plCounts
	start := time.Now()
	failures := 0
	for i := range n {
		mode := syncModes[rng.IntN(len(syncModes))]
		c := &plCase{mode: mode, wseed: rng.Uint64(), k: rng.Int64N(totals[mode] * 11 / 10), rng: rand.New(rand.NewPCG(rng.Uint64(), 3)),
			kinds: []int{rng.IntN(len(cloneKinds))}, crashRecovery: -1, rebuild: -1, secondLife: -1, total: totals[mode]}
		if rng.IntN(3) == 0 {
			c.secondLife = 0
		}
		if rng.IntN(3) == 0 {
			c.crashRecovery = 0
		}
		if rng.IntN(5) == 0 {
			c.rebuild = 0
		}
		c.restart = rng.IntN(2) == 0
		for _, f := range c.run(filepath.Join(root, strconv.Itoa(i)), &counts) {
			failures++
			if failures <= 5 {
				t.Errorf("case %d: %s\n(replay: %s=%d %s=%d)", i, f, seedEnv, seed, soakCasesEnv, i+1)
			}
		}
		if (i+1)%1000 == 0 {
			t.Logf("%d cases, %d failures, %v", i+1, failures, time.Since(start).Round(time.Second))
		}
	}
	if failures > 5 {
		t.Errorf("%d more failures not shown", failures-5)
	}
	t.Logf("power-loss soak of %d cases (seed %d): %v, in %v; failures %d", n, seed, &counts, time.Since(start).Round(time.Millisecond), failures)
}

// segmentRE matches the name of a segment file (not a prepared one, nor a
// spare).
var segmentRE = regexp.MustCompile(`^[0-9]{10}\.seg$`)

// syncWatchFS wraps a file system to learn which calls a completed
// fdatasync of a segment made durable: when such an fdatasync starts,
// every call completed so far has its events written in that segment or
// in an earlier, sealed and synced, one.
//
// It also holds the fdatasync the power loss interrupts for a moment before
// it fails (see crashedSyncHold).
type syncWatchFS struct {
	vfs.FS
	completed atomic.Int64 // calls completed, set by the workload
	synced    atomic.Int64 // calls covered by a completed segment fdatasync
	held      atomic.Bool  // an fdatasync the power loss interrupted was held

	mu    sync.Mutex
	files map[*watchFile]bool // open files, so that renames update their names
}

func newSyncWatchFS(inner vfs.FS) *syncWatchFS {
	return &syncWatchFS{FS: inner, files: map[*watchFile]bool{}}
}

func (w *syncWatchFS) Completed(n int) { w.completed.Store(int64(n)) }
func (w *syncWatchFS) Synced() int     { return int(w.synced.Load()) }

type watchFile struct {
	vfs.File
	fs   *syncWatchFS
	path string // the file's present name; guarded by fs.mu
}

func (w *syncWatchFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := w.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	wf := &watchFile{File: f, fs: w, path: filepath.Clean(name)}
	w.mu.Lock()
	w.files[wf] = true
	w.mu.Unlock()
	return wf, nil
}

func (w *syncWatchFS) Rename(oldname, newname string) error {
	if err := w.FS.Rename(oldname, newname); err != nil {
		return err
	}
	oldPath, newPath := filepath.Clean(oldname), filepath.Clean(newname)
	w.mu.Lock()
	defer w.mu.Unlock()
	for f := range w.files {
		if f.path == oldPath {
			f.path = newPath
		}
	}
	return nil
}

func (f *watchFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.files, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

// crashedSyncHold is how long the first fdatasync the power loss
// interrupts takes to fail. On a machine that loses power, an fdatasync in
// flight never returns, but the rest of the process runs on until the
// power is gone: a call the store released before its fdatasync completed
// has returned by then, and the workload journals it as acknowledged.
// Failed at once instead, the fdatasync would fail that call too, before
// its goroutine ever ran, and such a store would pass.
const crashedSyncHold = 2 * time.Millisecond

func (f *watchFile) Sync() error {
	covered := f.fs.completed.Load()
	if err := f.File.Sync(); err != nil {
		if errors.Is(err, vfs.ErrCrashed) && f.fs.held.CompareAndSwap(false, true) {
			time.Sleep(crashedSyncHold)
		}
		return err
	}
	f.fs.mu.Lock()
	segment := segmentRE.MatchString(filepath.Base(f.path))
	f.fs.mu.Unlock()
	if segment {
		for {
			old := f.fs.synced.Load()
			if covered <= old || f.fs.synced.CompareAndSwap(old, covered) {
				break
			}
		}
	}
	return nil
}

// sameObservation compares two observations of the same log (opened from
// its checkpoint and rebuilt, or recovered twice) and returns what differs.
func sameObservation(a, b *observation) string {
	var out []string
	for _, id := range sortedKeys(a.msgs) {
		if got, ok := b.msgs[id]; !ok {
			out = append(out, fmt.Sprintf("message %s: %v, then missing", id, a.msgs[id]))
		} else if got != a.msgs[id] {
			out = append(out, fmt.Sprintf("message %s: %v, then %v", id, a.msgs[id], got))
		}
	}
	for _, id := range sortedKeys(b.msgs) {
		if _, ok := a.msgs[id]; !ok {
			out = append(out, fmt.Sprintf("message %s: missing, then %v", id, b.msgs[id]))
		}
	}
	for _, k := range sortedKeys(a.dedup) {
		_, origA := a.msgs[a.dedup[k]]
		_, origB := b.msgs[b.dedup[k]]
		if (origA || origB) && a.dedup[k] != b.dedup[k] {
			out = append(out, fmt.Sprintf("key %s: %s, then %s", k, a.dedup[k], b.dedup[k]))
		}
	}
	return strings.Join(out, "\n")
}

// TestSyncNoneLosesOnlyTheLastInterval: under SyncNone no call waits for
// the device, but the background fdatasync every SyncInterval bounds what
// a power loss can take. Publishes that returned a few intervals before
// the power failed are on the device: a clone of what the device holds
// (synced bytes only) has every one of them.
func TestSyncNoneLosesOnlyTheLastInterval(t *testing.T) {
	const interval = 5 * time.Millisecond
	root := fastDir(t)
	dir := filepath.Join(root, "store")
	cfs := vfs.NewCrashFS(vfs.Default)
	c := newClock(t0)
	s, q := openQueue(t, dir, broker.Options{Now: c.Now, Sync: broker.SyncNone, SyncInterval: interval, SegmentBytes: broker.MinSegmentBytes, FS: cfs}, "orders")
	defer func() { _ = s.Close() }()
	published := map[string]string{}
	for i := range 20 {
		p := payloadOf("orders", i, 0) + strings.Repeat("n", 100)
		m, err := q.Publish(bg(), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		published[m.ID] = p
	}
	missing := afterIntervals(t, cfs, root, dir, interval, c.Now().Add(checkDelay), func(obs *observation) (missing []string) {
		for _, id := range sortedKeys(published) {
			if o, ok := obs.msgs[id]; !ok || o.payload != published[id] {
				missing = append(missing, id)
			}
		}
		return missing
	})
	if len(missing) == 0 {
		return
	}
	t.Errorf("%d of %d publishes that returned %v and more before the power failed are not on the device (SyncInterval %v): %v",
		len(missing), len(published), 50*10*interval, interval, missing)
}

// afterIntervals lets ten sync intervals pass, then clones what the device
// holds (the power fails) and observes the clone's store at at, and
// returns what wrong finds in it. The background fdatasync runs on the
// real clock and a machine may be slow to run it, so while wrong finds
// something it looks again, 50 times in all, and returns what it found
// the last time.
func afterIntervals(t *testing.T, cfs *vfs.CrashFS, root, dir string, interval time.Duration, at time.Time, wrong func(*observation) []string) []string {
	t.Helper()
	var found []string
	for try := range 50 {
		time.Sleep(10 * interval)
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", try))
		if err := cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}); err != nil {
			t.Fatal(err)
		}
		obs, err := observe(clone, at, nil, broker.Options{})
		if err != nil {
			t.Fatalf("the clone does not open: %v", err)
		}
		if found = wrong(obs); len(found) == 0 {
			return nil
		}
	}
	return found
}

// TestAPowerLossAfterACleanReopenKeepsWhatTheReopenedStoreAcknowledged:
// a store closed cleanly, opened again, and then losing power holds what
// the reopened store acknowledged. Close leaves a mark saying where the log
// ends, which lets the next Open skip reading the rest of the last segment;
// a mark that outlived the reopen (its removal not yet durable) would make
// the Open after the power loss take the log for ending there.
func TestAPowerLossAfterACleanReopenKeepsWhatTheReopenedStoreAcknowledged(t *testing.T) {
	root := fastDir(t)
	dir := filepath.Join(root, "store")
	cfs := vfs.NewCrashFS(vfs.Default)
	c := newClock(t0)
	published := map[string]string{}
	for round := range 2 {
		s, q := openQueue(t, dir, broker.Options{Now: c.Now, SegmentBytes: broker.MinSegmentBytes, FS: cfs}, "orders")
		for i := range 5 {
			p := payloadOf("orders", 10*round+i, 0)
			m, err := q.Publish(bg(), []byte(p))
			if err != nil {
				t.Fatal(err)
			}
			published[m.ID] = p
		}
		if round == 0 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		clone := filepath.Join(root, "clone")
		err := cfs.CrashClone(clone, vfs.CrashOptions{Root: dir})
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		obs, err := observe(clone, c.Now().Add(checkDelay), nil, broker.Options{})
		if err != nil {
			t.Fatalf("the clone does not open: %v", err)
		}
		for _, id := range sortedKeys(published) {
			if o, ok := obs.msgs[id]; !ok || o.payload != published[id] {
				t.Errorf("message %s (%q), published and synced, is not there after the power loss (found %v)", id, published[id], o)
			}
		}
	}
}
