package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walbroker/walbroker/vfs"
)

// The tests of walbench check what it computes and prints, not how fast
// the disk is: they run its workloads for a few milliseconds on tmpfs
// where the machine has one (fdatasync is free there), and assert only
// what holds whatever the timings.

// benchDir is a new directory for a test's run, on tmpfs when there is
// one, removed at the end of the test.
func benchDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "walbench-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// runResult is what one run of walbench did.
type runResult struct {
	code           int
	stdout, stderr string
}

// runWith runs walbench with args until ctx ends, with env e (nil: a
// plain one), and logs its output.
func runWith(t *testing.T, ctx context.Context, e *env, args ...string) runResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if e == nil {
		e = &env{}
	}
	if e.progress == nil {
		e.progress = newProgress(&stderr)
	}
	code := runContext(ctx, args, &stdout, &stderr, e, nil)
	t.Logf("walbench %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, &stdout, &stderr)
	return runResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// runOK runs walbench with args and fails t unless it exits with exitOK.
func runOK(t *testing.T, args ...string) runResult {
	t.Helper()
	r := runWith(t, context.Background(), nil, args...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want %d", r.code, exitOK)
	}
	return r
}

// readReport reads the report walbench wrote with -json to name.
func readReport(t *testing.T, name string) *Report {
	t.Helper()
	rep, err := readJSON(name)
	if err != nil {
		t.Fatalf("-json: %v", err)
	}
	return rep
}

// assertDirEmpty fails t when dir holds anything: walbench removes all it
// made.
func assertDirEmpty(t *testing.T, dir string) {
	t.Helper()
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		var ns []string
		for _, n := range names {
			ns = append(ns, n.Name())
		}
		t.Errorf("left behind in %s: %v", dir, ns)
	}
}

// assertDirEmptyBut fails t when dir holds anything but the files keep:
// walbench left nothing beside the -json file.
func assertDirEmptyBut(t *testing.T, dir string, keep ...string) {
	t.Helper()
	names, _ := os.ReadDir(dir)
	var ns []string
	for _, n := range names {
		if !slices.Contains(keep, n.Name()) {
			ns = append(ns, n.Name())
		}
	}
	if len(ns) != 0 {
		t.Errorf("left behind in %s: %v", dir, ns)
	}
}

// assertTablesFromJSON checks that stdout is exactly the tables made from
// the report in jsonFile: the JSON holds every figure the tables show.
func assertTablesFromJSON(t *testing.T, stdout, jsonFile string) *Report {
	t.Helper()
	rep := readReport(t, jsonFile)
	var b bytes.Buffer
	if err := printReport(&b, rep); err != nil {
		t.Fatal(err)
	}
	if b.String() != stdout {
		t.Errorf("the tables printed differ from those made from the JSON:\nprinted:\n%s\nfrom the JSON:\n%s", stdout, &b)
	}
	return rep
}

// jsonPath is a file name for -json in a new temporary directory.
func jsonPath(t *testing.T) string { return filepath.Join(t.TempDir(), "bench.json") }

// writeJSON replaces the file name with rep, whole or not at all, as a
// run's -json does.
func writeJSON(name string, rep *Report) error {
	b, err := marshalReport(rep)
	if err != nil {
		return fmt.Errorf("-json %s: %w", name, err)
	}
	if err := replaceFile(vfs.Default, name, b); err != nil {
		return fmt.Errorf("-json %s: %w", name, err)
	}
	return nil
}

// sectionOf returns what lies between doc's markers.
func sectionOf(doc []byte) (string, error) {
	s := string(doc)
	i := strings.Index(s, beginMarker+"\n")
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return "", errors.New("no generated section")
	}
	return s[i+len(beginMarker)+1 : j], nil
}
