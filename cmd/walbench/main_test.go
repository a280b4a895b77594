package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// runOK runs walbench with args, logs its output and fails t unless it
// exits with exitOK. It returns what walbench wrote on stdout.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("run = %d, want %d", code, exitOK)
	}
	return stdout.String()
}

// readReport reads the report walbench wrote with -json to name.
func readReport(t *testing.T, name string) report {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("-json: %v", err)
	}
	return rep
}

// assertDirEmpty fails t with msg, formatted with the names, when dir
// holds anything.
func assertDirEmpty(t *testing.T, dir, msg string) {
	t.Helper()
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf(msg, names)
	}
}

// TestRunTwoRounds runs walbench as a user would, with two rounds of
// short windows, and checks the table and the JSON: medians over the
// rounds, and ratios within each round.
func TestRunTwoRounds(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	stdout := runOK(t,
		"-dir", dir, "-rounds", "2", "-time", "100ms", "-probe-time", "100ms", "-warmup", "10ms",
		"-appenders", "1,4", "-size", "100", "-segment-bytes", "65536", "-broker=false", "-json", jsonFile,
	)
	for _, want := range []string{"min–max", "÷ batch ceiling", "medians of 2 rounds", "filesystem"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table has no %q", want)
		}
	}
	assertDirEmpty(t, dir, "left behind in -dir: %v")

	rep := readReport(t, jsonFile)
	if rep.Rounds != 2 || len(rep.Rows) != 4 {
		t.Fatalf("-json: %d rounds, %d rows; want 2, 4", rep.Rounds, len(rep.Rows))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }
	for i, r := range rep.Rows {
		if r.Rounds != 2 || len(r.PerRound) != 2 {
			t.Fatalf("row %d (%s): rounds %d, %d per round; want 2, 2", i, r.Workload, r.Rounds, len(r.PerRound))
		}
		for k, p := range r.PerRound {
			if p.Round != k+1 || p.Workload != r.Workload {
				t.Errorf("row %d per round %d: round %d, %q; want %d, %q", i, k, p.Round, p.Workload, k+1, r.Workload)
			}
		}
		if want := (r.PerRound[0].FdatasyncsPerSec + r.PerRound[1].FdatasyncsPerSec) / 2; !near(r.FdatasyncsPerSec, want) {
			t.Errorf("%s: fdatasyncs/s %v, want the median of the rounds %v", r.Workload, r.FdatasyncsPerSec, want)
		}
		if r.Kind != kindWAL {
			continue
		}
		var ratios []float64
		for k, p := range r.PerRound {
			// The ratio is to the raw overwrite probe of the same round.
			overwrite := rep.Rows[0].PerRound[k].FdatasyncsPerSec
			if p.VsRawOverwrite == nil || !near(*p.VsRawOverwrite, *p.AppendsPerSec/overwrite) {
				t.Errorf("%s round %d: ÷ raw overwrite %v, want %v / %v", r.Workload, k+1, p.VsRawOverwrite, *p.AppendsPerSec, overwrite)
			}
			if p.BatchCeilingPerSec == nil || p.VsBatchCeiling == nil || !near(*p.VsBatchCeiling, *p.AppendsPerSec / *p.BatchCeilingPerSec) {
				t.Errorf("%s round %d: batch ceiling %v, ÷ %v; want both, consistent", r.Workload, k+1, p.BatchCeilingPerSec, p.VsBatchCeiling)
			}
			if p.VsRawOverwrite != nil {
				ratios = append(ratios, *p.VsRawOverwrite)
			}
		}
		if len(ratios) == 2 {
			if !near(*r.VsRawOverwrite, (ratios[0]+ratios[1])/2) ||
				!near(*r.VsRawOverwriteMin, math.Min(ratios[0], ratios[1])) ||
				!near(*r.VsRawOverwriteMax, math.Max(ratios[0], ratios[1])) {
				t.Errorf("%s: ÷ raw overwrite %v (%v–%v); the rounds' are %v", r.Workload,
					*r.VsRawOverwrite, *r.VsRawOverwriteMin, *r.VsRawOverwriteMax, ratios)
			}
		}
	}
}

// TestMeasureFailsInRound2 fails every record write of the second round's
// log: the first round's rows stay, the second round's probes too, and the
// error says what failed.
func TestMeasureFailsInRound2(t *testing.T) {
	errDisk := errors.New("injected write error")
	var (
		mu       sync.Mutex
		firstLog string
	)
	// The first log to write a record is round 1's; fail every record
	// write to any other.
	fs := &recordFS{FS: vfs.Default, onRecordWrite: func(name string) error {
		mu.Lock()
		defer mu.Unlock()
		if firstLog == "" {
			firstLog = filepath.Dir(name)
		}
		if filepath.Dir(name) != firstLog {
			return errDisk
		}
		return nil
	}}
	cfg := config{
		duration:     100 * time.Millisecond,
		probeTime:    50 * time.Millisecond,
		appenders:    []int{2},
		recordBytes:  100,
		sync:         wal.SyncAlways,
		segmentBytes: 64 << 10,
		rounds:       2,
		fs:           fs,
	}
	rep, err := measure(context.Background(), io.Discard, t.TempDir(), cfg)
	if !errors.Is(err, errDisk) {
		t.Fatalf("measure = %v; want an error wrapping %v", err, errDisk)
	}
	t.Logf("measure: %v", err)
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3 (two raw probes, one workload)", len(rep.Rows))
	}
	for i, want := range []int{2, 2, 1} {
		if got := rep.Rows[i].Rounds; got != want {
			t.Errorf("%s: %d rounds, want %d", rep.Rows[i].Workload, got, want)
		}
	}
	if w := rep.Rows[2]; w.BatchCeilingPerSec == nil || w.VsRawOverwrite == nil {
		t.Errorf("round 1's workload lost its ratios: %+v", w)
	}
}
