package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
)

// Ctrl-C cancels the run's context (see run); these tests cancel it
// themselves, at chosen points of the run, and check that walbench stops
// there, prints and writes what it measured, removes its directory and
// exits 130.

func TestInterruptedBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, nil, "-dir", dir, "-json", jsonFile)
	if res.code != exitInterrupted || res.stdout != "" || !strings.Contains(res.stderr, "interrupted before anything was measured") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %d, nothing, and why", res.code, res.stdout, res.stderr, exitInterrupted)
	}
	if _, err := os.Stat(jsonFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-json file written with nothing measured: %v", err)
	}
	assertDirEmpty(t, dir)
}

// TestInterruptedBetweenRows cancels the run right after its second
// publish row: the probe and both rows are kept, the drains never run.
func TestInterruptedBetweenRows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var steps []string
	e := &env{afterStep: func(name string) {
		steps = append(steps, name)
		if strings.HasPrefix(name, "publish, 3 producers") {
			cancel()
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "-dir", dir, "-json", jsonFile, "-producers", "1,3", "-time", "30ms", "-probe-time", "30ms",
		"-warmup", "0", "-size", "100", "-segment-bytes", "64KiB", "-messages", "100")
	if res.code != exitInterrupted || !strings.Contains(res.stderr, "interrupted; the tables have what was measured") {
		t.Fatalf("exit %d, want %d and why", res.code, exitInterrupted)
	}
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if want := []string{"probe", "publish, 1 producer, 100 B, sync=all", "publish, 3 producers, 100 B, sync=all"}; strings.Join(steps, "|") != strings.Join(want, "|") {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if !rep.Interrupted || rep.Probe == nil || len(rep.Rows) != 2 || rep.Rows[0].Interrupted || rep.Rows[1].Interrupted {
		t.Fatalf("report: interrupted %v, probe %v, %d rows; want interrupted, the probe and two whole rows", rep.Interrupted, rep.Probe != nil, len(rep.Rows))
	}
	// The recommendation is made from what there is.
	if rep.Recommendation == nil || rep.Recommendation.Sync != "all" || rep.Recommendation.DrainMsgsPerSec != nil {
		t.Errorf("recommendation %+v; want sync all, without a drain", rep.Recommendation)
	}
}

// TestInterruptedInWindow cancels the run in the middle of an hour-long
// publish window, from inside the store's file system at the 20th
// fdatasync after the window opened: the window closes at once, and its
// row is marked.
func TestInterruptedInWindow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fs := vfs.NewFaultFS(vfs.Default)
	var (
		open  atomic.Bool
		syncs atomic.Int64
	)
	fs.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpSync && open.Load() && syncs.Add(1) == 20 {
			cancel()
		}
	})
	dir, jsonFile := benchDir(t), jsonPath(t)
	e := &env{fs: fs, onWindow: func(string) { open.Store(true) }}
	res := runWith(t, ctx, e, "publish", "-dir", dir, "-json", jsonFile, "-producers", "2", "-time", "1h",
		"-probe-time", "0", "-warmup", "0", "-size", "100", "-segment-bytes", "64KiB")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 || !rep.Rows[0].Interrupted || rep.Rows[0].Ops == 0 || rep.Rows[0].Seconds >= 3600 {
		t.Fatalf("%d rows (%+v); want one, interrupted, with what it measured", len(rep.Rows), rep.Rows)
	}
	if !strings.Contains(res.stdout, "publish, 2 producers, 100 B, sync=all (interrupted)") {
		t.Errorf("the table does not mark the row interrupted")
	}
}

