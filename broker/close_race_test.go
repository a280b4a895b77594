package broker_test

import (
	"context"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestCloseDuringReceiveLeavesNoLeaseHeldByNobody: a Receive whose leases the
// log took must hand those messages to its caller. When Close closes the
// log's segments while a Receive is still reading the payloads, Receive
// returns Closed for leases already in the log: after a reopen those
// messages stay leased, held by nobody, until the lease lapses (and on a
// last delivery they are dead-lettered without ever having been handed
// to a consumer).
//
// It is a race: the test runs rounds for up to WALBROKER_CLOSE_RACE_SECONDS
// (default 4, 2 with -short) and fails at the first that leases a message nobody got.
func TestCloseDuringReceiveLeavesNoLeaseHeldByNobody(t *testing.T) {
	secs := envCount(t, "WALBROKER_CLOSE_RACE_SECONDS", 4, 2)
	payload := make([]byte, 8<<10)
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone; o.SegmentBytes = 32 << 20 })
		pol := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 << 20; p.RetryDelay = 0 })
		q := e.queue("jobs", pol)
		const n = 1000
		batch := make([][]byte, 100)
		for i := range batch {
			batch[i] = payload
		}
		for i := 0; i < n/len(batch); i++ {
			_, err := q.PublishBatch(context.Background(), batch)
			require.NoError(t, err)
		}
		var mu sync.Mutex
		held := map[string]int{} // deliveries less successful nacks: 1 while a consumer holds it
		lastOp := map[string]string{}
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ds, err := q.Receive(context.Background(), n)
					mu.Lock()
					for _, d := range ds {
						held[d.Message.ID]++
						lastOp[d.Message.ID] = "delivered"
					}
					mu.Unlock()
					if err != nil {
						return
					}
					for _, d := range ds {
						if _, err := q.Nack(context.Background(), d.Lease.Receipt, nil); err != nil {
							return
						}
						mu.Lock()
						if held[d.Message.ID]--; held[d.Message.ID] == 0 {
							delete(held, d.Message.ID)
						}
						lastOp[d.Message.ID] = "nacked"
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Duration(2+round%9) * time.Millisecond)
		s := e.s
		e.s = nil
		require.NoError(t, s.Close())
		wg.Wait()

		e.open() // same clock: every lease logged is still held
		q = e.queue("jobs", pol)
		leased := q.Stats().Leased
		if leased > len(held) {
			ready, err := q.Receive(context.Background(), 2*n)
			require.NoError(t, err)
			got := map[string]bool{}
			for _, d := range ready {
				got[d.Message.ID] = true
			}
			stillHeld, other := 0, 0
			for id := range lastOp {
				if !got[id] {
					if held[id] > 0 {
						stillHeld++
					} else {
						other++
						if other < 4 {
							t.Logf("leased after reopen, not held: %s last op %s", id, lastOp[id])
						}
					}
				}
			}
			t.Logf("not ready after reopen: held %d, other %d; ready %d", stillHeld, other, len(ready))
			t.Fatalf("round %d: after Close and reopen %d messages are leased, but consumers hold only %d deliveries: a Receive that returned Closed had leased the others",
				round, leased, len(held))
		}
		require.NoError(t, e.s.Close())
		e.s = nil
	}
}

// A call that begins once Close has begun fails with Closed, whatever
// Close is doing then: here a Publish made while Close renames its
// checkpoint into place. It used to pass, since the store counted as
// closed only once that checkpoint was written; it was appended after the
// checkpoint, and the next Open replayed it, where Close promises a
// checkpoint that leaves nothing to replay.
func TestACallBegunDuringClosesCheckpointFailsWithClosed(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	dir := t.TempDir()
	opts := broker.Options{FS: ffs, SegmentBytes: broker.MinSegmentBytes * 4}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1024})
	require.NoError(t, err)
	_, err = q.Publish(t.Context(), []byte("before"))
	require.NoError(t, err)

	var closing, fired atomic.Bool
	var during error
	ffs.Observe(func(e vfs.Event) {
		if e.Op == vfs.OpRename && filepath.Base(e.NewName) == "checkpoint" && closing.Load() && fired.CompareAndSwap(false, true) {
			// On Close's goroutine: Close has begun, its checkpoint is
			// being put in place.
			_, during = q.Publish(context.Background(), []byte("during"))
		}
	})
	closing.Store(true)
	require.NoError(t, s.Close())
	require.True(t, fired.Load(), "Close renamed its checkpoint into place")

	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	t.Logf("publish begun during Close: %v; next Open: %v", during, s.Recovery())
	require.ErrorIs(t, during, broker.Closed, "a Publish that began once Close had begun succeeded")
	require.Zero(t, s.Recovery().Replayed, "the Open after Close replayed records: Close's checkpoint did not cover the log")
}

// A call that passed its start before Close began, but takes its queue's
// lock only once Close's checkpoint has taken its snapshot and let the
// queues go, fails with Closed: what it appended would come after the
// checkpoint, which leaves the next Open nothing to replay. Here a Publish
// is held in its first clock reading (before the queue's lock) until
// Close's checkpoint is in place.
func TestACallThatTakesItsQueueAfterClosesSnapshotFailsWithClosed(t *testing.T) {
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	at := time.Unix(1_700_000_000, 0)
	var armed atomic.Bool
	blocked, release := make(chan struct{}), make(chan struct{})
	clock := func() time.Time {
		// Only the Publish under test waits, at its first reading.
		if armed.Load() && strings.Contains(string(debug.Stack()), "(*Queue).publish") && armed.CompareAndSwap(true, false) {
			close(blocked)
			<-release
		}
		return at
	}
	opts := broker.Options{FS: ffs, Now: clock, Sync: broker.SyncAll, SegmentBytes: 4 << 20}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = q.Publish(context.Background(), []byte("before"))
	require.NoError(t, err)

	armed.Store(true)
	pubErr := make(chan error, 1)
	go func() {
		_, err := q.Publish(context.Background(), []byte("begun before Close"))
		pubErr <- err
	}()
	<-blocked // the Publish has begun: it passed the store's check

	var closing atomic.Bool
	var once sync.Once
	var published error
	ffs.Observe(func(e vfs.Event) {
		if !closing.Load() || e.Op != vfs.OpRename || filepath.Base(e.NewName) != "checkpoint" {
			return
		}
		once.Do(func() {
			// Close's checkpoint is in place; its queues run again.
			close(release)
			published = <-pubErr
		})
	})
	closing.Store(true)
	require.NoError(t, s.Close())
	require.ErrorIs(t, published, broker.Closed, "a Publish that took its queue's lock after Close's snapshot")

	s2, err := broker.Open(dir, broker.Options{Now: func() time.Time { return at }, SegmentBytes: 4 << 20})
	require.NoError(t, err)
	defer func() { _ = s2.Close() }()
	require.Zero(t, s2.Recovery().Replayed,
		"Close wrote a checkpoint, yet the next Open replayed records appended after it (%v)", s2.Recovery())
	q2, err := s2.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	ds, err := q2.Receive(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, ds, 1, "only the message published before Close")
	require.Equal(t, "before", string(ds[0].Message.Payload))
}
