package broker_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/vfs"
)

// An I/O error during Open (EIO: a file that is there and does not read)
// says nothing of what the file holds. Open fails on one, naming the file
// and the cause, and changes nothing a later Open needs; only a file that
// is not there (fs.ErrNotExist) or that is verified damaged (it fails its
// checks) takes the branch that rebuilds, repairs or drops it. The tests
// here each show one place where a transient error was taken for absence
// or damage, and Open then succeeded with a wrong report, or removed what
// a later Salvage needs to name the messages it lost.

// ofPolicy: leases of a minute, retry delays of a minute, dedup for an hour.
var ofPolicy = policy(func(p *broker.PolicyValue) {
	p.VisibilityTimeout = time.Minute
	p.RetryDelay = time.Minute
	p.MaxRetryDelay = time.Minute
	p.MaxDeliveries = 3
	p.MaxMessageBytes = 1024
	p.DedupWindow = time.Hour
})

var ofDLQPolicy = policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.MaxMessageBytes = 1024 })

var ofPolicies = map[string]broker.PolicyValue{"jobs": ofPolicy, "dlq": ofDLQPolicy, "churn": jobsPolicy, "stuck": stuckPolicy}

func ofOptions(clock *fakeClock, fs vfs.FS) broker.Options {
	o := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: fs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	broker.ManualMaintenance(&o)
	return o
}

// ofBuild makes a store in dir holding, in a few segments, ready, leased
// (one delivered twice), delayed, dead-lettered and keyed messages (one
// keyed message acked). A checkpoint is written part way; what follows it
// is in the log only. dir is left as a process crash leaves it: a copy of
// the open store's files.
func ofBuild(t *testing.T, dir string, clock *fakeClock) {
	t.Helper()
	live := filepath.Join(fastDir(t), "live")
	s, err := broker.Open(live, ofOptions(clock, nil))
	require.NoError(t, err)
	jobs, err := s.Queue("jobs", ofPolicy)
	require.NoError(t, err)
	dlq, err := s.Queue("dlq", ofDLQPolicy)
	require.NoError(t, err)
	stuck, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	intactAndVictim(t, stuck)
	churnSegments(t, s, 2)
	for i := range 4 {
		mustPublish(t, jobs, fmt.Sprintf("ready-%d-%s", i, strings.Repeat("r", 300)))
	}
	k1, err := jobs.PublishKeyed(ctx(t), "k1", []byte("keyed-1"))
	require.NoError(t, err)
	ds := mustReceive(t, jobs, 3) // leased
	require.Len(t, ds, 3)
	mustNack(t, jobs, ds[2].Lease.Receipt, errors.New("later")) // delayed a minute
	require.NoError(t, s.Maintain())
	churnSegments(t, s, 1)
	clock.Advance(61 * time.Second) // the first leases lapse
	redo := mustReceive(t, jobs, 1)
	require.Len(t, redo, 1)
	_, err = jobs.PublishKeyed(ctx(t), "k2", []byte("keyed-2"))
	require.NoError(t, err)
	for _, d := range mustReceive(t, jobs, 10) {
		if d.Message.ID == k1.ID {
			require.NoError(t, jobs.Ack(ctx(t), d.Lease.Receipt))
		}
	}
	for range 2 {
		mustPublish(t, dlq, "doomed")
	}
	for _, d := range mustReceive(t, dlq, 2) {
		require.NoError(t, dlq.Reject(ctx(t), d.Lease.Receipt, errors.New("bad")))
	}
	mustPublish(t, jobs, "last")
	clock.Advance(time.Second)
	ofCopyLive(t, live, dir)
	_ = s.Close()
}

