package broker_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// memoryHolding returns a Memory on a fake clock holding n messages, all
// received once (leased), with settle called on the i-th delivery. It
// returns the messages' IDs in publish order.
func memoryHolding(b *testing.B, n int, settle func(m *broker.Memory, i int, d broker.DeliveryValue) error) (*broker.Memory, []string) {
	b.Helper()
	m, err := broker.NewMemory(policy(), broker.MemoryOptions{Now: newFakeClock().Now})
	require.NoError(b, err)
	b.Cleanup(func() { _ = m.Close() })
	ids := make([]string, 0, n)
	for range n {
		msg, err := m.Publish(b.Context(), []byte("p"))
		require.NoError(b, err)
		ids = append(ids, msg.ID)
	}
	for got := 0; got < n; {
		ds, err := m.Receive(b.Context(), min(100, n-got))
		require.NoError(b, err)
		for i, d := range ds {
			require.NoError(b, settle(m, got+i, d))
		}
		got += len(ds)
	}
	return m, ids
}

// BenchmarkMemoryStats reads the gauges of a Memory queue holding n
// messages, half leased and half delayed. The cost should not grow with
// n: Stats walked every leased and delayed message to tell them apart,
// where the file-backed store's index counts its gauges; it counts them
// too now.
func BenchmarkMemoryStats(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			m, _ := memoryHolding(b, n, func(m *broker.Memory, i int, d broker.DeliveryValue) error {
				if i%2 == 0 {
					return nil // leased
				}
				_, err := m.Nack(b.Context(), d.Lease.Receipt, nil)
				return err
			})
			st := m.Stats()
			require.Equal(b, [2]int{n / 2, n / 2}, [2]int{st.Leased, st.Delayed})
			for b.Loop() {
				m.Stats()
			}
		})
	}
}

// BenchmarkMemoryDeadLetterReplay replays a dead letter from the middle
// of the n of a Memory queue, receives it and rejects it again (to the
// end of the list). The cost should not grow with n: the dead letters
// were one sorted slice, and each removal from its middle shifted every
// one after it; they are kept in blocks now, as the store's index keeps
// them (package blocklist).
func BenchmarkMemoryDeadLetterReplay(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			m, ids := memoryHolding(b, n, func(m *broker.Memory, _ int, d broker.DeliveryValue) error {
				return m.Reject(b.Context(), d.Lease.Receipt, nil)
			})
			require.Equal(b, n, m.Stats().DeadLetters)
			i := 0
			for b.Loop() {
				id := ids[n/4+i%(n/2)]
				i++
				if err := m.ReplayDeadLetter(b.Context(), id); err != nil {
					b.Fatal(err)
				}
				ds, err := m.Receive(b.Context(), 1)
				if err != nil || len(ds) != 1 || ds[0].Message.ID != id {
					b.Fatalf("Receive after replaying %s: %v, %v", id, ds, err)
				}
				if err := m.Reject(b.Context(), ds[0].Lease.Receipt, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
