package broker_test

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Promises the in-memory broker makes as the file-backed store does, each
// held to both brokers on one clock where both make it.

// TestMemoryAndStoreObserveTheClockRefusingABatchLargerThanCapacity: a
// PublishBatch of more messages than Capacity is refused with QueueFull
// "after the clock is read and observed, as the store refuses it" (see
// Memory.refuseOversized), and observing the clock is what decides, when
// it then steps backwards, whether a lease already lapsed (DESIGN.md, "The
// in-memory broker"): the lapse the refusal observed stays, and the
// message is receivable again on the earlier clock.
func TestMemoryAndStoreObserveTheClockRefusingABatchLargerThanCapacity(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
	pol := policy(func(p *broker.PolicyValue) { p.Capacity = 1 })
	for name, q := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			msg, err := q.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
			ds, err := q.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			before := e.clock.Now()
			e.clock.Set(ds[0].Lease.ExpiresAt)
			_, err = q.PublishBatch(ctx(t), [][]byte{[]byte("a"), []byte("b")})
			require.ErrorIs(t, err, broker.QueueFull)
			e.clock.Set(before) // behind the lapse the refusal observed
			ds, err = q.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1, "the lapse observed by the refused batch was undone by the clock stepping back")
			require.Equal(t, msg.ID, ds[0].Message.ID)
			require.Equal(t, 2, ds[0].Deliveries)
			require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
		})
	}
}

// TestAClosedMemoryLetsGoOfItsDedupKeys: Close drops everything a Memory
// held (see Memory.Close), its seen-set included: every later call is
// Closed, so a key kept past it would be memory held for nothing, for as
// long as the caller keeps the value.
func TestAClosedMemoryLetsGoOfItsDedupKeys(t *testing.T) {
	q, err := broker.NewMemory(policy(), broker.MemoryOptions{Now: newFakeClock().Now})
	require.NoError(t, err)
	const n = 100
	var freed atomic.Int64
	for i := range n {
		_, err := q.PublishKeyed(ctx(t), watchedKey(i, &freed), nil)
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	// Finalizers run on their own goroutine after a collection: collect
	// and yield to it, a bounded number of times, before calling the keys
	// held.
	for i := 0; i < 1000 && freed.Load() < n-1; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	require.GreaterOrEqual(t, freed.Load(), int64(n-1), "dedup keys of a closed Memory are still held")
	runtime.KeepAlive(q)
}

// TestMemoryAndStoreRefuseANackWhoseRetryInstantPasses2262: a retry
// instant that Unix nanoseconds cannot hold is refused with
// QueueMisconfigured before anything moves, as an Extend past it is (API.md
// §5.5, LeaseExtender): the lease the caller holds stays held and valid,
// and no wrapped instant, years in the past, makes the message receivable
// at once.
func TestMemoryAndStoreRefuseANackWhoseRetryInstantPasses2262(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
	e.clock.Set(time.Unix(0, math.MaxInt64-int64(time.Hour)))
	pol := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout, p.RetryDelay = time.Minute, 2*time.Hour })
	for name, q := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			_, err := q.Publish(ctx(t), []byte("x"))
			require.NoError(t, err)
			ds, err := q.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			_, err = q.Nack(ctx(t), ds[0].Lease.Receipt, nil)
			requireErrorIs(t, err, broker.QueueMisconfigured, "2262")
			again, err := q.Receive(ctx(t), 1)
			require.NoError(t, err)
			require.Empty(t, again, "the refused nack handed the message back")
			st := q.Stats()
			require.Equal(t, 1, st.Leased)
			require.Zero(t, st.Delayed)
			require.Zero(t, st.Nacked)
			require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt), "the lease outlives the refused nack")
		})
	}
}

// TestADuplicatesClockReadingHoldsOffEvictionAfterTheClockStepsBack: a
// keyed publish that finds a duplicate still reads the clock for its
// eviction, and "if the clock goes backwards, nothing is evicted" (API.md
// §4) counts from that reading, not only from the last enqueue. So a key
// published after the clock stepped back far behind the duplicate, whose
// window has passed by a later reading still behind the duplicate's, is
// still a duplicate: the clock has not come back past its latest reading.
func TestADuplicatesClockReadingHoldsOffEvictionAfterTheClockStepsBack(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Sync = broker.SyncNone })
	pol := policy(func(p *broker.PolicyValue) { p.DedupWindow = time.Minute })
	base := e.clock.Now()
	for name, q := range e.storeAndMemory(pol) {
		t.Run(name, func(t *testing.T) {
			at := func(d time.Duration) { e.clock.Set(base.Add(d)) }
			at(0)
			first, err := q.PublishKeyed(ctx(t), "a", []byte("a"))
			require.NoError(t, err)
			at(50 * time.Second)
			dup, err := q.PublishKeyed(ctx(t), "a", []byte("a"))
			require.NoError(t, err)
			require.Equal(t, first.ID, dup.ID, "within the window")
			at(-100 * time.Second) // the clock steps back, far
			k, err := q.PublishKeyed(ctx(t), "k", []byte("k"))
			require.NoError(t, err)
			at(20 * time.Second) // k's window has passed; the clock is still behind 50 s
			again, err := q.PublishKeyed(ctx(t), "k", []byte("k"))
			require.NoError(t, err)
			require.Equal(t, k.ID, again.ID, "evicted by a clock behind the duplicate's reading")
			require.Equal(t, int64(2), q.Stats().Duplicates)
		})
	}
}
