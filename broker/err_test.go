package broker_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestErrSaysWhetherTheStoreWorks: Store.Err is nil while the store works;
// once a background fdatasync failed, with no call there to meet it, it
// reports the failure (wrapping the cause, and saying to reopen) and so
// does every call after it; after Close it wraps Closed.
func TestErrSaysWhetherTheStoreWorks(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, func(o *broker.Options) {
		o.FS, o.Sync, o.SyncInterval = ffs, broker.SyncPublish, 5*time.Millisecond
		broker.ManualMaintenance(o)
	})
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	require.NoError(t, e.s.Err())

	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"}) // every fdatasync of a segment fails
	mustReceiveOne(t, q)                                       // a lease, synced in the background
	require.Eventually(t, func() bool { return e.s.Err() != nil }, 10*time.Second, time.Millisecond,
		"Err did not report the failed background fdatasync")
	err := e.s.Err()
	require.ErrorIs(t, err, wal.ErrPoisoned)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, "reopen")
	_, perr := q.Publish(ctx(t), []byte("two"))
	require.ErrorIs(t, perr, wal.ErrPoisoned, "a call fails as Err says")
	require.ErrorContains(t, perr, err.Error())

	require.Error(t, e.s.Close())
	e.s = nil
	ffs.Clear()
	e.open()
	require.NoError(t, e.s.Err(), "the reopened store works")
	e.close()
	// Err of the closed store.
	s, err := broker.Open(e.dir, e.opts)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Err(), broker.Closed)
}
