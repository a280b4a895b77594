package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
)

// TestASweepWhoseDurablePointsWereAllSkippedForMemoryFailsNamingThem: a
// sweep asked for -sync all,none whose sync=all point was skipped for its
// memory (the memory available changes from one point to the next) and
// whose sync=none point was measured has no recommendation to list the
// skipped point under. "No durable sync mode asked for" is not why: one
// was. As a sweep that measured nothing, it fails, and its error names the
// durable points it skipped and what to do.
func TestASweepWhoseDurablePointsWereAllSkippedForMemoryFailsNamingThem(t *testing.T) {
	var calls atomic.Int64
	e := &env{memAvailable: func() (int64, error) {
		if calls.Add(1) == 1 {
			return 1 << 20, nil // the sync=all point (sync modes run outermost, all first): too little
		}
		return 1 << 40, nil
	}}
	dir, out := benchDir(t), jsonPath(t)
	r := runWith(t, context.Background(), e, "sweep", "-sync", "all,none", "-producers", "1", "-size", "1024",
		"-segment-bytes", "4MiB", "-time", "20ms", "-warmup", "0", "-probe-time", "0", "-consumers", "1", "-batch", "8",
		"-dir", dir, "-json", out)
	if r.code != exitError {
		t.Fatalf("exit %d, want %d", r.code, exitError)
	}
	rep := readReport(t, out)
	if len(rep.Rows) != 1 || rep.Rows[0].Sync != "none" {
		t.Fatalf("rows %+v: want the sync=none point alone (the sync=all one skipped)", rep.Rows)
	}
	if strings.Contains(r.stdout, "no durable sync mode was measured (add -sync all or publish)") {
		t.Errorf("the report tells the operator to add -sync all, which was given (its point was skipped for its memory): %q",
			lineWith(r.stdout, "No recommendation"))
	}
	if !strings.Contains(r.stdout, "No recommendation: every point under a durable sync mode was skipped for its estimated memory") {
		t.Errorf("the report does not say why it has no recommendation: %q", lineWith(r.stdout, "No recommendation"))
	}
	for _, s := range []string{r.stderr, rep.Error} {
		if !strings.Contains(s, "sync=all, 4 MiB segments") || !strings.Contains(s, "-force-memory") {
			t.Errorf("the error does not name the sync=all point skipped for its memory, or what to do: %q", s)
		}
	}
}

// lineWith is the first line of s containing sub, "" if none.
func lineWith(s, sub string) string {
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
