package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/brokertest"
	"github.com/walbroker/walbroker/vfs"
)

// Consume on a disk that fills while its handlers run: the first ack the
// disk refuses stops the store, Consume ends its handlers' contexts and
// returns the store's error (wrapping ENOSPC) instead of retrying, and
// receives nothing more. Reopened, the store has lost no message a handler
// did not run for, and holds each message once.
func TestConsumeOnADiskThatFillsReturnsTheStoresErrorAndLosesNothing(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	logs := &lockedBuffer{}
	opts := diskFullOptions(ffs, clock)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, q := diskFullOpen(t, dir, opts)
	const n = 60
	all := map[string]bool{}
	for i := range n {
		m, err := q.Publish(ctx, fmt.Appendf(nil, "m%d", i))
		require.NoError(t, err)
		all[m.ID] = true
	}

	var handledMu sync.Mutex
	handled := map[string]int{}
	var calls atomic.Int64
	var afterStop atomic.Int64
	consumeLog := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, q, func(hctx context.Context, d broker.DeliveryValue) error {
			if s.Err() != nil {
				afterStop.Add(1)
			}
			handledMu.Lock()
			handled[d.Message.ID]++
			handledMu.Unlock()
			if calls.Add(1) == 10 {
				diskFullFill(ffs)
			}
			return nil
		}, broker.ConsumeOptions{Batch: 4, Concurrency: 4, Logger: slog.New(slog.NewTextHandler(consumeLog, nil))})
	}()
	var cerr error
	select {
	case cerr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Consume did not return in 30 s after the disk filled (%d handler calls)", calls.Load())
	}
	t.Logf("Consume: %v (%d handler calls)", cerr, calls.Load())
	require.ErrorIs(t, cerr, syscall.ENOSPC)
	require.ErrorIs(t, cerr, s.Err())
	// Deliveries received before the stop may still start (their handlers'
	// contexts then end at once), but no Receive runs after it.
	require.LessOrEqual(t, afterStop.Load(), int64(4), "handlers started after the store stopped")
	require.Less(t, calls.Load(), int64(n), "Consume handled the whole queue on a full disk")
	t.Logf("consume log:\n%s", consumeLog.String())
	t.Logf("store log:\n%s", logs.String())

	// A write failed: Close returns that failure (Store.Close).
	require.ErrorIs(t, s.Close(), syscall.ENOSPC)
	ffs.Clear()
	s, q = diskFullOpen(t, dir, diskFullOptions(ffs, clock))
	defer s.Close()
	got := diskFullContents(t, clock, q)
	for id := range all {
		if _, there := got[id]; !there {
			require.Contains(t, handled, id, "message %s is gone and no handler ran for it", id)
		}
	}
	for id := range got {
		require.Contains(t, all, id)
	}
}

// A Consume idle on an empty queue when the disk fills goes on waiting
// (nothing failed), and returns the store's error as soon as a Publish on
// the full disk stops the store.
func TestAnIdleConsumeReturnsWhenAPublishOnAFullDiskStopsTheStore(t *testing.T) {
	ctx := context.Background()
	clock := brokertest.NewClock(t0)
	ffs := vfs.NewFaultFS(vfs.Default)
	s, q := diskFullOpen(t, t.TempDir(), diskFullOptions(ffs, clock))
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{})
	}()
	diskFullFill(ffs)
	select {
	case err := <-done:
		t.Fatalf("an idle Consume returned on a full disk before anything failed: %v", err)
	default:
	}
	require.NoError(t, s.Err(), "a full disk with nothing written stops nothing")
	_, perr := q.Publish(ctx, []byte("x"))
	require.ErrorIs(t, perr, syscall.ENOSPC)
	select {
	case err := <-done:
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.ErrorIs(t, err, s.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("an idle Consume went on waiting on a store a full disk stopped")
	}
}