// ofCopyLive copies the files of the open store in live to dir: its
// preparer may rename one meanwhile.
func ofCopyLive(t *testing.T, live, dir string) {
	for i := 0; ; i++ {
		require.NoError(t, os.RemoveAll(dir))
		err := recovery.CopyTree(live, dir)
		if err == nil {
			return
		}
		require.Less(t, i, 20, "copy: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
}

type ofView struct {
	dump  string
	spans int
	lost  []string
}

// ofState opens dir fault-free and returns every queue's state and what the
// Open reported.
func ofState(t *testing.T, dir string, clock *fakeClock, salvage bool) (ofView, error) {
	t.Helper()
	o := ofOptions(clock, nil)
	o.Salvage = salvage
	s, err := broker.Open(dir, o)
	if err != nil {
		return ofView{}, err
	}
	defer s.Close()
	return ofViewOf(t, s), nil
}

func ofViewOf(t *testing.T, s *broker.Store) ofView {
	for _, name := range s.Queues() {
		_, err := s.Queue(name, ofPolicies[name])
		require.NoError(t, err)
	}
	r := s.Recovery()
	return ofView{dump: broker.Dump(s), spans: r.SalvagedSpans, lost: r.LostMessages}
}

func (v ofView) diff(w ofView) string {
	var out []string
	if v.dump != w.dump {
		out = append(out, ofDiff(w.dump, v.dump))
	}
	if v.spans != w.spans || !slices.Equal(v.lost, w.lost) {
		out = append(out, fmt.Sprintf("report: %d spans, lost %v; want %d spans, lost %v", v.spans, v.lost, w.spans, w.lost))
	}
	return strings.Join(out, "\n")
}

var ofOps = []vfs.Op{vfs.OpOpen, vfs.OpRead, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpMap,
	vfs.OpRemove, vfs.OpRename, vfs.OpSyncDir, vfs.OpClose, vfs.OpSize, vfs.OpReadDir, vfs.OpMkdirAll,
	vfs.OpAllocate, vfs.OpWriteBack, vfs.OpCheckDir}

// ofSweep fails, one run at a time, calls of each kind Open makes on a
// copy of template, and checks what such an Open leaves: every one of the
// first 30 calls of each kind, or, under -short (CI runs the package with
// -race -short, near its time budget), one call of each kind drawn at
// random (the seed is logged; a failure names the call), so that runs in
// turn cover them all.
func ofSweep(t *testing.T, template string, clock *fakeClock) {
	// One fault-free Open counts the calls of each kind, and gives the
	// state every Open must return or leave.
	dry := vfs.NewFaultFS(vfs.Default)
	s, err := broker.Open(ofCopy(t, template), ofOptions(clock, dry))
	require.NoError(t, err)
	counts := map[vfs.Op]int64{}
	for _, op := range ofOps {
		counts[op] = dry.Count(op)
	}
	want := ofViewOf(t, s)
	require.NoError(t, s.Close())
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	if testing.Short() {
		t.Logf("-short: one call of each kind, drawn with seed %d", seed)
	}
	for _, op := range ofOps {
		n := counts[op]
		nths := make([]int64, 0, 30)
		for nth := int64(1); nth <= min(n, 30); nth++ {
			nths = append(nths, nth)
		}
		if testing.Short() && len(nths) > 1 {
			nths = []int64{nths[rng.IntN(len(nths))]}
		}
		for _, nth := range nths {
			errno := syscall.EIO
			if op == vfs.OpWrite && nth%2 == 0 {
				errno = syscall.ENOSPC
			}
			what := fmt.Sprintf("%v #%d of %d failing with %v", op, nth, n, errno)
			dir := ofCopy(t, template)
			ffs := vfs.NewFaultFS(vfs.Default)
			ffs.Inject(vfs.Rule{Op: op, Nth: nth, Err: errno})
			s, err := broker.Open(dir, ofOptions(clock, ffs))
			if err != nil {
				if !strings.Contains(err.Error(), errno.Error()) {
					t.Errorf("%s: the error does not name the cause: %v", what, err)
				}
			} else {
				ffs.Clear()
				if e := s.Err(); e != nil {
					t.Errorf("%s: Open succeeded with a failed store: %v", what, e)
				}
				if d := ofViewOf(t, s).diff(want); d != "" {
					t.Errorf("%s: the store Open returned differs:\n%s", what, d)
				}
				if err := s.Close(); err != nil {
					t.Errorf("%s: close: %v", what, err)
				}
			}
			got, err := ofState(t, dir, clock, false)
			if err != nil {
				t.Errorf("%s: a fault-free Open afterwards fails: %v", what, err)
				continue
			}
			if d := got.diff(want); d != "" {
				t.Errorf("%s: a fault-free Open afterwards differs:\n%s", what, d)
			}
		}
	}
}

func ofCopy(t *testing.T, template string) string {
	d := filepath.Join(fastDir(t), "store")
	copyTree(t, template, d)
	return d
}

func ofDiff(want, got string) string { return broker.StateDiff(want, got) }

func ofTemplate(t *testing.T) (string, *fakeClock) {
	clock := newFakeClock()
	template := filepath.Join(fastDir(t), "t")
	ofBuild(t, template, clock)
	return template, clock
}

// A fault at any file operation of the Open of a store a process crash
// left (a checkpoint, then records to replay; ready, leased, delayed,
// dead-lettered and keyed messages) either fails it with an error naming
// the cause and leaves the store as it was, or opens it as it was.
func TestOpenUnderAFaultAfterAProcessCrashFailsNamingItOrOpensTheStoreAsItWas(t *testing.T) {
	template, clock := ofTemplate(t)
	ofSweep(t, template, clock)
}

// quiet is a logger that writes nowhere.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// isFile returns a Match for the file at path.
func isFile(path string) func(string) bool { return func(n string) bool { return n == path } }

// requireSalvageNames opens dir with Salvage, fault-free, and requires its
// report to name the one damaged span and lost, the message it held.
func requireSalvageNames(t *testing.T, dir string, opts broker.Options, lost broker.MessageValue, what string) {
	t.Helper()
	opts.Salvage, opts.FS = true, nil
	s, err := broker.Open(dir, opts)
	require.NoError(t, err, what)
	rep := s.Recovery()
	require.NoError(t, s.Close())
	require.Equal(t, 1, rep.SalvagedSpans, "%s: %v", what, rep)
	require.Equal(t, []string{lost.ID}, rep.LostMessages, "%s: Salvage no longer names the message the damage took: %v", what, rep)
}

// A salvaging Open names the messages the skipped span held from the last
// checkpoint (RecoveryReport.LostMessages). One transient EIO opening that
// checkpoint in index.Load made Open take it for unusable: it dropped the
// checkpoint (index.Rebuild removes it), rebuilt, and returned success
// with a report naming no lost message; the Close that followed removed
// the salvage's lists, so no later Open could name the message again. Now
// such an Open either fails naming the EIO, and the Salvage after it
// names the message, or reports it itself.
func TestSalvageWithACheckpointReadErrorFailsOrNamesTheLostMessage(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	ckpt := filepath.Join(dir, "index", "checkpoint")

	ffs := vfs.NewFaultFS(vfs.Default)
	// The first open of the checkpoint gives wal.Open its hints; the
	// second is index.Load's.
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, Match: isFile(ckpt), Nth: 2})
	salvage := opts
	salvage.Salvage, salvage.FS, salvage.Logger = true, ffs, quiet()
	s, err := broker.Open(dir, salvage)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpOpen), "the fault was met")
	if err != nil {
		require.ErrorIs(t, err, syscall.EIO, "an Open that fails names the cause")
		require.ErrorContains(t, err, ckpt, "and the file")
		require.FileExists(t, ckpt, "a checkpoint that did not read was dropped")
		requireSalvageNames(t, dir, salvage, lost, "after a salvaging Open that failed")
		return
	}
	rep := s.Recovery()
	require.NoError(t, s.Close())
	require.Equal(t, 1, rep.SalvagedSpans)
	require.Equal(t, []string{lost.ID}, rep.LostMessages,
		"Open returned success, but its report names none of the messages the skipped span held (the checkpoint that knew them was dropped on a transient read error): %v", rep)
}

