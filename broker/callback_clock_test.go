package broker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// panickyClock is a fake clock that panics, once, on a chosen reading:
// the caller's code, run by the broker where it reads Options.Now.
type panickyClock struct {
	*fakeClock
	mu    sync.Mutex
	left  int // readings before the one that panics; 0: none panics
	fired bool
	value any
}

func newPanickyClock(value any) *panickyClock {
	return &panickyClock{fakeClock: newFakeClock(), value: value}
}

// arm makes the nth reading from now panic (n ≥ 1).
func (c *panickyClock) arm(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left, c.fired = n, false
}

// disarm stops any panic still to come and reports whether one happened
// since arm.
func (c *panickyClock) disarm() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left = 0
	return c.fired
}

func (c *panickyClock) Now() time.Time {
	c.mu.Lock()
	if c.left > 0 {
		c.left--
		if c.left == 0 {
			c.fired = true
			c.mu.Unlock()
			panic(c.value)
		}
	}
	c.mu.Unlock()
	return c.fakeClock.Now()
}

// clockPanic is the value the clock panics with; its text must reach the
// error.
type clockPanic struct{ what string }

func (p clockPanic) String() string { return "clock trouble: " + p.what }

// clockOp is one call that reads the clock, given what it needs: a
// delivery leased and the ID of a dead letter.
type clockOp struct {
	name string
	call func(ctx context.Context, b fullBroker, d broker.DeliveryValue, dead string) error
}

var clockOps = []clockOp{
	{"Publish", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		_, err := b.Publish(ctx, []byte("p"))
		return err
	}},
	{"PublishKeyed", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		_, err := b.PublishKeyed(ctx, "k", []byte("p"))
		return err
	}},
	{"PublishBatch", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		_, err := b.PublishBatch(ctx, [][]byte{[]byte("a"), []byte("b")})
		return err
	}},
	{"Receive", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		_, err := b.Receive(ctx, 10)
		return err
	}},
	{"Ack", func(ctx context.Context, b fullBroker, d broker.DeliveryValue, _ string) error {
		return b.Ack(ctx, d.Lease.Receipt)
	}},
	{"Nack", func(ctx context.Context, b fullBroker, d broker.DeliveryValue, _ string) error {
		_, err := b.Nack(ctx, d.Lease.Receipt, errors.New("private text"))
		return err
	}},
	{"Reject", func(ctx context.Context, b fullBroker, d broker.DeliveryValue, _ string) error {
		return b.Reject(ctx, d.Lease.Receipt, errors.New("private text"))
	}},
	{"Extend", func(ctx context.Context, b fullBroker, d broker.DeliveryValue, _ string) error {
		_, err := b.Extend(ctx, d.Lease.Receipt, time.Minute)
		return err
	}},
	{"DeadLetters", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		_, err := b.DeadLetters(ctx, 10)
		return err
	}},
	{"ReplayDeadLetter", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, dead string) error {
		return b.ReplayDeadLetter(ctx, dead)
	}},
	{"DeleteDeadLetter", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, dead string) error {
		return b.DeleteDeadLetter(ctx, dead)
	}},
	{"Stats", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		b.Stats()
		return nil
	}},
	{"Wake", func(ctx context.Context, b fullBroker, _ broker.DeliveryValue, _ string) error {
		if w := b.Wake(); !w.Scheduled {
			return fmt.Errorf("Wake says nothing is due, with a message ready")
		}
		return nil
	}},
}

// callBounded runs f, reporting a panic that escapes it, and fails the
// test when f does not return: a call that finds its queue's lock left
// held by an earlier panic waits for ever.
func callBounded(t *testing.T, what string, f func() error) (panicked any, err error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		err = f()
	}()
	select {
	case <-done:
		return panicked, err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return: a lock left held, or a callback waiting for one?", what)
		return nil, nil
	}
}

// requireClockPanicError asserts the error a call returns for the clock
// that panicked under it: QueueMisconfigured, naming the clock and the
// panic.
func requireClockPanicError(t *testing.T, err error, clockName string) {
	t.Helper()
	requireErrorIs(t, err, broker.QueueMisconfigured, clockName, "panicked", "clock trouble: now")
}

// exerciseClockPanics runs op with the clock panicking at its first
// reading, then its second, and so on, until op reads it no more: each
// call that met the panic returns the error that names it (Stats and
// Wake, which return none, answer as for a clock no broker can record),
// and the next call on the queue works. setup makes a fresh broker with
// a leased delivery and a dead letter.
func exerciseClockPanics(t *testing.T, clock *panickyClock, clockName string, op clockOp, setup func() (fullBroker, broker.DeliveryValue, string)) {
	b, d, dead := setup()
	for n := 1; ; n++ {
		require.Less(t, n, 20, "%s reads the clock more than 20 times", op.name)
		clock.arm(n)
		panicked, err := callBounded(t, op.name, func() error { return op.call(ctx(t), b, d, dead) })
		fired := clock.disarm()
		require.Nil(t, panicked, "%s let the clock's panic through (reading %d)", op.name, n)
		if !fired {
			require.NoError(t, err, "%s with a clock that did not panic", op.name)
			require.Greater(t, n, 1, "%s never read the clock", op.name)
			break
		}
		if op.name != "Stats" && op.name != "Wake" {
			requireClockPanicError(t, err, clockName)
		} else {
			require.NoError(t, err, "reading %d", n)
		}
		// The queue is usable at once, and the call changed nothing: it
		// can be made again.
		_, _ = callBounded(t, "Stats after "+op.name, func() error { b.Stats(); return nil })
		_, err = callBounded(t, "Publish after "+op.name, func() error {
			_, err := b.Publish(ctx(t), []byte("after"))
			return err
		})
		require.NoError(t, err, "a Publish after %s met the clock's panic (reading %d)", op.name, n)
	}
}

