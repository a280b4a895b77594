package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The clock tests below kill the store (clockStore.kill) instead of closing
// it: a clean Close writes a checkpoint that holds the state, so the log's
// records of a nack, an Extend or an eviction are never replayed; after a
// kill, Open has only the log to go by. Under SyncAll a call that returned
// has its record on disk.

// TestARetryDelaySurvivesAKill: "Leases and retry delays survive a kill: a
// message is not delivered again ... before a nack's VisibleAt" (doc.go),
// as they survive a clean restart (API.md §5.4). The replay of the nack's
// record must give the message its retry instant back, not make it
// visible at once.
func TestARetryDelaySurvivesAKill(t *testing.T) {
	cs := newClockStore(t)
	m := cs.publish("a")
	d := cs.receiveOne()
	nv, err := cs.q.Nack(context.Background(), d.Lease.Receipt, nil)
	require.NoError(t, err)
	require.True(t, clockBase.Add(clockPolicy.RetryDelay).Equal(nv.VisibleAt), "VisibleAt %s", nv.VisibleAt)

	cs.kill()
	cs.clock.Set(clockBase.Add(time.Minute))
	cs.open()
	cs.requireNothing("a retry delay survives a kill: VisibleAt is 19 minutes away")
	cs.at(nv.VisibleAt.Add(-time.Nanosecond)).requireNothing("one nanosecond before VisibleAt")
	again := cs.at(nv.VisibleAt).receiveOne()
	require.Equal(t, m.ID, again.Message.ID)
	require.Equal(t, 2, again.Deliveries)
}

// TestAnExtendedLeaseSurvivesAKill: across a kill "a message is not
// delivered again before its lease's ExpiresAt (or an Extend's, which may
// shorten it)" (doc.go). The replay of the Extend's record must hold the
// lease to the new ExpiresAt, not to the one Receive gave it.
func TestAnExtendedLeaseSurvivesAKill(t *testing.T) {
	cs := newClockStore(t)
	m := cs.publish("a")
	d := cs.receiveOne()
	require.True(t, clockBase.Add(clockPolicy.VisibilityTimeout).Equal(d.Lease.ExpiresAt))
	lv, err := cs.q.Extend(context.Background(), d.Lease.Receipt, 2*time.Hour)
	require.NoError(t, err)
	require.True(t, clockBase.Add(2*time.Hour).Equal(lv.ExpiresAt), "ExpiresAt %s", lv.ExpiresAt)

	cs.kill()
	cs.clock.Set(d.Lease.ExpiresAt.Add(time.Minute))
	cs.open()
	cs.requireNothing("the extended lease holds until its new ExpiresAt, an hour and 20 minutes away")
	cs.at(lv.ExpiresAt.Add(-time.Nanosecond)).requireNothing("one nanosecond before the extended ExpiresAt")
	again := cs.at(lv.ExpiresAt).receiveOne()
	require.Equal(t, m.ID, again.Message.ID)
	require.Equal(t, 2, again.Deliveries)
}

// TestAForgottenDedupKeyStaysForgottenAcrossAKill: a key evicted before a
// kill stays evicted after it. index.Queue.EvictSeen: "the caller then
// logs an evict event with the same clock and window, so that a replay
// forgets the same keys". The clock steps back across the kill, and "if
// the clock goes backwards, nothing is evicted" (API.md §4): only the
// logged eviction can tell the reopened store that the key was forgotten,
// so a publish of it enqueues a new message, as it would have without the
// kill, rather than return the forgotten original.
func TestAForgottenDedupKeyStaysForgottenAcrossAKill(t *testing.T) {
	ctx := context.Background()
	cs := newClockStore(t)
	orig, err := cs.q.PublishKeyed(ctx, "k", []byte("first"))
	require.NoError(t, err)
	// Two hours on (the window is 90 minutes): a keyed publish evicts k.
	cs.at(clockBase.Add(2 * time.Hour))
	_, err = cs.q.PublishKeyed(ctx, "other", []byte("other"))
	require.NoError(t, err)

	cs.kill()
	cs.clock.Set(clockBase.Add(time.Hour))
	cs.open()
	again, err := cs.q.PublishKeyed(ctx, "k", []byte("second"))
	require.NoError(t, err)
	require.NotEqual(t, orig.ID, again.ID, "k was forgotten before the kill: its publish enqueues a new message, not the original of %s", orig.EnqueuedAt)
	require.Equal(t, "second", string(again.Payload))
}