// The same transient EIO reading the checkpoint, at a plain Open of a
// store whose log is damaged where the checkpoint vouches for it: the Open
// used to drop the checkpoint on its way (index.Rebuild) and then fail
// with Corrupt (the rebuild met the damage), whose text never named the
// EIO; the Open with Salvage that the error asks for then reported the
// span but no lost message. Now the Open fails naming the EIO and the
// checkpoint, which it leaves, and the Salvage names the message.
func TestACheckpointReadErrorInAPlainOpenKeepsTheCheckpointForALaterSalvage(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	opts.Logger = quiet()
	requireSalvageNames(t, ofCopy(t, dir), opts, lost, "fault-free")

	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpRead, vfs.OpSize} {
		d := ofCopy(t, dir)
		ckpt := filepath.Join(d, "index", "checkpoint")
		ffs := vfs.NewFaultFS(vfs.Default)
		// Each of these is met once by the hints' read of the
		// checkpoint, then by index.Load's: the second fails.
		ffs.Inject(vfs.Rule{Op: op, Match: isFile(ckpt), Nth: 2})
		plain := opts
		plain.FS = ffs
		s, err := broker.Open(d, plain)
		require.Equal(t, int64(1), ffs.Injected(op), "%v: the fault was met", op)
		if err == nil {
			require.NoError(t, s.Close())
		} else {
			require.ErrorIs(t, err, syscall.EIO, "%v: an Open that fails names the cause: %v", op, err)
			require.NotErrorIs(t, err, broker.Corrupt, "%v: an I/O error is not damage", op)
			require.ErrorContains(t, err, ckpt, "%v: and the file", op)
		}
		requireSalvageNames(t, d, opts, lost, fmt.Sprintf("after one EIO (%v) reading the checkpoint in a plain Open", op))
	}
}

