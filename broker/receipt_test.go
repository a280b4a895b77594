package broker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testKeys(t testing.TB, secret string) receiptKeys {
	k, err := newReceiptKeys([]byte(secret))
	require.NoError(t, err)
	return k
}

func TestReceiptRoundTrip(t *testing.T) {
	k := testKeys(t, "secret")
	for _, v := range []byte{receiptV1, receiptVersion} {
		r := k.makeVersion(v, 7, 1<<40+3, 0xdeadbeefcafef00d)
		queue, seq, nonce, err := k.parse(r)
		require.NoError(t, err, "version %d", v)
		require.Equal(t, uint32(7), queue)
		require.Equal(t, uint64(1<<40+3), seq)
		require.Equal(t, uint64(0xdeadbeefcafef00d), nonce)
	}
	raw, err := base64.RawURLEncoding.DecodeString(string(k.make(1, 2, 3)))
	require.NoError(t, err)
	require.Equal(t, byte(receiptVersion), raw[0], "new receipts are version 2")
}

// Version 1 receipts, sealed with HMAC-SHA256, are those of stores before
// version 2: a lease outlives the process that issued it, so they verify.
func TestReceiptVersion1IsTheHMACOne(t *testing.T) {
	k := testKeys(t, "secret")
	r := k.makeVersion(receiptV1, 1, 2, 3)
	raw, err := base64.RawURLEncoding.DecodeString(string(r))
	require.NoError(t, err)
	h := hmac.New(sha256.New, []byte("secret"))
	h.Write(raw[:receiptBody])
	require.Equal(t, h.Sum(nil)[:8], raw[receiptBody:], "version 1 is the first 8 bytes of HMAC-SHA256 of the body")
}

func TestReceiptMACCoversEveryBit(t *testing.T) {
	k := testKeys(t, "secret")
	for _, v := range []byte{receiptV1, receiptVersion} {
		raw, err := base64.RawURLEncoding.DecodeString(string(k.makeVersion(v, 9, 12345, 67890)))
		require.NoError(t, err)
		for i := range raw {
			for bit := range 8 {
				b := append([]byte(nil), raw...)
				b[i] ^= 1 << bit
				_, _, _, err := k.parse(ReceiptValue(base64.RawURLEncoding.EncodeToString(b)))
				require.ErrorIs(t, err, UnknownReceipt, "version %d, byte %d bit %d flipped", v, i, bit)
			}
		}
	}
}

func TestReceiptOfAnotherSecretIsUnknown(t *testing.T) {
	a, b := testKeys(t, "one secret"), testKeys(t, "another")
	for _, v := range []byte{receiptV1, receiptVersion} {
		_, _, _, err := b.parse(a.makeVersion(v, 1, 2, 3))
		require.ErrorIs(t, err, UnknownReceipt, "version %d", v)
	}
	_, _, _, err := a.parse(a.makeVersion(3, 1, 2, 3))
	require.ErrorIs(t, err, UnknownReceipt, "an unknown version")
}

// A store acks with the version 1 receipt of a lease it issued.
func TestStoreAcceptsVersion1Receipts(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("q", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = q.Publish(context.Background(), []byte("x"))
	require.NoError(t, err)
	ds, err := q.Receive(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	queue, seq, nonce, err := s.keys.parse(ds[0].Lease.Receipt)
	require.NoError(t, err)
	old := s.keys.makeVersion(receiptV1, queue, seq, nonce)
	require.NotEqual(t, ds[0].Lease.Receipt, old)
	require.NoError(t, q.Ack(context.Background(), old))
	st := q.Stats()
	require.Zero(t, st.Leased)
	require.EqualValues(t, 1, st.Acked)
}

// BenchmarkReceipt makes and checks one receipt per op, per version.
func BenchmarkReceipt(b *testing.B) {
	k := testKeys(b, "secret")
	for _, v := range []byte{receiptV1, receiptVersion} {
		b.Run(map[byte]string{receiptV1: "v1-hmac", receiptVersion: "v2-aes"}[v], func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				r := k.makeVersion(v, 1, uint64(i), 42)
				if _, _, _, err := k.parse(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
