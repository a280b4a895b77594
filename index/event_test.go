package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func sampleEvents() []Event {
	secret := make([]byte, SecretSize)
	for i := range secret {
		secret[i] = byte(i)
	}
	return []Event{
		{Kind: KindMeta, Secret: secret},
		{Kind: KindDeclare, Queue: 3, Name: "jobs.high", Policy: Policy{VisibilityTimeout: 30e9, RetryDelay: 1e9, MaxRetryDelay: 60e9, MaxDeliveries: 5, MaxMessageBytes: 1 << 20, Capacity: 1000, DedupWindow: 6 * 3600e9}},
		{Kind: KindPublish, Queue: 3, Seq: 1 << 40, Time: 1_700_000_000_123_456_789, Key: "k-1", Payload: []byte("payload")},
		{Kind: KindPublish, Queue: 1, Seq: 2, Time: -5, Payload: []byte{}},
		{Kind: KindLease, Queue: 3, Seq: 7, Deliveries: 2, Time: 1 << 62, Nonce: 0xdeadbeefcafef00d},
		{Kind: KindAck, Queue: 3, Seq: 7},
		{Kind: KindNack, Queue: 3, Seq: 7, Deliveries: 3, Time: 42},
		{Kind: KindDeadLetter, Queue: 3, Seq: 7, Deliveries: 5, Time: 99, Code: 0x07010003, Reason: "LEASE_EXPIRED", Cause: "public text"},
		{Kind: KindExtend, Queue: 3, Seq: 7, Deliveries: 1, Time: 1000, Nonce: 1},
		{Kind: KindReplay, Queue: 3, Seq: 7},
		{Kind: KindDelete, Queue: 3, Seq: 7},
		{Kind: KindEvict, Queue: 3, Time: 1_700_000_000_000_000_000, Window: 6 * 3600e9},
		{Kind: KindMark, Seq: 1 << 33},
		{Kind: KindSalvaged},
	}
}

func TestEventRoundTrip(t *testing.T) {
	for _, e := range sampleEvents() {
		rec := e.Append(nil)
		require.Equal(t, byte(e.Kind), rec[0])
		got, err := Decode(rec)
		require.NoError(t, err, "%s", e.Kind)
		if len(e.Payload) == 0 && e.Kind == KindPublish {
			require.Empty(t, got.Payload)
			got.Payload, e.Payload = nil, nil
		}
		require.Equal(t, e, got, "%s", e.Kind)
	}
}

func TestDecodeRefusesMalformedEvents(t *testing.T) {
	for _, e := range sampleEvents() {
		rec := e.Append(nil)
		if e.Kind != KindPublish { // a publish's payload is "the rest": any cut is a shorter payload
			for cut := 0; cut < len(rec); cut++ {
				_, err := Decode(rec[:cut])
				require.ErrorIs(t, err, ErrBadEvent, "%s cut at %d", e.Kind, cut)
			}
			_, err := Decode(append(rec, 0))
			require.ErrorIs(t, err, ErrBadEvent, "%s with a trailing byte", e.Kind)
		}
	}
	for _, rec := range [][]byte{nil, {0}, {11}} {
		_, err := Decode(rec)
		require.True(t, errors.Is(err, ErrBadEvent), "%v", rec)
	}
	// A kind above the last one is a later build's, not damage.
	for _, rec := range [][]byte{{byte(LastKind) + 1}, {200, 1, 2}} {
		_, err := Decode(rec)
		require.ErrorIs(t, err, ErrLaterKind, "%v", rec)
		require.ErrorIs(t, err, errors.ErrUnsupported, "%v", rec)
		require.NotErrorIs(t, err, ErrBadEvent, "%v", rec)
		require.ErrorContains(t, err, fmt.Sprintf("kind %d, written by a later build; this build reads kinds 1 to 13", rec[0]))
	}
	// A queue number beyond 32 bits is refused, not truncated.
	_, err := Decode([]byte{byte(KindAck), 0x80, 0x80, 0x80, 0x80, 0x10, 1})
	require.ErrorIs(t, err, ErrBadEvent)
}

// FuzzDecode decodes arbitrary bytes as an event record. Decode must not
// panic, and must fail only with ErrBadEvent, or, for a record whose kind
// is above LastKind, only with ErrLaterKind (a later build's record, not
// ErrBadEvent: it is no damage); and what it accepts has exactly one
// encoding: Append gives back the bytes it was read from (a field in a
// longer form is refused), they decode to the same event, and encodedLen
// is their length. The seeds are an event of every kind (sampleEvents)
// and each kind of 32-bit field one past its range.
func FuzzDecode(f *testing.F) {
	for _, e := range sampleEvents() {
		f.Add(e.Append(nil))
	}
	// Each kind of 32-bit field (a queue number, a delivery count, a
	// code) one past its range, which Decode must refuse rather than
	// truncate: the fuzzing engine seldom hits an exact bound by itself.
	over := binary.AppendUvarint(nil, 1<<32)
	f.Add(append(append([]byte{byte(KindAck)}, over...), 7))
	f.Add(binary.AppendVarint(append([]byte{byte(KindNack), 3, 7}, over...), 42))
	f.Add(append(append(binary.AppendVarint([]byte{byte(KindDeadLetter), 3, 7, 5}, 99), over...), 0, 0))
	f.Fuzz(func(t *testing.T, rec []byte) {
		e, err := Decode(rec)
		if err != nil {
			if len(rec) > 0 && rec[0] > byte(LastKind) {
				require.ErrorIs(t, err, ErrLaterKind) // a later build's kind
				require.NotErrorIs(t, err, ErrBadEvent)
				return
			}
			require.ErrorIs(t, err, ErrBadEvent)
			return
		}
		// What decodes re-encodes to the same bytes, which decode to the
		// same event.
		enc := e.Append(nil)
		require.Equal(t, rec, enc)
		again, err := Decode(enc)
		require.NoError(t, err, "the re-encoding of a %s event does not decode", e.Kind)
		require.Equal(t, e, again, "a %s event re-encoded decodes otherwise", e.Kind)
		// The length the index counts for an event without encoding it
		// (a publish's record, a state event's beside it in a copy
		// forward) is the length Append writes.
		require.Equal(t, len(enc), e.encodedLen(), "encodedLen of a %s event", e.Kind)
	})
}

