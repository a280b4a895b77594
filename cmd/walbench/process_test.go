package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Signals and a broken stdout act on the whole process: the tests of this
// file run walbench as its own process, the test binary started again
// with asMainEnv set, which makes it run main instead of the tests.

const asMainEnv = "WALBENCH_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main() // exits
	}
	os.Exit(m.Run())
}

// walbenchProcess is walbench with args, as a process of its own, its
// stderr kept in the returned buffer.
func walbenchProcess(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// exitCode is how cmd ended: its exit code, or -1 when a signal killed it.
func exitCode(t *testing.T, cmd *exec.Cmd, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run walbench: %v", err)
	}
	return cmd.ProcessState.ExitCode()
}

// publishArgs is a publish workload of one producer, probe-less, under
// dir, writing -json to jsonFile, for window.
func publishArgs(dir, jsonFile, window string) []string {
	return []string{"publish", "-dir", dir, "-json", jsonFile, "-producers", "1", "-time", window,
		"-probe-time", "0", "-warmup", "0", "-size", "100", "-segment-bytes", "64KiB"}
}

// TestBrokenStdout: walbench ... -json FILE | head: the reader is gone
// before the tables are printed. The run is not killed by SIGPIPE: it
// writes its report, removes its directory, says on stderr that the
// tables could not be printed, and exits 1.
func TestBrokenStdout(t *testing.T) {
	dir, jsonFile := benchDir(t), jsonPath(t)
	cmd, stderr := walbenchProcess(t, publishArgs(dir, jsonFile, "20ms")...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // no reader: every write to the pipe fails
	cmd.Stdout = w
	err = cmd.Run()
	w.Close()
	if code := exitCode(t, cmd, err); code != exitError || !strings.Contains(stderr.String(), "walbench: print the tables: ") ||
		!strings.Contains(stderr.String(), syscall.EPIPE.Error()) {
		t.Errorf("exit %d (%v), stderr %q; want %d and the broken pipe named", code, cmd.ProcessState, stderr, exitError)
	}
	if rep := readReport(t, jsonFile); len(rep.Rows) != 1 {
		t.Errorf("the report has %d rows, want 1", len(rep.Rows))
	}
	assertDirEmpty(t, dir)
}

// TestStdoutFails is TestBrokenStdout in the process of the test: a
// stdout whose writes fail.
func TestStdoutFails(t *testing.T) {
	dir, jsonFile := benchDir(t), jsonPath(t)
	var stderr bytes.Buffer
	code := runContext(context.Background(), publishArgs(dir, jsonFile, "20ms"), failingWriter{syscall.EPIPE}, &stderr,
		&env{progress: newProgress(&stderr)}, nil)
	if code != exitError || !strings.Contains(stderr.String(), "walbench: print the tables: "+syscall.EPIPE.Error()) {
		t.Errorf("exit %d, stderr %q; want %d and the failure", code, stderr.String(), exitError)
	}
	readReport(t, jsonFile)
	assertDirEmpty(t, dir)
}

// TestStdoutFailsProfileWritten: a stdout whose writes fail fails only the
// tables: the measuring did not fail, so -cpuprofile is written, as the
// report is.
func TestStdoutFailsProfileWritten(t *testing.T) {
	dir, jsonFile := benchDir(t), jsonPath(t)
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	var stderr bytes.Buffer
	code := runContext(context.Background(), []string{"probe", "-time", "10ms", "-dir", dir, "-json", jsonFile, "-cpuprofile", prof},
		failingWriter{syscall.EPIPE}, &stderr, &env{progress: newProgress(&stderr)}, nil)
	if code != exitError {
		t.Errorf("exit %d, want %d for the tables not printed; stderr:\n%s", code, exitError, &stderr)
	}
	readReport(t, jsonFile)
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("-cpuprofile %s: %d bytes, %v; want the profile written, only the tables failed; stderr:\n%s", prof, len(b), err, &stderr)
	}
	assertDirEmpty(t, dir)
}

