package broker_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// A re-declaration that lowers MaxDeliveries and is refused (here
// QueueMisconfigured: the new declaration would not fit in the room each
// segment keeps for declarations) changes nothing: the message the lowered
// maximum would leave without a delivery stays in the queue, under the
// policy in force, and no dead letter is counted.
func TestARefusedPolicyChangeDeadLettersNothing(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	base := broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 5, MaxMessageBytes: 512}
	q := e.queue("t", base)
	m := mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	mustNack(t, q, d.Lease.Receipt, nil) // 1 delivery of 5, ready again at once

	// Fill the preamble to the byte: queues while they fit, then grow
	// their policies one varint byte at a time.
	var fillers []string
	for n := 59; n >= 0; n-- {
		for {
			name := fmt.Sprintf("f%04d", len(fillers)) + strings.Repeat("x", n)
			if _, err := e.s.Queue(name, base); err != nil {
				require.ErrorIs(t, err, broker.QueueMisconfigured)
				break
			}
			fillers = append(fillers, name)
		}
	}
	// Capacity first; then MaxDeliveries, for the room a 32-bit int's
	// Capacity leaves (five varint bytes at most, where a 64-bit one has
	// nine). Neither is doubled past what an int holds.
	policyOf := map[string]broker.PolicyValue{}
	for _, f := range fillers {
		policyOf[f] = base
	}
	grow := []func(*broker.PolicyValue) bool{
		func(p *broker.PolicyValue) bool {
			if p.Capacity > math.MaxInt/2 {
				return false
			}
			p.Capacity = max(p.Capacity*2, 128)
			return true
		},
		func(p *broker.PolicyValue) bool {
			if p.MaxDeliveries > math.MaxUint32/2 || p.MaxDeliveries > math.MaxInt/2 {
				return false
			}
			p.MaxDeliveries *= 2
			return true
		},
	}
	for _, g := range grow {
		for grown := true; grown; {
			grown = false
			for _, f := range fillers {
				p := policyOf[f]
				if !g(&p) {
					continue
				}
				if _, err := e.s.Queue(f, p); err == nil {
					policyOf[f] = p
					grown = true
				}
			}
		}
	}

	lowered := base
	lowered.MaxDeliveries = 1
	lowered.Capacity = 1 << 20 // a longer record than base's
	_, err := e.s.Queue("t", lowered)
	require.ErrorIs(t, err, broker.QueueMisconfigured, "the declaration no longer fits")
	require.ErrorContains(t, err, "each segment keeps")

	st := q.Stats()
	require.Equal(t, 1, st.Ready, "the message is still in the queue: %+v", st)
	require.Zero(t, st.DeadLettered)
	dls := mustDeadLetters(t, q)
	require.Emptyf(t, dls, "a refused re-declaration must change nothing, but message %s (1 delivery of the 5 the policy in force allows) was dead-lettered: %+v; Stats DeadLetters=%d DeadLettered=%d Ready=%d",
		m.ID, dls, st.DeadLetters, st.DeadLettered, st.Ready)
}

// A declaration that lowers MaxDeliveries gives up, as part of it, on
// the messages it leaves no delivery. A power loss at any point of that
// call, keeping none of what was not synced or a torn prefix of it,
// leaves the store consistent once reopened: either the old policy and
// the messages still in the queue, or the new policy and every one of
// them a dead letter (the declaration is the change's commit point; dead
// letters it did not get to log are given up by the next process's first
// handle on the queue), never a dead letter under a policy that gives it
// deliveries left, nor a message ready with none left.
func TestALoweredMaxDeliveriesIsAtomicWithItsDeadLettersAcrossAPowerLoss(t *testing.T) {
	root := fastDir(t)
	base := broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 5, MaxMessageBytes: 512}
	lowered := base
	lowered.MaxDeliveries = 1
	const n = 3
	outcomes := map[int64]int{}
	for k := int64(0); ; k++ {
		require.Less(t, k, int64(200), "the policy change never completed")
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		cfs, clock, qerr := lowerUnderPowerLoss(t, dir, k, base, lowered, n)
		if qerr == nil {
			break // every crash point inside the call has been tried
		}
		for seed := range 9 {
			co := vfs.CrashOptions{Root: dir}
			if seed > 0 { // a torn prefix of what was written and not synced
				co.KeepUnsyncedFraction, co.TearLastWrite = 1, true
				co.Rand = rand.New(rand.NewPCG(uint64(k), uint64(seed)))
			}
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d", k, seed))
			require.NoError(t, cfs.CrashClone(clone, co))
			s2, err := broker.Open(clone, broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes})
			require.NoError(t, err)
			maxd, ok := broker.DeclaredMaxDeliveries(s2, "t")
			require.True(t, ok)
			outcomes[maxd]++
			in := base
			in.MaxDeliveries = int(maxd) // a handle on the policy in force changes nothing
			q2, err := s2.Queue("t", in)
			require.NoError(t, err)
			dls := mustDeadLetters(t, q2)
			st := q2.Stats()
			require.NoError(t, s2.Close())
			at := fmt.Sprintf("power loss after %d operations of the change (which returned %v), clone %d", k, qerr, seed)
			switch maxd {
			case 5:
				require.Empty(t, dls, "%s: the old policy is in force, yet messages delivered once are dead letters", at)
				require.Equal(t, n, st.Ready, "%s: %+v", at, st)
			case 1:
				require.Len(t, dls, n, "%s: the lowered policy is in force, yet not every message delivered once is a dead letter (%+v)", at, st)
				for _, dl := range dls {
					require.Equal(t, 1, dl.Deliveries, at)
				}
				require.Zero(t, st.Ready, at)
			default:
				t.Fatalf("%s: MaxDeliveries %d is neither policy", at, maxd)
			}
		}
	}
	t.Logf("clones by the policy found in force: %v", outcomes)
	require.NotZero(t, outcomes[5], "no crash point came before the change was durable")
	require.NotZero(t, outcomes[1], "no crash point kept the change")
}

