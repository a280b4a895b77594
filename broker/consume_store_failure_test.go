package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// statusQueue is a caller's decorator of a *Queue that reports a failed
// Receive as an error of its own, keeping the text of the queue's error
// but not the error itself, as a layer that turns errors into the status
// codes of an RPC does. before, when set, runs before each Receive is
// passed on, with its number (from 1).
type statusQueue struct {
	*broker.Queue
	receives atomic.Int64
	before   func(n int64)
}

var errUnavailable = errors.New("jobs service: unavailable")

func (w *statusQueue) Receive(ctx context.Context, max int) ([]broker.DeliveryValue, error) {
	if n := w.receives.Add(1); w.before != nil {
		w.before(n)
	}
	ds, err := w.Queue.Receive(ctx, max)
	if err != nil {
		return ds, fmt.Errorf("%w: %v", errUnavailable, err)
	}
	return ds, nil
}

// TestConsumeEndsWithTheFailureTheStoreStoppedOnWhateverTheReceiveSaid: a
// Receive that fails, with ctx live, as the store stops for good ends
// Consume, and the running handlers' contexts, with the failure the store
// stopped on, as when the Receive returns that failure itself: it is the
// error a caller can act on (close the store and reopen it), and the one
// errors.Is finds (wal.ErrPoisoned, the fdatasync's EIO). The Receive's
// own error (here a decorator's, which keeps only the failure's text; or
// any error the call met as the store stopped) was what Consume returned
// and the handlers' contexts ended with; it goes to the Logger now.
func TestConsumeEndsWithTheFailureTheStoreStoppedOnWhateverTheReceiveSaid(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := broker.Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, FS: ffs}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	for _, p := range []string{"a", "b"} {
		_, err = q.Publish(ctx, []byte(p))
		require.NoError(t, err)
	}

	// The first Receive leases "a", whose handler waits; the commit of
	// the second's lease (SyncAll) fails, and the store stops for good
	// during that Receive.
	started := make(chan struct{})
	w := &statusQueue{Queue: q, before: func(n int64) {
		if n == 2 {
			<-started
			failNextCommit(t, ffs, dir)
		}
	}}
	handled := make(chan string, 2)
	cause := make(chan error, 1)
	var logged bytes.Buffer // written under the handler's lock; read once Consume returned
	err = broker.Consume(ctx, w, func(hctx context.Context, d broker.DeliveryValue) error {
		handled <- string(d.Message.Payload)
		close(started)
		<-hctx.Done()
		cause <- context.Cause(hctx)
		return hctx.Err()
	}, broker.ConsumeOptions{Concurrency: 2, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	close(handled)
	var got []string
	for p := range handled {
		got = append(got, p)
	}
	require.Equal(t, []string{"a"}, got, "setup: the second lease was not committed")
	failure := s.Err()
	require.ErrorIs(t, failure, wal.ErrPoisoned, "setup: the store stopped on the failed fdatasync")

	require.ErrorIs(t, err, wal.ErrPoisoned, "Consume returned %v, want the failure the store stopped on", err)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, "must be reopened")
	require.False(t, errors.Is(err, errUnavailable), "Consume returned the Receive's own error, %v, not the store's failure", err)
	require.False(t, errors.Is(err, broker.Closed))
	c := <-cause
	require.ErrorIs(t, c, wal.ErrPoisoned, "the handler's context ended with %v, want the store's failure", c)
	require.False(t, errors.Is(c, errUnavailable), "the handler's context ended with the Receive's own error, %v", c)
	require.Contains(t, logged.String(), "receive failed as the broker stopped", "the Receive's own error is logged")
	require.Contains(t, logged.String(), errUnavailable.Error())
}