// The same for the markers Open looks for beside the checkpoint: an error
// looking for SUSPECT (other than its absence) made the store take the
// checkpoint for suspect, rebuild, and so drop it; the plain Open then
// failed with Corrupt, and the Salvage it asks for named nothing. Now it
// fails naming the marker and the EIO, and removes nothing.
func TestAnErrorLookingForTheSuspectMarkKeepsTheCheckpointForALaterSalvage(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	opts.Logger = quiet()
	for nth := int64(1); nth <= 2; nth++ { // the hints' look, then loadCheckpoint's
		d := ofCopy(t, dir)
		ffs := vfs.NewFaultFS(vfs.Default)
		ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "SUSPECT", Nth: nth})
		plain := opts
		plain.FS = ffs
		s, err := broker.Open(d, plain)
		require.Equal(t, int64(1), ffs.Injected(vfs.OpOpen), "look #%d: the fault was met", nth)
		if err == nil {
			require.NoError(t, s.Close())
		} else {
			require.ErrorIs(t, err, syscall.EIO, "look #%d: %v", nth, err)
			require.ErrorContains(t, err, "SUSPECT")
		}
		require.FileExists(t, filepath.Join(d, "index", "checkpoint"), "look #%d", nth)
		requireSalvageNames(t, d, opts, lost, fmt.Sprintf("after one EIO looking for SUSPECT (#%d)", nth))
	}
}

// An Open with Salvage that finishes an unfinished one names the messages
// the earlier one kept in salvage/lost.json (its checkpoint is gone). One
// transient EIO reading that file made Open log, name nothing, and then
// overwrite lost.json with an empty list (keepLost, before the rebuild):
// the only record was destroyed before any report was handed on, and a
// crash before this Open's Close left a store whose next salvaging Open
// named nothing either. Now the EIO fails Open, naming the file, which it
// leaves as it was.
func TestAReadErrorOnTheKeptLostListFailsOpenAndKeepsTheList(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	salvage := opts
	salvage.Salvage, salvage.Logger = true, quiet()
	kept := filepath.Join(dir, "salvage", "lost.json")

	// 1. A salvaging Open that fails after it kept lost.json and removed
	// the checkpoint (the removal of a table file fails).
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "tbl-", Nth: 1})
	salvage.FS = ffs
	_, err := broker.Open(dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	require.NoFileExists(t, filepath.Join(dir, "index", "checkpoint"))
	require.FileExists(t, kept)
	// The kept list names the message: a fault-free salvaging Open of a
	// copy reports it.
	requireSalvageNames(t, ofCopy(t, dir), salvage, lost, "the kept list")
	list, err := os.ReadFile(kept)
	require.NoError(t, err)

	// 2. The Open that finishes it meets one EIO reading lost.json.
	for _, op := range []vfs.Op{vfs.OpOpen, vfs.OpRead} {
		ffs = vfs.NewFaultFS(vfs.Default)
		ffs.Inject(vfs.Rule{Op: op, Match: isFile(kept), Nth: 1})
		salvage.FS = ffs
		s, err := broker.Open(dir, salvage)
		require.Equal(t, int64(1), ffs.Injected(op), "%v: the fault was met", op)
		if err == nil {
			rep := s.Recovery()
			// The machine goes down before the report is handed on: the
			// directory as this Open left it.
			crashed := filepath.Join(fastDir(t), "crashed")
			ofCopyLive(t, dir, crashed)
			require.NoError(t, s.Close())
			require.Equal(t, []string{lost.ID}, rep.LostMessages,
				"%v: Open returned success with a report naming no lost message after one failed read of salvage/lost.json", op)
			requireSalvageNames(t, crashed, salvage, lost, "after that Open, whose report was never handed on")
			return
		}
		require.ErrorIs(t, err, syscall.EIO, "%v: an Open that fails names the cause", op)
		require.ErrorContains(t, err, kept, "%v: and the file", op)
		now, err := os.ReadFile(kept)
		require.NoError(t, err)
		require.Equal(t, string(list), string(now), "%v: the list that did not read was replaced", op)
	}
	requireSalvageNames(t, dir, salvage, lost, "once the list reads")
}

