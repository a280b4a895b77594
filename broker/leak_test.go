package broker_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/leakcheck"
	"github.com/walbroker/walbroker/vfs"
)

// requireReleased fails t unless the store in each dir, closed, left
// nothing behind: no descriptor or mapping of its files, no goroutine
// started since before.
func requireReleased(t *testing.T, before leakcheck.Goroutines, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		require.NoError(t, leakcheck.Check(before, dir))
	}
}

// leakWorkload runs through a store what a long-lived program does: two
// queues, publishes (single, keyed, batched), receives, acks, nacks and
// dead letters, a Consume, rotations, reclamation and checkpoints in the
// background, and a Backup into backup.
func leakWorkload(t *testing.T, s *broker.Store, backup string) {
	t.Helper()
	c := t.Context()
	qs := make([]*broker.Queue, 2)
	for i := range qs {
		q, err := s.Queue(fmt.Sprintf("q%d", i), leakPolicy)
		require.NoError(t, err)
		qs[i] = q
	}
	payload := make([]byte, 512)
	for i := range 400 {
		q := qs[i%2]
		_, err := q.Publish(c, payload)
		require.NoError(t, err)
		_, err = q.PublishKeyed(c, fmt.Sprint("k", i%50), payload)
		require.NoError(t, err)
		if i%40 == 0 {
			_, err = q.PublishBatch(c, [][]byte{payload, payload, payload})
			require.NoError(t, err)
		}
	}
	ds, err := qs[0].Receive(c, 20)
	require.NoError(t, err)
	require.Len(t, ds, 20)
	for i, d := range ds {
		switch i % 3 {
		case 0:
			require.NoError(t, qs[0].Ack(c, d.Lease.Receipt))
		case 1:
			_, err := qs[0].Nack(c, d.Lease.Receipt, nil)
			require.NoError(t, err)
		default:
			require.NoError(t, qs[0].Reject(c, d.Lease.Receipt, nil))
		}
	}
	require.NoError(t, s.Backup(c, backup))

	// Consume the other queue until it has handled 200 of its 225.
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(c)
	err = broker.Consume(cctx, qs[1], func(context.Context, broker.DeliveryValue) error {
		if handled.Add(1) == 200 {
			cancel()
		}
		return nil
	}, broker.ConsumeOptions{Batch: 16, Concurrency: 8})
	require.ErrorIs(t, err, context.Canceled)
	require.GreaterOrEqual(t, handled.Load(), int64(200))
	require.Greater(t, s.Stats().Segments, 2, "the workload rotated the log")
}

func TestCloseReleasesEverything(t *testing.T) {
	for _, sync := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		t.Run(sync.String(), func(t *testing.T) {
			before := leakcheck.Running()
			dir := t.TempDir()
			backup := filepath.Join(t.TempDir(), "backup")
			s, err := broker.Open(dir, broker.Options{Sync: sync, SegmentBytes: broker.MinSegmentBytes * 4})
			require.NoError(t, err)
			leakWorkload(t, s, backup)
			require.NoError(t, s.Close())
			requireReleased(t, before, dir, backup)

			// And again once reopened: its replay or checkpoint load
			// leaves nothing either.
			s, err = broker.Open(dir, broker.Options{Sync: sync, SegmentBytes: broker.MinSegmentBytes * 4})
			require.NoError(t, err)
			require.NotEmpty(t, s.Queues())
			require.NoError(t, s.Close())
			requireReleased(t, before, dir)
		})
	}
}

// TestAFailedOpenReleasesEverything fails the file operations an Open
// makes (of its log, its index files, its checkpoint): each call alone,
// and each call with every later one of its kind. An Open that returns an
// error must leave nothing behind, whichever step failed; one that
// succeeds must close clean. Both a new store and the reopen of a used one.
func TestAFailedOpenReleasesEverything(t *testing.T) {
	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes * 4}
	used := t.TempDir()
	s, err := broker.Open(used, opts)
	require.NoError(t, err)
	leakWorkload(t, s, filepath.Join(t.TempDir(), "backup"))
	require.NoError(t, s.Close())

	for _, tc := range []struct{ name, src string }{{"new", ""}, {"used", used}} {
		t.Run(tc.name, func(t *testing.T) {
			// Each run opens a copy of src (or a new directory).
			store := func() string {
				d := filepath.Join(t.TempDir(), "store")
				if tc.src != "" {
					copyTree(t, tc.src, d)
				}
				return d
			}
			counting := vfs.NewFaultFS(vfs.Default)
			opts.FS = counting
			s, err := broker.Open(store(), opts)
			require.NoError(t, err)
			require.NoError(t, s.Close())

			refused, err := leakcheck.FailedOpens(counting, func(fs vfs.FS) (string, io.Closer, error) {
				d := store()
				opts.FS = fs
				s, err := broker.Open(d, opts)
				return d, s, err
			})
			require.NoError(t, err)
			require.Positive(t, refused, "no injected failure refused the Open")
		})
	}
}

func TestALockedOpenReleasesEverything(t *testing.T) {
	before := leakcheck.Running()
	dir := t.TempDir()
	s, err := broker.Open(dir, broker.Options{})
	require.NoError(t, err)
	for range 3 {
		_, err := broker.Open(dir, broker.Options{})
		require.Error(t, err)
		require.Contains(t, err.Error(), "locked")
	}
	require.NoError(t, s.Close())
	requireReleased(t, before, dir)
}

func TestAFailedStoreClosesClean(t *testing.T) {
	before := leakcheck.Running()
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	s, err := broker.Open(dir, broker.Options{FS: fs, SegmentBytes: broker.MinSegmentBytes * 4})
	require.NoError(t, err)
	q, err := s.Queue("q", leakPolicy)
	require.NoError(t, err)
	_, err = q.Publish(t.Context(), []byte("kept"))
	require.NoError(t, err)
	fs.Inject(vfs.Rule{Op: vfs.OpSync, Err: syscall.EIO})
	_, err = q.Publish(t.Context(), []byte("lost"))
	require.ErrorIs(t, err, syscall.EIO)
	require.Error(t, s.Close(), "Close reports the failure")
	requireReleased(t, before, dir)
}

// leakPolicy fits the small segments of these tests.
var leakPolicy = broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, MaxMessageBytes: 4 << 10}
