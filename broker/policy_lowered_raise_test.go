package broker_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// DESIGN.md ("A lowered MaxDeliveries gives up on what has no delivery
// left") and Store.Queue's doc: a lowering a power loss cut short (its
// declaration durable, dead letters behind it lost) "is finished by the
// next process's first successful call of Queue for that name". A first
// call that declares yet another policy (here MaxDeliveries raised back)
// finishes it too, under the durable policy, before its own declaration:
// the messages the durable lowering left with no delivery are dead
// letters, never ready to be delivered again.
func TestACutShortLoweringIsFinishedByAFirstCallThatRaisesTheMaximum(t *testing.T) {
	root := fastDir(t)
	base := broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 5, MaxMessageBytes: 512}
	lowered := base
	lowered.MaxDeliveries = 1
	raised := base
	raised.MaxDeliveries = 10
	const n = 3
	for k := int64(0); ; k++ {
		require.Less(t, k, int64(200), "the policy change never completed")
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		cfs, clock, qerr := lowerUnderPowerLoss(t, dir, k, base, lowered, n)
		if qerr == nil {
			break
		}
		for seed := range 9 {
			co := vfs.CrashOptions{Root: dir}
			if seed > 0 {
				co.KeepUnsyncedFraction, co.TearLastWrite = 1, true
				co.Rand = rand.New(rand.NewPCG(uint64(k), uint64(seed)))
			}
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d", k, seed))
			require.NoError(t, cfs.CrashClone(clone, co))
			s2, err := broker.Open(clone, broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes})
			require.NoError(t, err)
			maxd, _ := broker.DeclaredMaxDeliveries(s2, "t")
			if maxd != 1 {
				require.NoError(t, s2.Close())
				continue
			}
			// The lowering is durable. The first call of this process
			// declares another policy.
			q2, err := s2.Queue("t", raised)
			require.NoError(t, err)
			dls := mustDeadLetters(t, q2)
			got, err := q2.Receive(ctx(t), n)
			require.NoError(t, err)
			require.NoError(t, s2.Close())
			if len(got) > 0 {
				t.Fatalf("power loss after %d ops (clone %d): the lowering to MaxDeliveries 1 was durable with %d of its %d dead letters; the next process's first Store.Queue (raising MaxDeliveries to 10) did not finish it: %d message(s) with no delivery left under the durable policy stayed ready and Receive handed them out again (e.g. %s, delivery %d); want all %d given up",
					k, seed, len(dls), n, len(got), got[0].Message.ID, got[0].Deliveries, n)
			}
		}
	}
}