// TestInterruptedInFirstRoundNoMedians: Ctrl-C in the first of three
// rounds leaves rows measured in one round, marked "(1 of 3 rounds)": the
// note under their table counts the rounds that measured them, as the
// probe's and reopen's do, and so says nothing of medians.
func TestInterruptedInFirstRoundNoMedians(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{afterStep: func(name string) {
		if strings.HasPrefix(name, "publish") {
			cancel()
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "publish", "-dir", dir, "-json", jsonFile, "-producers", "1", "-time", "20ms", "-warmup", "0s",
		"-probe-time", "0", "-rounds", "3")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 || rep.Rows[0].Rounds != 1 {
		t.Fatalf("want one row measured in 1 round, got %d rows", len(rep.Rows))
	}
	if !strings.Contains(res.stdout, "(1 of 3 rounds)") || strings.Contains(res.stdout, "medians of") {
		t.Errorf("the only row was measured in 1 of 3 rounds: want it marked so, and no note of medians under its table:\n%s", res.stdout)
	}
}

// TestProbeStoppedInItsPrefillIsNoRoundThatMeasured: with -rounds 2, a
// probe Ctrl-C stops in its second round's prefill measured nothing, so
// the probe's summary counts one round that measured it, and its rows are
// marked "1 of 2 rounds"; per_round still holds the second round, which
// says where it stopped.
func TestProbeStoppedInItsPrefillIsNoRoundThatMeasured(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefills := 0
	e := &env{onWindow: func(name string) {
		if name == "probe: "+probePrefill {
			if prefills++; prefills == 2 {
				cancel() // the second round's prefill writes nothing
			}
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "probe", "-dir", dir, "-json", jsonFile, "-time", "20ms", "-rounds", "2", "-producers", "1", "-size", "100")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	rep := readReport(t, jsonFile)
	p := rep.Probe
	if p == nil || len(p.PerRound) != 2 || p.PerRound[0].FdatasyncsPerSec == nil || p.PerRound[1].FdatasyncsPerSec != nil ||
		p.PerRound[1].InterruptedIn != probePrefill {
		t.Fatalf("probe %+v; want round 1 measured whole and round 2 cut in its prefill", p)
	}
	if p.Rounds != 1 {
		t.Errorf("probe \"rounds\": %d; want 1, the rounds that measured it (round 2 measured nothing)", p.Rounds)
	}
	if !strings.Contains(res.stdout, "fdatasync after pwrite 4 KiB over written blocks (1 of 2 rounds)") {
		t.Errorf("the probe's rows are not marked \"1 of 2 rounds\" though one round measured them:\n%s", res.stdout)
	}
	if !strings.Contains(res.stdout, "note: probe: round 2: interrupted while writing its 64 MiB file, before its loops") {
		t.Errorf("the probe's notes do not say that round 2 was cut in its prefill:\n%s", res.stdout)
	}
}

// TestProbeCutInALaterRoundMarksTheLoopsItDidNotRun: with -rounds 2, Ctrl-C
// as the second probe's bandwidth loop starts leaves that loop and the
// append loop measured by round 1 alone. Their rows are marked "1 of 2
// rounds", and the notes say which round was cut where, not that the
// loops whose figures the table prints did not run.
func TestProbeCutInALaterRoundMarksTheLoopsItDidNotRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writes := 0
	e := &env{onWindow: func(name string) {
		if name == "probe: "+probeWrite {
			if writes++; writes == 2 {
				cancel()
			}
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "probe", "-dir", dir, "-json", jsonFile, "-time", "20ms", "-rounds", "2", "-producers", "1", "-size", "100")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	rep := readReport(t, jsonFile)
	p := rep.Probe
	if p == nil || len(p.PerRound) != 2 || p.PerRound[1].AppendFdatasyncsPerSec != nil || p.AppendFdatasyncsPerSec == nil {
		t.Fatalf("probe %+v; want the append loop measured in round 1 only", p)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(res.stdout, "\n") {
		for _, label := range []string{"fdatasync after pwrite 4 KiB over written blocks", "fdatasync after pwrite 4 KiB at the end of a growing file"} {
			if strings.HasPrefix(l, label) {
				rows[label] = l
			}
		}
	}
	if row := rows["fdatasync after pwrite 4 KiB at the end of a growing file"]; !strings.Contains(row, "(1 of 2 rounds)") {
		t.Errorf("append row %q (figures of round 1 alone) not marked \"1 of 2 rounds\"", row)
	}
	if row := rows["fdatasync after pwrite 4 KiB over written blocks"]; row == "" || strings.Contains(row, "rounds)") {
		t.Errorf("fdatasync row %q: want it unmarked, both rounds measured it", row)
	}
	if strings.Contains(res.stdout, "the loops after the one marked did not run") ||
		!strings.Contains(res.stdout, "note: probe: round 2: interrupted in its sequential write loop; the loops after it did not run in that round") {
		t.Errorf("the probe's notes do not say that round 2 was cut in its bandwidth loop:\n%s", res.stdout)
	}
}

// TestPublishFails fails the writes of the second publish workload's
// store: walbench keeps the first row, says what failed and exits 1.
func TestPublishFails(t *testing.T) {
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: "publish-3-", After: 20, Err: syscall.EIO})
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, context.Background(), &env{fs: fs, hangTimeout: 10 * time.Second}, "publish", "-dir", dir, "-json", jsonFile,
		"-producers", "1,3", "-time", "30ms", "-probe-time", "0", "-warmup", "0", "-size", "100", "-segment-bytes", "64KiB")
	if res.code != exitError || !strings.Contains(res.stderr, "Publish") || !strings.Contains(res.stderr, syscall.EIO.Error()) {
		t.Fatalf("exit %d, stderr %q; want %d, naming the Publish and the error", res.code, res.stderr, exitError)
	}
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 1 || rep.Rows[0].Producers != 1 || !strings.Contains(rep.Error, syscall.EIO.Error()) {
		t.Fatalf("%d rows, error %q; want the first row, and the failure", len(rep.Rows), rep.Error)
	}
}

// TestSweepPointWhoseDrainFailedIsNotScored: a sweep point is scored on
// the rate at which messages went through the queue, its publish and its
// drain; one whose drain failed is reported with its window, marked
// "drain failed", and not scored (doc.go, # Recommendation): scored on
// its publish rate alone, it would be compared with the others' publish
// and drain, and beat them. Here the sweep measures sync=publish, then
// sync=all, one point each; the first fdatasync after the second
// window's drain has begun (a segment write smaller than a message: a
// lease or an ack) fails.
func TestSweepPointWhoseDrainFailedIsNotScored(t *testing.T) {
	const size = 4096
	fs := vfs.NewFaultFS(vfs.Default)
	var windows atomic.Int32
	var armed atomic.Bool
	fs.Observe(func(ev vfs.Event) {
		if windows.Load() == 2 && ev.Op == vfs.OpWrite && strings.Contains(filepath.Base(ev.Name), ".seg") && ev.Len > 0 && ev.Len < size/2 {
			armed.Store(true)
		}
	})
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Times: 1, Match: func(string) bool { return armed.Load() }})
	e := &env{fs: fs, hangTimeout: time.Minute, onWindow: func(string) { windows.Add(1) }}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, context.Background(), e, "sweep", "-dir", dir, "-json", jsonFile,
		"-sync", "publish,all", "-segment-bytes", "64MiB", "-size", "4096", "-producers", "1",
		"-time", "100ms", "-warmup", "0s", "-probe-time", "0", "-consumers", "1", "-batch", "1")
	if res.code != exitError || fs.Injected(vfs.OpSync) != 1 {
		t.Fatalf("exit %d, %d fdatasyncs failed; want the second point's drain to fail the run (exit %d)", res.code, fs.Injected(vfs.OpSync), exitError)
	}
	assertDirEmpty(t, dir)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 2 || rep.Rows[0].DrainFailed || rep.Rows[0].ThroughMsgsPerSec == nil {
		t.Fatalf("rows %+v; want the sync=publish point whole, then the sync=all one", rep.Rows)
	}
	failed := rep.Rows[1]
	if failed.Sync != "all" || !failed.DrainFailed || failed.MsgsPerSec == nil || failed.DrainMsgsPerSec != nil || failed.ThroughMsgsPerSec != nil {
		t.Fatalf("row %+v; want the sync=all point's window, marked drain failed, without drain figures", failed)
	}
	if !strings.Contains(res.stdout, failed.Workload+" (drain failed)") {
		t.Errorf("the table does not mark the point whose drain failed:\n%s", res.stdout)
	}
	rec := rep.Recommendation
	if rec == nil || rec.Sync != "publish" || len(rec.Scores) != 1 || rec.Scores[0].Sync != "publish" {
		t.Fatalf("recommendation %+v; want sync=publish, the only point measured whole, and sync=all not scored", rec)
	}
	if len(rec.Unscored) != 1 || rec.Unscored[0].Sync != "all" {
		t.Errorf("unscored %+v; want sync=all, measured only in a point whose drain failed", rec.Unscored)
	}
}