// A lowering of MaxDeliveries that a power loss cut short (its
// declaration durable, a dead letter behind it not) is finished by the
// next process's first successful call of Queue for that name. A first
// call that fails (here the clock panics once) must leave it to the next
// one: otherwise Receive hands the message a delivery beyond
// MaxDeliveries.
func TestAFirstQueueCallThatFailsLeavesACutShortLoweringToTheNext(t *testing.T) {
	root := fastDir(t)
	base := broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 5, MaxMessageBytes: 512}
	lowered := base
	lowered.MaxDeliveries = 1
	found := false
	sweeps := 0
	for k := int64(0); !found; k++ {
		require.Less(t, k, int64(200), "no crash point left the declaration without its dead letters")
		dir := filepath.Join(root, fmt.Sprintf("run-%d-%d", sweeps, k))
		cfs, clock, qerr := lowerUnderPowerLoss(t, dir, k, base, lowered, 1)
		if qerr == nil {
			// How the group commit gathers the call's records into
			// writes varies from run to run, and with it what a crash
			// k operations in cuts: sweep the crash points again.
			sweeps++
			require.Less(t, sweeps, 20, "no crash point left the declaration without its dead letters")
			k = -1
			continue
		}
		for seed := 1; seed < 40 && !found; seed++ {
			co := vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: 1, TearLastWrite: true, Rand: rand.New(rand.NewPCG(uint64(k), uint64(seed)))}
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d-%d", sweeps, k, seed))
			require.NoError(t, cfs.CrashClone(clone, co))
			var panicky atomic.Bool
			now := func() time.Time {
				if panicky.Load() {
					panic("clock unavailable")
				}
				return clock.Now()
			}
			s2, err := broker.Open(clone, broker.Options{Now: now, SegmentBytes: broker.MinSegmentBytes})
			require.NoError(t, err)
			maxd, _ := broker.DeclaredMaxDeliveries(s2, "t")
			if maxd != 1 {
				require.NoError(t, s2.Close())
				continue
			}
			panicky.Store(true)
			_, err = s2.Queue("t", lowered)
			panicky.Store(false)
			if err == nil {
				require.NoError(t, s2.Close()) // the dead letter was logged: nothing to finish
				continue
			}
			found = true
			q2, err := s2.Queue("t", lowered)
			require.NoError(t, err, "the clock works again")
			ds, err := q2.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.NoError(t, s2.Close())
			for _, d := range ds {
				t.Errorf("power loss after %d ops: the lowering to MaxDeliveries 1 was durable, the first Queue call failed (%v), the second succeeded, and Receive then handed message %s delivery %d, beyond MaxDeliveries 1",
					k, "clock panicked", d.Message.ID, d.Deliveries)
			}
		}
	}
}

// lowerUnderPowerLoss opens a store in dir on a CrashFS, declares queue
// "t" with base, publishes n messages and nacks each once (ready again,
// one delivery spent), then loses power k file operations into the
// declaration of lowered. It returns the CrashFS to clone, the store's
// clock, and what the declaration returned (nil: it completed before the
// power failed).
func lowerUnderPowerLoss(t *testing.T, dir string, k int64, base, lowered broker.PolicyValue, n int) (*vfs.CrashFS, *fakeClock, error) {
	t.Helper()
	clock := newFakeClock()
	cfs := vfs.NewCrashFS(vfs.Default)
	opts := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: cfs}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("t", base)
	require.NoError(t, err)
	for i := range n {
		mustPublish(t, q, fmt.Sprint("m", i))
	}
	ds, err := q.Receive(ctx(t), n)
	require.NoError(t, err)
	require.Len(t, ds, n)
	for _, d := range ds {
		mustNack(t, q, d.Lease.Receipt, nil)
	}
	cfs.CrashAfter(cfs.Ops() + k)
	_, qerr := s.Queue("t", lowered)
	_ = s.Close()
	return cfs, clock, qerr
}
