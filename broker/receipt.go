package broker

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// A receipt names one lease: the queue, the message, and the lease's random
// nonce, sealed with a MAC keyed by the store's secret (kept in the log). A
// receipt that does not verify — garbled, forged, or from another store —
// is UnknownReceipt; one that verifies but names a lease that is no longer
// live is LeaseExpired. A store opened from a Backup (or a copy of a
// stopped store's directory) has the original's secret, so the two take
// each other's receipts as their own: one naming a lease the copy holds
// acts on it, and any other is LeaseExpired, not UnknownReceipt. Except
// that a receipt names its queue by number, which each store gives in the
// order its queues are first declared: once the two declare new queues in
// different orders, a receipt for a queue declared after the copy was made
// may name a number the other store gave another queue, and is then
// UnknownReceipt there, as another queue's receipt is.
//
//	byte 0      version (2; 1 is still accepted)
//	bytes 1-4   queue number, little-endian
//	bytes 5-12  message sequence
//	bytes 13-20 lease nonce
//	bytes 21-28 the MAC of bytes 0-20, first 8 bytes
//
// Version 2's MAC is a CBC-MAC with AES-128 over the 21 bytes padded with
// zeros to two blocks. CBC-MAC is a secure MAC for messages of one fixed
// length, and every version 2 body is 21 bytes. Its key is the first 16
// bytes of HMAC-SHA256(secret, "walbroker receipt v2"). Version 1, the
// first 8 bytes of HMAC-SHA256(secret, bytes 0-20), cost ten times more
// per receipt, a tenth of a delivery's CPU; it is still accepted, since a
// lease (and so its receipt) outlives the process that issued it.
//
// The text form is unpadded base64url.
const (
	receiptV1      = 1
	receiptVersion = 2
	receiptBody    = 21
	receiptLen     = receiptBody + 8
)

// receiptKeys makes and checks receipts. Safe for concurrent use.
type receiptKeys struct {
	block cipher.Block // version 2; safe for concurrent use
	// v1 holds keyed HMACs for version 1, pooled since keying one costs
	// more than using it.
	v1 *sync.Pool
}

func newReceiptKeys(secret []byte) (receiptKeys, error) {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("walbroker receipt v2"))
	block, err := aes.NewCipher(h.Sum(nil)[:16])
	if err != nil {
		return receiptKeys{}, fmt.Errorf("receipt key: %w", err)
	}
	return receiptKeys{
		block: block,
		v1:    &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }},
	}, nil
}

// A receipt's working memory, in one allocation: the MAC's scratch (a
// cipher.Block's and a hash.Hash's arguments escape to the heap, so a
// stack array would be allocated anyway), the raw receipt, its text.
const (
	scratchLen = 2 * aes.BlockSize // also sha256.Size
	receiptTxt = (receiptLen*8 + 5) / 6
	rawAt      = scratchLen
	txtAt      = rawAt + receiptLen
	workLen    = txtAt + receiptTxt
)

// mac writes the MAC of a receipt body (receiptBody bytes, by its version
// byte) to mac (8 bytes). scratch is scratchLen bytes.
func (k receiptKeys) mac(body, mac, scratch []byte) {
	if body[0] == receiptV1 {
		h := k.v1.Get().(hash.Hash)
		h.Reset()
		h.Write(body)
		copy(mac, h.Sum(scratch[:0]))
		k.v1.Put(h)
		return
	}
	clear(scratch)
	copy(scratch, body)
	first, second := scratch[:aes.BlockSize], scratch[aes.BlockSize:]
	k.block.Encrypt(first, first)
	subtle.XORBytes(second, second, first)
	k.block.Encrypt(second, second)
	copy(mac, second)
}

func (k receiptKeys) make(queue uint32, seq, nonce uint64) ReceiptValue {
	return k.makeVersion(receiptVersion, queue, seq, nonce)
}

func (k receiptKeys) makeVersion(version byte, queue uint32, seq, nonce uint64) ReceiptValue {
	work := make([]byte, workLen)
	raw, txt := work[rawAt:txtAt], work[txtAt:]
	raw[0] = version
	binary.LittleEndian.PutUint32(raw[1:], queue)
	binary.LittleEndian.PutUint64(raw[5:], seq)
	binary.LittleEndian.PutUint64(raw[13:], nonce)
	k.mac(raw[:receiptBody], raw[receiptBody:], work[:scratchLen])
	receiptEncoding.Encode(txt, raw)
	return ReceiptValue(txt)
}

var receiptEncoding = base64.RawURLEncoding.Strict()

// parse verifies r and returns what it names, or an error wrapping
// UnknownReceipt.
func (k receiptKeys) parse(r ReceiptValue) (queue uint32, seq, nonce uint64, err error) {
	ok := len(r) == receiptTxt
	var raw []byte
	if ok {
		work := make([]byte, workLen)
		txt := work[txtAt:]
		copy(txt, r)
		// Strict: the last character's unused bits must be zero, or
		// four strings would decode to the receipt issued, and three of
		// them were never issued.
		n, derr := receiptEncoding.Decode(work[rawAt:txtAt], txt)
		raw = work[rawAt : rawAt+n]
		ok = derr == nil && n == receiptLen && (raw[0] == receiptVersion || raw[0] == receiptV1)
		if ok {
			// The text is no longer needed: the MAC goes in its room.
			want := work[txtAt : txtAt+receiptLen-receiptBody]
			k.mac(raw[:receiptBody], want, work[:scratchLen])
			ok = subtle.ConstantTimeCompare(raw[receiptBody:], want) == 1
		}
	}
	if !ok {
		return 0, 0, 0, fmt.Errorf("receipt %s: not issued by this broker: %w", quoteReceipt(r), UnknownReceipt)
	}
	return binary.LittleEndian.Uint32(raw[1:]), binary.LittleEndian.Uint64(raw[5:]), binary.LittleEndian.Uint64(raw[13:]), nil
}

// quoteReceipt quotes the first 12 characters of a receipt that was
// refused, marked with "..." when there were more: enough to tell which
// one it was, while a caller's megabyte of junk stays out of the error.
func quoteReceipt(r ReceiptValue) string {
	const shown = 12
	if utf8.RuneCountInString(string(r)) <= shown {
		return fmt.Sprintf("%q", string(r))
	}
	return fmt.Sprintf("%.*q...", shown, string(r))
}

// payloadCopy returns a copy of p that the caller owns: never nil, even
// for an empty payload, so that a new message is told from a duplicate
// (whose Payload is nil; see Queue.PublishKeyed).
func payloadCopy(p []byte) []byte {
	return append(make([]byte, 0, len(p)), p...)
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

// parseMessageID returns the sequence number of an ID messageID made, and
// false for any other string (upper-case digits included: an ID is
// compared as the string it was handed out as).
func parseMessageID(id string) (uint64, bool) {
	if len(id) != 16 || strings.ContainsFunc(id, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'f') }) {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 16, 64)
	return n, err == nil && n != 0
}
