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

// TestACutShortLoweringDatesALapsedLeasesDeadLetterAtTheCallThatFinishesIt:
// Store.Queue's doc says a lowering of MaxDeliveries moves a message with
// no delivery left to the dead-letter store "failed at the declaration's
// reading of the clock", and that one a crash cuts short is finished by
// the next process's first Queue call, "its dead letters then failed at
// that call's reading of the clock". The message here is one whose lease
// lapsed with deliveries left under the old policy (1 of 5). Uncut, the
// declaration gives it up at its own reading. Cut short by a power loss
// after the declaration was durable and before its dead letter, the next
// first call must give it up at that call's reading: the log restates it
// as ready before the declaration, so that a replay does not take the old
// lease for a last delivery under the lowered policy and date its death at
// the lease's expiry, before the lowering existed.
func TestACutShortLoweringDatesALapsedLeasesDeadLetterAtTheCallThatFinishesIt(t *testing.T) {
	root := fastDir(t)
	base := broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 5, MaxMessageBytes: 512}
	lowered := base
	lowered.MaxDeliveries = 1
	found := false
	sweeps := 0
	for k := int64(0); !found; k++ {
		require.Less(t, k, int64(200), "no crash point left the declaration without its dead letter")
		dir := filepath.Join(root, fmt.Sprintf("run-%d-%d", sweeps, k))

		clock := newFakeClock()
		cfs := vfs.NewCrashFS(vfs.Default)
		opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: cfs}
		broker.ManualMaintenance(&opts)
		s, err := broker.Open(dir, opts)
		require.NoError(t, err)
		q, err := s.Queue("t", base)
		require.NoError(t, err)
		mustPublish(t, q, "m")
		d := mustReceiveOne(t, q)
		expiry := d.Lease.ExpiresAt
		clock.Set(expiry.Add(time.Minute)) // the lease lapsed, delivery 1 of 5
		declaredAt := clock.Now()
		cfs.CrashAfter(cfs.Ops() + k)
		_, qerr := s.Queue("t", lowered)
		_ = s.Close()
		if qerr == nil {
			// Uncut: the declaration's own reading.
			s2, err := broker.Open(dir, broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes})
			require.NoError(t, err)
			q2, err := s2.Queue("t", lowered)
			require.NoError(t, err)
			dls := mustDeadLetters(t, q2)
			require.NoError(t, s2.Close())
			require.Len(t, dls, 1)
			requireSameInstant(t, declaredAt, dls[0].FailedAt, "uncut lowering")
			// How the group commit gathers the call's records into
			// writes varies from run to run, and with it what a crash
			// k operations in cuts: sweep the crash points again.
			sweeps++
			require.Less(t, sweeps, 20, "no crash point left the declaration without its dead letter")
			k = -1
			continue
		}
		for seed := 1; seed < 40 && !found; seed++ {
			co := vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: 1, TearLastWrite: true, Rand: rand.New(rand.NewPCG(uint64(k), uint64(seed)))}
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d-%d", sweeps, k, seed))
			require.NoError(t, cfs.CrashClone(clone, co))
			c2 := newFakeClock()
			c2.Set(declaredAt.Add(time.Hour))
			s2, err := broker.Open(clone, broker.Options{Now: c2.Now, SegmentBytes: broker.MinSegmentBytes})
			require.NoError(t, err)
			maxd, _ := broker.DeclaredMaxDeliveries(s2, "t")
			if maxd != 1 {
				require.NoError(t, s2.Close())
				continue
			}
			q2, err := s2.Queue("t", lowered)
			require.NoError(t, err)
			finishedAt := c2.Now()
			dls := mustDeadLetters(t, q2)
			require.NoError(t, s2.Close())
			require.Len(t, dls, 1, "the lowered policy is durable: the message has no delivery left")
			if dls[0].FailedAt.Equal(declaredAt) {
				continue // the declaration's dead letter was durable too
			}
			found = true
			require.Truef(t, dls[0].FailedAt.Equal(finishedAt),
				"power loss %d operations into the lowering: the declaration is durable, its dead letter is not; the next process's first Queue call (at %v) finishes it, and the dead letter must have failed at that call's reading, but FailedAt is %v (the expiry of the lease that lapsed with 4 deliveries left: %v; the lowering was declared at %v)",
				k, finishedAt.UTC(), dls[0].FailedAt.UTC(), expiry.UTC(), declaredAt.UTC())
		}
	}
}
