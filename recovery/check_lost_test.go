package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// onePublishJournaled is a checker whose journal holds one Publish to the
// work queue that returned nil.
func onePublishJournaled(t *testing.T) *Checker {
	t.Helper()
	base := time.Now().Add(-10 * time.Second).UnixNano()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	c := checkerWithoutStores(t)
	c.AddCycle(1, []Entry{
		{Op: OpStart, Cycle: 1, Sync: "all"},
		{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{"00000000000000aa"}, Refs: []string{ref},
			Enq: base, T0: base, T1: base},
	})
	require.NoError(t, c.Err(), "the journal alone breaks nothing")
	return c
}

// storeWithQueues makes a store in a new directory declaring the queues.
func storeWithQueues(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	s, err := broker.Open(dir, broker.Options{SegmentBytes: SegmentBytes})
	require.NoError(t, err)
	for _, name := range names {
		p, ok := Policy(name)
		require.True(t, ok, name)
		_, err := s.Queue(name, p)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	return dir
}

// storeHolding makes a store in a new directory declaring the workload's
// queues and holding, on the work queue, one message per payload
// reference given, published keyed when the reference has a key; it
// returns the directory and the messages.
func storeHolding(t *testing.T, refs ...string) (string, []broker.MessageValue) {
	t.Helper()
	dir := t.TempDir()
	s, q := openQueueOf(t, dir, QueueWork)
	var out []broker.MessageValue
	for _, ref := range refs {
		r, err := ParseRef(ref)
		require.NoError(t, err)
		var m broker.MessageValue
		if r.Key != "" {
			m, err = q.PublishKeyed(context.Background(), r.Key, Payload(ref))
		} else {
			m, err = q.Publish(context.Background(), Payload(ref))
		}
		require.NoError(t, err)
		out = append(out, m)
	}
	require.NoError(t, s.Close())
	return dir, out
}

// openQueueOf opens the store in dir on the real clock and declares the
// workload's queues; it returns the store and the queue named.
func openQueueOf(t *testing.T, dir, name string) (*broker.Store, *broker.Queue) {
	t.Helper()
	return openQueueAt(t, dir, name, nil)
}

// openQueueAt is openQueueOf with the store's clock now (nil: the real
// one).
func openQueueAt(t *testing.T, dir, name string, now func() time.Time) (*broker.Store, *broker.Queue) {
	t.Helper()
	s, err := broker.Open(dir, broker.Options{SegmentBytes: SegmentBytes, Now: now})
	require.NoError(t, err)
	var out *broker.Queue
	for _, n := range QueueNames {
		p, _ := Policy(n)
		q, err := s.Queue(n, p)
		require.NoError(t, err)
		if n == name {
			out = q
		}
	}
	return s, out
}

// TestCheckDrainSeesAMessageLostWithItsQueue: a message whose Publish
// returned nil must be in the store, whether or not the store still lists
// its queue: a store holding the queue without the message, one holding
// only another queue, and an empty one (what CheckCopy drains when the
// store's directory is gone) all fail the check.
func TestCheckDrainSeesAMessageLostWithItsQueue(t *testing.T) {
	err := onePublishJournaled(t).CheckDrain(storeWithQueues(t, QueueWork))
	require.ErrorContains(t, err, "lost: ")
	require.ErrorContains(t, err, "not in the store (work)")

	for what, dir := range map[string]string{"another queue only": storeWithQueues(t, QueueFlow), "no queue": t.TempDir()} {
		err := onePublishJournaled(t).CheckDrain(dir)
		require.ErrorContains(t, err, "lost: ", what)
		require.ErrorContains(t, err, "the store has no queue work", what)
	}
}

// TestCheckInPlaceSeesAMessageLostWithItsQueue: CheckInPlace counts the
// messages of the queues the store lists, and must also see one whose
// whole queue is gone.
func TestCheckInPlaceSeesAMessageLostWithItsQueue(t *testing.T) {
	err := onePublishJournaled(t).CheckInPlace(storeWithQueues(t, QueueWork))
	require.ErrorContains(t, err, "the journal says at least 1 must be there")

	err = onePublishJournaled(t).CheckInPlace(t.TempDir())
	require.ErrorContains(t, err, "in place: lost: ")
	require.ErrorContains(t, err, "the store has no queue work")
}

// TestAckInFlightSeenUndoneMustStay: a message whose ack was under way at
// a kill may be gone; but once a store opened after that kill shows it,
// the ack did not happen (the process that would have made it is gone),
// and the message must stay like any other: a later store without it has
// lost it.
func TestAckInFlightSeenUndoneMustStay(t *testing.T) {
	c, dir, m := storeOfOnePublish(t)
	// Cycle 2: a consumer receives the message and journals the delivery
	// with an ack intent; the kill comes before the Ack.
	s, q := openQueueOf(t, dir, QueueWork)
	_, del := receiveTimed(t, q, IntentAck)
	require.NoError(t, s.Close())
	c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}, del})
	// The kill of cycle 2 left the message in the store (the Ack did not
	// happen): the drain of a copy shows it.
	require.NoError(t, c.CheckDrain(copyOfStore(t, dir)))

	// Cycle 3 acks nothing; its store has lost the message.
	c.AddCycle(3, []Entry{{Op: OpStart, Cycle: 3, Sync: "all"}})
	empty, _ := storeHolding(t)
	require.ErrorContains(t, c.CheckDrain(empty), "lost: ",
		"message %s was seen in the store after the kill that left its ack in flight; losing it later must be a violation", m.ID)
}

// TestDeleteInFlightSeenUndoneMustStay: as for an ack, a delete of a dead
// letter under way at a kill that a store opened in place after the kill
// shows undone never happens, and the dead letter must stay.
func TestDeleteInFlightSeenUndoneMustStay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, q := openQueueOf(t, dir, QueueWork)
	m, entries := rejectJournaled(t, q, causeFor(QueueWork, IntentReject))
	ref := entries[1].Refs[0]
	t0 := time.Now().UnixNano()
	dls, err := q.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	t1 := time.Now().UnixNano()
	require.NoError(t, s.Close())
	dl := dls[0]
	entries = append(entries, Entry{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: m.ID, Ref: ref, Enq: m.EnqueuedAt.UnixNano(),
		Del: dl.Deliveries, Reason: dl.Reason, Code: dl.Code, Cause: dl.Cause, Failed: dl.FailedAt.UnixNano(), T0: t0, T1: t1})

	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	require.NoError(t, c.CheckInPlace(dir), "the delete in flight at the kill did not happen")
	c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: "all"}})
	require.ErrorContains(t, c.CheckInPlace(storeWithQueues(t, QueueWork)), "must be there",
		"the dead letter %s was seen after the kill that left its delete in flight; losing it later must be a violation", m.ID)
}
