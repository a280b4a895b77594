package index

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEventLayout checks the encoding of every kind byte for byte against
// the table in doc.go: the kind first, then its fields in the order
// listed, unsigned integers as uvarints, signed ones as zig-zag varints,
// strings as a uvarint length then the bytes, nonces as 8 little-endian
// bytes, a publish's payload as the rest of the record, and the failure
// trailer of a lease or nack only when it has a reason. The expected
// bytes are written out by hand, not with encoding/binary, and each also
// decodes back to its event.
func TestEventLayout(t *testing.T) {
	secret := bytes.Repeat([]byte{0xa5}, SecretSize)
	nonce := []byte{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01} // 0x0102030405060708
	for _, c := range []struct {
		name string
		e    Event
		want []byte
	}{
		{"meta: the secret, 32 bytes, no length",
			Event{Kind: KindMeta, Secret: secret},
			append([]byte{1}, secret...)},
		{"declare: queue, name, then the policy as zig-zag varints",
			Event{Kind: KindDeclare, Queue: 3, Name: "q", Policy: Policy{
				VisibilityTimeout: 1, RetryDelay: -1, MaxRetryDelay: 64, MaxDeliveries: 5,
				MaxMessageBytes: 300, Capacity: 0, DedupWindow: -64}},
			[]byte{2, 3, 1, 'q', 0x02, 0x01, 0x80, 0x01, 0x0a, 0xd8, 0x04, 0x00, 0x7f}},
		{"publish: queue, seq, enqueuedAt, key, payload to the end",
			Event{Kind: KindPublish, Queue: 2, Seq: 300, Time: -2, Key: "k", Payload: []byte("xy")},
			[]byte{3, 2, 0xac, 0x02, 0x03, 1, 'k', 'x', 'y'}},
		{"lease: queue, seq, deliveries, expiresAt, nonce; no failure",
			Event{Kind: KindLease, Queue: 1, Seq: 7, Deliveries: 2, Time: 1, Nonce: 0x0102030405060708},
			append([]byte{4, 1, 7, 2, 0x02}, nonce...)},
		{"lease with a failure: code, reason, cause after the nonce",
			Event{Kind: KindLease, Queue: 1, Seq: 7, Deliveries: 2, Time: 1, Nonce: 0x0102030405060708, Code: 5, Reason: "r"},
			append(append([]byte{4, 1, 7, 2, 0x02}, nonce...), 5, 1, 'r', 0)},
		{"ack: queue, seq",
			Event{Kind: KindAck, Queue: 1, Seq: 7},
			[]byte{5, 1, 7}},
		{"nack: queue, seq, deliveries, visibleAt (AtOnce), no failure",
			Event{Kind: KindNack, Queue: 1, Seq: 7, Deliveries: 3, Time: AtOnce},
			[]byte{6, 1, 7, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"nack with a failure",
			Event{Kind: KindNack, Queue: 1, Seq: 7, Deliveries: 3, Time: 0, Code: 300, Reason: "r", Cause: "c"},
			[]byte{6, 1, 7, 3, 0x00, 0xac, 0x02, 1, 'r', 1, 'c'}},
		{"deadletter: queue, seq, deliveries, failedAt, code, reason, cause",
			Event{Kind: KindDeadLetter, Queue: 1, Seq: 7, Deliveries: 5, Time: 99, Code: 1, Reason: "LE"},
			[]byte{7, 1, 7, 5, 0xc6, 0x01, 1, 2, 'L', 'E', 0}},
		{"extend: queue, seq, deliveries, expiresAt, nonce",
			Event{Kind: KindExtend, Queue: 1, Seq: 7, Deliveries: 1, Time: 2, Nonce: 0x0102030405060708},
			append([]byte{8, 1, 7, 1, 0x04}, nonce...)},
		{"replay: queue, seq",
			Event{Kind: KindReplay, Queue: 1, Seq: 7},
			[]byte{9, 1, 7}},
		{"delete: queue, seq",
			Event{Kind: KindDelete, Queue: 1, Seq: 7},
			[]byte{10, 1, 7}},
		{"evict: queue, clock, window (NoEviction: a clock reading only)",
			Event{Kind: KindEvict, Queue: 1, Time: 3, Window: NoEviction},
			[]byte{11, 1, 0x06, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"mark: nextSeq, no queue",
			Event{Kind: KindMark, Seq: 128},
			[]byte{12, 0x80, 0x01}},
		{"salvaged: no fields",
			Event{Kind: KindSalvaged},
			[]byte{13}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.e.Append(nil))
			require.Equal(t, len(c.want), c.e.encodedLen())
			got, err := Decode(c.want)
			require.NoError(t, err)
			require.Equal(t, c.e, got)
		})
	}
}
