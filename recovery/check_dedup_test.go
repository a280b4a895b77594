package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/broker"
)

// TestInFlightKeyedOriginalHoldsItsKey: a PublishKeyed in flight at a
// kill whose message the store kept is its key's original from then on,
// held to the dedup rules like one whose publish returned: a PublishKeyed
// of the same key within the window must return it, so a new message
// enqueued for that key is a violation.
func TestInFlightKeyedOriginalHoldsItsKey(t *testing.T) {
	key := "pub0-k01"
	c, orig := inFlightKeyedOriginal(t, key)

	// Cycle 2: PublishKeyed of the same key, within the window, returned a
	// new message instead of the original.
	enq := orig.EnqueuedAt.Add(500 * time.Millisecond).UnixNano()
	ref2 := MakeRef(Ref{Queue: QueueWork, Cycle: 2, Who: "pub0", N: 1, Key: key})
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, Key: key, IDs: []string{"00000000000fffff"}, Refs: []string{ref2},
			Enq: enq, T0: enq, T1: enq},
	})
	require.ErrorContains(t, c.Err(), "enqueued a new message while the key's original "+orig.ID,
		"a new message for %q within %v of its original %s", key, DedupWindow, orig.ID)
}

// TestDuplicateOfInFlightOriginalKeepsItsEnqueuedAt: a duplicate returns
// its original as it was enqueued (same ID and EnqueuedAt), also when the
// original is a publish in flight at a kill that a store showed later.
func TestDuplicateOfInFlightOriginalKeepsItsEnqueuedAt(t *testing.T) {
	key := "pub0-k01"
	c, orig := inFlightKeyedOriginal(t, key)

	at := orig.EnqueuedAt.Add(300 * time.Millisecond).UnixNano()
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: "all"},
		{Op: OpDuplicate, Who: "pub0", Queue: QueueWork, N: 1, Key: key, ID: orig.ID,
			Enq: orig.EnqueuedAt.Add(-time.Hour).UnixNano(), T0: at, T1: at},
	})
	require.ErrorContains(t, c.Err(), "returned the original with EnqueuedAt", "a duplicate must return the original's EnqueuedAt %s", orig.EnqueuedAt)
}

// TestDuplicatePastTheWindowIsALoss: a key strictly older than the window
// (by the broker's clock) is forgotten before a keyed publish looks it up,
// so a PublishKeyed that started more than the window after its key's
// original was enqueued must enqueue a new message; one that returns the
// old original as a duplicate dropped its payload.
func TestDuplicatePastTheWindowIsALoss(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	key := "pub0-k03"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1, Key: key})
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, Key: key, IDs: []string{"0000000000000001"}, Refs: []string{ref},
			Enq: base, T0: base, T1: base},
	})
	require.NoError(t, c.Err())

	// Within the window at the call's start: a sound duplicate.
	t0 := base + int64(DedupWindow)
	c.AddCycle(2, []Entry{
		{Op: OpStart, Cycle: 2, Sync: "all"},
		{Op: OpDuplicate, Who: "pub0", Queue: QueueWork, N: 1, Key: key, ID: "0000000000000001", Enq: base, T0: t0, T1: t0 + 1000},
	})
	require.NoError(t, c.Err(), "an original enqueued exactly the window before the call is still remembered")

	t0 = base + int64(DedupWindow) + int64(time.Second)
	c.AddCycle(3, []Entry{
		{Op: OpStart, Cycle: 3, Sync: "all"},
		{Op: OpDuplicate, Who: "pub0", Queue: QueueWork, N: 1, Key: key, ID: "0000000000000001", Enq: base, T0: t0, T1: t0 + 1000},
	})
	require.ErrorContains(t, c.Err(), "past the 2s window",
		"a duplicate of an original enqueued %v before the call started", time.Duration(t0-base))
}

// TestAnInFlightKeyedPublishWithinTheWindowEnqueuesNothing: a
// PublishKeyed in flight at a kill is held to the window like one that
// returned. Here pub0's PublishKeyed(K) returned message X, and its next
// PublishKeyed(K), a few milliseconds later, was in flight at the kill;
// the store after the kill holds X and a new message for K. A key seen
// within the window returns the original and enqueues nothing, so the
// store forgot the key early.
//
// The second message comes 100 ms after X, at X's very instant (a clock
// that did not move between them: the checker once let a message of the
// key's original's EnqueuedAt through), and 100 ms before X (the checker
// let that through too: the call in flight started after X's returned,
// so a message enqueued before X is as much a new message within the
// window, and a clock reading besides that no call could have made).
func TestAnInFlightKeyedPublishWithinTheWindowEnqueuesNothing(t *testing.T) {
	for _, step := range []time.Duration{100 * time.Millisecond, 0, -100 * time.Millisecond} {
		t.Run(step.String(), func(t *testing.T) { inFlightKeyedPublishAfter(t, step) })
	}
}

func inFlightKeyedPublishAfter(t *testing.T, step time.Duration) {
	ctx := context.Background()
	key := "pub0-k07"
	refX := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1, Key: key})
	refZ := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 2, Key: key})
	dir := t.TempDir()
	// The store's clock stands still: on the real clock, X's fdatasync on
	// a loaded machine could take DedupWindow/2 and more, and Z would then
	// not be the within-the-window publish this test is about.
	clk := &stepClock{now: time.Now().Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueWork, clk.Now)
	// What a store that forgot the key holds after the second call: a new
	// message carrying the key, enqueued within the window of X (before
	// X, for a negative step: written first, at the earlier instant).
	var z broker.MessageValue
	var err error
	if step < 0 {
		z, err = q.Publish(ctx, Payload(refZ))
		require.NoError(t, err)
		clk.Set(clk.Now().Add(-step))
	}
	t0 := clk.Now().UnixNano()
	x, err := q.PublishKeyed(ctx, key, Payload(refX))
	require.NoError(t, err)
	t1 := clk.Now().UnixNano()
	if step >= 0 {
		clk.Set(clk.Now().Add(step))
		z, err = q.Publish(ctx, Payload(refZ))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	require.Equal(t, step, z.EnqueuedAt.Sub(x.EnqueuedAt), "the second message's EnqueuedAt less the original's")

	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, Key: key, IDs: []string{x.ID}, Refs: []string{refX},
			Enq: x.EnqueuedAt.UnixNano(), T0: t0, T1: t1},
	})
	require.NoError(t, c.Err())
	require.ErrorContains(t, c.CheckDrain(dir), "the key's original "+x.ID,
		"key %q: original %s, and a second message %s for it enqueued %v after it, within the %v window",
		key, x.ID, z.ID, z.EnqueuedAt.Sub(x.EnqueuedAt), DedupWindow)
}

// inFlightKeyedOriginal returns a checker that has checked cycle 1, whose
// child was killed with pub0's first PublishKeyed (of key) in flight, and
// found its message in the store; and that message.
func inFlightKeyedOriginal(t *testing.T, key string) (*Checker, broker.MessageValue) {
	t.Helper()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1, Key: key})
	dir, ms := storeHolding(t, ref)
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}})
	require.NoError(t, c.CheckDrain(dir), "the in-flight original is a legitimate find")
	require.Equal(t, 1, c.Figures.InFlight)
	return c, ms[0]
}
