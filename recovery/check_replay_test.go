package recovery

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestConfirmedReplayOfALapsedDeadLetterMustHold: a ReplayDeadLetter that
// returned nil took the dead letter out of the store for good; a dead
// letter of the message seen afterwards failed after the replay started.
// Here a work message lapsed on its MaxDeliveries-th lease
// (LEASE_EXPIRED), was replayed (OpReplaying, then OpReplayed), and the
// store after the kill still shows that very dead letter: the replay was
// lost. (A lost replay of a nack's or a reject's dead letter is seen by
// the counts their reasons need; a LEASE_EXPIRED one needs none the
// replay changed.)
func TestConfirmedReplayOfALapsedDeadLetterMustHold(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := &stepClock{now: time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)}
	s, err := broker.Open(dir, broker.Options{SegmentBytes: SegmentBytes, Now: clk.Now})
	require.NoError(t, err)
	queues := map[string]*broker.Queue{}
	for _, name := range QueueNames {
		p, _ := Policy(name)
		queues[name], err = s.Queue(name, p)
		require.NoError(t, err)
	}
	q := queues[QueueWork]
	m, entries := publishJournaled(t, q)
	p, _ := Policy(QueueWork)
	for i := 1; i <= p.MaxDeliveries; i++ {
		clk.Set(clk.Now().Add(2 * p.VisibilityTimeout))
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, i, ds[0].Deliveries)
		at := clk.Now().UnixNano()
		entries = append(entries, deliveredEntry("con0", QueueWork, ds[0], IntentHold, at, at))
	}
	clk.Set(clk.Now().Add(2 * p.VisibilityTimeout))
	ds, err := q.Receive(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, ds)
	dls, err := q.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	dl := dls[0]
	require.Equal(t, broker.ReasonLeaseExpired, dl.Reason)
	require.NoError(t, s.Close())

	at := clk.Now().Add(time.Second).UnixNano()
	replaying := replayingEntry(entries[1], dl, at)

	// Without its result the replay was in flight at the kill: the dead
	// letter as it was is a sound store.
	c := checkerWithoutStores(t)
	c.AddCycle(1, append(entries, replaying))
	require.NoError(t, c.CheckDrain(dir), "a replay in flight at the kill may not have happened")

	c = checkerWithoutStores(t)
	c.AddCycle(1, append(entries, replaying, Entry{Op: OpReplayed, Who: "janitor", Queue: QueueWork, ID: m.ID, T0: at + 1, T1: at + 2}))
	require.NoError(t, c.Err(), "the journal alone is sound")
	// The store never saw the replay: the dead letter is as it was.
	require.ErrorContains(t, c.CheckDrain(dir), "the replay was lost",
		"ReplayDeadLetter(%s) returned nil, yet after the kill the same dead letter (LEASE_EXPIRED, %d deliveries, FailedAt %s) is still there", m.ID, dl.Deliveries, dl.FailedAt)
}

// replayedTwice is a work message rejected in cycle 1 and, in cycle 2, a
// child under SyncPublish that loses power, replayed, rejected, replayed
// again and delivered again, as the journals have it, with copies of the
// store in each state a power loss in cycle 2 may leave.
type replayedTwice struct {
	id     string
	cycle1 []Entry // the publish, delivery 1 and its reject, all certain
	cycle2 []Entry // two replays, each followed by a delivery journaled as a maybe
	// states holds the store after cycle 1 (dead1: its reject's dead
	// letter), after the first replay (ready1), after the delivery that
	// follows it (leased1), after that delivery's reject (dead2), after
	// the second replay (ready2), and after the last delivery (leased2).
	states map[string]string
}

// storeStates lists replayedTwice's states in the order cycle 2 made them.
var storeStates = []string{"dead1", "ready1", "leased1", "dead2", "ready2", "leased2"}