// blockingFS is vfs.Default, except that once armed, the writes of
// records (not at offset 0, not all zeros: segment preparation writes
// only the header and zeros) wait until release is closed.
type blockingFS struct {
	vfs.FS
	armed   atomic.Bool
	release chan struct{}
}

type blockingFile struct {
	vfs.File
	fs *blockingFS
}

func (fs *blockingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return blockingFile{File: f, fs: fs}, nil
}

func (f blockingFile) WriteAt(p []byte, off int64) (int, error) {
	if off != 0 && f.fs.armed.Load() && strings.ContainsFunc(string(p), func(r rune) bool { return r != 0 }) {
		<-f.fs.release
	}
	return f.File.WriteAt(p, off)
}

// TestPublishHangs: a store whose writes stop returning once the window
// is open is reported as hung when the hang timeout has passed after the
// window, and walbench still removes its directory.
func TestPublishHangs(t *testing.T) {
	fs := &blockingFS{FS: vfs.Default, release: make(chan struct{})}
	defer close(fs.release) // let the stuck writer go once the test is done
	dir, jsonFile := benchDir(t), jsonPath(t)
	e := &env{fs: fs, hangTimeout: 100 * time.Millisecond, onWindow: func(string) { fs.armed.Store(true) }}
	res := runWith(t, context.Background(), e, "publish", "-dir", dir, "-json", jsonFile,
		"-producers", "2", "-time", "30ms", "-probe-time", "0", "-warmup", "0", "-size", "100", "-segment-bytes", "64KiB")
	if res.code != exitError || !strings.Contains(res.stderr, "the broker hung: producers still inside Publish") {
		t.Fatalf("exit %d, stderr %q; want %d and the hang named", res.code, res.stderr, exitError)
	}
	assertDirEmpty(t, dir)
}

