package broker_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// racingCalls is what the calls racing maintenance were told: the
// messages whose publish returned nil, those an ack was tried on, and
// those whose ack returned nil, each with the number of acks returned
// before it (stamp). covered is the highest stamp a publish that returned
// nil began after: under SyncPublish an ack is durable once such a
// publish's commit covers it.
type racingCalls struct {
	mu        sync.Mutex
	published map[string]bool
	tried     map[string]bool
	acked     map[string]int64
	stamp     int64
	covered   int64
}

// Publishes (with and without keys), Receives and Acks run on their
// goroutines on two queues while maintenance rounds (checkpoints, copies
// forward, removals) run on another, until the power is lost after a
// random file operation; the directory is cloned as the device held it
// (synced data only, a share of the unsynced writes, or unsynced names
// and sizes apart from the data). The clone opens, its index agrees with
// itself, every message published and never offered an ack is there, and
// no message whose ack returned (and, under SyncPublish, that a later
// publish's commit covered) comes back.
func TestCallsRacingMaintenanceThenAPowerLossKeepTheAcknowledgedState(t *testing.T) {
	seed := uint64(envSeed(t, "WALBROKER_SEED"))
	t.Logf("seed %d (WALBROKER_SEED replays the choices, not the interleaving)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	root := fastDir(t)
	clock := newFakeClock()
	pol := policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1000
		p.MaxMessageBytes = 2 << 10
		p.DedupWindow = time.Hour
	})
	for run := range envCount(t, "WALBROKER_ROUNDS", 24, 6) {
		dir := filepath.Join(root, fmt.Sprintf("run-%d", run))
		cfs := vfs.NewCrashFS(vfs.Default)
		opts := reclaimOptions(clock, cfs)
		if run%2 == 1 {
			opts.Sync = broker.SyncPublish
		}
		s, err := broker.Open(dir, opts)
		require.NoError(t, err)
		qs := make([]*broker.Queue, 2)
		for i, name := range []string{"a", "b"} {
			qs[i], err = s.Queue(name, pol)
			require.NoError(t, err)
		}
		k := cfs.Ops() + 300 + rng.Int64N(4000)
		cfs.CrashAfter(k)
		calls := raceMaintenance(t, s, qs)
		_ = s.Close()

		copts := crashOptionsFor(int64(run), dir, rand.New(rand.NewPCG(rng.Uint64(), 5)))
		state := fmt.Sprintf("keep %.1f of the unsynced writes", copts.KeepUnsyncedFraction)
		if run%4 == 3 {
			copts, state = metadataCrashOptions(int64(run/4), dir, rng.Uint64())
		}
		what := fmt.Sprintf("run %d (%v): power lost after operation %d (%s)", run, opts.Sync, k, state)
		clone := dir + "-clone"
		require.NoError(t, cfs.CrashClone(clone, copts))
		live := liveAfterPowerLoss(t, clone, clock, pol, what)
		for id := range calls.published {
			if !calls.tried[id] && !live[id] {
				t.Fatalf("%s: message %s, published and never acked, is gone", what, id)
			}
		}
		for id, stamp := range calls.acked {
			if opts.Sync == broker.SyncPublish && stamp > calls.covered {
				continue // no publish's commit covered the ack
			}
			require.False(t, live[id], "%s: message %s, acked, is live again", what, id)
		}
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, os.RemoveAll(clone))
	}
}

// raceMaintenance runs, until the first of them fails (the power loss),
// a publisher and a consumer on each of qs and maintenance rounds on s,
// and returns what the calls were told.
func raceMaintenance(t *testing.T, s *broker.Store, qs []*broker.Queue) *racingCalls {
	c := &racingCalls{published: map[string]bool{}, tried: map[string]bool{}, acked: map[string]int64{}}
	stop := make(chan struct{})
	failed := make(chan struct{}, 2*len(qs)+1)
	var wg sync.WaitGroup
	run := func(step func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := step(i); err != nil {
					failed <- struct{}{}
					return
				}
			}
		}()
	}
	for g, q := range qs {
		run(func(i int) error {
			payload := []byte(fmt.Sprintf("%d-%d-%0300d", g, i, i))
			c.mu.Lock()
			began := c.stamp
			c.mu.Unlock()
			var m broker.MessageValue
			var err error
			if i%3 == 0 {
				m, err = q.PublishKeyed(ctx(t), fmt.Sprintf("k%d-%d", g, i%50), payload)
			} else {
				m, err = q.Publish(ctx(t), payload)
			}
			if err != nil {
				return err
			}
			if len(m.Payload) > 0 { // not a duplicate, which commits nothing
				c.mu.Lock()
				c.published[m.ID] = true
				c.covered = max(c.covered, began)
				c.mu.Unlock()
			}
			return nil
		})
		run(func(int) error {
			ds, err := q.Receive(ctx(t), 5)
			if err != nil {
				return err
			}
			for j, d := range ds {
				if j%4 == 3 {
					continue // left leased
				}
				c.mu.Lock()
				c.tried[d.Message.ID] = true
				c.mu.Unlock()
				if err := q.Ack(ctx(t), d.Lease.Receipt); err != nil {
					return err
				}
				c.mu.Lock()
				c.stamp++
				c.acked[d.Message.ID] = c.stamp
				c.mu.Unlock()
			}
			return nil
		})
	}
	run(func(int) error { return s.Maintain() })
	<-failed
	close(stop)
	wg.Wait()
	return c
}

// liveAfterPowerLoss opens the clone, checks its index, and returns the
// IDs of the messages its queues hold, every lease lapsed.
func liveAfterPowerLoss(t *testing.T, clone string, clock *fakeClock, pol broker.PolicyValue, what string) map[string]bool {
	s, err := broker.Open(clone, reclaimOptions(clock, nil))
	require.NoError(t, err, what)
	defer func() { require.NoError(t, s.Close(), what) }()
	require.NoError(t, broker.VerifyIndex(s), what)
	clock.Advance(time.Hour)
	live := map[string]bool{}
	for _, name := range []string{"a", "b"} {
		q, err := s.Queue(name, pol)
		require.NoError(t, err, what)
		for {
			ds, err := q.Receive(ctx(t), 100)
			require.NoError(t, err, what)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				live[d.Message.ID] = true
			}
		}
	}
	return live
}
