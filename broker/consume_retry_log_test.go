package broker

import (
	"context"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// failsAfterFirstExtend renews a lease once, then refuses every renewal
// for a reason that is not the lease's.
type failsAfterFirstExtend struct {
	*fakeBroker
	calls atomic.Int32
}

func (f *failsAfterFirstExtend) Extend(ctx context.Context, r ReceiptValue, by time.Duration) (LeaseValue, error) {
	if f.calls.Add(1) > 1 {
		return LeaseValue{}, errTransient
	}
	return f.fakeBroker.Extend(ctx, r, by)
}

// A failed renewal's record says when it is tried again. Once nothing is
// left of the last good renewal's lease (an ExtendBy barely above
// ExtendEvery leaves no room), the retry is the next tick's renewal, and
// the record says how far off that is: it said retry_in=0s, a retry at
// once that never came.
func TestConsumeLogsWhenAFailedRenewalIsTriedAgain(t *testing.T) {
	const every = 10 * time.Millisecond
	f := &failsAfterFirstExtend{fakeBroker: newFake()}
	f.clock.Freeze() // the fake's lease must not lapse: the failures are the point
	f.Publish(context.Background(), []byte("slow"))
	log, logs := newTestLogger()
	done := make(chan struct{})
	startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		defer close(done)
		for ctx.Err() == nil && f.calls.Load() < 6 {
			time.Sleep(time.Millisecond)
		}
		return nil
	}, ConsumeOptions{ExtendEvery: every, ExtendBy: every + time.Millisecond, Logger: log})
	select {
	case <-done:
	case <-time.After(eventually):
		t.Fatal("the handler did not finish")
	}
	retries := regexp.MustCompile(`will retry.* retry_in=(\S+)`).FindAllStringSubmatch(logs.String(), -1)
	require.GreaterOrEqual(t, len(retries), 4, logs.String())
	for _, r := range retries {
		in, err := time.ParseDuration(r[1])
		require.NoError(t, err, r[0])
		require.Positive(t, in, "a failed renewal logged as tried again at once, but it waits for the next tick\nlog:\n%s", logs.String())
		require.LessOrEqual(t, in, every, r[0])
	}
}
