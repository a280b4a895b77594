package broker_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestLeasesAndReceiptsSurviveRestartAsMemoryKeepsThem drives a Memory and a
// file-backed queue with one seeded random sequence, as
// TestMemoryBehavesAsFileStore does, and also closes and reopens the store,
// checkpoints it and copies its records forward (small segments) between
// calls. API.md §2 and §5.4: leases, receipts, retry delays and delivery
// counts survive a clean restart, and a copy forward moves records without
// changing state; so the file store must keep answering as the Memory,
// which never restarts, does. The clock steps backwards, but never behind a
// reading taken before a reopen (DESIGN.md: the log does not record
// observations of time, so a restart forgets lapses seen).
//
//	WALBROKER_RESTART_SEED, WALBROKER_RESTART_STEPS replay a run.
func TestLeasesAndReceiptsSurviveRestartAsMemoryKeepsThem(t *testing.T) {
	seed := envSeed(t, "WALBROKER_RESTART_SEED")
	steps := envCount(t, "WALBROKER_RESTART_STEPS", 1500, 300)
	t.Logf("restart differential: seed %d, %d steps", seed, steps)
	e := newEnv(t, func(o *broker.Options) {
		o.Sync = broker.SyncNone
		o.SegmentBytes = broker.MinSegmentBytes
		broker.ManualMaintenance(o)
	})
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7e5))
	pol := policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = []time.Duration{time.Second, 30 * time.Second}[rng.IntN(2)]
		p.MaxDeliveries = 1 + rng.IntN(4)
		p.RetryDelay, p.MaxRetryDelay = [][2]time.Duration{{5 * time.Second, 20 * time.Second}, {0, 0}, {time.Second, 0}}[rng.IntN(3)][0], 0
		if p.RetryDelay == 5*time.Second {
			p.MaxRetryDelay = 20 * time.Second
		}
		p.Capacity, p.DedupWindow, p.MaxMessageBytes = 10, time.Minute, 8
	})
	t.Logf("policy %+v", pol)
	d := newDifferential(t, e, rng, pol, seed, 60)
	floor := e.clock.Now()
	var copied int64
	for range steps {
		if e.clock.Now().Before(floor) {
			// No reading behind one a reopen forgot was observed.
			e.clock.Advance(floor.Sub(e.clock.Now()))
		}
		switch r := d.rng.IntN(40); {
		case r == 0 && !e.clock.Now().Before(d.latest):
			d.reopen()
			floor = d.latest
		case r == 1:
			d.history = append(d.history, fmt.Sprintf("t+%v maintain", e.clock.Now().Sub(t0)))
			require.NoError(t, e.s.Maintain())
			copied += e.s.Stats().CopiedForward
		case r == 2:
			d.publish() // bulk, so that segments fill and copy forward
		default:
			d.step()
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("records copied forward %d; outcomes: %v", copied, d.seen)
}
