package index

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestALapseStaysSeenWhenTheClockGoesBack: once Promote saw a lease lapse,
// the lease is no longer held, even at an earlier reading of the clock.
func TestALapseStaysSeenWhenTheClockGoesBack(t *testing.T) {
	x := declared(t)
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 0, "")))
	q := x.Queue("q")
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 50, Nonce: 3})
	m := q.Get(1)
	require.True(t, LeaseLive(m, 49))
	require.False(t, LeaseLive(m, 50), "a lease lapses at its instant")
	q.Promote(50)
	require.True(t, m.Lapsed)
	require.False(t, LeaseLive(m, 49), "the clock went back: the lapse Promote saw stands")
	require.Equal(t, []*Message{m}, q.Lapsed())
}

// TestARedeclarationResortsLeasesByTheirLastDelivery: when a new policy
// changes how many deliveries a message may have, a lease on what was its
// last delivery lapses into the ready set, and one on what now is its last
// exhausts the message.
func TestARedeclarationResortsLeasesByTheirLastDelivery(t *testing.T) {
	x := declared(t) // MaxDeliveries 2
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 0, "")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), pub(2, 0, "")))
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 2, Time: 50})
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 1, Time: 50})
	require.Equal(t, []*Message{q.Get(1)}, q.FinalsDue(50))

	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 3}}))
	require.Empty(t, q.FinalsDue(50), "3 deliveries allowed: 2 is no longer the last")
	q.Promote(50)
	require.Empty(t, q.Exhausted())
	require.Equal(t, uint64(1), q.NextReady().Seq)

	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 3, Time: 80})
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 2, Deliveries: 2, Time: 80})
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 2}}))
	q.Promote(80)
	require.ElementsMatch(t, []*Message{q.Get(1), q.Get(2)}, q.Exhausted(), "2 deliveries allowed again: both leases were the last")
	require.Nil(t, q.NextReady())
	require.Zero(t, q.Live(), "exhausted messages, on their way to the dead letters, hold no capacity")
}

// TestAClockAtTheLastReadingStillEvicts: only a clock behind the latest
// reading (a publish's enqueue instant here) evicts nothing; one that reads
// the same instant is not going backwards.
func TestAClockAtTheLastReadingStillEvicts(t *testing.T) {
	x := declared(t)
	q := x.Queue("q")
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 100, "a")))
	require.NoError(t, x.Apply(wal.MakePosition(1, 200), pub(2, 200, "b")))
	require.Equal(t, int64(200), q.LastEvicts())
	require.True(t, q.EvictSeen(200, 50), "a is 100 old, beyond the window of 50")
	_, _, ok := q.Seen("a")
	require.False(t, ok)
	_, _, ok = q.Seen("b")
	require.True(t, ok)
}

// TestALapseOfALastDeliveryStaysSeenWhenTheClockGoesBack: a lease on the
// last allowed delivery that Promote saw lapse (the message exhausted, on
// its way to the dead letters) is no longer held either, even at an earlier
// reading of the clock.
func TestALapseOfALastDeliveryStaysSeenWhenTheClockGoesBack(t *testing.T) {
	x := declared(t) // MaxDeliveries 2
	require.NoError(t, x.Apply(wal.MakePosition(1, 100), pub(1, 0, "")))
	q := x.Queue("q")
	q.Apply(0, &Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 2, Time: 50, Nonce: 3})
	m := q.Get(1)
	require.True(t, LeaseLive(m, 49))
	q.Promote(50)
	require.Equal(t, []*Message{m}, q.Exhausted())
	require.True(t, m.Lapsed)
	require.False(t, LeaseLive(m, 49), "the clock went back: the lapse Promote saw stands")
}

// TestANackToTheUnixEpochIsAnOrdinaryInstant: a nack's visibleAt is when
// the message becomes receivable, and 0, the Unix epoch, is an instant
// like any other: the message is delayed at -1 and receivable from 0 on,
// also when loaded from a checkpoint. 0 was taken for "at once", and such
// a message was received a nanosecond early. Only AtOnce, the earliest
// instant, is at once.
func TestANackToTheUnixEpochIsAnOrdinaryInstant(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 3}}))
	for seq := uint64(1); seq <= 2; seq++ {
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*int(seq)), pub(seq, -5, "")))
		require.NoError(t, x.Apply(wal.MakePosition(1, 100*int(seq)+50), &Event{Kind: KindLease, Queue: 1, Seq: seq, Deliveries: 1, Time: 5, Nonce: seq}))
	}
	require.NoError(t, x.Apply(wal.MakePosition(1, 300), &Event{Kind: KindNack, Queue: 1, Seq: 1, Deliveries: 1, Time: 0}))
	require.NoError(t, x.Apply(wal.MakePosition(1, 350), &Event{Kind: KindNack, Queue: 1, Seq: 2, Deliveries: 1, Time: AtOnce}))
	checkpointAt(t, x, dir, wal.MakePosition(1, 400))
	require.NoError(t, x.Table.Close())
	loaded, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	defer loaded.Table.Close()

	for name, q := range map[string]*Queue{"applied": x.Queue("q"), "loaded": loaded.Queue("q")} {
		q.Promote(-1)
		ready, _, delayed, _ := q.Counts()
		require.Equal(t, 1, ready, name)
		require.Equal(t, 1, delayed, "%s: the message nacked to the epoch is delayed before it", name)
		require.Equal(t, uint64(2), q.NextReady().Seq, "%s: only the message handed back at once is receivable", name)
		due, ok := q.NextDue()
		require.True(t, ok, name)
		require.Zero(t, due, name)
		q.Promote(0)
		ready, _, delayed, _ = q.Counts()
		require.Equal(t, 2, ready, "%s: at the epoch, both are receivable", name)
		require.Zero(t, delayed, name)
	}
}
