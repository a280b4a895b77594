package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// closable is a broker that Consume runs over, and the call that closes it.
type closable struct {
	name  string
	open  func(t *testing.T) (Broker, func() error)
	renew bool
	busy  bool // one slot, held by the handler: no Receive can find the close
}

func closables() []closable {
	pol := PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}
	store := func(t *testing.T) (Broker, func() error) {
		s, err := Open(t.TempDir(), Options{SegmentBytes: 4 << 20})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		q, err := s.Queue("jobs", pol)
		require.NoError(t, err)
		return q, s.Close
	}
	memory := func(t *testing.T) (Broker, func() error) {
		m, err := NewMemory(pol, MemoryOptions{})
		require.NoError(t, err)
		return m, m.Close
	}
	var cs []closable
	for _, mode := range []struct{ renew, busy bool }{{false, false}, {true, false}, {false, true}} {
		cs = append(cs, closable{"store", store, mode.renew, mode.busy}, closable{"memory", memory, mode.renew, mode.busy})
	}
	return cs
}

// untilCancelled is a handler that closes started, then runs until its
// context ends (a minute at most) and sends the context's cause on causes
// (nil if it ran out its minute).
func untilCancelled(started chan struct{}, causes chan error) Handler {
	return func(ctx context.Context, d DeliveryValue) error {
		close(started)
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(time.Minute):
			causes <- nil
			return nil
		}
	}
}

// TestConsumeEndsItsHandlersWhenTheBrokerCloses: "Consume returns ... when
// the store is closed". A handler still running then can no longer settle
// its delivery, so its context ends, with the close as its cause, and
// Consume returns Closed without waiting for the handler's own end. Over a
// broker that renews leases (ExtendEvery) the renewal that meets the close
// ends it too, and the renewals stop instead of failing on every tick.
func TestConsumeEndsItsHandlersWhenTheBrokerCloses(t *testing.T) {
	for _, c := range closables() {
		t.Run(c.name+map[bool]string{false: "", true: "/ExtendEvery"}[c.renew]+map[bool]string{false: "", true: "/EverySlotBusy"}[c.busy], func(t *testing.T) {
			b, closeIt := c.open(t)
			_, err := b.Publish(context.Background(), []byte("x"))
			require.NoError(t, err)
			started := make(chan struct{})
			causes := make(chan error, 1)
			opts := ConsumeOptions{Concurrency: 2}
			if c.renew {
				// One slot: the loop waits for it, and only the renewal
				// can find the close.
				opts = ConsumeOptions{Concurrency: 1, ExtendEvery: 5 * time.Millisecond}
			}
			if c.busy {
				// One slot, no renewal: Consume makes no call while the
				// handler runs, and must still learn of the close.
				opts = ConsumeOptions{Concurrency: 1}
			}
			logger, logs := newTestLogger()
			opts.Logger = logger
			done := make(chan error, 1)
			go func() {
				done <- Consume(context.Background(), b, untilCancelled(started, causes), opts)
			}()
			<-started
			require.NoError(t, closeIt())
			select {
			case err := <-done:
				require.ErrorIs(t, err, Closed)
			case <-time.After(10 * time.Second):
				t.Fatal("Consume still waits for its handler 10 s after the broker closed")
			}
			cause := <-causes
			require.ErrorIs(t, cause, Closed, "the handler's context ended, with the close as its cause")
			require.LessOrEqual(t, strings.Count(logs.String(), "lease extension failed"), 1,
				"renewals that cannot succeed are not retried:\n%s", logs)
		})
	}
}

