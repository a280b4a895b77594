package boltq

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLeaseUpToMaxLease: Open refuses a Lease above MaxLease with an error
// naming Lease, since its expiry could pass the year 2262 and wrap in
// Unix nanoseconds into a lease that hides nothing; a Lease of MaxLease
// is accepted and hides the received message from the next Receive.
func TestLeaseUpToMaxLease(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, lease := range []time.Duration{MaxLease + 1, 250 * 365 * 24 * time.Hour} {
		q, err := Open(t.TempDir(), Options{Now: clock, Lease: lease, MaxBatchDelay: -1})
		if err == nil {
			q.Close()
			t.Errorf("Open with a Lease of %v = nil error; want it refused", lease)
		} else if !strings.Contains(err.Error(), "Lease") {
			t.Errorf("Open with a Lease of %v = %q; want an error naming Lease", lease, err)
		}
	}

	q, err := Open(t.TempDir(), Options{Now: clock, Lease: MaxLease, MaxBatchDelay: -1})
	if err != nil {
		t.Fatalf("Open with a Lease of MaxLease: %v", err)
	}
	defer q.Close()
	ctx := context.Background()
	id, err := q.Publish(ctx, []byte("once"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := q.Receive(ctx, 1)
	if err != nil || len(first) != 1 || first[0].ID != id {
		t.Fatalf("first Receive = %v, %v; want message %d", first, err, id)
	}
	second, err := q.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 0 {
		t.Errorf("a second Receive within a lease of MaxLease returned %v: the lease hid nothing", second)
	}
}
