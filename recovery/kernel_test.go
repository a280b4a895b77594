package recovery_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// The kernel tests make the real kernel fail the store, where the machine
// allows it: a full file system (a small tmpfs mounted for the test, which
// needs root), and fdatasync and pwrite64 failures injected into a child
// process by strace(1) ("-e inject"). A case the machine cannot run is
// skipped with its reason, and TestKernel logs a summary:
// "kernel faults: N run, M not run (reasons)".

// kernelChildEnv makes TestKernelChild run: its value is the store
// directory; kernelJournalEnv names the file it journals to.
const (
	kernelChildEnv   = "WALBROKER_RECOVERY_KERNEL_CHILD"
	kernelJournalEnv = "WALBROKER_RECOVERY_KERNEL_JOURNAL"
	// kernelPublishes is how many publishes the child makes at most.
	kernelPublishes = 300
)

func TestKernel(t *testing.T) {
	var ran, notRun int
	var reasons []string
	run := func(name string, f func(t *testing.T) (skip string)) {
		t.Run(name, func(t *testing.T) {
			if why := f(t); why != "" {
				notRun++
				reasons = append(reasons, name+": "+why)
				t.Skip(why)
			}
			ran++
		})
	}
	run("tmpfs full", kernelTmpfsFull)
	for _, c := range []struct {
		name, syscall, inject string
		want                  error
	}{
		{"fdatasync EIO", "fdatasync", "error=EIO", syscall.EIO},
		{"pwrite64 ENOSPC", "pwrite64", "error=ENOSPC", syscall.ENOSPC},
		// A write that wrote nothing: Go reports it as io.ErrUnexpectedEOF.
		{"pwrite64 short write", "pwrite64", "retval=0", nil},
	} {
		run("strace "+c.name, func(t *testing.T) string { return kernelStrace(t, c.syscall, c.inject, c.want) })
	}
	summary := fmt.Sprintf("kernel faults: %d run, %d not run", ran, notRun)
	if notRun > 0 {
		summary += " (" + strings.Join(reasons, "; ") + ")"
	}
	if ran == 0 {
		t.Skip(summary)
	}
	t.Log(summary)
}

// kernelTmpfsFull fills a 2 MiB tmpfs until Publish fails, checks that the
// store failed as it must and lost nothing acknowledged, frees space and
// checks that the reopened store works.
func kernelTmpfsFull(t *testing.T) string {
	if os.Geteuid() != 0 {
		return "not root: cannot mount a tmpfs"
	}
	mnt, err := os.MkdirTemp("", "walbroker-tmpfs-")
	if err != nil {
		return "no temporary directory: " + err.Error()
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		_ = os.Remove(mnt)
		return strings.TrimSuffix(fmt.Sprintf("mount refused: %v: %s", err, strings.TrimSpace(string(out))), ": ")
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			_ = exec.Command("umount", "-l", mnt).Run()
		}
		_ = os.Remove(mnt)
	})
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatalf("filler: %v", err)
	}
	dir := filepath.Join(mnt, "store")
	c := newClock(t0)
	s, q := openQueue(t, dir, broker.Options{Now: c.Now, SegmentBytes: broker.MinSegmentBytes}, "orders")
	acked := map[string]string{}
	var failure error
	var failedPayload string
	for i := range 100_000 {
		p := fmt.Sprintf("full-%05d|%s", i, strings.Repeat("x", 1000))
		m, err := q.Publish(bg(), []byte(p))
		if err != nil {
			failure, failedPayload = err, p
			break
		}
		acked[m.ID] = p
	}
	if failure == nil {
		t.Fatal("100,000 publishes of 1 KiB fit in a 2 MiB tmpfs")
	}
	t.Logf("%d publishes acknowledged, then: %v", len(acked), failure)
	if !errors.Is(failure, syscall.ENOSPC) || !strings.Contains(failure.Error(), failureText) {
		t.Errorf("the failed publish returned %q: want ENOSPC, and the store saying it %s", failure, failureText)
	}
	for _, b := range checkFailStop(s, map[string]*broker.Queue{"orders": q}, nil, failureText) {
		t.Error(b)
	}
	_ = s.Close()

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	checkReopened(t, dir, c.Now().Add(checkDelay), acked, func(p string) bool { return p == failedPayload }, "a full disk, after freeing space")
	// Space was freed: the store works again, through rotations.
	s, q = openQueue(t, dir, broker.Options{Now: c.Now, SegmentBytes: broker.MinSegmentBytes}, "orders")
	defer s.Close()
	for i := range 100 {
		if _, err := q.Publish(bg(), []byte(fmt.Sprintf("again-%d|%s", i, strings.Repeat("y", 1000)))); err != nil {
			t.Fatalf("publish %d after space was freed: %v", i, err)
		}
	}
	return ""
}

