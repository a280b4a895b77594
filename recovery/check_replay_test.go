package recovery

import (
	"context"
	"path/filepath"
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
	c := NewChecker(func(int) string { return filepath.Join(t.TempDir(), "none") })
	c.AddCycle(1, append(entries, replaying))
	require.NoError(t, c.CheckDrain(dir), "a replay in flight at the kill may not have happened")

	c = NewChecker(func(int) string { return filepath.Join(t.TempDir(), "none") })
	c.AddCycle(1, append(entries, replaying, Entry{Op: OpReplayed, Who: "janitor", Queue: QueueWork, ID: m.ID, T0: at + 1, T1: at + 2}))
	require.NoError(t, c.Err(), "the journal alone is sound")
	// The store never saw the replay: the dead letter is as it was.
	require.ErrorContains(t, c.CheckDrain(dir), "the replay was lost",
		"ReplayDeadLetter(%s) returned nil, yet after the kill the same dead letter (LEASE_EXPIRED, %d deliveries, FailedAt %s) is still there", m.ID, dl.Deliveries, dl.FailedAt)
}
