package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestACorruptPayloadIsReportedOnce: a payload that is not what its
// reference makes is one fault, reported once for the entry that read
// it, by the report that says what is wrong with its bytes. The reference
// a corrupt payload carries (none, or another message's) is not evidence
// of which message it is: the message is the one its ID names, and a
// mismatch of that reference with the published one is the same fault,
// not a second one.
func TestACorruptPayloadIsReportedOnce(t *testing.T) {
	base := time.Now().Add(-time.Minute).UnixNano()
	ms := int64(time.Millisecond)
	id := "00000000000000c1"
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	other := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub1", N: 7})
	flipped := func(ref string) []byte {
		p := Payload(ref)
		p[len(p)-1] ^= 1
		return p
	}
	published := Entry{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{id}, Refs: []string{ref},
		Enq: base, T0: base, T1: base}
	t0, t1 := base+ms, base+2*ms

	for _, payload := range []struct {
		name  string
		bytes []byte
		want  string
	}{
		{"no reference", []byte("garbage"), "has no reference"},
		{"another message's reference, its bytes changed", flipped(other), "is not the one its reference makes"},
		{"control: its own reference, its bytes changed", flipped(ref), "is not the one its reference makes"},
	} {
		delivery := deliveredEntry("con0", QueueWork, workDelivery(id, ref, base, 1, t0, t1, payload.bytes), IntentHold, t0, t1)
		require.NotEmpty(t, delivery.Err, "the payload is corrupt")
		oneReport := func(t *testing.T, c *Checker) {
			t.Helper()
			require.ErrorContains(t, c.Err(), payload.want)
			require.Len(t, c.violations, 1, "one corrupt payload: %v", c.violations)
		}

		t.Run(payload.name+"/delivered", func(t *testing.T) {
			c := checkerWithoutStores(t)
			c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: broker.SyncAll.String()}, published, delivery})
			oneReport(t, c)
		})
		t.Run(payload.name+"/a maybe, then made certain", func(t *testing.T) {
			maybe := delivery
			maybe.Op = OpMaybe
			c := checkerWithoutStores(t)
			c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: broker.SyncPublish.String()}, published, maybe, delivery})
			oneReport(t, c)
		})
		t.Run(payload.name+"/a dead letter the janitor read", func(t *testing.T) {
			entries, exp := holdToLastDelivery(id, ref, base, IntentHold, func(int64) []Entry { return nil })
			c := checkerWithoutStores(t)
			c.AddCycle(1, entries)
			require.NoError(t, c.Err(), "the journal up to the lapse is sound")
			read := exp + int64(time.Second)
			deleting := Entry{Op: OpDeleting, Who: "janitor", Queue: QueueWork, ID: id, Enq: base, Del: maxDeliveries(QueueWork),
				Reason: broker.ReasonLeaseExpired, Failed: exp, T0: read, T1: read}
			var err error
			deleting.Ref, err = CheckPayload(payload.bytes)
			require.Error(t, err)
			deleting.Err = err.Error()
			c.AddCycle(2, []Entry{{Op: OpStart, Cycle: 2, Sync: broker.SyncAll.String()}, deleting})
			oneReport(t, c)
		})
	}
}

// TestACorruptPayloadInAStoreIsReportedOnce: as TestACorruptPayloadIsReportedOnce,
// for the payloads the checker reads from a store rather than from a
// journal: a message a drain receives, a dead letter a drain reads, and a
// dead letter the in-place check reads. Each is one fault, reported once
// by what is wrong with its bytes; the reference it carries is no
// evidence, so it is neither compared with the published one nor, for a
// message the journal does not know, taken for a publish that never
// returned.
func TestACorruptPayloadInAStoreIsReportedOnce(t *testing.T) {
	ctx := context.Background()
	ref := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1})
	other := MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub1", N: 7})
	flipped := func(ref string) []byte {
		p := Payload(ref)
		p[len(p)-1] ^= 1
		return p
	}
	// store returns a store holding one message with payload on the work
	// queue, rejected on its first delivery if dead, and the journal of a
	// child that published it with ref (and, if dead, rejected it); a
	// child that journaled nothing of it if unknown. The payload is the
	// corrupt one in the store only: the journal saw it whole.
	store := func(t *testing.T, payload []byte, dead, unknown bool) (string, []Entry) {
		t.Helper()
		dir := t.TempDir()
		s, q := openQueueOf(t, dir, QueueWork)
		t0 := time.Now().UnixNano()
		m, err := q.Publish(ctx, payload)
		require.NoError(t, err)
		entries := []Entry{{Op: OpStart, Cycle: 1, Sync: broker.SyncAll.String()},
			{Op: OpPublished, Who: "pub0", Queue: QueueWork, N: 1, IDs: []string{m.ID}, Refs: []string{ref},
				Enq: m.EnqueuedAt.UnixNano(), T0: t0, T1: time.Now().UnixNano()}}
		if dead {
			t0 := time.Now().UnixNano()
			ds, err := q.Receive(ctx, 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			t1 := time.Now().UnixNano()
			delivered := deliveredEntry("con0", QueueWork, ds[0], IntentReject, t0, t1)
			delivered.Ref, delivered.Err = ref, ""
			t0 = time.Now().UnixNano()
			require.NoError(t, q.Reject(ctx, ds[0].Lease.Receipt, causeFor(QueueWork, IntentReject)))
			entries = append(entries, delivered,
				Entry{Op: OpRejected, Who: "con0", Queue: QueueWork, ID: m.ID, Del: 1, T0: t0, T1: time.Now().UnixNano()})
		}
		require.NoError(t, s.Close())
		if unknown {
			entries = entries[:1]
		}
		return dir, entries
	}

	for _, payload := range []struct {
		name    string
		bytes   []byte
		unknown bool // the journal does not know the message
		want    string
	}{
		{"no reference", []byte("garbage"), false, "has no reference"},
		{"another message's reference, its bytes changed", flipped(other), false, "is not the one its reference makes"},
		{"control: its own reference, its bytes changed", flipped(ref), false, "is not the one its reference makes"},
		{"a message the journal does not know, another's reference", flipped(other), true, "is not the one its reference makes"},
	} {
		for _, path := range []struct {
			name  string
			dead  bool
			check func(c *Checker, dir string) error
		}{
			{"a message a drain received", false, (*Checker).CheckDrain},
			{"a dead letter a drain read", true, (*Checker).CheckDrain},
			{"a dead letter the in-place check read", true, (*Checker).CheckInPlace},
		} {
			t.Run(payload.name+"/"+path.name, func(t *testing.T) {
				dir, entries := store(t, payload.bytes, path.dead, payload.unknown)
				c := checkerWithoutStores(t)
				c.AddCycle(1, entries)
				require.NoError(t, c.Err(), "the journal is sound")
				require.ErrorContains(t, path.check(c, dir), payload.want)
				require.Len(t, c.violations, 1, "one corrupt payload: %v", c.violations)
			})
		}
	}
}
