package broker_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// A dead letter whose message is as large as a segment allows, with a long
// public cause and reason, still lets the segment it pins be reclaimed:
// copying it forward must neither build a group larger than a segment nor
// stop the store, and the dead letter keeps its payload and its cause,
// clipped to the bounds that make this possible.
func TestCopyForwardOfALargestDeadLetter(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	// The largest MaxMessageBytes the store accepts for its segment size.
	lo, hi := 1, int(broker.MinSegmentBytes)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		p := dlqPolicy
		p.MaxMessageBytes = mid
		if _, err := s.Queue("probe", p); err == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	policy := dlqPolicy
	policy.MaxMessageBytes = lo
	q, err := s.Queue("big", policy)
	require.NoError(t, err)
	payload := bytes.Repeat([]byte{'x'}, lo)
	_, err = q.Publish(ctx(t), payload)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	public := strings.Repeat("€", 8<<10) // 3 bytes each
	reason := "R" + strings.Repeat("E", 200)
	require.NoError(t, q.Reject(ctx(t), ds[0].Lease.Receipt, broker.NewError(reason, 7, public, "private")))

	// Churn that seals the dead letter's segment and several after it.
	churn := churnSegments(t, s, 4)
	for range 3 {
		require.NoError(t, s.Maintain(), "maintenance with a largest dead letter to copy forward")
	}
	st := s.Stats()
	require.Positive(t, st.BytesReclaimed, "the segments behind the dead letter were reclaimed")
	_, err = churn.Publish(ctx(t), []byte("still works"))
	require.NoError(t, err, "the store still takes publishes")

	dead, err := q.DeadLetters(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, payload, dead[0].Message.Payload)
	require.Equal(t, reason[:broker.MaxReasonBytes], dead[0].Reason, "the reason is clipped")
	require.Equal(t, strings.Repeat("€", broker.MaxPublicBytes/3), dead[0].Cause, "the cause is clipped on a rune boundary")
}

// Copying a leased message forward moves its records, not its state: a
// lapse this process already saw stays seen, even when the broker clock
// then steps back before the lease's ExpiresAt, as it would without the
// copy.
func TestCopyForwardKeepsALapseAlreadySeen(t *testing.T) {
	clock := newFakeClock()
	s, err := broker.Open(fastDir(t), reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	m, lease := leaseThenLapse(t, q, clock)
	require.Equal(t, 1, q.Stats().Ready, "the lease lapsed, and the queue saw it")

	churnSegments(t, s, 4)
	for range 3 {
		require.NoError(t, s.Maintain())
	}
	require.Positive(t, s.Stats().CopiedForward, "the leased message was copied forward")

	clock.Set(lease.ExpiresAt.Add(-time.Second)) // the clock steps back
	again, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, again, 1, "the lapse seen before the copy is still seen")
	require.Equal(t, m.ID, again[0].Message.ID)
	require.Equal(t, 2, again[0].Deliveries)
}

