package recovery

import (
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