// kernelStrace runs TestKernelChild under strace, which injects a failure
// into syscall, and checks the store afterwards.
func kernelStrace(t *testing.T, sys, inject string, want error) string {
	path, err := exec.LookPath("strace")
	if err != nil {
		return "no strace in PATH"
	}
	if out, err := exec.Command(path, "-f", "-qq", "-o", "/dev/null", "-e", "trace=none", "true").CombinedOutput(); err != nil {
		return fmt.Sprintf("strace cannot trace here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	seed := testSeed(t)
	// Accounting is per syscall and per thread; the n-th call of some
	// thread fails, after Open and some publishes.
	when := 10 + seed%40
	dir := filepath.Join(fastDir(t), "store")
	journal := filepath.Join(t.TempDir(), "journal")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-f", "-qq", "-o", "/dev/null", "-e", "trace="+sys,
		"-e", fmt.Sprintf("inject=%s:%s:when=%d", sys, inject, when),
		os.Args[0], "-test.run=^TestKernelChild$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), kernelChildEnv+"="+dir, kernelJournalEnv+"="+journal)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child under strace (inject %s:%s:when=%d): %v\n%s", sys, inject, when, err, out)
	}
	acked, failed, after, maybe := readKernelJournal(t, journal)
	what := fmt.Sprintf("%s %s from the %d-th call of a thread", sys, inject, when)
	switch {
	case failed == "":
		t.Logf("%s: no publish failed (%d acknowledged): the injection hit no log append", what, len(acked))
	case want != nil && !strings.Contains(failed, syscallText(want)):
		t.Errorf("%s: the publish failed with %q, want %v", what, failed, want)
	case !strings.Contains(failed, failureText):
		t.Errorf("%s: the failed publish does not say the store %s: %q", what, failureText, failed)
	case after != "fail":
		t.Errorf("%s: a publish after the failure returned %s: the store must stop", what, after)
	default:
		t.Logf("%s: %d publishes acknowledged, then %q", what, len(acked), failed)
	}
	checkReopened(t, dir, t0.Add(checkDelay), acked, func(p string) bool { return p == maybe }, what)
	return ""
}

func syscallText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// readKernelJournal reads what the child journaled: the acknowledged
// messages, the error of the publish that failed and what the next one
// did, and the payload of the failed publish (which may or may not be in
// the log).
func readKernelJournal(t *testing.T, path string) (acked map[string]string, failed, after, maybe string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the child wrote no journal: %v", err)
	}
	defer f.Close()
	acked = map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "ACK":
			id, p, _ := strings.Cut(rest, " ")
			acked[id] = p
		case "TRY":
			maybe = rest
		case "ERR":
			failed = rest
		case "AFTER":
			after = rest
		case "OPEN":
			t.Fatalf("the child could not open the store: %s", rest)
		}
	}
	return acked, failed, after, maybe
}

// TestKernelChild is the child process of the strace cases: it runs only
// when kernelChildEnv is set. It publishes until a publish fails,
// journaling each acknowledged message (one line, written before the next
// publish), then the failure, then whether one more publish failed too.
func TestKernelChild(t *testing.T) {
	dir := os.Getenv(kernelChildEnv)
	if dir == "" {
		t.Skip("the child process of TestKernel")
	}
	jf, err := os.OpenFile(os.Getenv(kernelJournalEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer jf.Close()
	s, err := broker.Open(dir, broker.Options{Now: newClock(t0).Now, SegmentBytes: broker.MinSegmentBytes})
	if err != nil {
		fmt.Fprintf(jf, "OPEN %v\n", err)
		return
	}
	defer s.Close()
	q, err := s.Queue("orders", policyOf("orders"))
	if err != nil {
		fmt.Fprintf(jf, "OPEN %v\n", err)
		return
	}
	for i := range kernelPublishes {
		p := fmt.Sprintf("kernel-%04d|%s", i, strings.Repeat("k", 200+i%700))
		fmt.Fprintf(jf, "TRY %s\n", p)
		m, err := q.Publish(bg(), []byte(p))
		if err != nil {
			fmt.Fprintf(jf, "ERR %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			_, err := q.Publish(bg(), []byte("after the failure"))
			if err != nil {
				fmt.Fprintf(jf, "AFTER fail\n")
			} else {
				fmt.Fprintf(jf, "AFTER succeeded\n")
			}
			return
		}
		fmt.Fprintf(jf, "ACK %s %s\n", m.ID, p)
	}
}
