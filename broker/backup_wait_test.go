package broker_test

import (
	"context"
	"path/filepath"
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
