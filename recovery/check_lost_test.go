package recovery

import (
	"context"
	"path/filepath"
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
	c := NewChecker(func(int) string { return filepath.Join(t.TempDir(), "none") })
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
	s, err := broker.Open(dir, broker.Options{SegmentBytes: SegmentBytes})
	require.NoError(t, err)
	var out []broker.MessageValue
	for _, name := range QueueNames {
		p, _ := Policy(name)
		q, err := s.Queue(name, p)
		require.NoError(t, err)
		if name != QueueWork {
			continue
		}
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
	}
	require.NoError(t, s.Close())
	return dir, out
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
