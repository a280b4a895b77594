package recovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Roles of the lock test's children.
const (
	// roleHold opens the store, publishes one message, writes "HOLDING
	// <id>" and holds the store until it is killed.
	roleHold = "hold"
	// roleTryOpen tries to open the store once and writes LOCKED, OPENED
	// or ERROR, then ends.
	roleTryOpen = "try-open"
)

var lockPolicy = broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}

func runHold(cfg ChildConfig) error {
	WatchParent(cfg.ParentPID)
	s, err := broker.Open(cfg.Dir, broker.Options{})
	if err != nil {
		return err
	}
	q, err := s.Queue("held", lockPolicy)
	if err != nil {
		return err
	}
	m, err := q.Publish(context.Background(), []byte("published by the holder"))
	if err != nil {
		return err
	}
	fmt.Printf("%s%s\n", LineHolding, m.ID)
	for {
		time.Sleep(time.Hour) // until the parent's SIGKILL
	}
}

func runTryOpen(cfg ChildConfig) error {
	WatchParent(cfg.ParentPID)
	s, err := broker.Open(cfg.Dir, broker.Options{})
	switch {
	case errors.Is(err, broker.Locked):
		fmt.Printf("LOCKED %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	case err != nil:
		fmt.Printf("ERROR %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	default:
		fmt.Println("OPENED")
		return s.Close()
	}
	return nil
}

// startRole starts a lock-test child and returns it once it wrote a line
// starting with want, with the rest of that line.
func startRole(t *testing.T, role, dir, want string) (*exec.Cmd, <-chan string, string) {
	t.Helper()
	cmd, lines, stderr, err := StartChild(os.Args[0], childArgs, ChildConfig{Role: role, Dir: dir, ParentPID: os.Getpid()})
	require.NoError(t, err)
	t.Cleanup(func() { Kill(cmd, lines) })
	var other []string
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("child %s ended before writing %q; it wrote %q\nstderr:\n%s", role, want, other, stderr)
			}
			if rest, found := strings.CutPrefix(line, want); found {
				return cmd, lines, rest
			}
			other = append(other, line)
		case <-timeout:
			t.Fatalf("child %s wrote no %q within a minute; it wrote %q\nstderr:\n%s", role, want, other, stderr)
		}
	}
}

// tryOpenInChild reports what a second process gets from Open.
func tryOpenInChild(t *testing.T, dir string) string {
	t.Helper()
	cmd, lines, stderr, err := StartChild(os.Args[0], childArgs, ChildConfig{Role: roleTryOpen, Dir: dir, ParentPID: os.Getpid()})
	require.NoError(t, err)
	var out []string
	for line := range lines {
		out = append(out, line)
	}
	require.NoError(t, cmd.Wait(), "stderr:\n%s", stderr)
	for _, l := range out {
		for _, verdict := range []string{"LOCKED", "OPENED", "ERROR"} {
			if strings.HasPrefix(l, verdict) {
				return l
			}
		}
	}
	t.Fatalf("the child wrote no verdict: %q\nstderr:\n%s", out, stderr)
	return ""
}

func TestSecondOpenInSameProcessIsLocked(t *testing.T) {
	dir := filepath.Join(fastDir(t), "store")
	s, err := broker.Open(dir, broker.Options{})
	require.NoError(t, err)

	_, err = broker.Open(dir, broker.Options{})
	require.ErrorIs(t, err, broker.Locked)
	require.Contains(t, err.Error(), dir, "the error names the directory")

	// Another spelling of the same directory is the same lock.
	link := dir + "-link"
	require.NoError(t, os.Symlink(dir, link))
	_, err = broker.Open(link, broker.Options{})
	require.ErrorIs(t, err, broker.Locked, "through a symbolic link")
	_, err = broker.Open(dir+"/.", broker.Options{})
	require.ErrorIs(t, err, broker.Locked, "through dir/.")

	require.NoError(t, s.Close())
	s, err = broker.Open(link, broker.Options{})
	require.NoError(t, err, "Close released the lock")
	require.NoError(t, s.Close())
}

func TestOpenIsLockedAcrossProcessesUntilTheHolderDies(t *testing.T) {
	dir := filepath.Join(fastDir(t), "store")
	holder, holderLines, id := startRole(t, roleHold, dir, LineHolding)

	_, err := broker.Open(dir, broker.Options{})
	require.ErrorIs(t, err, broker.Locked, "a live holder in another process")
	require.Contains(t, err.Error(), dir)
	require.True(t, strings.HasPrefix(tryOpenInChild(t, dir), "LOCKED"), "a third process is refused too")

	Kill(holder, holderLines) // SIGKILL: the lock dies with its process
	s, err := broker.Open(dir, broker.Options{})
	require.NoError(t, err, "the killed holder's lock is gone")
	q, err := s.Queue("held", lockPolicy)
	require.NoError(t, err)
	ds, err := q.Receive(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the holder's publish survived its kill")
	require.Equal(t, id, ds[0].Message.ID)
	require.Equal(t, "published by the holder", string(ds[0].Message.Payload))

	verdict := tryOpenInChild(t, dir)
	require.True(t, strings.HasPrefix(verdict, "LOCKED"), "this process holds it now: %s", verdict)
	require.NoError(t, s.Close())
	require.Equal(t, "OPENED", tryOpenInChild(t, dir), "released at Close")
}
