// Package claim keeps, in memory, what both queues of this module must
// know between calls and their stores cannot tell cheaply: which stored
// messages are ready to be received, oldest first, and which are leased
// and until when. The store holds the durable truth (a message record
// while the message lives, a lease record with its expiry while it is
// leased); a Table is rebuilt from it when a queue opens.
//
// A queue changes the Table before its write, so that two callers never
// claim or acknowledge the same message, and undoes the change when the
// write fails: Claim then Unclaim, Release then Restore. Ready is called
// after the write, so that nothing is received before it is durable.
package claim

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/walbroker/walbroker/compare"
)

// lastExpiry is the latest expiry a Table records: the last instant whose
// Unix nanoseconds fit in an int64.
var lastExpiry = time.Unix(0, math.MaxInt64)

// Table is the ready and leased sets of one queue. It is safe for
// concurrent use and retains nothing its callers pass.
type Table struct {
	now func() time.Time

	// mu guards every field below it. No method calls out while holding
	// it.
	mu sync.Mutex
	// ready holds the IDs that may be received, as a min-heap: the oldest
	// message is received first.
	ready idHeap
	// leased maps each leased ID to its lease's expiry (Unix nanoseconds
	// on the Table's clock).
	leased map[uint64]int64
	// expiries holds one entry per lease granted, as a min-heap on the
	// expiry, so that lapsed leases are found without a scan of leased.
	// An entry whose ID is no longer leased with that expiry (acknowledged,
	// or leased again) is stale and dropped when it reaches the top.
	expiries expiryHeap
}

// New returns an empty Table whose leases are measured on now (time.Now
// when nil).
func New(now func() time.Time) *Table {
	if now == nil {
		now = time.Now
	}
	return &Table{now: now, leased: make(map[uint64]int64)}
}

// Now returns the Table's clock reading, for a queue's lease records.
func (t *Table) Now() time.Time { return t.now() }

// Ready makes ids receivable: messages whose write is now durable.
func (t *Table) Ready(ids ...uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.ready.push(id)
	}
}

// Load records a stored message found when a queue opens, with the expiry
// of its stored lease (the zero time when it has none). A lease that has
// already lapsed leaves the message ready.
func (t *Table) Load(id uint64, expiry time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !expiry.IsZero() && expiry.After(t.now()) {
		t.leaseLocked(id, expiry.UnixNano())
		return
	}
	t.ready.push(id)
}

// Claim leases up to max of the oldest ready IDs until now + lease and
// returns them in ascending order with the expiry to record. An expiry
// past the last instant Unix nanoseconds can name (April 2262) is that
// instant: wrapped, it would name a time long past, a lease that hides
// nothing. Leases that have lapsed are made ready first, so a message
// whose consumer vanished is received again, in its turn.
func (t *Table) Claim(max int, lease time.Duration) ([]uint64, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.lapseLocked(now.UnixNano())
	expiry := now.Add(lease)
	if expiry.After(lastExpiry) {
		expiry = lastExpiry
	}
	n := min(max, len(t.ready))
	ids := make([]uint64, 0, n)
	for range n {
		id := t.ready.pop()
		t.leaseLocked(id, expiry.UnixNano())
		ids = append(ids, id)
	}
	return ids, expiry
}

// Unclaim undoes a Claim whose lease write failed: each ID still leased
// with that expiry is ready again.
func (t *Table) Unclaim(ids []uint64, expiry time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if e, ok := t.leased[id]; ok && e == expiry.UnixNano() {
			delete(t.leased, id)
			t.ready.push(id)
		}
	}
}

// Release ends the leases of ids for an acknowledgement and returns their
// expiries, for Restore. When one of them is not leased now (never was,
// was released already, appears twice, or lapsed), it changes nothing and
// returns an error wrapping compare.ErrNotLeased that names the ID.
func (t *Table) Release(ids []uint64) ([]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now().UnixNano()
	expiries := make([]int64, 0, len(ids))
	for i, id := range ids {
		e, ok := t.leased[id]
		if !ok || e <= now {
			for j, done := range ids[:i] {
				t.leased[done] = expiries[j]
			}
			return nil, fmt.Errorf("message %d: %w", id, compare.ErrNotLeased)
		}
		delete(t.leased, id)
		expiries = append(expiries, e)
	}
	return expiries, nil
}

// Restore undoes a Release whose write failed: the messages are leased
// again until the expiries Release returned.
func (t *Table) Restore(ids []uint64, expiries []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, id := range ids {
		t.leaseLocked(id, expiries[i])
	}
}

// Counts returns how many messages are ready and how many leased, leases
// that lapsed counted as ready.
func (t *Table) Counts() (ready, leased int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lapseLocked(t.now().UnixNano())
	return len(t.ready), len(t.leased)
}

// leaseLocked records id as leased until expiry. t.mu must be held.
func (t *Table) leaseLocked(id uint64, expiry int64) {
	t.leased[id] = expiry
	t.expiries.push(expiryEntry{expiry: expiry, id: id})
}

// lapseLocked makes ready every ID whose lease expired at or before now,
// and drops stale entries from the top of t.expiries. t.mu must be held.
func (t *Table) lapseLocked(now int64) {
	for len(t.expiries) > 0 {
		top := t.expiries[0]
		e, ok := t.leased[top.id]
		current := ok && e == top.expiry
		if current && top.expiry > now {
			return
		}
		t.expiries.pop()
		if current {
			delete(t.leased, top.id)
			t.ready.push(top.id)
		}
	}
}
