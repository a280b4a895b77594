package natsjs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// A receipt the adapter refuses is quoted whole when short, and cut to its
// first 12 characters, marked "...", only when there were more: the mark
// must not say a short receipt was clipped.
func TestAGarbledReceiptIsQuotedClippedOnlyWhenLong(t *testing.T) {
	q := openQueue(t, "jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
		err := q.Ack(ctx, tc.receipt)
		if !errors.Is(err, broker.UnknownReceipt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ack(%q) = %v; want UnknownReceipt, saying %q", tc.receipt, err, tc.want)
		}
	}
}
