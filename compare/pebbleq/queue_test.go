package pebbleq

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestLeaseUpToMaxLease: Open refuses a Lease above MaxLease with an error
// naming Lease, since its expiry could pass the year 2262 and wrap in
// Unix nanoseconds into a lease that hides nothing; a Lease of MaxLease
// is accepted and hides the received message from the next Receive.
func TestLeaseUpToMaxLease(t *testing.T) {
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, lease := range []time.Duration{MaxLease + 1, 250 * 365 * 24 * time.Hour} {
		q, err := Open(t.TempDir(), Options{Now: clock, Lease: lease})
		if err == nil {
			q.Close()
			t.Errorf("Open with a Lease of %v = nil error; want it refused", lease)
		} else if !strings.Contains(err.Error(), "Lease") {
			t.Errorf("Open with a Lease of %v = %q; want an error naming Lease", lease, err)
		}
	}

	q, err := Open(t.TempDir(), Options{Now: clock, Lease: MaxLease})
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

// TestOrphanLeaseRecordHidesNoReissuedID: a lease record whose message is
// gone, which a Receive racing an Ack can leave behind, is deleted by the
// next Open, so that the message that later takes its ID (IDs of
// acknowledged messages are given again after a reopen) is received like
// any other, not hidden until the old lease's expiry.
//
// The race is replayed in order, through the API where the API allows:
// A's lease lapses; B's Receive claims the message again, reads it, and
// builds its lease batch (expiry e2); A's Ack, which names the message and
// not the lease, ends B's lease and commits its deletes; then B's lease
// batch commits. That last commit cannot be ordered through the API, so
// it is replayed with the key and value B's batch holds.
func TestOrphanLeaseRecordHidesNoReissuedID(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	const lease = 30 * time.Second
	dir := t.TempDir()
	open := func() *Queue {
		t.Helper()
		q, err := Open(dir, Options{Now: clock, Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}

	q := open()
	id, err := q.Publish(ctx, []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	// A's lease.
	if ms, err := q.Receive(ctx, 1); err != nil || len(ms) != 1 {
		t.Fatalf("A's Receive = %v, %v", ms, err)
	}
	// A's lease lapses, and B's Receive leases the message until e2.
	now = now.Add(lease)
	if ms, err := q.Receive(ctx, 1); err != nil || len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("B's Receive = %v, %v", ms, err)
	}
	e2 := now.Add(lease)
	// A's Ack commits first.
	if err := q.Ack(ctx, []uint64{id}); err != nil {
		t.Fatalf("A's Ack: %v", err)
	}
	var value [8]byte
	binary.BigEndian.PutUint64(value[:], uint64(e2.UnixNano()))
	// B's lease batch commits after it.
	if err := q.db.Set(key(leasePrefix, id), value[:], pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart: Open deletes the lease record, and no message is stored,
	// so the next Publish reissues id.
	q = open()
	if _, closer, err := q.db.Get(key(leasePrefix, id)); !errors.Is(err, pebble.ErrNotFound) {
		if err == nil {
			closer.Close()
		}
		t.Errorf("the lease record of acknowledged message %d after a reopen: %v; want it deleted", id, err)
	}
	newID, err := q.Publish(ctx, []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if newID != id {
		t.Fatalf("the new message got ID %d, not the reissued %d: the scenario this test holds no longer arises", newID, id)
	}

	// Restart again, well before e2: the new message was never received.
	now = now.Add(time.Second)
	q = open()
	defer q.Close()
	ms, err := q.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || string(ms[0].Payload) != "new" {
		t.Errorf("Receive after reopen = %v; want the never-received message %d (\"new\"), which an old lease record under its reissued ID must not hide", ms, newID)
	}
}
