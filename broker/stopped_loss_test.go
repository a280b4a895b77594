package broker_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/vfs"
)

// Store.Err's doc: it returns "the failure that stopped it for good (a
// write or fdatasync failed, ...)", and "a failure no call waited for
// (the background fdatasync of SyncPublish and SyncNone) stops the store
// as soon as the log reports it". A store a failed rotation stopped lost
// nothing, and its error says so; but its log still syncs what it wrote
// before the stop, in the background, and when that fdatasync fails the
// events written (here, leases) may be lost. Err, and every call, must
// then say so, not only that a rotation stopped the store.
func TestAStoppedStoresErrReportsALaterLossOfItsLog(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	rfs := &failingRotationFS{FS: ffs, err: syscall.ENOSPC}
	clock := brokertest.NewClock(t0)
	opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: rfs,
		Sync: broker.SyncPublish, SyncInterval: time.Second}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 2048})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = q.Publish(ctx, []byte("payload"))
	require.NoError(t, err)
	// Batches until one does not fit what is left of the segment: its
	// rotation fails, and the log stops.
	rfs.armed.Store(true)
	big := make([][]byte, 4)
	for i := range big {
		big[i] = make([]byte, 1000)
	}
	for !rfs.fired.Load() {
		// A lease, written and not synced: the batch's fdatasync would
		// cover it, but the batch that stops the log makes none.
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		if _, err := q.PublishBatch(ctx, big); err != nil {
			break
		}
	}
	require.True(t, rfs.fired.Load(), "a rotation was attempted")
	stopped := s.Err()
	require.Error(t, stopped)

	// The stopped log's background fdatasync fails: the leases may be lost.
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.Err().Error(), "may be lost") {
		if time.Now().After(deadline) {
			if ffs.Injected(vfs.OpSync) == 0 {
				t.Fatal("no background fdatasync of the stopped log in 20 s")
			}
			t.Fatalf("the stopped store's log failed an fdatasync of events it had written (leases), yet Err still reports only the rotation's stop: %v", s.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.ErrorIs(t, s.Err(), syscall.EIO)
	_, err = q.Publish(ctx, []byte("after"))
	require.ErrorContains(t, err, "may be lost", "a call after the loss")
}
