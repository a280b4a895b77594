package boltq

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Open makes durable the names it creates, as Pebble does for pebbleq: the
// database file's in its directory, and each directory it made in its
// parent (bbolt syncs only the file). Without them, a power loss after the
// first Open and an acknowledged Publish could take the file's entry, and
// the message with it, though package compare promises that a call that
// returns nil has reached the device.
//
// The test runs Open + Publish + Close in a child process under strace
// and looks for an fsync of the directory holding queue.bolt and of the
// parent in which Open created that directory; it skips without strace.
func TestOpenSyncsTheNamesItCreates(t *testing.T) {
	if dir := os.Getenv("BOLTQ_TEST_CHILD_DIR"); dir != "" {
		q, err := Open(dir, Options{MaxBatchDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Publish(context.Background(), []byte("m")); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed: the test reads which files Open fsyncs from its trace, and nothing else shows a directory fsync")
	}
	parent, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "q")
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-y", "-e", "trace=fsync,fdatasync", "-o", trace,
		os.Args[0], "-test.run=^TestOpenSyncsTheNamesItCreates$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BOLTQ_TEST_CHILD_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child under strace: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	synced := func(path string) bool {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "sync(") && strings.Contains(line, "<"+path+">") {
				return true
			}
		}
		return false
	}
	if !strings.Contains(string(b), "<"+filepath.Join(dir, FileName)+">") {
		t.Fatalf("the trace shows no sync of %s at all: the trace is not what this test expects:\n%s", FileName, b)
	}
	if !synced(dir) {
		t.Errorf("Open created %s in %s and a Publish returned nil, but %s was never fsynced: a power loss can take the file, and the acknowledged message, with it", FileName, dir, dir)
	}
	if !synced(parent) {
		t.Errorf("Open created directory %s, but its parent %s was never fsynced", dir, parent)
	}
}