// A kept list that does not parse (it is replaced whole or not at all, so
// this is damage) is not replaced either: the Open that met it fails,
// naming it and what removing it costs, rather than go on naming nothing
// and write an empty list over it.
func TestADamagedKeptLostListFailsOpenAndIsNotReplaced(t *testing.T) {
	dir, opts, _, lost, _ := damagedStore(t)
	salvage := opts
	salvage.Salvage, salvage.Logger = true, quiet()
	kept := filepath.Join(dir, "salvage", "lost.json")
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: "tbl-", Nth: 1})
	salvage.FS = ffs
	_, err := broker.Open(dir, salvage)
	require.ErrorIs(t, err, syscall.EIO)
	list, err := os.ReadFile(kept)
	require.NoError(t, err)
	damaged := list[:len(list)/2]
	require.NoError(t, os.WriteFile(kept, damaged, 0o600))

	salvage.FS = nil
	_, err = broker.Open(dir, salvage)
	require.Error(t, err)
	require.ErrorContains(t, err, kept)
	require.ErrorContains(t, err, "remove it")
	now, err := os.ReadFile(kept)
	require.NoError(t, err)
	require.Equal(t, string(damaged), string(now), "the list was replaced")

	// Put back whole, it is read.
	require.NoError(t, os.WriteFile(kept, list, 0o600))
	requireSalvageNames(t, dir, salvage, lost, "the list put back")
}

// Salvage of a segment whose header is damaged rewrites the header and
// keeps every record ("Salvage keeps every intact record before AND after
// a damaged span", API.md §5.12). When the salvage's own reopen of that
// file met one transient EIO, wal.salvageHeader took the file for one
// "too short for a header" and replaced it by an empty segment
// (salvageStub): every intact record in it was dropped for good, and the
// Open succeeded, reporting them lost. Now the Open fails naming the EIO,
// and the Salvage after it keeps every record.
func TestSalvageOfADamagedHeaderKeepsTheSegmentOnATransientError(t *testing.T) {
	dir, opts := fastDir(t), reclaimOptions(newFakeClock(), nil)
	opts.Logger = quiet()
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	intact, victim := intactAndVictim(t, q) // both in segment 1
	churnSegments(t, s, 3)
	require.NoError(t, s.Close())
	seg1 := filepath.Join(dir, "0000000001.seg")
	b, err := os.ReadFile(seg1)
	require.NoError(t, err)
	b[5] ^= 0xff // the header fails its checks; every frame is intact
	require.NoError(t, os.WriteFile(seg1, b, 0o600))

	salvage := opts
	salvage.Salvage = true
	stuckIDs := func(s *broker.Store) []string {
		q, err := s.Queue("stuck", stuckPolicy)
		require.NoError(t, err)
		return ids(mustReceive(t, q, 10))
	}
	{
		// Without a fault: the header is rewritten, nothing is lost.
		s, err := broker.Open(ofCopy(t, dir), salvage)
		require.NoError(t, err)
		require.Empty(t, s.Recovery().LostMessages)
		require.ElementsMatch(t, []string{intact.ID, victim.ID}, stuckIDs(s))
		require.NoError(t, s.Close())
	}

	ffs := vfs.NewFaultFS(vfs.Default)
	// Segment 1 is opened by the scan (bad header), then again by the
	// salvage of its header: that second open fails, once.
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, Match: isFile(seg1), Nth: 2})
	salvage.FS = ffs
	s, err = broker.Open(dir, salvage)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpOpen), "the fault was met")
	if err == nil {
		rep := s.Recovery()
		got := stuckIDs(s)
		require.NoError(t, s.Close())
		require.ElementsMatch(t, []string{intact.ID, victim.ID}, got,
			"one transient EIO made the salvage drop the intact records of the segment whose header it repairs: %v", rep)
		return
	}
	require.ErrorIs(t, err, syscall.EIO, "an Open that fails names the cause")
	require.ErrorContains(t, err, seg1, "and the file")
	now, err := os.ReadFile(seg1)
	require.NoError(t, err)
	require.Equal(t, b, now, "the segment was replaced")
	salvage.FS = nil
	s, err = broker.Open(dir, salvage)
	require.NoError(t, err)
	require.Empty(t, s.Recovery().LostMessages)
	require.ElementsMatch(t, []string{intact.ID, victim.ID}, stuckIDs(s))
	require.NoError(t, s.Close())
}

