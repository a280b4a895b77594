package compare_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// syncedCalls is how many calls of each kind the child process of
// TestPublishReceiveAndAckFdatasyncBeforeTheyReturn makes.
const syncedCalls = 10

// Package compare promises of both queues that "every call that returns
// nil has reached the device": compare.Queue's Publish, PublishBatch,
// Receive and Ack each return once their write is on the device. Nothing
// but the system calls shows it; a queue that never synced would pass
// every other test.
//
// The test runs each queue in a child process under strace and makes
// syncedCalls sequential Publish calls, as many PublishBatch calls of two
// messages, then as many Receive(1) and Acks of one ID, marking the start and the end of each call with a chdir to
// a path that does not exist; between the two marks of every call the
// trace must show a completed fsync or fdatasync. It skips without
// strace.
func TestPublishReceiveAndAckFdatasyncBeforeTheyReturn(t *testing.T) {
	if child := os.Getenv("COMPARE_TEST_SYNC_CHILD"); child != "" {
		name, dir, _ := strings.Cut(child, ":")
		runSyncedCalls(t, name, dir)
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed: the test reads when the queues fdatasync from its trace")
	}
	for _, qt := range queues {
		t.Run(qt.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			trace := filepath.Join(t.TempDir(), "trace")
			cmd := exec.Command(strace, "-f", "-e", "trace=fsync,fdatasync,chdir", "-o", trace,
				os.Args[0], "-test.run=^TestPublishReceiveAndAckFdatasyncBeforeTheyReturn$", "-test.count=1")
			cmd.Env = append(os.Environ(), "COMPARE_TEST_SYNC_CHILD="+qt.name+":"+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child under strace: %v\n%s", err, out)
			}
			b, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			checkSyncedCalls(t, string(b), dir)
		})
	}
}

// runSyncedCalls is the child's part: it opens queue name in dir and makes
// the marked calls.
func runSyncedCalls(t *testing.T, name, dir string) {
	var open opener
	for _, qt := range queues {
		if qt.name == name {
			open = qt.open
		}
	}
	if open == nil {
		t.Fatalf("no queue named %q", name)
	}
	q := open(t, dir, newClock())
	defer mustClose(t, q)
	ctx := context.Background()
	call := func(what string, i int, fn func() error) {
		t.Helper()
		mark(dir, what, i, "start")
		if err := fn(); err != nil {
			t.Fatalf("%s %d: %v", what, i, err)
		}
		mark(dir, what, i, "end")
	}
	for i := range syncedCalls {
		call("Publish", i, func() error { _, err := q.Publish(ctx, []byte("m")); return err })
	}
	for i := range syncedCalls {
		call("PublishBatch", i, func() error {
			ids, err := q.PublishBatch(ctx, [][]byte{[]byte("b1"), []byte("b2")})
			if err == nil && len(ids) != 2 {
				err = fmt.Errorf("PublishBatch of 2 returned %d IDs", len(ids))
			}
			return err
		})
	}
	var held []uint64
	for i := range syncedCalls {
		call("Receive", i, func() error {
			msgs, err := q.Receive(ctx, 1)
			if err == nil && len(msgs) != 1 {
				err = fmt.Errorf("received %d messages, want 1", len(msgs))
			}
			for _, m := range msgs {
				held = append(held, m.ID)
			}
			return err
		})
	}
	for i := range syncedCalls {
		call("Ack", i, func() error { return q.Ack(ctx, held[i:i+1]) })
	}
}

// mark leaves "what i when" in the trace: a chdir to a path under dir that
// does not exist, and fails without changing anything.
func mark(dir, what string, i int, when string) {
	_ = syscall.Chdir(filepath.Join(dir, "marks", fmt.Sprintf("%s-%d-%s", what, i, when)))
}

// checkSyncedCalls reads the trace of runSyncedCalls and fails the test
// for each call between whose marks no fsync or fdatasync completed.
func checkSyncedCalls(t *testing.T, trace, dir string) {
	t.Helper()
	prefix := filepath.Join(dir, "marks") + "/"
	var open string // the call whose start mark was the last mark seen
	synced, calls := 0, 0
	for _, line := range strings.Split(trace, "\n") {
		if i := strings.Index(line, `chdir("`+prefix); i >= 0 {
			m := line[i+len(`chdir("`+prefix):]
			m = m[:strings.IndexByte(m, '"')]
			switch {
			case strings.HasSuffix(m, "-start"):
				open, synced = strings.TrimSuffix(m, "-start"), 0
			case open != "" && m == open+"-end":
				if synced == 0 {
					t.Errorf("%s returned nil without a completed fsync or fdatasync since it was called: its write need not be on the device", open)
				}
				open, calls = "", calls+1
			}
			continue
		}
		// A completed call is one line, or the "resumed" line of one that
		// another thread's call interrupted in the trace.
		if (strings.Contains(line, "sync(") && !strings.Contains(line, "<unfinished")) ||
			strings.Contains(line, "sync resumed>") {
			synced++
		}
	}
	if calls != 4*syncedCalls {
		t.Fatalf("the trace marks %d calls, want %d: it is not what this test expects:\n%s", calls, 4*syncedCalls, trace)
	}
}
