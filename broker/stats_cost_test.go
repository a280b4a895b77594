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
