package compare_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/walbroker/walbroker/broker"
)

// TestWalbrokerDrainsSettleEveryMessageOnce: BenchmarkQueues counts a
// walbroker drain as done when its handlers have run b.N times, and a
// pebbleq or boltq drain when b.N messages were acknowledged. The rates
// compare the same work only if, by the time a walbroker drain returns,
// every message was delivered once and acknowledged, none left leased or
// ready. The test runs each walbroker drain shape of the benchmark on a
// queue filled as benchDrain fills it and reads the queue's figures.
func TestWalbrokerDrainsSettleEveryMessageOnce(t *testing.T) {
	const n = 600 // not a multiple of the fill's batch or of a Receive's 64
	shapes := []struct {
		name      string
		consumers int
		target    func(q *broker.Queue) target
	}{
		{"drain", 64, func(q *broker.Queue) target { return walbrokerTarget{q} }},
		{"drain-4", 4, func(q *broker.Queue) target { return walbrokerTarget{q} }},
		{"drain-4/walbroker-4x64", 4, func(q *broker.Queue) target { return walbrokerCallsTarget{walbrokerTarget{q}} }},
		{"drain-4/walbroker-prefetch", 4, func(q *broker.Queue) target { return walbrokerPrefetchTarget{walbrokerTarget{q}} }},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			s, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncAll})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			q, err := s.Queue("bench", benchPolicy)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			tg := sh.target(q)
			batch := make([][]byte, 256)
			for i := range batch {
				batch[i] = []byte(fmt.Sprint(i))
			}
			for left := n; left > 0; left -= len(batch) {
				if err := tg.publishBatch(ctx, batch[:min(left, len(batch))]); err != nil {
					t.Fatal(err)
				}
			}
			if err := tg.drain(ctx, n, sh.consumers); err != nil {
				t.Fatal(err)
			}
			st := q.Stats()
			if st.Delivered != n || st.Acked != n {
				t.Errorf("after the drain of %d messages: %d delivered, %d acknowledged; want %d each", n, st.Delivered, st.Acked, n)
			}
			if st.Ready != 0 || st.Leased != 0 || st.Delayed != 0 || st.Nacked != 0 {
				t.Errorf("after the drain: %d ready, %d leased, %d delayed, %d nacked; want none", st.Ready, st.Leased, st.Delayed, st.Nacked)
			}
		})
	}
}
