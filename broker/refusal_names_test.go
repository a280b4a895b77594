package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// A receipt that does not parse or verify is refused naming the queue
// that refused it, as every other refusal of these calls is: a program
// settling the deliveries of several queues can tell from the error which
// one it was.
func TestAGarbledReceiptIsRefusedNamingTheQueue(t *testing.T) {
	e := newEnv(t)
	q := e.queue("billing-events", policy())
	mem := e.memory()
	const garbled = broker.ReceiptValue("not-a-receipt")
	calls := map[string]func() error{
		"Queue.Ack":    func() error { return q.Ack(ctx(t), garbled) },
		"Queue.Nack":   func() error { _, err := q.Nack(ctx(t), garbled, nil); return err },
		"Queue.Reject": func() error { return q.Reject(ctx(t), garbled, nil) },
		"Queue.Extend": func() error { _, err := q.Extend(ctx(t), garbled, time.Second); return err },
		"Memory.Ack":   func() error { return mem.Ack(ctx(t), garbled) },
		"Memory.Nack":  func() error { _, err := mem.Nack(ctx(t), garbled, nil); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, broker.UnknownReceipt) {
			t.Errorf("%s of a garbled receipt: %v, want UnknownReceipt", name, err)
			continue
		}
		want := "queue billing-events"
		if strings.HasPrefix(name, "Memory") {
			want = "memory queue"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s of a garbled receipt: %q does not name the queue (%q)", name, err, want)
		}
	}
}

// A garbled receipt is quoted in the error as it was given, and marked as
// clipped only when it was: "zzz" read `receipt "zzz"...`, as if more had
// been cut off.
func TestAGarbledReceiptIsQuotedClippedOnlyWhenLong(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for _, tc := range []struct {
		receipt broker.ReceiptValue
		want    string
	}{
		{"", `receipt "": not issued`},
		{"zzz", `receipt "zzz": not issued`},
		{"abcdefghijkl", `receipt "abcdefghijkl": not issued`},
		{"abcdefghijklm", `receipt "abcdefghijkl"...: not issued`},
		{broker.ReceiptValue(strings.Repeat("é", 40)), `receipt "` + strings.Repeat("é", 12) + `"...: not issued`},
	} {
		err := q.Ack(ctx(t), tc.receipt)
		if !errors.Is(err, broker.UnknownReceipt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ack(%q) = %v; want UnknownReceipt, saying %q", tc.receipt, err, tc.want)
		}
	}
}