// A message handed back with its deliveries (here by a nack with a
// classified cause) keeps its delivery count, and its last failure, when
// copying it forward lets its segment go: the log alone, which an index
// rebuild reads, still holds both (the restating nack event carries the
// failure). A delivery count never goes backwards, and a lapse on its last
// delivery still records the nack's cause, not LEASE_EXPIRED. (It was
// handed back by lowering MaxDeliveries below a lapsed lease's count until
// such a declaration dead-lettered the message instead.)
func TestCopyForwardKeepsTheDeliveriesOfAHandedBackMessage(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	opts := reclaimOptions(clock, nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	m, err := q.Publish(ctx(t), []byte("a"))
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	_, err = q.Nack(ctx(t), ds[0].Lease.Receipt, broker.NewError("HTTP_5XX", 42<<24|500, "target answered 500", "private"))
	require.NoError(t, err)

	churnSegments(t, s, 4)
	for range 3 {
		require.NoError(t, s.Maintain())
	}
	require.Positive(t, s.Stats().BytesReclaimed, "the message's first segment is gone")

	s = rebuildFromLog(t, s, dir, opts)
	q, err = s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	clock.Advance(time.Minute) // past the retry delay
	for want := 2; want <= stuckPolicy.MaxDeliveries; want++ {
		again, err := q.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.Equal(t, m.ID, again[0].Message.ID)
		require.Equal(t, want, again[0].Deliveries, "the delivery before the copy still counts")
		clock.Set(again[0].Lease.ExpiresAt) // its lease lapses
	}
	dls, err := q.DeadLetters(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, [3]any{"HTTP_5XX", uint32(42<<24 | 500), "target answered 500"}, [3]any{dls[0].Reason, dls[0].Code, dls[0].Cause},
		"the nack's cause survived the copy forward")
}

// rebuildFromLog closes s, removes its index and opens dir again: the
// store then holds what its log alone says. It is closed at cleanup.
func rebuildFromLog(t *testing.T, s *broker.Store, dir string, opts broker.Options) *broker.Store {
	t.Helper()
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.True(t, s.Recovery().IndexRebuilt)
	return s
}

// churnSegments publishes and acknowledges messages of about 1 KiB on a
// queue "churn" until the store holds n more segments, and returns it.
func churnSegments(t *testing.T, s *broker.Store, n int) *broker.Queue {
	t.Helper()
	churn, err := s.Queue("churn", jobsPolicy)
	require.NoError(t, err)
	first := s.Stats().Segments
	for s.Stats().Segments < first+n {
		_, err := churn.Publish(ctx(t), bytes.Repeat([]byte{'c'}, 1000))
		require.NoError(t, err)
		ds, err := churn.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.NoError(t, churn.Ack(ctx(t), ds[0].Lease.Receipt))
	}
	return churn
}

// leaseThenLapse publishes a message to q, receives it, and sets clock to
// the instant its lease lapses. It returns the message and that lease.
func leaseThenLapse(t *testing.T, q *broker.Queue, clock *fakeClock) (broker.MessageValue, broker.LeaseValue) {
	t.Helper()
	m, err := q.Publish(ctx(t), []byte("a"))
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	clock.Set(ds[0].Lease.ExpiresAt)
	return m, ds[0].Lease
}

// Copying forward writes each pinned message's whole state into the log:
// a lease (its deadline, count and receipt), a retry delay, a dead letter
// (its failure time, code, reason and cause) and a dedup key read back from
// the log alone exactly as the store held them, and the lease's receipt is
// still honoured.
func TestCopyForwardWritesEveryStateIntoTheLog(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	opts := reclaimOptions(clock, nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("pinned", keyedJobs)
	require.NoError(t, err)
	dlq, err := s.Queue("dlq", dlqPolicy)
	require.NoError(t, err)

	_, err = q.PublishKeyed(ctx(t), "done", []byte("acknowledged, its key remembered"))
	require.NoError(t, err)
	for _, p := range []string{"leased", "nacked"} {
		mustPublish(t, q, p)
	}
	ds, err := q.Receive(ctx(t), 3)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	held := ds[1].Lease.Receipt
	_, err = q.Nack(ctx(t), ds[2].Lease.Receipt, errors.New("later"))
	require.NoError(t, err)
	mustPublish(t, dlq, "dead")
	dead, err := dlq.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	clock.Advance(time.Millisecond)
	require.NoError(t, dlq.Reject(ctx(t), dead[0].Lease.Receipt, broker.NewError("BAD_INPUT", 17, "field x is malformed", "private detail")))

	churnSegments(t, s, 4)
	for range 3 {
		require.NoError(t, s.Maintain())
	}
	st := s.Stats()
	require.Positive(t, st.CopiedForward, "the pinned records were copied forward")
	require.Positive(t, st.BytesReclaimed, "the segment they pinned is gone")
	want := broker.Dump(s)

	s = rebuildFromLog(t, s, dir, opts)
	requireSameState(t, want, broker.Dump(s), "the store rebuilt from its log")
	q, err = s.Queue("pinned", keyedJobs)
	require.NoError(t, err)
	require.NoError(t, q.Ack(ctx(t), held), "the receipt of the lease copied forward")
}

// A dedup key that outlived its window and was taken by a later message
// stays with the later one when copying the earlier message forward lets
// its segment go: the copied publish does not name the key again, so the
// log alone still remembers the key for the later message, and a publish
// within that message's window is still a duplicate.
func TestCopyForwardLeavesAKeyWithTheMessageThatTookItLast(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	opts := reclaimOptions(clock, nil)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("keyed", keyedJobs)
	require.NoError(t, err)
	_, err = q.PublishKeyed(ctx(t), "order-7", []byte("first"))
	require.NoError(t, err)
	churnSegments(t, s, 4)
	// The later message lands in the active segment, which is not copied:
	// the copy of the first comes after it in the log.
	clock.Advance(2 * time.Hour)
	later, err := q.PublishKeyed(ctx(t), "order-7", []byte("second"))
	require.NoError(t, err)
	require.Equal(t, int64(2), q.Stats().Published, "the key's window had passed")
	for range 3 {
		require.NoError(t, s.Maintain())
	}
	require.Positive(t, s.Stats().CopiedForward, "the first message was copied forward")
	want := broker.Dump(s)

	s = rebuildFromLog(t, s, dir, opts)
	requireSameState(t, want, broker.Dump(s), "the store rebuilt from its log")
	q, err = s.Queue("keyed", keyedJobs)
	require.NoError(t, err)
	dup, err := q.PublishKeyed(ctx(t), "order-7", []byte("third"))
	require.NoError(t, err)
	require.Equal(t, later.ID, dup.ID, "within the second message's window, the key names it")
}

// A kill between a copy forward and the checkpoint after it leaves Open
// the checkpoint from before the copy, and the copied records to replay:
// the nack event that restates a delayed message (index.StateEvent: "a
// nack with its deliveries and retry instant") gives it back its retry
// delay. Retry delays survive a kill (recovery's invariants): the message
// is not delivered again before its VisibleAt.
func TestARetryDelayCopiedForwardSurvivesAKill(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	cfs := vfs.NewCrashFS(vfs.Default)
	ffs := vfs.NewFaultFS(cfs)
	s, err := broker.Open(dir, reclaimOptions(clock, ffs))
	require.NoError(t, err)
	delayed := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024; p.RetryDelay = time.Hour })
	q, err := s.Queue("delayed", delayed)
	require.NoError(t, err)
	m := mustPublish(t, q, "nacked")
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	nv, err := q.Nack(ctx(t), ds[0].Lease.Receipt, nil)
	require.NoError(t, err)
	churnSegments(t, s, 4)

	// The round's checkpoint takes its name; the kill lands right after
	// the copy forward's first write to the log, before the checkpoint
	// that would hold the copy. (The next segment's preparation writes at
	// its offset 0, any time: an append to the active segment does not.)
	var checkpointed, killed atomic.Bool
	index := filepath.Join(dir, "index")
	ffs.Observe(func(ev vfs.Event) {
		switch {
		case ev.Op == vfs.OpRename && strings.HasPrefix(ev.Name, index):
			checkpointed.Store(true)
		case checkpointed.Load() && ev.Op == vfs.OpWrite && ev.Off > 0 && strings.Contains(filepath.Base(ev.Name), ".seg") && !killed.Swap(true):
			cfs.Crash()
		}
	})
	_ = s.Maintain() // fails: the copy forward's fdatasync is refused
	require.True(t, killed.Load(), "the copy forward wrote to the log")
	_ = s.Close()
	cfs.Restart() // a process crash: what was written stays

	s, err = broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.False(t, s.Recovery().IndexRebuilt, "Open loaded the checkpoint from before the copy")
	q, err = s.Queue("delayed", delayed)
	require.NoError(t, err)
	clock.Set(nv.VisibleAt.Add(-time.Nanosecond))
	none, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Empty(t, none, "one nanosecond before the nack's VisibleAt, after a kill that followed its copy forward")
	clock.Set(nv.VisibleAt)
	again, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, again, 1, "at VisibleAt")
	require.Equal(t, m.ID, again[0].Message.ID)
	require.Equal(t, 2, again[0].Deliveries)
}
