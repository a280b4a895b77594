package main

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/walbroker/walbroker/vfs"
)

// TestAProfileCutBeforeItsDrainsSaysSyncPublishWasNotCompared: the
// profile tells SyncAll from SyncPublish by its drains alone (its
// publishes run under SyncAll). A profile stopped after its publishes,
// before any drain, still recommends a setting: it must then say that
// SyncPublish was not compared (as a sweep cut short lists the settings it
// never reached under not_measured), and not describe its scores as
// publish and drain taking turns, nor the recommendation as made from the
// drain workloads, when no drain was measured. walbench report says the
// same from the JSON.
func TestAProfileCutBeforeItsDrainsSaysSyncPublishWasNotCompared(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{afterStep: func(name string) {
		if strings.HasPrefix(name, "publish, 3 producers") {
			cancel() // the last publish: the drains never run
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "-dir", dir, "-json", jsonFile, "-producers", "1,3", "-time", "30ms", "-probe-time", "30ms",
		"-warmup", "0", "-size", "100", "-segment-bytes", "64KiB", "-messages", "100")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if slices.ContainsFunc(rep.Rows, func(r Row) bool { return r.Kind == kindDrain }) {
		t.Fatalf("a drain row was measured; the test wants a profile cut before its drains")
	}
	rec := rep.Recommendation
	if rec == nil {
		return // no recommendation from half a profile: nothing claimed
	}
	named := slices.ContainsFunc(slices.Concat(rec.Unscored, rec.NotMeasured), func(s Setting) bool { return s.Sync == "publish" })
	if !named || !rec.PublishOnly {
		t.Errorf("recommendation sync=%s from a profile that never drained: unscored %v, not_measured %v, publish_only %v; want sync=publish named as not compared, and publish_only",
			rec.Sync, rec.Unscored, rec.NotMeasured, rec.PublishOnly)
	}
	_, text, _ := strings.Cut(res.stdout, "Recommendation for this disk")
	if !strings.Contains(text, "sync=publish") {
		t.Errorf("the recommendation's text never names sync=publish, which the run did not compare:\n%s", text)
	}
	for _, claim := range []string{"from the publish and drain workloads", "publish and drain taking turns"} {
		if strings.Contains(res.stdout, claim) {
			t.Errorf("the recommendation says %q, but no drain was measured", claim)
		}
	}
}

// TestAProfileCutBetweenItsDrainsSaysSyncPublishWasNotCompared: a
// profile stopped after its SyncAll drain, before its SyncPublish one,
// scores SyncAll alone, publish and drain taking turns; SyncPublish,
// never drained, was not compared, and the recommendation says so.
func TestAProfileCutBetweenItsDrainsSaysSyncPublishWasNotCompared(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{afterStep: func(name string) {
		if strings.HasPrefix(name, "drain") && strings.HasSuffix(name, "sync=all") {
			cancel()
		}
	}}
	dir, jsonFile := benchDir(t), jsonPath(t)
	res := runWith(t, ctx, e, "-dir", dir, "-json", jsonFile, "-producers", "1", "-time", "30ms", "-probe-time", "0",
		"-warmup", "0", "-size", "100", "-segment-bytes", "64KiB", "-messages", "100")
	if res.code != exitInterrupted {
		t.Fatalf("exit %d, want %d", res.code, exitInterrupted)
	}
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if len(rep.Rows) != 2 || rep.Rows[1].Kind != kindDrain || rep.Rows[1].Sync != "all" || rep.Rows[1].Interrupted {
		t.Fatalf("rows %+v; the test wants the publish and the whole SyncAll drain", rep.Rows)
	}
	rec := rep.Recommendation
	if rec == nil || rec.Sync != "all" || rec.PublishOnly || rec.DrainMsgsPerSec == nil {
		t.Fatalf("recommendation %+v; want sync=all, scored with its drain", rec)
	}
	want := []Setting{{Sync: "publish", SegmentBytes: 64 << 10}}
	if !slices.Equal(rec.NotMeasured, want) || len(rec.Unscored) != 0 {
		t.Errorf("not_measured %v, unscored %v; want not_measured %v, the drain the run never reached", rec.NotMeasured, rec.Unscored, want)
	}
	if !strings.Contains(res.stdout, "not measured, the run having ended before them, so not compared: sync=publish, 64 KiB segments") {
		t.Errorf("the recommendation does not name sync=publish as not compared:\n%s", res.stdout)
	}
}

// TestACtrlCAfterTheMeasuringExitsAsAWholeRun: a Ctrl-C that comes once
// every workload has run whole (while the report is being put in place)
// stops no measurement. The report and the tables say the run was not
// interrupted; the exit code and stderr must not say otherwise ("the
// tables have what was measured until then", 130), which would tell a
// script that a whole run was cut short. stderr says when the signal
// came.
func TestACtrlCAfterTheMeasuringExitsAsAWholeRun(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	jsonFile := jsonPath(t)
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Observe(func(ev vfs.Event) {
		if ev.Op == vfs.OpRename && ev.NewName == jsonFile {
			cancel(interruption{syscall.SIGINT}) // Ctrl-C as the whole report is renamed into place
		}
	})
	dir := benchDir(t)
	res := runWith(t, ctx, &env{outFS: fs}, probeArgs(dir, jsonFile)...)
	rep := assertTablesFromJSON(t, res.stdout, jsonFile)
	if rep.Interrupted || rep.Probe == nil || rep.Probe.Interrupted {
		t.Fatalf("report: interrupted %v; the test wants a run whose measuring ended whole", rep.Interrupted)
	}
	if res.code != exitOK || strings.Contains(res.stderr, "the tables have what was measured until then") {
		t.Errorf("exit %d, stderr %q; the report says the run was not interrupted, so want exit %d and no word of an interruption that cut it",
			res.code, res.stderr, exitOK)
	}
	if want := "interrupted by Ctrl-C after everything was measured"; !strings.Contains(res.stderr, want) {
		t.Errorf("stderr %q; want %q", res.stderr, want)
	}
	assertDirEmpty(t, dir)
}
