package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// leaseEvery publishes n messages to q and leases them all.
func leaseEvery(t testing.TB, q *broker.Queue, n int) {
	t.Helper()
	const batch = 1000
	payloads := make([][]byte, batch)
	for i := range payloads {
		payloads[i] = []byte("p")
	}
	for done := 0; done < n; done += batch {
		_, err := q.PublishBatch(ctx(t), payloads[:min(batch, n-done)])
		require.NoError(t, err)
	}
	for got := 0; got < n; {
		ds := mustReceive(t, q, batch)
		require.NotEmpty(t, ds)
		got += len(ds)
	}
}

// BenchmarkQueueStats reads the Stats of a queue holding n messages
// leased with deliveries left, or n leases lapsed on their last delivery
// that no call has swept yet (a consumer that died holding them, and a
// queue no one Receives from). Stats runs under the queue's lock, which
// every publish waits for, so its cost should not grow with n. When it
// walked both lists, 100 calls took 13 ms and 20 ms with 50,000 of
// either, against 0.1 ms with 1,000; it counts both now (60–90 ns a call
// at either n).
func BenchmarkQueueStats(b *testing.B) {
	for _, c := range []struct {
		name string
		p    broker.PolicyValue
	}{
		{"leased", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 })},
		{"exhausted", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })},
	} {
		for _, n := range []int{1_000, 50_000} {
			b.Run(fmt.Sprintf("%s=%d", c.name, n), func(b *testing.B) {
				e := newEnv(b, func(o *broker.Options) { o.Sync = broker.SyncNone; o.SegmentBytes = 16 << 20 })
				q := e.queue("q", c.p)
				leaseEvery(b, q, n)
				if c.name == "exhausted" {
					e.clock.Advance(time.Minute) // every lease lapses on its last delivery
					if st := q.Stats(); st.DeadLetters != n || st.DeadLettered != int64(n) {
						b.Fatalf("%d dead letters, %d dead-lettered; want %d", st.DeadLetters, st.DeadLettered, n)
					}
				} else if st := q.Stats(); st.Leased != n {
					b.Fatalf("%d leased; want %d", st.Leased, n)
				}
				for b.Loop() {
					q.Stats()
				}
			})
		}
	}
}

// TestDeadLetteredCountsOnlyTheLapsesSinceOpen: leases that lapsed on
// their last delivery before the store was opened are dead letters that
// DeadLettered, which counts since open, leaves out; those that lapsed
// since, and no call swept yet, it counts, however many of each there
// are (Stats counts the fewer).
func TestDeadLetteredCountsOnlyTheLapsesSinceOpen(t *testing.T) {
	e := newEnv(t)
	p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	q := e.queue("jobs", p)
	for range 4 {
		mustPublish(t, q, "m")
	}
	mustReceiveOne(t, q) // lapses at t0+30s
	e.clock.Advance(10 * time.Second)
	require.Len(t, mustReceive(t, q, 3), 3) // lapse at t0+40s
	e.close()

	e.clock.Set(t0.Add(35 * time.Second)) // the first lapsed while the store was closed
	e.open()
	q = e.queue("jobs", p)
	st := q.Stats()
	require.Equal(t, [3]int{1, 3, 0}, [3]int{st.DeadLetters, st.Leased, int(st.DeadLettered)}, "one lapsed before the open")

	e.clock.Set(t0.Add(45 * time.Second)) // the three lapse in this process, and no call sweeps
	st = q.Stats()
	require.Equal(t, [3]int{4, 0, 3}, [3]int{st.DeadLetters, st.Leased, int(st.DeadLettered)}, "three lapsed since the open")

	require.Len(t, mustDeadLetters(t, q), 4) // sweeps
	st = q.Stats()
	require.Equal(t, [3]int{4, 0, 3}, [3]int{st.DeadLetters, st.Leased, int(st.DeadLettered)}, "after the sweep")
}