// setupClockState publishes to b, dead-letters one message and leases
// another, with the clock working.
func setupClockState(t *testing.T, b fullBroker) (broker.DeliveryValue, string) {
	t.Helper()
	_, err := b.Publish(ctx(t), []byte("dead"))
	require.NoError(t, err)
	ds, err := b.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, b.Reject(ctx(t), ds[0].Lease.Receipt, broker.DoNotRetry(nil)))
	_, err = b.Publish(ctx(t), []byte("held"))
	require.NoError(t, err)
	ds, err = b.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	_, err = b.Publish(ctx(t), []byte("ready"))
	require.NoError(t, err)
	return ds[0], deadID(t, b)
}

func deadID(t *testing.T, b fullBroker) string {
	t.Helper()
	dls, err := b.DeadLetters(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	return dls[0].Message.ID
}

// Options.Now is the caller's code, read with a queue's lock held: a
// clock that panics fails the one call that read it, with an error that
// names it and the panic, and leaves the queue as it was. Before, the
// panic left the lock held and every later call on the queue waited for
// ever, even when the caller recovered the panic (as net/http does).
func TestAPanickingClockFailsOneCallAndLeavesTheQueueUsable(t *testing.T) {
	for _, op := range clockOps {
		t.Run("Store/"+op.name, func(t *testing.T) {
			clock := newPanickyClock(clockPanic{"now"})
			exerciseClockPanics(t, clock, "Options.Now", op, func() (fullBroker, broker.DeliveryValue, string) {
				s, err := broker.Open(t.TempDir(), broker.Options{Now: clock.Now, SegmentBytes: testSegmentBytes})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				q, err := s.Queue("jobs", policy())
				require.NoError(t, err)
				d, dead := setupClockState(t, q)
				return q, d, dead
			})
		})
		t.Run("Memory/"+op.name, func(t *testing.T) {
			clock := newPanickyClock(clockPanic{"now"})
			exerciseClockPanics(t, clock, "MemoryOptions.Now", op, func() (fullBroker, broker.DeliveryValue, string) {
				m, err := broker.NewMemory(policy(), broker.MemoryOptions{Now: clock.Now})
				require.NoError(t, err)
				t.Cleanup(func() { _ = m.Close() })
				d, dead := setupClockState(t, m)
				return m, d, dead
			})
		})
	}
}

// A queue declared again with another policy reads the clock with the
// store's lock and the queue's held: a panic there fails the declaration
// and leaves both usable.
func TestAPanickingClockFailsAPolicyChangeAndLeavesTheStoreUsable(t *testing.T) {
	clock := newPanickyClock(clockPanic{"now"})
	s, err := broker.Open(t.TempDir(), broker.Options{Now: clock.Now, SegmentBytes: testSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	mustPublish(t, q, "x")

	clock.arm(1)
	panicked, err := callBounded(t, "Queue", func() error {
		_, err := s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 9 }))
		return err
	})
	require.True(t, clock.disarm(), "the policy change reads the clock")
	require.Nil(t, panicked, "Queue let the clock's panic through")
	requireClockPanicError(t, err, "Options.Now")

	_, _ = callBounded(t, "Queues", func() error { s.Queues(); return nil })
	_, err = callBounded(t, "Queue again", func() error {
		_, err := s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 9 }))
		return err
	})
	require.NoError(t, err)
	mustReceiveOne(t, q)
}

// Open reads the clock before it touches anything, and again once the log
// is open: a panic at either reading fails Open with the error that names
// it, and leaves nothing held (the next Open of the directory succeeds,
// where a lock left held would refuse it with Locked).
func TestAPanickingClockFailsOpenAndLeavesTheDirectoryFree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	clock := newPanickyClock(clockPanic{"now"})
	opts := broker.Options{Now: clock.Now, SegmentBytes: testSegmentBytes}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	mustPublish(t, q, "kept")
	require.NoError(t, s.Close())

	for n := 1; ; n++ {
		require.Less(t, n, 20, "Open reads the clock more than 20 times")
		clock.arm(n)
		var s *broker.Store
		panicked, err := callBounded(t, "Open", func() error {
			var err error
			s, err = broker.Open(dir, opts)
			return err
		})
		fired := clock.disarm()
		require.Nil(t, panicked, "Open let the clock's panic through (reading %d)", n)
		if !fired {
			require.NoError(t, err)
			q, err := s.Queue("jobs", policy())
			require.NoError(t, err)
			require.Equal(t, 1, q.Stats().Ready, "the message published before")
			require.NoError(t, s.Close())
			return
		}
		require.Nil(t, s)
		requireClockPanicError(t, err, "Options.Now")
	}
}
