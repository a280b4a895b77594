package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestConsumePolicyChangesAndMaintenanceTogether runs Consume (in half
// the sessions with a Prefetch) over a store of small segments while a
// driver publishes, changes the queue's policy, moves the clock, replays
// dead letters and runs maintenance (checkpoints, copies forward,
// removals); each session ends with a cancel, then a reopen (from the
// checkpoint or rebuilt from the log).
// Checked: every message published is acked once (by the counters) or
// still held, live or dead, never both; a reopen holds the state the
// store had. WALBROKER_STRESS_SECONDS bounds it (default 4, 2 with -short).
func TestConsumePolicyChangesAndMaintenanceTogether(t *testing.T) {
	secs := envCount(t, "WALBROKER_STRESS_SECONDS", 4, 2)
	seed := envSeed(t, "WALBROKER_STRESS_SEED")
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	mode := []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone}[rng.IntN(3)]
	e := newEnv(t, func(o *broker.Options) {
		o.SegmentBytes = broker.MinSegmentBytes
		o.Sync = mode
		broker.ManualMaintenance(o)
	})
	randPolicy := func() broker.PolicyValue {
		return broker.PolicyValue{
			VisibilityTimeout: time.Duration(20+rng.IntN(200)) * time.Millisecond,
			RetryDelay:        time.Duration(rng.IntN(30)) * time.Millisecond,
			MaxDeliveries:     1 + rng.IntN(4),
			MaxMessageBytes:   1024,
			Capacity:          []int{0, 0, 50, 200}[rng.IntN(4)],
			DedupWindow:       time.Duration(1+rng.IntN(1000)) * time.Millisecond,
		}
	}
	pol := randPolicy()
	q := e.queue("jobs", pol)
	var published, acked int64
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	sessions := 0
	for time.Now().Before(deadline) {
		sessions++
		ctx, cancel := context.WithCancel(context.Background())
		var handled atomic.Int64
		done := make(chan error, 1)
		copts := broker.ConsumeOptions{Batch: 1 + rng.IntN(8), Concurrency: 1 + rng.IntN(6), PollInterval: time.Millisecond}
		if rng.IntN(2) == 0 {
			copts.Batch, copts.Prefetch = 1+rng.IntN(24), 1+rng.IntN(16) // messages held at the cancel are nacked unstarted
		}
		cq := q
		go func() {
			done <- broker.Consume(ctx, cq, func(_ context.Context, d broker.DeliveryValue) error {
				handled.Add(1)
				switch h := d.Message.Payload[0] % 10; {
				case h < 6:
					return nil
				case h < 9:
					return errors.New("fail")
				default:
					return broker.DoNotRetry(errors.New("bad"))
				}
			}, copts)
		}()
		steps := 50 + rng.IntN(200)
		for i := 0; i < steps; i++ {
			switch r := rng.IntN(100); {
			case r < 40:
				n := 1 + rng.IntN(5)
				batch := make([][]byte, n)
				for j := range batch {
					batch[j] = fmt.Appendf(nil, "%c%0200d", byte(rng.IntN(256)), i)
				}
				var err error
				if n == 1 && rng.IntN(2) == 0 {
					var m broker.MessageValue
					m, err = q.PublishKeyed(context.Background(), strconv.Itoa(rng.IntN(50)), batch[0])
					if err == nil && m.Payload != nil {
						published++
					}
				} else {
					_, err = q.PublishBatch(context.Background(), batch)
					if err == nil {
						published += int64(n)
					}
				}
				if err != nil {
					require.ErrorIs(t, err, broker.QueueFull)
				}
			case r < 55:
				e.clock.Advance(time.Duration(rng.IntN(60)) * time.Millisecond)
			case r < 62:
				pol = randPolicy()
				q = e.queue("jobs", pol)
			case r < 75:
				require.NoError(t, e.s.Maintain())
			case r < 78:
				// A consumer that dies: its leases lapse.
				_, err := q.Receive(context.Background(), 1+rng.IntN(3))
				require.NoError(t, err)
			case r < 82:
				dls, err := q.DeadLetters(context.Background(), 3)
				require.NoError(t, err)
				for _, dl := range dls {
					if err := q.ReplayDeadLetter(context.Background(), dl.Message.ID); err != nil {
						require.ErrorIs(t, err, broker.QueueFull, "a replay into a queue at its Capacity")
					}
				}
			default:
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
			}
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		st := q.Stats()
		acked += st.Acked
		live := st.Ready + st.Leased + st.Delayed + st.DeadLetters
		require.Equal(t, published, acked+int64(live), "session %d: published = acked + held (ready %d leased %d delayed %d dead %d)",
			sessions, st.Ready, st.Leased, st.Delayed, st.DeadLetters)

		before := broker.Dump(e.s)
		rebuild := rng.IntN(2) == 0
		e.close()
		if rebuild {
			require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
		}
		e.open()
		requireSameState(t, before, broker.Dump(e.s), fmt.Sprintf("session %d: reopen (rebuild %v) changed the state", sessions, rebuild))
		q = e.queue("jobs", pol)
		st = q.Stats()
		require.Equal(t, published, acked+int64(st.Ready+st.Leased+st.Delayed+st.DeadLetters), "session %d: after reopen", sessions)
	}
	t.Logf("%d sessions, %d published, %d acked, sync %v", sessions, published, acked, mode)
	_ = sync.Mutex{}
}