// BenchmarkQueueStatsAfterOpen reads the Stats of a queue whose n leases
// had lapsed on their last delivery when the store was opened, before any
// call sweeps them (a queue no one Receives from): DeadLettered leaves
// those deaths out (see TestDeadLetteredCountsOnlyTheLapsesSinceOpen).
// Its cost should not grow with n.
func BenchmarkQueueStatsAfterOpen(b *testing.B) {
	p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			e := newEnv(b, func(o *broker.Options) { o.Sync = broker.SyncNone; o.SegmentBytes = 16 << 20 })
			leaseEvery(b, e.queue("q", p), n)
			e.close()
			e.clock.Advance(time.Minute) // every lease lapsed while the store was closed
			e.open()
			q := e.queue("q", p)
			if st := q.Stats(); st.DeadLetters != n || st.DeadLettered != 0 {
				b.Fatalf("%d dead letters, %d dead-lettered; want %d and 0", st.DeadLetters, st.DeadLettered, n)
			}
			for b.Loop() {
				q.Stats()
			}
		})
	}
}

// TestDeadLetteredAfterOpenCountsThroughSweepsAndAcks: the lapses Open
// found stay dead letters that DeadLettered leaves out, even if the clock
// then goes back before them (an ack of one is refused), while the leases
// lapsing since, the sweep, and acks of others move the figures as they
// should.
func TestDeadLetteredAfterOpenCountsThroughSweepsAndAcks(t *testing.T) {
	e := newEnv(t)
	p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.VisibilityTimeout = 30 * time.Second })
	q := e.queue("jobs", p)
	for range 8 {
		mustPublish(t, q, "m")
	}
	early := mustReceive(t, q, 3) // lapse at t0+30s
	e.clock.Advance(10 * time.Second)
	late := mustReceive(t, q, 3) // lapse at t0+40s
	require.Len(t, early, 3)
	require.Len(t, late, 3)
	e.close()

	type figures struct{ ready, leased, dead, deadLettered, acked int }
	stats := func() figures {
		st := q.Stats()
		return figures{st.Ready, st.Leased, st.DeadLetters, int(st.DeadLettered), int(st.Acked)}
	}
	e.clock.Set(t0.Add(35 * time.Second)) // the early three lapsed while the store was closed
	e.open()
	q = e.queue("jobs", p)
	e.clock.Set(t0.Add(20 * time.Second)) // back before either lapse
	require.Equal(t, figures{ready: 2, leased: 3, dead: 3}, stats(), "Open saw the early three lapse")
	require.ErrorIs(t, q.Ack(ctx(t), early[0].Lease.Receipt), broker.LeaseExpired)
	require.NoError(t, q.Ack(ctx(t), late[0].Lease.Receipt))
	require.Equal(t, figures{ready: 2, leased: 2, dead: 3, acked: 1}, stats(), "after an ack of a live lease")

	e.clock.Set(t0.Add(45 * time.Second)) // the late two lapse in this process, and no call sweeps
	require.Equal(t, figures{ready: 2, dead: 5, deadLettered: 2, acked: 1}, stats(), "two lapsed since the open")

	got := mustReceive(t, q, 10) // sweeps
	require.Len(t, got, 2)
	require.Equal(t, figures{leased: 2, dead: 5, deadLettered: 2, acked: 1}, stats(), "after the sweep")
	require.NoError(t, q.Ack(ctx(t), got[0].Lease.Receipt))
	require.Equal(t, figures{leased: 1, dead: 5, deadLettered: 2, acked: 2}, stats(), "after an ack after the sweep")

	e.clock.Advance(time.Minute) // the last lapses while the store is closed
	e.reopen()
	q = e.queue("jobs", p)
	require.Equal(t, figures{dead: 6}, stats(), "after a reopen: every death came before it")
	require.Len(t, mustDeadLetters(t, q), 6) // sweeps
	require.Equal(t, figures{dead: 6}, stats(), "after that sweep")
}
