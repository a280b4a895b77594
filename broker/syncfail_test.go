package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestABackgroundFdatasyncFailureStopsEveryLaterCall: under SyncNone and
// SyncPublish the fdatasync that covers acks and leases (and, under
// SyncNone, publishes) is the log's background one, which no call waits
// for. When it fails, the store must stop as it does when a call's own
// fdatasync fails: every later call fails and says the store must be
// reopened ("Failures": fail-stop, never retried). A call that appends
// nothing (a Receive on an empty queue, DeadLetters, Queue) went on as if
// nothing had happened.
func TestABackgroundFdatasyncFailureStopsEveryLaterCall(t *testing.T) {
	for _, mode := range []SyncMode{SyncNone, SyncPublish} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			now := time.Unix(1_700_000_000, 0)
			ffs := vfs.NewFaultFS(vfs.Default)
			opts := Options{Now: func() time.Time { return now }, Sync: mode, SyncInterval: 5 * time.Millisecond, FS: ffs}
			ManualMaintenance(&opts)
			s, err := Open(t.TempDir(), opts)
			require.NoError(t, err)
			defer s.Close()
			pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 4096}
			work, err := s.Queue("work", pol)
			require.NoError(t, err)
			idle, err := s.Queue("idle", pol)
			require.NoError(t, err)
			_, err = work.Publish(ctx, []byte("m"))
			require.NoError(t, err)
			// The publish is durable before the fault: under SyncNone its
			// own background fdatasync, not yet run, would fail the
			// Receive below instead of the lease's.
			require.NoError(t, s.log.Sync())

			// Every fdatasync of a segment fails from now on.
			ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
			ds, err := work.Receive(ctx, 1) // a lease: written, synced in the background
			require.NoError(t, err)
			require.Len(t, ds, 1)
			// The log reports a failure no call waited for before any call
			// meets it (wal.Log.Err). The background fdatasync runs when
			// the machine gets to it: poll, rather than count syncs, which
			// may have run (and failed) before they were counted.
			require.Eventually(t, func() bool { return s.log.Err() != nil }, eventually, tick,
				"the background fdatasync did not fail the log")
			require.Positive(t, ffs.Injected(vfs.OpSync), "the background fdatasync ran (and failed)")

			reopen := func(what string, err error) {
				t.Helper()
				require.Error(t, err, "%s after the background fdatasync failed", what)
				require.True(t, strings.Contains(err.Error(), "reopen"), "%s: %v", what, err)
			}
			_, err = idle.Receive(ctx, 1)
			reopen("Receive on an empty queue", err)
			_, err = idle.DeadLetters(ctx, 1)
			reopen("DeadLetters", err)
			_, err = s.Queue("idle", pol)
			reopen("Queue", err)
		})
	}
}

// TestConsumeEndsWhenTheStoreFails: a store whose fdatasync failed stops
// for good (fail-stop) and must be reopened, so no Receive can succeed
// before then. A Consume idle on one of its queues is woken by the
// failure and returns it, instead of waiting for a publish that cannot
// come, or retrying every PollInterval for ever.
func TestConsumeEndsWhenTheStoreFails(t *testing.T) {
	ctx := context.Background()
	ffs := vfs.NewFaultFS(vfs.Default)
	opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, FS: ffs}
	ManualMaintenance(&opts)
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("work", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)

	handled := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, q, func(_ context.Context, d DeliveryValue) error {
			handled <- string(d.Message.Payload)
			return nil
		}, ConsumeOptions{})
	}()
	_, err = q.Publish(ctx, []byte("before"))
	require.NoError(t, err)
	require.Equal(t, "before", <-handled)
	require.Eventually(t, func() bool { return q.Stats().Acked == 1 }, eventually, tick, "the handled message is acked")

	// Consume is idle now; the next fdatasync of a segment fails.
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
	_, err = q.Publish(ctx, []byte("lost"))
	require.ErrorIs(t, err, wal.ErrPoisoned)
	select {
	case err := <-done:
		require.ErrorIs(t, err, wal.ErrPoisoned, "Consume returns the failure")
		require.ErrorContains(t, err, "must be reopened")
	case <-time.After(eventually):
		t.Fatal("Consume goes on over a store that failed for good")
	}
	require.Empty(t, handled, "nothing was handled after the failure")
}

// A background fdatasync that fails (acks and leases under SyncPublish,
// everything under SyncNone: no call waits for it) stops the store at
// once, not at the next call: a Consume idle on an empty queue of it
// returns the failure, as it does when a call's own fdatasync fails.
// Before, nothing told it, and it waited on a store that could take
// nothing more until some other call touched the store.
func TestConsumeEndsWhenABackgroundFdatasyncFailsWhileItIsIdle(t *testing.T) {
	for _, mode := range []SyncMode{SyncNone, SyncPublish} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			ffs := vfs.NewFaultFS(vfs.Default)
			opts := Options{Now: func() time.Time { return time.Unix(1_700_000_000, 0) }, Sync: mode, SyncInterval: 20 * time.Millisecond, FS: ffs}
			ManualMaintenance(&opts) // no maintenance round finds the failure
			s, err := Open(t.TempDir(), opts)
			require.NoError(t, err)
			defer s.Close()
			pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}
			idle, err := s.Queue("idle", pol)
			require.NoError(t, err)
			other, err := s.Queue("other", pol)
			require.NoError(t, err)
			_, err = other.Publish(ctx, []byte("m"))
			require.NoError(t, err)
			require.NoError(t, s.log.Sync())

			done := make(chan error, 1)
			go func() {
				done <- Consume(ctx, idle, func(context.Context, DeliveryValue) error { return nil }, ConsumeOptions{})
			}()
			// Consume's first Receive finds the queue empty, and it waits
			// for a publish (a Receive after the failure would meet it,
			// and the test would not tell).
			time.Sleep(50 * time.Millisecond)

			// Every fdatasync of a segment fails from now on. The lease is
			// written, and synced in the background: no call meets the
			// failure.
			ffs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: ".seg"})
			ds, err := other.Receive(ctx, 1)
			require.NoError(t, err)
			require.Len(t, ds, 1)
			select {
			case err := <-done:
				require.ErrorIs(t, err, wal.ErrPoisoned, "Consume returns the failure")
				require.ErrorContains(t, err, "must be reopened")
			case <-time.After(eventually):
				t.Fatal("Consume went on waiting on a store whose background fdatasync failed")
			}
		})
	}
}