// TestConsumeEndsItsHandlersWhenTheBrokerClosesDuringTheStopGrace: ctx
// has ended, and the running handler keeps its context for the StopGrace;
// but a Store or a Memory that closes meanwhile tells Consume at once, and
// the handler's context ends, with the close as its cause: nothing it does
// can be settled any more. Once ctx ended, no wait of the loop was left
// to hear the broker, and the handler ran on, unsettleable, to the grace's
// end.
func TestConsumeEndsItsHandlersWhenTheBrokerClosesDuringTheStopGrace(t *testing.T) {
	for _, c := range closables() {
		if c.renew {
			continue // the renewal ends its own handler, grace or not
		}
		t.Run(c.name+map[bool]string{false: "", true: "/EverySlotBusy"}[c.busy], func(t *testing.T) {
			b, closeIt := c.open(t)
			_, err := b.Publish(context.Background(), []byte("x"))
			require.NoError(t, err)
			started := make(chan struct{})
			causes := make(chan error, 1)
			opts := ConsumeOptions{Concurrency: 2, StopGrace: time.Hour}
			if c.busy {
				opts.Concurrency = 1
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Consume(ctx, b, untilCancelled(started, causes), opts) }()
			<-started
			cancel() // a graceful shutdown begins: the handler keeps its context
			require.NoError(t, closeIt())
			select {
			case cause := <-causes:
				require.ErrorIs(t, cause, Closed, "the handler's context ended, with the close as its cause")
			case <-time.After(10 * time.Second):
				t.Fatal("the broker closed during the StopGrace, yet the handler's context was still live 10 s later")
			}
			select {
			case err := <-done:
				// ctx's error, as at any stop: ctx ended before the close,
				// even should the loop, between two waits, meet both.
				require.ErrorIs(t, err, context.Canceled)
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return once its handler had")
			}
		})
	}
}

// TestConsumeEndsItsHandlersWhenTheStoreStops: a store stopped for good (a
// full disk here) ends Consume with its failure, as it ends a closed one,
// and the handler still running is told at once: its result could never be
// settled, and the program waiting for Consume must reopen the store.
func TestConsumeEndsItsHandlersWhenTheStoreStops(t *testing.T) {
	// Concurrency 1: the handler holds the one slot, so no Receive can
	// meet the failure.
	for _, concurrency := range []int{2, 1} {
		t.Run(fmt.Sprintf("concurrency=%d", concurrency), func(t *testing.T) {
			ffs := vfs.NewFaultFS(vfs.Default)
			dir := t.TempDir()
			s, err := Open(dir, Options{SegmentBytes: 4 << 20, FS: ffs})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
			require.NoError(t, err)
			_, err = q.Publish(context.Background(), []byte("x"))
			require.NoError(t, err)
			started := make(chan struct{})
			causes := make(chan error, 1)
			done := make(chan error, 1)
			go func() {
				done <- Consume(context.Background(), q, untilCancelled(started, causes), ConsumeOptions{Concurrency: concurrency})
			}()
			<-started
			ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Err: syscall.ENOSPC})
			_, err = q.Publish(context.Background(), []byte("y"))
			require.ErrorIs(t, err, syscall.ENOSPC)
			select {
			case err := <-done:
				require.ErrorIs(t, err, syscall.ENOSPC)
				require.False(t, errors.Is(err, Closed))
			case <-time.After(10 * time.Second):
				t.Fatal("Consume still waits for its handler 10 s after the store stopped")
			}
			require.ErrorIs(t, <-causes, syscall.ENOSPC, "the handler's context ended, with the failure as its cause")

			// Close reports the failure and lets the directory go: once there is
			// room, the store opens again with the message still leased.
			require.ErrorIs(t, s.Close(), syscall.ENOSPC)
			ffs.Clear()
			reopened, err := Open(dir, Options{SegmentBytes: 4 << 20})
			require.NoError(t, err)
			defer reopened.Close()
			q, err = reopened.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
			require.NoError(t, err)
			require.Equal(t, 1, q.Stats().Leased)
		})
	}
}

// endingFake is the fake as an ender: closeAndEnd closes it and then the
// channel, as a Store's or a Memory's close does.
type endingFake struct {
	*fakeBroker
	over chan struct{}
}

func (e *endingFake) ended() <-chan struct{} { return e.over }

func (e *endingFake) endErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("fake: %w", Closed)
	}
	return nil
}

func (e *endingFake) closeAndEnd() {
	e.Close()
	close(e.over)
}

