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
