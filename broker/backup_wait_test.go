package broker_test

import (
	"context"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// canceledOnceAsked is a context that its first Err finds live and then
// cancels: a call that checks its context on entry goes on, and finds it
// canceled at whatever it waits for next.
type canceledOnceAsked struct {
	context.Context
	cancel context.CancelFunc
	asked  atomic.Int32
}

func (c *canceledOnceAsked) Err() error {
	if c.asked.Add(1) == 1 {
		c.cancel()
		return nil
	}
	return c.Context.Err()
}

// Backup's doc: other Backups of the store wait until a Backup returns.
// One whose context ends meanwhile returns its error at once, making
// nothing, rather than wait for the other's whole copy, however long
// that takes, and then write a checkpoint for a copy nobody wants. (It
// used to wait on a plain mutex, deaf to its context.)
func TestABackupWaitingForAnotherEndsWithItsContext(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	first, release, done := holdBackup(t, e.s, ffs, copyingSegments)
	checkpoints := e.s.Stats().Checkpoints

	inner, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := &canceledOnceAsked{Context: inner, cancel: cancel}
	second := filepath.Join(t.TempDir(), "second")
	result := make(chan error, 1)
	go func() { result <- e.s.Backup(waiting, second) }()
	select {
	case err := <-result:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(20 * time.Second):
		release()
		t.Fatalf("a Backup whose context was canceled waited for the Backup before it (which returned %v), and then returned %v", <-done, <-result)
	}
	require.NoDirExists(t, second)
	require.NoDirExists(t, second+".partial")
	require.Equal(t, checkpoints, e.s.Stats().Checkpoints, "the canceled Backup wrote a checkpoint")

	release()
	require.NoError(t, <-done, "the Backup that was copying")
	b, err := broker.Open(first, e.opts)
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

// askedOnce is a context that says on a channel when a call first asks it
// for its error: the call has begun.
type askedOnce struct {
	context.Context
	once  atomic.Bool
	asked chan struct{}
}

func (c *askedOnce) Err() error {
	if c.once.CompareAndSwap(false, true) {
		close(c.asked)
	}
	return c.Context.Err()
}

// A Backup that waited for another Backup of the store, and finds the
// store closed when its turn comes, makes nothing where its copy would
// go, not even the parents of its directory, as one that found it closed
// at the start (TestABackupRefusedAtTheStartWritesNothing). It used to
// look only at the start: it made the parents, the partial copy and its
// mark, found the store closed at its checkpoint, and left the parents.
//
// The second Backup may, on a slow machine, not have passed its own
// start before Close began, and then is refused there: the test can only
// pass falsely, never fail falsely.
func TestABackupThatWaitedForAnotherMakesNothingOnceTheStoreClosed(t *testing.T) {
	e, ffs, _ := faultyBackupEnv(t)
	_, release, done := holdBackup(t, e.s, ffs, copyingSegments)
	root := t.TempDir()
	begun := &askedOnce{Context: context.Background(), asked: make(chan struct{})}
	result := make(chan error, 1)
	go func() { result <- e.s.Backup(begun, filepath.Join(root, "nightly", "second")) }()
	<-begun.asked
	closed := make(chan error, 1)
	go func() { closed <- e.s.Close() }()
	for e.s.Err() == nil { // Close has begun: every call from now on is refused
		runtime.Gosched()
	}
	release()
	require.NoError(t, <-done, "the Backup that was copying, which Close waited for")
	require.NoError(t, <-closed)
	requireErrorIs(t, <-result, broker.Closed)
	requireEmptyDir(t, root)
}
