package broker_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// TestMemoryFreesTheDedupKeysItDrops: the Memory doc (memory.go) says
// it retains "each dedup key until the first keyed publish after it left
// the window (keys are dropped there, not by a clock)". The keyed publish
// evicts them from the seen map, and the heap that orders them must not
// keep them either (a popped slot left in its backing array held every
// evicted key until a later push overwrote it: a burst of a million
// 256-byte keys kept some 256 MB for the life of the queue).
func TestMemoryFreesTheDedupKeysItDrops(t *testing.T) {
	clock := newFakeClock()
	q, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.DedupWindow = time.Minute }), broker.MemoryOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var freed atomic.Int64
	func() {
		for i := range n {
			key := watchedKey(i, &freed)
			if _, err := q.PublishKeyed(t.Context(), key, nil); err != nil {
				t.Fatal(err)
			}
		}
	}()
	ds, err := q.Receive(t.Context(), n)
	if err != nil || len(ds) != n {
		t.Fatalf("Receive: %d, %v", len(ds), err)
	}
	for _, d := range ds {
		if err := q.Ack(t.Context(), d.Lease.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	// Every key is now strictly older than the window: the next keyed
	// publish drops them all.
	clock.Advance(2 * time.Minute)
	if _, err := q.PublishKeyed(t.Context(), "fresh", nil); err != nil {
		t.Fatal(err)
	}
	requireKeysFreed(t, &freed, n)
	runtime.KeepAlive(q)
}
