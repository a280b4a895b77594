package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestAReopenWhereThePageCacheCannotBeEmptiedIsTimedWarmAndSaysSo: where
// the system lets no process evict files from the page cache (macOS), the
// reopen workload still measures, but its report and table say that the
// opens were warm; any other failure to evict still fails the run.
func TestAReopenWhereThePageCacheCannotBeEmptiedIsTimedWarmAndSaysSo(t *testing.T) {
	defer func(f func(string) error) { evictPageCache = f }(evictPageCache)
	evictPageCache = func(dir string) error {
		return fmt.Errorf("evict %s: %w", dir, errors.ErrUnsupported)
	}
	args := []string{"reopen", "-messages", "300", "-size", "100", "-segment-bytes", "64KiB", "-rounds", "2"}
	jsonFile := jsonPath(t)
	res := runOK(t, append(args, "-dir", benchDir(t), "-json", jsonFile)...)
	r := readReport(t, jsonFile).Reopen
	if r == nil || !r.Warm || len(r.PerRound) != 2 || !r.PerRound[0].Warm || r.CheckpointOpenNs == nil || r.RebuildOpenNs == nil {
		t.Fatalf("reopen: %+v; want both rounds measured, and warm", r)
	}
	if len(r.Notes) != 0 {
		t.Errorf("notes %q: a warm open is no fault of the store's", r.Notes)
	}
	if !strings.Contains(res.stdout, "Reopen: a store with a backlog, warm") || !strings.Contains(res.stdout, "still in the page cache") {
		t.Errorf("the table does not say the opens were warm:\n%s", res.stdout)
	}

	evictPageCache = func(dir string) error { return fmt.Errorf("evict %s: %w", dir, syscall.EIO) }
	if r := runWith(t, context.Background(), nil, append(args, "-dir", benchDir(t))...); r.code != exitError || !strings.Contains(r.stderr, "input/output error") {
		t.Errorf("an eviction that failed: exit %d, stderr %q; want %d and the cause", r.code, r.stderr, exitError)
	}
}

// TestAReopenOfFewerMessagesThanOpensIsMeasured: each open of the reopen
// workload hands back the message it received, so that the next open
// finds the store as the fill left it, every message ready: however few
// messages -messages asks for (at least 1, as the flags allow), every
// round measures both opens, and the store's counters raise no note.
func TestAReopenOfFewerMessagesThanOpensIsMeasured(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		rounds int
	}{
		{[]string{"reopen", "-messages", "1", "-size", "16", "-segment-bytes", "1MiB"}, 1},
		{[]string{"reopen", "-messages", "3", "-size", "16", "-segment-bytes", "1MiB", "-rounds", "3"}, 3},
	} {
		jsonFile := jsonPath(t)
		res := runWith(t, context.Background(), nil, append(tc.args, "-dir", benchDir(t), "-json", jsonFile)...)
		if res.code != exitOK {
			t.Errorf("walbench %q: exit %d, stderr %q; want every round measured", tc.args, res.code, res.stderr)
			continue
		}
		r := readReport(t, jsonFile).Reopen
		if r == nil || r.Rounds != tc.rounds || r.CheckpointOpenNs == nil || r.RebuildOpenNs == nil {
			t.Errorf("walbench %q: reopen %+v; want both opens of each of %d rounds measured", tc.args, r, tc.rounds)
			continue
		}
		if len(r.Notes) != 0 {
			t.Errorf("walbench %q: notes %q; want every open to find every message ready but the one it received", tc.args, r.Notes)
		}
	}
}