// The checkpoint's hints tell wal.Open where the log was known durable
// (Options.Verified): damage before that point, after a crash (no clean
// mark), is damage to synced records, which Open refuses. One transient
// EIO reading the checkpoint for its hints made Open go on without them:
// the damaged last record read as a torn tail and was zeroed (no copy
// kept) before the checkpoint was even loaded. Now Open fails naming the
// checkpoint and the EIO, and the log is as it was.
func TestAnErrorReadingTheCheckpointsHintsZeroesNoSyncedRecord(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.Logger = quiet() })
	q := e.queue("jobs", policy())
	for i := range 3 {
		mustPublish(t, q, fmt.Sprintf("message-%d", i))
	}
	mustPublish(t, q, string(victimPayload))
	e.close() // a checkpoint at the log's end
	// As a crash leaves it: no clean mark.
	require.NoError(t, os.Remove(filepath.Join(e.dir, "CLEAN")))
	seg := damagePayload(t, e.dir, victimPayload)
	before, err := os.ReadFile(seg)
	require.NoError(t, err)
	{
		_, err := broker.Open(ofCopy(t, e.dir), e.opts)
		require.ErrorIs(t, err, broker.Corrupt, "fault-free, the damage to a synced record is refused")
	}

	ckpt := filepath.Join(e.dir, "index", "checkpoint")
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRead, Match: isFile(ckpt), Nth: 1})
	o := e.opts
	o.FS = ffs
	s, err := broker.Open(e.dir, o)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpRead), "the fault was met")
	if err == nil {
		require.NoError(t, s.Close())
	}
	now, rerr := os.ReadFile(seg)
	require.NoError(t, rerr)
	require.Equal(t, before, now, "an Open that could not read the checkpoint's hints changed the segment (zeroed a synced record as a torn tail): %v", err)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, ckpt)
	_, err = broker.Open(e.dir, e.opts)
	require.ErrorIs(t, err, broker.Corrupt, "the damage is still refused")
}

// Open reads the store secret from the log before it opens it, to tell
// its own checkpoint from another store's (an index directory copied in
// from one). One transient EIO reading the segment made it take the
// secret as unknown: it trusted the other store's checkpoint, and opened
// with the other store's queues and messages in place of its own. Now
// Open fails naming the segment and the EIO; the Open after it rebuilds
// its own state from its log.
func TestAnErrorPeekingTheLogsSecretDoesNotTakeAnotherStoresIndex(t *testing.T) {
	a, _ := storeWith(t, "alpha", policy(), []string{"aaaa0", "aaaa1", "aaaa2", "aaaa3", "aaaa4"})
	b, bravo := storeWith(t, "bravo", policy(), []string{"bbbb0", "bbbb1", "bbbb2", "bbbb3", "bbbb4"})
	swapIndex(t, a.dir, b.dir)
	seg := filepath.Join(b.dir, "0000000001.seg")
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRead, Match: isFile(seg), Nth: 1})
	o := b.opts
	o.FS, o.Logger = ffs, quiet()
	s, err := broker.Open(b.dir, o)
	require.Equal(t, int64(1), ffs.Injected(vfs.OpRead), "the fault was met")
	if err == nil {
		queues := s.Queues()
		require.NoError(t, s.Close())
		require.Equal(t, []string{"bravo"}, queues, "Open took another store's index for this one's state after one EIO reading the log's secret")
	} else {
		require.ErrorIs(t, err, syscall.EIO)
		require.ErrorContains(t, err, seg)
	}
	requireOwnState(t, b, "bravo", policy(), bravo)
}