// TestConsumeEndsWhenTheBrokerEndsWhileExtraDeliveriesWait: the deliveries
// a broker returns beyond those asked for wait for a free slot, which the
// running handler holds until its context ends. A broker that says it
// ended must end that wait: Consume returns Closed, the handler is told,
// and the extra deliveries, which nothing can settle now, are not started.
func TestConsumeEndsWhenTheBrokerEndsWhileExtraDeliveriesWait(t *testing.T) {
	f := newFake()
	f.overDeliver = 3
	for range 4 {
		f.Publish(context.Background(), []byte("x"))
	}
	b := &endingFake{fakeBroker: f, over: make(chan struct{})}
	var started atomic.Int64
	first := make(chan struct{})
	causes := make(chan error, 4)
	r := startConsume(t, b, func(ctx context.Context, d DeliveryValue) error {
		if started.Add(1) == 1 {
			close(first)
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, ConsumeOptions{Concurrency: 1})
	<-first
	require.Eventually(t, func() bool { return f.leased() == 4 }, eventually, tick, "the three extra deliveries wait")
	b.closeAndEnd()
	select {
	case <-r.done:
		require.ErrorIs(t, r.err, Closed)
	case <-time.After(5 * time.Second):
		t.Fatal("Consume still waits, for a slot for the extra deliveries, 5 s after the broker ended")
	}
	require.EqualValues(t, 1, started.Load(), "no extra delivery started once the broker ended")
	require.ErrorIs(t, <-causes, Closed, "the handler's context ended, with the close as its cause")
}

// quietFake is the fake as a broker that cannot say it ended without a
// call (no ender) and whose Wake signal its close does not close (the
// Waker contract names only events that make a message receivable), as
// another package's broker may be: Consume learns of the close only from
// a call. Its Receive calls after the first fail with failLater, when set.
type quietFake struct {
	*fakeBroker
	sig       chan struct{}
	failLater error
	received  atomic.Int64
}

func (b *quietFake) Wake() WakeValue {
	b.fakeBroker.Wake()
	return WakeValue{Signal: b.sig}
}

func (b *quietFake) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	if b.received.Add(1) > 1 && b.failLater != nil {
		return nil, b.failLater
	}
	return b.fakeBroker.Receive(ctx, max)
}

// closeQuietly makes every later call fail with Closed, and signals
// nothing.
func (b *quietFake) closeQuietly() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
}

// TestConsumeReturnsWhenARenewalFindsTheBrokerClosed: "Once Consume learns
// of such an end (... another broker at the next Receive or lease
// renewal), the contexts of the running handlers end, with that error as
// their cause ..., and Consume returns it when they have returned." A
// renewal that met the close cancelled only its own handler, and the loop,
// idle on a signal the close does not close (or waiting out PollInterval
// after a failed Receive), went on waiting.
func TestConsumeReturnsWhenARenewalFindsTheBrokerClosed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failLater error
	}{
		{"idle", nil},
		{"pausing after a failed Receive", errors.New("fake: the network blinked")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.Publish(context.Background(), []byte("x"))
			b := &quietFake{fakeBroker: f, sig: make(chan struct{}), failLater: tc.failLater}
			running := make(chan struct{})
			causes := make(chan error, 1)
			r := startConsume(t, b, func(ctx context.Context, d DeliveryValue) error {
				close(running)
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			}, ConsumeOptions{Concurrency: 2, ExtendEvery: 20 * time.Millisecond, PollInterval: time.Hour})
			<-running
			// A free slot: the loop receives again, and waits.
			require.Eventually(t, func() bool { return b.received.Load() >= 2 }, eventually, tick)
			b.closeQuietly()
			select {
			case <-r.done:
				require.ErrorIs(t, r.err, Closed)
			case <-time.After(5 * time.Second):
				t.Fatal("a renewal found the broker closed, but Consume has not returned 5 s later")
			}
			require.ErrorIs(t, <-causes, Closed, "the handler's context ended, with the close as its cause")
			require.Empty(t, f.calls(), "nothing could be settled")
		})
	}
}

// A broker that closes while Consume waits PollInterval to retry a
// Receive that failed (not with Closed) ends Consume at once: "a Store or
// a Memory tells it at once". That wait selected on ctx and on the
// renewals' end, not on the broker's end channel, and a Memory's close was
// found only when the PollInterval was over. Here every Receive is
// refused (its lease would pass 2262, an error Consume retries), the
// PollInterval is an hour, and the Memory closes.
func TestConsumeReturnsWhenTheBrokerClosesWhileItWaitsToRetryAReceive(t *testing.T) {
	late := time.Unix(0, math.MaxInt64).Add(-time.Second) // now + 1 min passes 2262
	m, err := NewMemory(PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3},
		MemoryOptions{Now: func() time.Time { return late }})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	logger, logs := newTestLogger()
	r := startConsume(t, m, ackAll, ConsumeOptions{PollInterval: time.Hour, Logger: logger})
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "receive failed; retrying") }, eventually, tick)
	require.NoError(t, m.Close())

	select {
	case <-r.done:
		require.ErrorIs(t, r.err, Closed)
	case <-time.After(5 * time.Second):
		t.Fatal("the Memory closed while Consume waited PollInterval (an hour) to retry a Receive; Consume had not returned 5 s later")
	}
}