func TestRestampRewritesTheHeadInPlaceWhenItKeepsItsLength(t *testing.T) {
	payload := []byte("the payload, not copied again")
	e := Event{Kind: KindPublish, Queue: 3, Seq: 1000, Time: 1_700_000_000_000_000_000, Key: "k", Payload: payload}
	rec := e.Append(make([]byte, 0, 256))
	e.Seq, e.Time = 1001, 1_700_000_000_000_000_500
	got := e.Restamp(rec)
	require.Same(t, &rec[0], &got[0], "a head of the same length is rewritten in place")
	require.Equal(t, e.Append(nil), got)
	d, err := Decode(got)
	require.NoError(t, err)
	require.Equal(t, uint64(1001), d.Seq)
	require.Equal(t, int64(1_700_000_000_000_000_500), d.Time)
	require.Equal(t, payload, d.Payload)
	require.Equal(t, "k", d.Key)
}

func TestRestampEncodesAnewWhenTheHeadChangesLength(t *testing.T) {
	for _, tc := range []struct{ from, to uint64 }{{127, 128}, {128, 127}, {1, 1 << 40}} {
		e := Event{Kind: KindPublish, Queue: 1, Seq: tc.from, Time: 5, Payload: []byte("abc")}
		rec := e.Append(nil)
		e.Seq = tc.to
		got := e.Restamp(rec)
		require.Equal(t, e.Append(nil), got, "%d -> %d", tc.from, tc.to)
		d, err := Decode(got)
		require.NoError(t, err)
		require.Equal(t, tc.to, d.Seq)
		require.Equal(t, []byte("abc"), d.Payload)
	}
}

func TestRestampOfARecordItsPayloadAliases(t *testing.T) {
	// A decoded event's payload aliases its record: a head that grows
	// must not overwrite the payload before it is copied.
	rec := (&Event{Kind: KindPublish, Queue: 1, Seq: 100, Time: 5, Payload: []byte("0123456789")}).Append(nil)
	e, err := Decode(rec)
	require.NoError(t, err)
	e.Seq = 1 << 50
	got := e.Restamp(rec)
	d, err := Decode(got)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<50), d.Seq)
	require.Equal(t, []byte("0123456789"), d.Payload)
}

// TestDecodeRefusesAFieldInALongerForm: the encoder writes every varint in
// its shortest form, so each event has exactly one encoding. A field, signed
// or unsigned, written in a longer form (a last byte of zero) is refused,
// naming the field, while the same event in its shortest form decodes.
func TestDecodeRefusesAFieldInALongerForm(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		short, long []byte
	}{
		{"unsigned sequence", "seq", []byte{byte(KindNack), 3, 7, 2, 0x54}, []byte{byte(KindNack), 3, 0x87, 0x00, 2, 0x54}},
		{"unsigned delivery count", "deliveries", []byte{byte(KindNack), 3, 7, 2, 0x54}, []byte{byte(KindNack), 3, 7, 0x82, 0x00, 0x54}},
		{"signed visibleAt", "visibleAt", []byte{byte(KindNack), 3, 7, 2, 0x54}, []byte{byte(KindNack), 3, 7, 2, 0xd4, 0x00}},
		{"signed eviction clock", "clock", []byte{byte(KindEvict), 3, 0x54, 0x54}, []byte{byte(KindEvict), 3, 0xd4, 0x80, 0x00, 0x54}},
		{"signed eviction window", "window", []byte{byte(KindEvict), 3, 0x54, 0x54}, []byte{byte(KindEvict), 3, 0x54, 0xd4, 0x00}},
		{"signed policy field", "visibilityTimeout", []byte{byte(KindDeclare), 3, 0, 0x14, 0, 0, 2, 0, 0, 0}, []byte{byte(KindDeclare), 3, 0, 0x94, 0x00, 0, 0, 2, 0, 0, 0}},
	} {
		short, err := Decode(tc.short)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.short, short.Append(nil), tc.name)
		_, err = Decode(tc.long)
		require.ErrorIs(t, err, ErrBadEvent, tc.name)
		require.ErrorContains(t, err, tc.field+": bad", "%s: the error names the field", tc.name)
	}
}

// encodedLen is what Append writes, for the kinds it computes and the
// kinds it encodes, across varint boundaries.
func TestEncodedLenIsTheLengthAppendWrites(t *testing.T) {
	for _, kind := range []Kind{KindPublish, KindLease, KindExtend, KindNack, KindDeadLetter, KindAck, KindDelete, KindReplay, KindMark, KindSalvaged} {
		for _, big := range []uint64{0, 127, 128, 1 << 40} {
			e := Event{Kind: kind, Queue: uint32(big % (1 << 31)), Seq: big, Deliveries: uint32(big % (1 << 32)), Time: -int64(big),
				Nonce: big, Code: uint32(big % (1 << 32)), Reason: "R", Cause: string(make([]byte, big%300)), Key: "k", Payload: make([]byte, big%200)}
			require.Equal(t, len(e.Append(nil)), e.encodedLen(), "%s with values near %d", kind, big)
		}
	}
}
