package broker_test

import (
	"encoding/base64"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// tampered is every variant of receipt r a client could send instead of
// it: each character replaced by every other of both base64 alphabets and
// padding, each prefix, extensions, the standard alphabet's spelling, the
// padded form, each raw bit flipped, a last character whose unused bits
// are set, and large inputs.
func tampered(t *testing.T, r broker.ReceiptValue) map[string]bool {
	t.Helper()
	s := string(r)
	raw, err := base64.RawURLEncoding.DecodeString(s)
	require.NoError(t, err)
	out := map[string]bool{}
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=. \x00\xff"
	for i := range s {
		for _, c := range []byte(chars) {
			out[s[:i]+string(c)+s[i+1:]] = true
		}
	}
	for n := range len(s) {
		out[s[:n]] = true
	}
	for _, tail := range []string{"A", "AA", "AAA", "AAAA", "=", "==", "\n", s} {
		out[s+tail] = true
		out[tail+s] = true
	}
	for i := range raw {
		for bit := range 8 {
			b := append([]byte(nil), raw...)
			b[i] ^= 1 << bit
			out[base64.RawURLEncoding.EncodeToString(b)] = true
			out[base64.URLEncoding.EncodeToString(b)] = true
			out[base64.StdEncoding.EncodeToString(b)] = true
		}
	}
	out[base64.URLEncoding.EncodeToString(raw)] = true    // padded
	out[base64.StdEncoding.EncodeToString(raw)] = true    // standard alphabet, padded
	out[base64.RawStdEncoding.EncodeToString(raw)] = true // standard alphabet: the same when no + or / occurs
	// The last character carries 2 bits (29 bytes = 232 bits, 39 chars
	// of 6): the others are unused, and a lenient decoder ignores them.
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", s[len(s)-1])
	for v := range 16 {
		c := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|v]
		out[s[:len(s)-1]+string(c)] = true
	}
	out[strings.Repeat("A", 1<<16)] = true
	out[s+strings.Repeat("A", 1<<16)] = true
	out[strings.Repeat("\xff", 1000)] = true
	delete(out, s)
	return out
}

// Every variant of a live receipt is refused with UnknownReceipt, by every
// call that takes one, of the store's queue and of a Memory, and nothing
// moves: the receipt itself still acks its message afterwards.
func TestEveryTamperedReceiptIsUnknown(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	mem := e.memory()
	mustPublishTo(t, mem, "a")
	md, err := mem.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, md, 1)

	type target struct {
		name string
		b    interface {
			broker.Broker
			broker.LeaseExtender
			broker.Rejecter
		}
		r broker.ReceiptValue
	}
	n := 0
	for _, tg := range []target{{"store", q, d.Lease.Receipt}, {"memory", mem, md[0].Lease.Receipt}} {
		for g := range tampered(t, tg.r) {
			rv := broker.ReceiptValue(g)
			for call, err := range map[string]error{
				"Ack":    tg.b.Ack(ctx(t), rv),
				"Nack":   second(tg.b.Nack(ctx(t), rv, nil)),
				"Reject": tg.b.Reject(ctx(t), rv, nil),
				"Extend": second(tg.b.Extend(ctx(t), rv, time.Minute)),
			} {
				if !errors.Is(err, broker.UnknownReceipt) {
					t.Fatalf("%s %s of %q: %v, want UnknownReceipt", tg.name, call, g, err)
				}
			}
			n++
		}
		require.NoError(t, tg.b.Ack(ctx(t), tg.r), "%s: nothing moved", tg.name)
	}
	require.Greater(t, n, 6000)
}

func second[T any](_ T, err error) error { return err }

// A receipt names one lease of one message of one queue of one store: it
// does not act on another message, on a later lease of its own message,
// on another queue of its store, on a Memory, or on another store (one
// whose queue of that name holds the same message sequence). A backup is
// the store as it was, secret included: it honours the receipts the store
// had issued (see Store.Backup).
func TestAReceiptIsBoundToItsLease(t *testing.T) {
	e := newEnv(t)
	a, b := e.queue("a", policy()), e.queue("b", policy())
	other := newEnv(t)
	oa := other.queue("a", policy())
	mem := e.memory()
	for range 2 {
		mustPublish(t, a, "x")
		mustPublish(t, oa, "x")
	}
	mustPublish(t, b, "y")
	mustPublishTo(t, mem, "z")
	first := mustReceiveOne(t, a)
	mustReceiveOne(t, oa) // the same sequence, leased in the other store

	// Another store, another queue, a Memory: UnknownReceipt.
	requireErrorIs(t, oa.Ack(ctx(t), first.Lease.Receipt), broker.UnknownReceipt)
	requireErrorIs(t, b.Ack(ctx(t), first.Lease.Receipt), broker.UnknownReceipt)
	requireErrorIs(t, mem.Ack(ctx(t), first.Lease.Receipt), broker.UnknownReceipt)
	md, err := mem.Receive(ctx(t), 1)
	require.NoError(t, err)
	requireErrorIs(t, a.Ack(ctx(t), md[0].Lease.Receipt), broker.UnknownReceipt)

	// A later lease of the same message: the first receipt is spent.
	e.clock.Advance(time.Minute)
	again := mustReceive(t, a, 2)
	require.Len(t, again, 2)
	require.Equal(t, first.Message.ID, again[0].Message.ID)
	requireErrorIs(t, a.Ack(ctx(t), first.Lease.Receipt), broker.LeaseExpired)

	// Across a restart the receipt of a live lease still acts, and only on
	// its own message.
	e.reopen()
	a = e.queue("a", policy())
	require.NoError(t, a.Ack(ctx(t), again[0].Lease.Receipt))
	requireErrorIs(t, a.Ack(ctx(t), again[0].Lease.Receipt), broker.LeaseExpired, again[0].Message.ID)
	require.Equal(t, 1, a.Stats().Leased, "the other message's lease is untouched")
	require.NoError(t, a.Ack(ctx(t), again[1].Lease.Receipt))
}

// A huge receipt is refused without work in proportion to its size: no
// decoding, no copy, and an error that quotes only its first characters.
func TestAHugeReceiptCostsNothing(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	mustReceiveOne(t, q)
	huge := broker.ReceiptValue(strings.Repeat("A", 32<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		err := q.Ack(ctx(t), huge)
		requireErrorIs(t, err, broker.UnknownReceipt)
		require.Less(t, len(err.Error()), 200, "the error quotes the receipt's first characters only")
	}
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated by ten refusals of a 32 MiB receipt")
}
