package index

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestANackRecordWrittenBeforeTheFailureTrailerDecodesAsBefore shows the
// log stays readable: a nack or lease record as the code before the
// failure trailer wrote it (its fields, nothing after) decodes as an
// event with no failure, and encodes back to the same bytes.
func TestANackRecordWrittenBeforeTheFailureTrailerDecodesAsBefore(t *testing.T) {
	old := []byte{byte(KindNack)}
	old = binary.AppendUvarint(old, 3) // queue
	old = binary.AppendUvarint(old, 7) // seq
	old = binary.AppendUvarint(old, 1) // deliveries
	old = binary.AppendVarint(old, 42) // visibleAt
	e, err := Decode(old)
	require.NoError(t, err)
	require.Equal(t, Event{Kind: KindNack, Queue: 3, Seq: 7, Deliveries: 1, Time: 42}, e)
	require.Equal(t, old, e.Append(nil))

	lease := (&Event{Kind: KindLease, Queue: 3, Seq: 7, Deliveries: 2, Time: 9, Nonce: 5}).Append(nil)
	e, err = Decode(lease)
	require.NoError(t, err)
	require.Empty(t, e.Reason)
}

// TestANackCarriesItsFailure shows a nack's (and a restating lease's)
// failure round-trips, and that a trailer without a reason, a second
// encoding of an event with no failure, is refused.
func TestANackCarriesItsFailure(t *testing.T) {
	for _, e := range []Event{
		{Kind: KindNack, Queue: 3, Seq: 7, Deliveries: 1, Time: AtOnce, Code: 0x2A000042, Reason: "DOWNSTREAM_DOWN", Cause: "the downstream is down"},
		{Kind: KindNack, Queue: 3, Seq: 7, Deliveries: 1, Time: 5, Reason: "UNEXPLAINED"},
		{Kind: KindLease, Queue: 3, Seq: 7, Deliveries: 2, Time: 9, Nonce: 5, Code: 1, Reason: "R", Cause: "c"},
	} {
		rec := e.Append(nil)
		require.Equal(t, len(rec), e.encodedLen())
		got, err := Decode(rec)
		require.NoError(t, err)
		require.Equal(t, e, got)
		for cut := 1; cut < len(rec); cut++ {
			if got, err := Decode(rec[:cut]); err == nil {
				// Only the record without its trailer decodes.
				require.Empty(t, got.Reason, "cut at %d", cut)
			}
		}
	}
	bad := (&Event{Kind: KindNack, Queue: 3, Seq: 7, Deliveries: 1, Time: 5}).Append(nil)
	bad = binary.AppendUvarint(bad, 0)
	bad = appendString(bad, "")
	bad = appendString(bad, "")
	_, err := Decode(bad)
	require.ErrorIs(t, err, ErrBadEvent)
}

// TestTheLastFailureIsKeptForTheMessagesLife shows the projection keeps
// the last nack's failure through later leases (which report nothing),
// restates it in a copy forward (StateEvent), carries it through a
// checkpoint, and forgets it at a replay, which starts a new life.
func TestTheLastFailureIsKeptForTheMessagesLife(t *testing.T) {
	dir := t.TempDir()
	x, err := Rebuild(vfs.Default, dir)
	require.NoError(t, err)
	require.NoError(t, x.Apply(0, &Event{Kind: KindMeta, Secret: make([]byte, SecretSize)}))
	require.NoError(t, x.Apply(0, &Event{Kind: KindDeclare, Queue: 1, Name: "q", Policy: Policy{VisibilityTimeout: 10, MaxDeliveries: 3}}))
	events := []*Event{
		pub(1, 1, ""),
		{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 1, Time: 20, Nonce: 1},
		{Kind: KindNack, Queue: 1, Seq: 1, Deliveries: 1, Time: AtOnce, Code: 9, Reason: "FIRST", Cause: "one"},
		{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 2, Time: 30, Nonce: 2},
		{Kind: KindNack, Queue: 1, Seq: 1, Deliveries: 2, Time: AtOnce, Code: 8, Reason: "SECOND", Cause: "two"},
		{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 3, Time: 40, Nonce: 3},
	}
	for i, e := range events {
		require.NoError(t, x.Apply(wal.MakePosition(1, 32+i), e))
	}
	m := x.Queue("q").Get(1)
	require.Equal(t, [3]any{uint32(8), "SECOND", "two"}, [3]any{m.Code, m.Reason, m.Cause})
	se, ok := StateEvent(1, m)
	require.True(t, ok)
	require.Equal(t, Event{Kind: KindLease, Queue: 1, Seq: 1, Deliveries: 3, Time: 40, Nonce: 3, Code: 8, Reason: "SECOND", Cause: "two"}, se)

	// A copy forward (publish, then the state event) gives the same state.
	copied := declared(t)
	copied.Queue("q").Policy.MaxDeliveries = 3
	require.NoError(t, copied.Apply(wal.MakePosition(2, 32), pub(1, 1, "")))
	require.NoError(t, copied.Apply(wal.MakePosition(2, 64), &se))
	cm := copied.Queue("q").Get(1)
	require.Equal(t, [3]any{m.Code, m.Reason, m.Cause}, [3]any{cm.Code, cm.Reason, cm.Cause})

	// A checkpoint keeps it (its format already held every active
	// message's code, reason and cause).
	checkpointAt(t, x, dir, wal.MakePosition(1, 32+len(events)))
	want := dumpAll(x, 0)
	require.NoError(t, x.Table.Close())
	loaded, _, err := Load(vfs.Default, dir)
	require.NoError(t, err)
	require.Equal(t, want, dumpAll(loaded, 0))
	lm := loaded.Queue("q").Get(1)
	require.Equal(t, "SECOND", lm.Reason)

	// A dead letter, then a replay: the new life has no failure.
	require.NoError(t, loaded.Apply(wal.MakePosition(1, 100), &Event{Kind: KindDeadLetter, Queue: 1, Seq: 1, Deliveries: 3, Time: 50, Code: 8, Reason: "SECOND", Cause: "two"}))
	require.NoError(t, loaded.Apply(wal.MakePosition(1, 101), &Event{Kind: KindReplay, Queue: 1, Seq: 1}))
	lm = loaded.Queue("q").Get(1)
	require.Equal(t, [3]any{uint32(0), "", ""}, [3]any{lm.Code, lm.Reason, lm.Cause})
	require.NoError(t, loaded.Table.Close())
}
