package broker_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestReclaimAtRandomKeepsTheIndexTrue drives three queues with random
// calls of every kind (keyed publishes, leases, extends, nacks with and
// without a cause, rejects, replays and deletes, policy changes, the clock
// stepping back and forth) over a store of small segments, with frequent
// maintenance (checkpoints, copies forward, removals) and a Close and
// reopen now and then, from the checkpoint or rebuilt from the log. Before
// every step the index must agree with itself (Index.Verify: every count
// against what it counts) and count no segment the log no longer has; a
// maintenance must change nothing but positions and sizes, and a reopen
// nothing at all. WALBROKER_RECLAIM_SEEDS sets the seeds run (default 8,
// 2 with -short), WALBROKER_RECLAIM_STEPS the steps of each (default 1200).
func TestReclaimAtRandomKeepsTheIndexTrue(t *testing.T) {
	seeds := envCount(t, "WALBROKER_RECLAIM_SEEDS", 8, 2)
	steps := envCount(t, "WALBROKER_RECLAIM_STEPS", 1200, 1200)
	first := uint64(envSeed(t, "WALBROKER_RECLAIM_SEED"))
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runReclaimAtRandom(t, seed, steps) })
	}
}

func runReclaimAtRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := fastDir(t)
	clock := newFakeClock()
	opts := reclaimOptions(clock, nil)
	if rng.IntN(2) == 0 {
		opts.Sync = broker.SyncNone
	}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	pols := []broker.PolicyValue{
		policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2048; p.DedupWindow = 10 * time.Second }),
		policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2048; p.MaxDeliveries = 2; p.DedupWindow = time.Hour }),
		policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 2048; p.RetryDelay = 0 }),
	}
	names := []string{"a", "b", "c"}
	qs := make([]*broker.Queue, len(names))
	open := func() {
		for i := range qs {
			qs[i], err = s.Queue(names[i], pols[i])
			require.NoError(t, err)
		}
	}
	open()
	receipts := make([][]broker.ReceiptValue, len(names))
	var back time.Duration
	for step := range steps {
		if err := broker.VerifyIndex(s); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		i := rng.IntN(len(names))
		q := qs[i]
		switch r := rng.IntN(100); {
		case r < 30:
			p := bytes.Repeat([]byte{byte('a' + step%26)}, 50+rng.IntN(900))
			if rng.IntN(2) == 0 {
				_, err = q.PublishKeyed(ctx(t), fmt.Sprintf("k%d", rng.IntN(20)), p)
			} else {
				_, err = q.Publish(ctx(t), p)
			}
			if err != nil {
				require.ErrorIs(t, err, broker.QueueFull)
			}
		case r < 48:
			ds, err := q.Receive(ctx(t), 1+rng.IntN(3))
			require.NoError(t, err)
			for _, d := range ds {
				receipts[i] = append(receipts[i], d.Lease.Receipt)
			}
		case r < 68:
			if n := len(receipts[i]); n > 0 {
				k := rng.IntN(n)
				rc := receipts[i][k]
				receipts[i] = append(receipts[i][:k], receipts[i][k+1:]...)
				switch rng.IntN(10) {
				case 0, 1, 4, 5, 6, 7:
					_ = q.Ack(ctx(t), rc)
				case 2, 8:
					_, _ = q.Nack(ctx(t), rc, broker.NewError("R", 3, "pub", "priv"))
				case 9:
					_, _ = q.Nack(ctx(t), rc, nil)
				case 3:
					_ = q.Reject(ctx(t), rc, broker.NewError("X", 4, "public text", "priv"))
				}
			}
		case r < 72:
			if n := len(receipts[i]); n > 0 {
				_, _ = q.Extend(ctx(t), receipts[i][rng.IntN(n)], time.Duration(1+rng.IntN(60))*time.Second)
			}
		case r < 77:
			dls, err := q.DeadLetters(ctx(t), 5)
			require.NoError(t, err)
			if len(dls) > 0 {
				d := dls[rng.IntN(len(dls))]
				if rng.IntN(3) == 0 {
					_ = q.ReplayDeadLetter(ctx(t), d.Message.ID)
				} else {
					_ = q.DeleteDeadLetter(ctx(t), d.Message.ID)
				}
			}
		case r < 79:
			p := pols[i]
			p.MaxDeliveries = 1 + rng.IntN(4)
			p.DedupWindow = time.Duration(5+rng.IntN(60)) * time.Second
			nq, err := s.Queue(names[i], p)
			require.NoError(t, err)
			qs[i], pols[i] = nq, p
		case r < 88:
			d := time.Duration(rng.IntN(8000)) * time.Millisecond
			clock.Advance(d)
			back = max(0, back-d)
		case r < 89:
			d := time.Duration(rng.IntN(5000)) * time.Millisecond
			clock.Advance(-d)
			back += d
		case r < 91:
			// Close and reopen, from the checkpoint or rebuilt from the log.
			clock.Advance(back)
			back = 0
			want := broker.Dump(s)
			require.NoError(t, s.Close())
			rebuild := rng.IntN(2) == 0
			if rebuild {
				require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
			}
			s, err = broker.Open(dir, opts)
			require.NoError(t, err)
			got := broker.Dump(s)
			require.Equal(t, want, got, "step %d reopen rebuild=%v: %s", step, rebuild, broker.StateDiff(want, got))
			open()
		default:
			before := reclaimPosRE.ReplaceAllString(broker.Dump(s), "")
			require.NoError(t, s.Maintain())
			after := reclaimPosRE.ReplaceAllString(broker.Dump(s), "")
			require.Equal(t, before, after, "step %d: maintenance changed state: %s", step, broker.StateDiff(before, after))
		}
	}
	t.Logf("stats %+v", s.Stats())
}
