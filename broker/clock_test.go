package broker_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Open refuses a clock no store can record before it touches anything: a
// zero time.Time (a fake clock nobody set) would otherwise stamp 1754.
func TestOpenRefusesAClockNoStoreCanRecord(t *testing.T) {
	for _, bad := range []time.Time{{}, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
		dir := filepath.Join(t.TempDir(), "store")
		s, err := broker.Open(dir, broker.Options{Now: func() time.Time { return bad }})
		require.Nil(t, s)
		requireErrorIs(t, err, broker.QueueMisconfigured, "Options.Now", "clock reads", bad.Format(time.RFC3339))
		_, err = os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist, "Open created the directory")
	}
}

// While the clock reads an instant no store can record, the calls that
// read it fail and log nothing; Stats and Wake, which return no error,
// observe nothing (Wake says to look now, and Receive then says why).
// Once the clock is set right, the store is as it was, after a restart
// too.
func TestAClockNoStoreCanRecordChangesNothing(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "held")
	d := mustReceiveOne(t, q)
	late := mustPublish(t, q, "late")
	before := q.Stats()
	good := e.clock.Now()

	e.clock.Set(time.Time{})
	require.Equal(t, before, q.Stats())
	w := q.Wake()
	require.True(t, w.Scheduled, "Wake says to look")
	require.Zero(t, w.In, "at once")
	_, err := q.Receive(ctx(t), 1)
	requireErrorIs(t, err, broker.QueueMisconfigured, "0001-01-01")
	_, err = e.s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 9 }))
	requireErrorIs(t, err, broker.QueueMisconfigured, "clock")

	// The lapse that a wrapped reading could have passed did not happen:
	// the lease stands, with its deliveries.
	e.clock.Set(good)
	require.Equal(t, before, q.Stats())
	e.reopen()
	q = e.queue("jobs", policy())
	require.Equal(t, before.Ready, q.Stats().Ready)
	require.Equal(t, before.Leased, q.Stats().Leased)
	require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt), "the lease taken before is still held")
	got := mustReceiveOne(t, q)
	require.Equal(t, late.ID, got.Message.ID)
	require.Equal(t, 1, got.Deliveries)
	requireNoneReceivable(t, q)
}

// Options.Now nil means time.Now: a store opened without a clock stamps
// EnqueuedAt and ExpiresAt from the real one.
func TestAStoreWithoutAClockRunsOnTheRealOne(t *testing.T) {
	s, err := broker.Open(t.TempDir(), broker.Options{SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	before := time.Now()
	m, err := q.Publish(ctx(t), nil)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	after := time.Now()
	require.Len(t, ds, 1)
	require.False(t, m.EnqueuedAt.Before(before) || m.EnqueuedAt.After(after), "EnqueuedAt %v is not within the call, %v to %v", m.EnqueuedAt, before, after)
	expires := ds[0].Lease.ExpiresAt.Add(-policy().VisibilityTimeout)
	require.False(t, expires.Before(before) || expires.After(after), "ExpiresAt %v is not VisibilityTimeout after the Receive, %v to %v", ds[0].Lease.ExpiresAt, before, after)
}

// The first and last instants a broker records are recorded: the refusal
// starts beyond them, where UnixNano would wrap. A store opens at them,
// and a publish there is stamped with them, file-backed or in memory.
func TestTheFirstAndLastInstantsABrokerRecordsAreAccepted(t *testing.T) {
	e := newEnv(t)
	m := newMemory(t, e.clock)
	for _, at := range []time.Time{time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)} {
		e.clock.Set(at)
		e.reopen()
		q := e.queue("jobs", policy())
		for _, b := range []broker.Broker{q, m} {
			msg, err := b.Publish(ctx(t), []byte("x"))
			require.NoError(t, err, "%T at %v", b, at)
			require.True(t, msg.EnqueuedAt.Equal(at), "%T: EnqueuedAt %v, want %v", b, msg.EnqueuedAt, at)
		}
	}
}

// A Memory whose clock reads an instant no broker can record tells an
// idle consumer to look now, as the file-backed queue does: the Receive
// that follows says why. Told to wait on its signal instead, the consumer
// would sleep, never learning what is wrong.
func TestAMemoryWhoseClockReadsNoInstantSaysToLookNow(t *testing.T) {
	clock := newFakeClock()
	m := newMemory(t, clock)
	clock.Set(time.Time{})
	w := m.Wake()
	require.True(t, w.Scheduled, "Wake says to look")
	require.Zero(t, w.In, "at once")
	_, err := m.Receive(ctx(t), 1)
	requireErrorIs(t, err, broker.QueueMisconfigured, "0001-01-01")
}

// TestTheClocksRangeIsTheOneDocumented: Options.Now and MemoryOptions.Now
// give the range of readings a broker records, to the nanosecond: the
// first and last instants of it are taken, one nanosecond outside is
// refused with QueueMisconfigured, by Open and by a Memory's Publish.
func TestTheClocksRangeIsTheOneDocumented(t *testing.T) {
	first := time.Date(1677, time.September, 21, 0, 12, 43, 145224192, time.UTC)
	last := time.Date(2262, time.April, 11, 23, 47, 16, 854775807, time.UTC)
	for _, c := range []struct {
		at time.Time
		ok bool
	}{{first, true}, {last, true}, {first.Add(-1), false}, {last.Add(1), false}} {
		at := c.at
		m, err := broker.NewMemory(policy(), broker.MemoryOptions{Now: func() time.Time { return at }})
		require.NoError(t, err)
		_, err = m.Publish(ctx(t), []byte("x"))
		require.NoError(t, m.Close())
		s, oerr := broker.Open(t.TempDir(), broker.Options{Now: func() time.Time { return at }})
		if oerr == nil {
			require.NoError(t, s.Close())
		}
		if c.ok {
			require.NoError(t, err, "Memory at %s", at.Format(time.RFC3339Nano))
			require.NoError(t, oerr, "Open at %s", at.Format(time.RFC3339Nano))
		} else {
			require.ErrorIs(t, err, broker.QueueMisconfigured, "Memory at %s", at.Format(time.RFC3339Nano))
			require.ErrorIs(t, oerr, broker.QueueMisconfigured, "Open at %s", at.Format(time.RFC3339Nano))
		}
	}
}
