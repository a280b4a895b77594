package recovery

// Steps that the checker's tests (check_*_test.go) share: a checker fed
// journals only, copies of a store as it was at one instant, the journal
// entries of one publish and one delivery on the work queue, and the
// check that a call in flight at a kill, once a store after the kill has
// shown it done or undone, stays so.

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// checkerWithoutStores returns a checker for tests that feed it journals
// only: it never reads a journal file back.
func checkerWithoutStores(t *testing.T) *Checker {
	t.Helper()
	return NewChecker(func(int) string { return filepath.Join(t.TempDir(), "none") })
}

// copyOfStore copies the store in dir to a new directory and returns it:
// the store as it is now, while dir goes on.
func copyOfStore(t *testing.T, dir string) string {
	t.Helper()
	cp := t.TempDir()
	require.NoError(t, CopyTree(dir, cp))
	return cp
}

// publishTimed publishes pub0's first work message of cycle 1 on q and
// returns it with its journal entry, timed on the real clock around the
// call.
func publishTimed(t *testing.T, q *broker.Queue) (broker.MessageValue, Entry) {
	t.Helper()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	t0 := time.Now().UnixNano()
	m, err := q.Publish(context.Background(), Payload(ref))
	require.NoError(t, err)
	t1 := time.Now().UnixNano()
	return m, Entry{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{m.ID}, Refs: []string{ref},
		Enq: m.EnqueuedAt.UnixNano(), T0: t0, T1: t1}
}

// receiveTimed receives one message from the work queue q, failing t
// unless exactly one comes, and returns it with con0's journal entry of
// the delivery with intent, timed on the real clock around the call.
func receiveTimed(t *testing.T, q *broker.Queue, intent Intent) (broker.DeliveryValue, Entry) {
	t.Helper()
	t0 := time.Now().UnixNano()
	ds, err := q.Receive(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	t1 := time.Now().UnixNano()
	return ds[0], deliveredEntry("con0", QueueWork, ds[0], intent, t0, t1)
}

// rejectJournaled publishes a work message on q, receives it (intent
// reject) and rejects it with cause, and returns the message and the
// journal of cycle 1: its start, the publish, the delivery and the
// Reject, each timed on the real clock around its call.
func rejectJournaled(t *testing.T, q *broker.Queue, cause error) (broker.MessageValue, []Entry) {
	t.Helper()
	m, pub := publishTimed(t, q)
	d, del := receiveTimed(t, q, IntentReject)
	t0 := time.Now().UnixNano()
	require.NoError(t, q.Reject(context.Background(), d.Lease.Receipt, cause))
	t1 := time.Now().UnixNano()
	return m, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}, pub, del,
		{Op: OpRejected, Who: "con0", Queue: QueueWork, ID: m.ID, Del: 1, T0: t0, T1: t1}}
}

// storeOfOnePublish makes a store holding pub0's first work message of
// cycle 1, and a checker whose cycle 1 journals that publish as returned
// (at the message's EnqueuedAt) and is sound. It returns the checker, the
// store's directory and the message.
func storeOfOnePublish(t *testing.T) (*Checker, string, broker.MessageValue) {
	t.Helper()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	dir, ms := storeHolding(t, ref)
	m := ms[0]
	enq := m.EnqueuedAt.UnixNano()
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{m.ID}, Refs: []string{ref}, Enq: enq, T0: enq, T1: enq},
	})
	require.NoError(t, c.Err())
	return c, dir, m
}

// requireSettledByFirstLook checks a call in flight at the kill that ends
// cycle 1 (journaled as cycle1, which must be sound): the drain of the
// store first, after that kill, must pass (firstOK says why it may), and
// settles the call; after a cycle 2 that journals nothing, the drain of
// the store later must fail with an error containing want (msgAndArgs say
// what later broke).
func requireSettledByFirstLook(t *testing.T, cycle1 []Entry, first, firstOK, later, want string, msgAndArgs ...any) {
	t.Helper()
	c := checkerWithoutStores(t)
	c.AddCycle(1, cycle1)
	require.NoError(t, c.Err())
	require.NoError(t, c.CheckDrain(first), firstOK)

	c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}})
	require.ErrorContains(t, c.CheckDrain(later), want, msgAndArgs...)
}
