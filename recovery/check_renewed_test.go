package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// renewedReject is a store in which a flow message was received, its
// lease renewed as Consume renews it (ExtendBy 1 s, every 100 ms) and
// rejected after the ExpiresAt Receive returned, within the renewed
// lease. It returns copies of the store, the journal entries of the
// publish, the delivery as Receive returned it (with the reject intent;
// T0 and T1 its Receive's) and each renewal as Extend returned it, and
// the instant Receive's lease would have lapsed.
type renewedReject struct {
	dead     func() string // a copy of the store with the dead letter
	pub, del Entry
	renewals []Entry
	exp      int64 // the ExpiresAt Receive returned
}

func buildRenewedReject(t *testing.T) renewedReject {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	clk := &stepClock{now: time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueFlow, clk.Now)
	ref := MakeRef(Ref{Queue: QueueFlow, Cycle: 1, Who: "pub0", N: 1})
	m, err := q.Publish(ctx, Payload(ref))
	require.NoError(t, err)
	enq := m.EnqueuedAt.UnixNano()
	r := renewedReject{pub: Entry{Op: OpPublished, Who: "pub0", Queue: QueueFlow, N: 1, IDs: []string{m.ID}, Refs: []string{ref},
		Enq: enq, T0: enq, T1: enq}}
	clk.Set(clk.Now().Add(time.Second))
	at := clk.Now().UnixNano()
	ds, err := q.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	r.del = deliveredEntry("flow", QueueFlow, ds[0], IntentReject, at, at)
	r.exp = ds[0].Lease.ExpiresAt.UnixNano()
	// The handler runs for 1.2 s (a loaded machine: its journal write, its
	// pause), and Consume renews the lease every 100 ms.
	receipt := ds[0].Lease.Receipt
	for range 12 {
		clk.Set(clk.Now().Add(100 * time.Millisecond))
		t0 := clk.Now().UnixNano()
		lv, err := q.Extend(ctx, receipt, time.Second)
		require.NoError(t, err)
		receipt = lv.Receipt
		r.renewals = append(r.renewals, Entry{Op: OpExtended, Who: "flow", Queue: QueueFlow, ID: m.ID, Del: 1,
			Exp: lv.ExpiresAt.UnixNano(), By: int64(time.Second), T0: t0, T1: t0})
	}
	require.Greater(t, clk.Now().UnixNano(), r.exp, "the reject comes after the ExpiresAt Receive returned")
	require.NoError(t, q.Reject(ctx, receipt, causeFor(QueueFlow, IntentReject)))
	dls, err := q.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.GreaterOrEqual(t, dls[0].FailedAt.UnixNano(), r.exp, "the dead letter failed after Receive's lease would have lapsed")
	require.NoError(t, s.Close())
	r.dead = func() string {
		cp := t.TempDir()
		require.NoError(t, CopyTree(dir, cp))
		return cp
	}
	return r
}

// TestARejectWithinLeaseRenewalsConsumeDidNotJournal: in one child in
// three Consume runs on the flow queue itself, and its handler journals
// each delivery (T0 0: when Receive began is not known) with its intent;
// Consume renews the lease while the handler runs and journals no
// renewal, nor the Reject it makes when the handler fails with
// DoNotRetry. A handler slower than the visibility timeout (its journal
// write and its pause on a loaded machine) has its reject dated after
// the ExpiresAt the delivery was journaled with, within the renewed
// lease: the store after the kill shows that dead letter, and so does
// every later look at it. The drain once took it for a lapse (no reject
// after the lease) and dropped the reject, and the next look reported the
// dead letter as one the journal does not explain. The control: the same
// store, where the journal bracketed the Receive (a consumer whose Extend
// calls are journaled, and none is), is reported.
func TestARejectWithinLeaseRenewalsConsumeDidNotJournal(t *testing.T) {
	r := buildRenewedReject(t)

	t.Run("Consume on the queue itself", func(t *testing.T) {
		del := r.del
		del.T0 = 0
		c := checkerWithoutStores(t)
		c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}, r.pub, del})
		require.NoError(t, c.Err())
		require.NoError(t, c.CheckDrain(r.dead()), "the reject in flight at the kill happened, within a renewed lease")
		require.NoError(t, c.CheckInPlace(r.dead()), "and the same store, looked at again, shows its dead letter still")
		c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}})
		require.NoError(t, c.CheckDrain(r.dead()), "and so does the store after the next kill")
	})

	t.Run("control: a Receive the journal bracketed, no renewal journaled", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}, r.pub, r.del})
		require.NoError(t, c.Err())
		require.NoError(t, c.CheckDrain(r.dead()))
		require.ErrorContains(t, c.CheckInPlace(r.dead()), "the journal has a reject meant for delivery 0",
			"no Extend of the delivery was journaled: a reject dead letter dated after its lease's ExpiresAt is no reject of it")
	})

	t.Run("control: the renewals journaled", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, append([]Entry{{Op: OpStart, Cycle: 1, Sync: "all"}, r.pub, r.del}, r.renewals...))
		require.NoError(t, c.Err())
		require.NoError(t, c.CheckDrain(r.dead()))
		require.NoError(t, c.CheckInPlace(r.dead()), "the reject came within the lease the last Extend returned")
	})
}

// TestARejectWithinAnExtendJournaledOnlyAsReturned: under SyncPublish the
// flow queue's wrapper journals each Extend Consume makes only as
// returned (OpReturned) until a publish makes it certain. A power loss
// that keeps the Extend's record and the reject's after it, neither made
// certain, leaves a dead letter dated within the extended lease, after
// the ExpiresAt Receive returned: the reject happened. So when the reject
// itself returned (journaled as returned too) before the power failed.
func TestARejectWithinAnExtendJournaledOnlyAsReturned(t *testing.T) {
	r := buildRenewedReject(t)
	maybe := r.del
	maybe.Op = OpMaybe
	returned := func(e Entry) Entry {
		e.Op, e.Settle = OpReturned, e.Op
		return e
	}
	var extends []Entry
	for _, e := range r.renewals {
		extends = append(extends, returned(e))
	}
	last := r.renewals[len(r.renewals)-1]
	rejected := returned(Entry{Op: OpRejected, Who: "flow", Queue: QueueFlow, ID: r.del.ID, Del: 1, T0: last.T1 + 1, T1: last.T1 + 2})

	for _, tc := range []struct {
		name    string
		entries []Entry
	}{
		{"the reject in flight", extends},
		{"the reject returned", append(append([]Entry{}, extends...), rejected)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkerWithoutStores(t)
			c.AddCycle(1, append([]Entry{{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()}, r.pub, maybe}, tc.entries...))
			require.NoError(t, c.Err())
			require.NoError(t, c.CheckDrain(r.dead()), "the power loss kept the reject")
			require.NoError(t, c.CheckInPlace(r.dead()), "and the same store, looked at again, shows its dead letter still")
		})
	}
}
