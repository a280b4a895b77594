package broker_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// MessageValue.EnqueuedAt "is when the broker accepted the message. It is
// the ordering key a FIFO implementation sorts on": concurrent publishes
// get EnqueuedAt and IDs in the one order they entered the queue, so that
// every message of a backlog stays in the index's stream, none on the heap.
func TestConcurrentPublishesAreAcceptedInOneOrder(t *testing.T) {
	const producers, each = 16, 150
	s, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)

	var (
		mu  sync.Mutex
		all []broker.MessageValue
		wg  sync.WaitGroup
	)
	for range producers {
		wg.Go(func() {
			for range each {
				m, err := q.Publish(ctx(t), []byte("m"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, m)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, all, producers*each)
	require.Zero(t, broker.ActiveMessages(q), "every published message is in the stream, none held on the heap")

	seqOf := func(m broker.MessageValue) uint64 {
		seq, ok := broker.MessageSeq(m.ID)
		require.True(t, ok, m.ID)
		return seq
	}
	slices.SortFunc(all, func(a, b broker.MessageValue) int { return int(seqOf(a)) - int(seqOf(b)) })
	for i := 1; i < len(all); i++ {
		require.False(t, all[i].EnqueuedAt.Before(all[i-1].EnqueuedAt),
			"message %s was accepted at %s, before %s of the earlier %s",
			all[i].ID, all[i].EnqueuedAt.Format(time.RFC3339Nano), all[i-1].EnqueuedAt.Format(time.RFC3339Nano), all[i-1].ID)
	}

	// Received oldest first: in the same order.
	got := 0
	for got < len(all) {
		ds, err := q.Receive(ctx(t), 64)
		require.NoError(t, err)
		require.NotEmpty(t, ds)
		for _, d := range ds {
			require.Equal(t, all[got].ID, d.Message.ID, "delivery %d", got)
			got++
		}
	}
}
