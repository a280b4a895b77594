package broker

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strconv"
	"sync"
)

// A receipt names one lease: the queue, the message, and the lease's random
// nonce, sealed with a MAC keyed by the store's secret (kept in the log). A
// receipt that does not verify — garbled, forged, or from another store —
// is UnknownReceipt; one that verifies but names a lease that is no longer
// live is LeaseExpired.
//
//	byte 0      version (1)
//	bytes 1-4   queue number, little-endian
//	bytes 5-12  message sequence
//	bytes 13-20 lease nonce
//	bytes 21-28 first 8 bytes of HMAC-SHA256(secret, bytes 0-20)
//
// The text form is unpadded base64url.
const (
	receiptVersion = 1
	receiptBody    = 21
	receiptLen     = receiptBody + 8
)

// receiptKeys makes and checks receipts. Its MACs come from a pool, since
// keying an HMAC costs more than using one. Safe for concurrent use.
type receiptKeys struct{ macs *sync.Pool }

func newReceiptKeys(secret []byte) receiptKeys {
	return receiptKeys{macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}}
}

func (k receiptKeys) mac(body []byte) []byte {
	h := k.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(body)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])[:8]
	k.macs.Put(h)
	return out
}

func (k receiptKeys) make(queue uint32, seq, nonce uint64) ReceiptValue {
	var b [receiptLen]byte
	b[0] = receiptVersion
	binary.LittleEndian.PutUint32(b[1:], queue)
	binary.LittleEndian.PutUint64(b[5:], seq)
	binary.LittleEndian.PutUint64(b[13:], nonce)
	copy(b[receiptBody:], k.mac(b[:receiptBody]))
	return ReceiptValue(receiptEncoding.EncodeToString(b[:]))
}

var receiptEncoding = base64.RawURLEncoding.Strict()

// parse verifies r and returns what it names, or an error wrapping
// UnknownReceipt.
func (k receiptKeys) parse(r ReceiptValue) (queue uint32, seq, nonce uint64, err error) {
	// Strict: the last character's unused bits must be zero, or four
	// strings would decode to the receipt issued, and three of them were
	// never issued.
	b, derr := receiptEncoding.DecodeString(string(r))
	if derr != nil || len(b) != receiptLen || b[0] != receiptVersion || !hmac.Equal(b[receiptBody:], k.mac(b[:receiptBody])) {
		return 0, 0, 0, fmt.Errorf("broker: receipt %.12q...: not issued by this store: %w", string(r), UnknownReceipt)
	}
	return binary.LittleEndian.Uint32(b[1:]), binary.LittleEndian.Uint64(b[5:]), binary.LittleEndian.Uint64(b[13:]), nil
}

// Message IDs are the store-wide message sequence in 16 hex digits: unique
// in the store, never reused, and stable across replays of a dead letter.
func messageID(seq uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[seq&0xf]
		seq >>= 4
	}
	return string(b[:])
}

func parseMessageID(id string) (uint64, bool) {
	if len(id) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 16, 64)
	return n, err == nil && n != 0
}