func newReplayedTwice(t *testing.T) *replayedTwice {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	s, q := openQueueOf(t, dir, QueueWork)
	rt := &replayedTwice{states: map[string]string{}}
	snapshot := func(name string) {
		cp := t.TempDir()
		require.NoError(t, CopyTree(dir, cp))
		rt.states[name] = cp
	}
	m, pubs := publishJournaled(t, q)
	rt.id = m.ID
	pub := pubs[1]
	receive := func(who string, intent Intent) (broker.DeliveryValue, Entry) {
		t0 := time.Now().UnixNano()
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, 1, ds[0].Deliveries)
		return ds[0], deliveredEntry(who, QueueWork, ds[0], intent, t0, time.Now().UnixNano())
	}
	reject := func(d broker.DeliveryValue) (int64, int64) {
		t0 := time.Now().UnixNano()
		require.NoError(t, q.Reject(ctx, d.Lease.Receipt, causeFor(QueueWork, IntentReject)))
		return t0, time.Now().UnixNano()
	}
	replay := func() Entry {
		dls, err := q.DeadLetters(ctx, 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		e := replayingEntry(pub, dls[0], time.Now().UnixNano())
		require.NoError(t, q.ReplayDeadLetter(ctx, m.ID))
		return e
	}
	maybe := func(e Entry) Entry {
		e.Op = OpMaybe
		return e
	}

	d, del := receive("con0", IntentReject)
	t0, t1 := reject(d)
	rt.cycle1 = append(pubs, del, Entry{Op: OpRejected, Who: "con0", Queue: QueueWork, ID: m.ID, Del: 1, T0: t0, T1: t1})
	snapshot("dead1")

	rt.cycle2 = []Entry{{Op: OpStart, Cycle: 2, Sync: broker.SyncPublish.String()}, replay()}
	snapshot("ready1")
	d, del = receive("con1", IntentReject)
	snapshot("leased1")
	t0, t1 = reject(d)
	rt.cycle2 = append(rt.cycle2, maybe(del), returnedEntry("con1", QueueWork, m.ID, OpRejected, 1, t0, t1, 0))
	snapshot("dead2")
	rt.cycle2 = append(rt.cycle2, replay())
	snapshot("ready2")
	_, del = receive("con1", IntentHold)
	rt.cycle2 = append(rt.cycle2, maybe(del))
	snapshot("leased2")
	require.NoError(t, s.Close())
	return rt
}

// store returns a fresh copy of the store in state name (a drain takes
// leases in what it opens).
func (rt *replayedTwice) store(t *testing.T, name string) string {
	t.Helper()
	cp := t.TempDir()
	require.NoError(t, CopyTree(rt.states[name], cp))
	return cp
}

// checkedThrough returns a checker that has checked both cycles, the store
// after cycle 1, and the store in state after cycle 2's power loss.
func (rt *replayedTwice) checkedThrough(t *testing.T, state string) (*Checker, error) {
	t.Helper()
	c := checkerWithoutStores(t)
	c.AddCycle(1, rt.cycle1)
	require.NoError(t, c.CheckDrain(rt.store(t, "dead1")), "the reject of cycle 1 returned nil")
	c.AddCycle(2, rt.cycle2)
	require.NoError(t, c.Err(), "the journal of cycle 2 alone is sound")
	return c, c.CheckDrain(rt.store(t, state))
}

