package broker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/vfs"
)

// The operator's day: a producer and a consumer run, and the disk fills.
// The store goes on in the segment it prepared ahead (writes there need no
// new space), stops with an error wrapping ENOSPC when it needs the next
// one, and once space is freed and it is reopened, it holds every message
// whose Publish returned nil and whose Ack did not, each once, and none
// whose Ack returned nil. Published counts exactly the publishes that
// returned nil.
func TestADiskThatFillsUnderTrafficStopsTheStoreAndTheReopenedOneLosesNothing(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	dir := t.TempDir()
	ffs := &fullDiskFS{FS: vfs.Default}
	s, q := diskFullOpen(t, dir, diskFullOptions(ffs, clock))

	published := map[string]bool{} // ID -> its Ack returned nil
	payload := make([]byte, 700)
	var stopErr error
	okAfterFull, publishedOK := 0, 0
	for i := 0; i < 10_000 && stopErr == nil; i++ {
		if i == 40 {
			ffs.full.Store(true)
		}
		m, err := q.Publish(ctx, payload)
		if err != nil {
			stopErr = err
			break
		}
		publishedOK++
		published[m.ID] = false
		if i%2 == 1 {
			ds, err := q.Receive(ctx, 2)
			if err != nil {
				stopErr = err
				break
			}
			for j, d := range ds {
				if j == 0 {
					if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
						stopErr = err
						break
					}
					published[d.Message.ID] = true
				}
			}
		}
		if ffs.full.Load() && stopErr == nil {
			okAfterFull++
		}
	}
	require.Error(t, stopErr, "the store never stopped on a full disk")
	t.Logf("stopped after %d calls succeeded on the full disk: %v", okAfterFull, stopErr)
	require.ErrorIs(t, stopErr, syscall.ENOSPC)
	require.Contains(t, stopErr.Error(), "free space")
	require.Positive(t, okAfterFull, "the store served nothing from the segment it had prepared")
	require.ErrorIs(t, s.Err(), syscall.ENOSPC)
	st := s.Stats()
	t.Logf("MaintenanceStopped: %q", st.MaintenanceStopped)
	require.Equal(t, int64(publishedOK), q.Stats().Published, "Published counts the publishes that returned nil")

	// Space comes back. The store stays stopped (it must be reopened).
	ffs.full.Store(false)
	_, err := q.Publish(ctx, payload)
	require.ErrorIs(t, err, syscall.ENOSPC, "a stopped store stays stopped once space is back")
	require.NoError(t, s.Close(), "Close of a store stopped by a rotation a full disk failed")

	s, q = diskFullOpen(t, dir, diskFullOptions(ffs, clock))
	defer s.Close()
	got := diskFullContents(t, clock, q)
	for id, acked := range published {
		_, there := got[id]
		if acked {
			require.False(t, there, "message %s, acked, is back", id)
		} else {
			require.True(t, there, "message %s, published and never acked, is lost", id)
		}
	}
	for id := range got {
		_, ok := published[id]
		require.True(t, ok, "message %s was never published", id)
	}
	// The reopened store works through rotations.
	for range 40 {
		_, err := q.Publish(ctx, payload)
		require.NoError(t, err)
	}
}

// A disk full for a while between two rotations: the preparation of the
// next segment fails meanwhile, and so does a checkpoint. Once space is
// back before the segment in use is full, the store goes on through its
// rotations without a reopen (the rotation tries the preparation again),
// and StoreStats.MaintenanceStopped says why the directory now grows,
// until the reopen, which resumes checkpoints and loses nothing.
func TestADiskFullBetweenRotationsDoesNotStopTheStore(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	dir := t.TempDir()
	ffs := &fullDiskFS{FS: vfs.Default}
	s, q := diskFullOpen(t, dir, diskFullOptions(ffs, clock))
	payload := make([]byte, 700)
	ids := map[string]bool{}
	publish := func(n int) {
		t.Helper()
		for range n {
			m, err := q.Publish(ctx, payload)
			require.NoError(t, err)
			ids[m.ID] = true
		}
	}
	// Fill the disk just after a rotation: the preparation of the next
	// segment, which starts then, and the rotation's checkpoint fail. The
	// segment the rotation takes must be ready before the disk fills: the
	// log prepares it in the background from its first write on (the
	// queue's declaration), and its last step is an fdatasync.
	segs := s.Stats().Segments
	require.Eventually(t, func() bool { return ffs.hasSynced(fmt.Sprintf("%010d.seg", segs+1)) }, 20*time.Second, time.Millisecond,
		"the log prepares its next segment")
	ffs.full.Store(true)
	for s.Stats().Segments == segs {
		publish(1)
	}
	// Wait for the preparer and the checkpoint to meet the full disk.
	require.Eventually(t, func() bool { return s.Stats().MaintenanceStopped != "" }, 20*time.Second, time.Millisecond)
	require.Positive(t, ffs.refused.Load())
	require.NoError(t, s.Err(), "a failed checkpoint stops nothing")
	ffs.full.Store(false)

	// Through three more rotations.
	for s.Stats().Segments < segs+4 {
		publish(1)
	}
	require.NoError(t, s.Err())
	require.NotEmpty(t, s.Stats().MaintenanceStopped)
	require.NoError(t, s.Close())

	s, err := broker.Open(dir, diskFullOptions(ffs, clock))
	require.NoError(t, err)
	defer s.Close()
	require.Empty(t, s.Stats().MaintenanceStopped)
	q, err = s.Queue("jobs", diskFullPolicy)
	require.NoError(t, err)
	got := diskFullContents(t, clock, q)
	require.Len(t, got, len(ids))
	for id := range ids {
		require.Contains(t, got, id)
	}
}