// TestJSONUnwritable: a -json path that cannot be written ends the run
// before anything is measured, naming the flag and the path.
func TestJSONUnwritable(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "missing", "x.json"), t.TempDir() + "/"} {
		dir := benchDir(t)
		res := runWith(t, context.Background(), nil, "publish", "-dir", dir, "-json", name,
			"-producers", "1", "-time", "30ms", "-probe-time", "0", "-warmup", "0", "-size", "100", "-segment-bytes", "64KiB")
		if res.code != exitError || res.stdout != "" || !strings.Contains(res.stderr, "-json "+name+": ") {
			t.Errorf("-json %s: exit %d, stdout %q, stderr %q; want %d before anything was measured (no tables), and the path named",
				name, res.code, res.stdout, res.stderr, exitError)
		}
		assertDirEmpty(t, dir)
	}
}

// TestJSONEarlierFileKept: a run that measures nothing, cut by Ctrl-C
// or failing before its first result, leaves the file an earlier run
// wrote at its -json path as it was, says so, and leaves no file beside
// it.
func TestJSONEarlierFileKept(t *testing.T) {
	const earlier = "PRECIOUS\n"
	earlierAt := func(t *testing.T) string {
		name := jsonPath(t)
		if err := os.WriteFile(name, []byte(earlier), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	check := func(t *testing.T, what string, res runResult, jsonFile string) {
		t.Helper()
		if b, err := os.ReadFile(jsonFile); err != nil || string(b) != earlier {
			t.Errorf("%s: the earlier -json file holds %q, %v; want it as it was", what, b, err)
		}
		if !strings.Contains(res.stderr, "-json "+jsonFile+": not written; the file that was there is left as it was") {
			t.Errorf("%s: stderr does not say the -json file was left as it was", what)
		}
		assertDirEmptyBut(t, filepath.Dir(jsonFile), filepath.Base(jsonFile))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir, jsonFile := benchDir(t), earlierAt(t)
	res := runWith(t, ctx, nil, "publish", "-dir", dir, "-json", jsonFile, "-probe-time", "0")
	if res.code != exitInterrupted {
		t.Errorf("interrupted: exit %d, want %d", res.code, exitInterrupted)
	}
	check(t, "interrupted before the first result", res, jsonFile)
	assertDirEmpty(t, dir)

	jsonFile = earlierAt(t)
	res = runWith(t, context.Background(), nil, "publish", "-dir", filepath.Join(t.TempDir(), "missing"), "-json", jsonFile,
		"-time", "50ms", "-probe-time", "0")
	if res.code != exitError || res.stdout != "" {
		t.Errorf("-dir missing: exit %d, stdout %q; want %d and nothing measured", res.code, res.stdout, exitError)
	}
	check(t, "a -dir that does not exist", res, jsonFile)

	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: "publish-1-", Err: syscall.EIO})
	dir, jsonFile = benchDir(t), earlierAt(t)
	res = runWith(t, context.Background(), &env{fs: fs, hangTimeout: 10 * time.Second}, "publish", "-dir", dir, "-json", jsonFile,
		"-producers", "1", "-time", "30ms", "-probe-time", "0", "-warmup", "0", "-size", "100", "-segment-bytes", "64KiB")
	if res.code != exitError || res.stdout != "" {
		t.Errorf("failed: exit %d, stdout %q; want %d and nothing measured", res.code, res.stdout, exitError)
	}
	check(t, "failed before the first result", res, jsonFile)
	assertDirEmpty(t, dir)
}