// TestTwoReplaysNoCommitCoveredMayBothBeLost: under SyncPublish a replay,
// a lease and a reject are written before their calls return and reach
// the device with the next commit; a power loss before it may take the
// last few. Here the janitor replayed a rejected message, a consumer
// received it and rejected it again (delivery 1, journaled as a maybe and
// a returned reject), the janitor replayed the new dead letter and a
// consumer received it once more, all in one cycle that lost power before
// a publish made any of it certain. The store after the power loss may
// show any prefix of that: the first dead letter (everything lost), the
// message ready or leased after the first replay, the second dead letter,
// or the message ready or leased after the second replay. The checker
// took only the last replay as in doubt: a store that lost both replays,
// showing the first dead letter, was reported as a reject dead letter the
// journal did not explain ("a reject meant for delivery 0").
//
// Whatever the store showed settles the calls for good, its process
// being gone: a later store that brings back a dead letter a replay took
// out, or shows a dead letter the store after the power loss had not, is
// still reported.
func TestTwoReplaysNoCommitCoveredMayBothBeLost(t *testing.T) {
	rt := newReplayedTwice(t)
	for _, tc := range []struct {
		state string
		// later are stores that may not follow this one with nothing
		// journaled, and what the checker says of each.
		later map[string]string
	}{
		{"dead1", map[string]string{"ready2": "after it was dead-lettered", "dead2": "the journal has a reject meant for delivery 0"}},
		{"ready1", map[string]string{"dead1": "the replay was lost", "dead2": "the replay was lost"}},
		{"leased1", map[string]string{"dead1": "the replay was lost", "dead2": "the replay was lost"}},
		{"dead2", map[string]string{"ready2": "after it was dead-lettered", "dead1": "the replay was lost"}},
		{"ready2", map[string]string{"dead1": "the replay was lost", "dead2": "the replay was lost"}},
		{"leased2", map[string]string{"dead1": "the replay was lost", "dead2": "the replay was lost"}},
	} {
		t.Run(tc.state, func(t *testing.T) {
			_, err := rt.checkedThrough(t, tc.state)
			require.NoError(t, err, "message %s: the power loss in cycle 2 may leave the store %s", rt.id, tc.state)
			for _, later := range storeStates {
				want, bad := tc.later[later]
				if !bad {
					continue
				}
				c, err := rt.checkedThrough(t, tc.state)
				require.NoError(t, err)
				c.AddCycle(3, []Entry{{Op: OpStart, Cycle: 3, Sync: broker.SyncPublish.String()}})
				require.ErrorContains(t, c.CheckDrain(rt.store(t, later)), want,
					"message %s: the store after cycle 2 was %s, and the next, with nothing journaled, is %s", rt.id, tc.state, later)
			}
		})
	}

	t.Run("the first dead letter, read again in the process that replayed it", func(t *testing.T) {
		c := checkerWithoutStores(t)
		c.AddCycle(1, rt.cycle1)
		again := rt.cycle2[1]
		again.T0, again.T1 = time.Now().UnixNano(), time.Now().UnixNano()
		c.AddCycle(2, append(slices.Clone(rt.cycle2), again))
		require.ErrorContains(t, c.Err(), "the journal has a reject meant for delivery 0",
			"message %s: the janitor read the first dead letter again after its replay and a later one returned in the same process", rt.id)
	})

	t.Run("the first dead letter, replayed in the next cycle", func(t *testing.T) {
		c, err := rt.checkedThrough(t, "dead1")
		require.NoError(t, err)
		replaying := rt.cycle2[1]
		replaying.T0, replaying.T1 = time.Now().UnixNano(), time.Now().UnixNano()
		c.AddCycle(3, []Entry{{Op: OpStart, Cycle: 3, Sync: broker.SyncAll.String()}, replaying,
			{Op: OpReplayed, Who: "janitor", Queue: QueueWork, ID: rt.id, T0: replaying.T1 + 1, T1: replaying.T1 + 2}})
		require.NoError(t, c.Err(), "message %s: the store after the power loss shows the first dead letter, which the next child replays", rt.id)
		require.NoError(t, c.CheckDrain(rt.store(t, "ready1")))
	})
}