// The same day with four producers and four consumers, in each sync mode:
// whatever the disk refused, the reopened store holds every message whose
// Publish returned nil and whose Ack did not, once, and none whose Ack
// returned nil; and while the store ran, every call that failed failed
// with the store's error, wrapping ENOSPC.
func TestProducersAndConsumersOnADiskThatFillsLoseNothing(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			clock := brokertest.NewClock(t0)
			dir := t.TempDir()
			ffs := &fullDiskFS{FS: vfs.Default}
			opts := diskFullOptions(ffs, clock)
			opts.Sync = mode
			opts.SyncInterval = time.Millisecond
			s, q := diskFullOpen(t, dir, opts)

			var mu sync.Mutex
			published := map[string]bool{} // ID -> its Ack returned nil
			failedAck := map[string]error{}
			failedPublish := 0
			var errs []error
			var ops atomic.Int64
			var wg sync.WaitGroup
			record := func(err error) bool {
				if err == nil {
					if ops.Add(1) == 200 {
						ffs.full.Store(true)
					}
					return true
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return false
			}
			payload := make([]byte, 300)
			for range 4 {
				wg.Add(2)
				go func() {
					defer wg.Done()
					for {
						m, err := q.Publish(ctx, payload)
						if !record(err) {
							mu.Lock()
							failedPublish++
							mu.Unlock()
							return
						}
						mu.Lock()
						if _, ok := published[m.ID]; !ok {
							published[m.ID] = false
						}
						mu.Unlock()
					}
				}()
				go func() {
					defer wg.Done()
					for {
						ds, err := q.Receive(ctx, 3)
						if !record(err) {
							return
						}
						for _, d := range ds {
							if err := q.Ack(ctx, d.Lease.Receipt); !record(err) {
								mu.Lock()
								failedAck[d.Message.ID] = err
								mu.Unlock()
								return
							}
							mu.Lock()
							published[d.Message.ID] = true
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			stopped := s.Err()
			require.ErrorIs(t, stopped, syscall.ENOSPC)
			for _, err := range errs {
				require.ErrorIs(t, err, syscall.ENOSPC)
				require.Contains(t, err.Error(), "free space")
			}
			t.Logf("%d calls succeeded; stopped: %v", ops.Load(), stopped)
			okPublishes := int64(0)
			for range published {
				okPublishes++
			}
			require.Equal(t, okPublishes, q.Stats().Published, "Published counts the publishes that returned nil")
			closeErr := s.Close()
			t.Logf("Close: %v", closeErr)
			require.Equal(t, okPublishes, q.Stats().Published, "Published after Close")
			ffs.full.Store(false)

			s, q = diskFullOpen(t, dir, opts)
			defer s.Close()
			got := diskFullContents(t, clock, q)
			for id, acked := range published {
				_, there := got[id]
				if acked {
					require.False(t, there, "message %s, acked, is back", id)
				} else if ferr, failed := failedAck[id]; failed {
					t.Logf("message %s, whose Ack failed (%v), is there: %v", id, ferr, there)
				} else {
					require.True(t, there, "message %s, published and never acked, is lost", id)
				}
			}
			for id := range got {
				if _, ok := published[id]; !ok {
					t.Logf("message %s is there, and its Publish did not return nil (%d publishes failed)", id, failedPublish)
					require.LessOrEqual(t, 1, failedPublish)
				}
			}
		})
	}
}