// failingWriter fails every write with its error.
type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// TestStoppedBySignal: a run stopped by SIGTERM or SIGHUP (the context's
// cause as run sets it) says which signal stopped it, on stderr, in the
// tables and in the JSON, and exits with 128 + its number.
func TestStoppedBySignal(t *testing.T) {
	for _, tc := range []struct {
		sig      syscall.Signal
		code     int
		name, by string
	}{
		{syscall.SIGTERM, 143, "SIGTERM", "by SIGTERM"},
		{syscall.SIGHUP, 129, "SIGHUP", "by SIGHUP"},
		{syscall.SIGINT, 130, "SIGINT", "by Ctrl-C"},
	} {
		// Before anything is measured.
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(interruption{tc.sig})
		res := runWith(t, ctx, nil, publishArgs(benchDir(t), jsonPath(t), "20ms")...)
		if res.code != tc.code || !strings.Contains(res.stderr, "walbench: interrupted "+tc.by+" before anything was measured") {
			t.Errorf("%s before the run: exit %d, stderr %q; want %d and the signal named", tc.name, res.code, res.stderr, tc.code)
		}

		// After the probe.
		ctx, cancel = context.WithCancelCause(context.Background())
		e := &env{afterStep: func(string) { cancel(interruption{tc.sig}) }}
		dir, jsonFile := benchDir(t), jsonPath(t)
		res = runWith(t, ctx, e, "probe", "-time", "10ms", "-dir", dir, "-json", jsonFile, "-rounds", "2")
		if res.code != tc.code || !strings.Contains(res.stderr, "walbench: interrupted "+tc.by+"; the tables have") {
			t.Errorf("%s after the probe: exit %d, stderr %q; want %d and the signal named", tc.name, res.code, res.stderr, tc.code)
		}
		rep := assertTablesFromJSON(t, res.stdout, jsonFile)
		if !rep.Interrupted || rep.InterruptedBy != tc.name || !strings.Contains(res.stdout, "\ninterrupted            "+tc.by+": ") {
			t.Errorf("%s after the probe: interrupted %v by %q; want it named in the JSON and the tables", tc.name, rep.Interrupted, rep.InterruptedBy)
		}
		assertDirEmpty(t, dir)
	}
}

// TestSignals sends SIGTERM and SIGHUP to walbench in an hour-long
// publish window: each stops the run, which exits with 128 + the signal's
// number, names the signal, and removes its directory.
func TestSignals(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, 143}, {syscall.SIGHUP, 129}} {
		dir, jsonFile := benchDir(t), jsonPath(t)
		cmd, stderr := walbenchProcess(t, publishArgs(dir, jsonFile, "1h")...)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// The temporary directory is made after the signals are caught.
		waitForGlob(t, filepath.Join(dir, "walbench-*"), exited)
		if err := cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		err := <-exited
		name := signalName(tc.sig)
		if code := exitCode(t, cmd, err); code != tc.code || !strings.Contains(stderr.String(), "walbench: "+name+": stopping the current measurement") ||
			!strings.Contains(stderr.String(), "walbench: interrupted by "+name) {
			t.Errorf("%s: exit %d (%v), stderr %q; want %d and the signal named", name, code, cmd.ProcessState, stderr, tc.code)
		}
		assertDirEmpty(t, dir)
		if stdout.Len() > 0 {
			if rep := readReport(t, jsonFile); !rep.Interrupted || rep.InterruptedBy != name {
				t.Errorf("%s: the report says interrupted %v by %q", name, rep.Interrupted, rep.InterruptedBy)
			}
		}
	}
}

// waitForGlob waits until pattern names a file. It fails t if the process
// whose end exited reports ends first, or after a minute, which only a
// broken run takes.
func waitForGlob(t *testing.T, pattern string, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("walbench exited (%v) before %s appeared", err, pattern)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear in a minute", pattern)
		}
	}
}

// TestASignalDeliveredTwiceStopsOnce: timeout(1), and kill to a process
// group, deliver one SIGINT to walbench twice, the second just after the
// first was taken. That is one request to stop, not a second Ctrl-C: the
// run stops its measurement, prints what it measured and removes its
// directory, as for one signal. The second goes as soon as walbench says
// it took the first; a machine too loaded to send it within 50ms of that
// cannot tell the two apart, and the attempt is made again.
func TestASignalDeliveredTwiceStopsOnce(t *testing.T) {
	for attempt := 1; ; attempt++ {
		late, text, code, dir := signalTwice(t)
		if late && attempt < 5 {
			t.Logf("attempt %d: the second signal went late; again", attempt)
			continue
		}
		if code != 130 || strings.Contains(text, "quitting") || !strings.Contains(text, "walbench: interrupted by Ctrl-C") {
			t.Errorf("exit %d, stderr %q; want 130, the run stopped and not quit", code, text)
		}
		assertDirEmpty(t, dir)
		return
	}
}

// signalTwice runs a publish workload, sends it SIGINT, and SIGINT again
// as soon as its stderr says it took the first. late says whether that
// took more than 50ms.
func signalTwice(t *testing.T) (late bool, stderr string, code int, dir string) {
	t.Helper()
	dir = benchDir(t)
	cmd, _ := walbenchProcess(t, publishArgs(dir, jsonPath(t), "1h")...)
	cmd.Stderr = nil
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64 // when the first signal went, in UnixNano
	text := make(chan string, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "stopping the current measurement") {
				_ = cmd.Process.Signal(syscall.SIGINT)
				late = time.Since(time.Unix(0, sent.Load())) > 50*time.Millisecond
			}
		}
		text <- all.String()
	}()
	waitForGlob(t, filepath.Join(dir, "walbench-*"), nil)
	sent.Store(time.Now().UnixNano())
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	stderr = <-text
	return late, stderr, exitCode(t, cmd, cmd.Wait()), dir
}