// TestALostReplayWithTheDeathItUndidLeavesTheEarlierNacksToTheLapse: under
// SyncPublish a power loss may take a replay together with the death it
// undid and the lease before that. Here cycle 1 nacked every delivery but
// the last (all certain); cycle 2 delivered the last, whose nack
// dead-lettered the message, replayed it and delivered and acked it once
// more, and lost all of it. The store then goes on with the first life:
// cycle 3 hands out the last delivery again (certain), and when its lease
// lapses the dead letter records the failure the earlier nacks reported.
// The checker had taken the lost replay for the start of a new life and
// reported that dead letter as one no nack explains ("a nack meant for
// delivery 0"), as a 300-cycle soak of TestProcessCrash met.
func TestALostReplayWithTheDeathItUndidLeavesTheEarlierNacksToTheLapse(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := &stepClock{now: time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)}
	s, q := openQueueAt(t, dir, QueueWork, clk.Now)
	m, cycle1 := publishJournaled(t, q)
	max := maxDeliveries(QueueWork)
	receive := func(q *broker.Queue, want int) (broker.DeliveryValue, int64) {
		clk.Set(clk.Now().Add(time.Second))
		ds, err := q.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, want, ds[0].Deliveries)
		return ds[0], clk.Now().UnixNano()
	}
	copyOf := func(src string) string {
		cp := t.TempDir()
		require.NoError(t, CopyTree(src, cp))
		return cp
	}
	for i := 1; i < max; i++ {
		d, at := receive(q, i)
		cycle1 = append(cycle1, deliveredEntry("con0", QueueWork, d, IntentNack, at, at))
		nv, err := q.Nack(ctx, d.Lease.Receipt, causeFor(QueueWork, IntentNack))
		require.NoError(t, err)
		cycle1 = append(cycle1, Entry{Op: OpNacked, Who: "con0", Queue: QueueWork, ID: m.ID, Del: nv.Deliveries,
			Exp: nv.VisibleAt.UnixNano(), Dead: nv.DeadLettered, T0: at, T1: at})
	}
	after1 := copyOf(dir)

	cycle2 := []Entry{{Op: OpStart, Cycle: 2, Sync: broker.SyncPublish.String()}}
	d, at := receive(q, max)
	del := deliveredEntry("con0", QueueWork, d, IntentNack, at, at)
	del.Op = OpMaybe
	nv, err := q.Nack(ctx, d.Lease.Receipt, causeFor(QueueWork, IntentNack))
	require.NoError(t, err)
	require.True(t, nv.DeadLettered)
	nacked := returnedEntry("con0", QueueWork, m.ID, OpNacked, max, at, at, nv.VisibleAt.UnixNano())
	nacked.Dead = true
	dls, err := q.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	cycle2 = append(cycle2, del, nacked, replayingEntry(cycle1[1], dls[0], clk.Now().UnixNano()))
	require.NoError(t, q.ReplayDeadLetter(ctx, m.ID))
	d, at = receive(q, 1)
	again := deliveredEntry("con1", QueueWork, d, IntentAck, at, at)
	again.Op = OpMaybe
	require.NoError(t, q.Ack(ctx, d.Lease.Receipt))
	cycle2 = append(cycle2, again, returnedEntry("con1", QueueWork, m.ID, OpAcked, 1, at, at, 0))
	require.NoError(t, s.Close())

	// The power loss took all of cycle 2: the next child opens the store
	// cycle 1 left and hands out the last delivery again.
	dir3 := copyOf(after1)
	s, q = openQueueAt(t, dir3, QueueWork, clk.Now)
	d, at = receive(q, max)
	cycle3 := []Entry{{Op: OpStart, Cycle: 3, Sync: broker.SyncPublish.String()}, deliveredEntry("con0", QueueWork, d, IntentHold, at, at)}
	require.NoError(t, s.Close())

	c := checkerWithoutStores(t)
	c.AddCycle(1, cycle1)
	require.NoError(t, c.CheckDrain(copyOf(after1)))
	c.AddCycle(2, cycle2)
	require.NoError(t, c.Err(), "the journal of cycle 2 alone is sound")
	require.NoError(t, c.CheckDrain(copyOf(after1)), "the power loss may take all of cycle 2")
	c.AddCycle(3, cycle3)
	require.NoError(t, c.Err())
	require.NoError(t, c.CheckDrain(dir3), "message %s: its last delivery's lease lapsed in the first life, after nacks of it", m.ID)
}
