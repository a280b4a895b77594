package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// refusedUnmade calls f and fails the test unless it returned an error
// wrapping QueueMisconfigured, without panicking.
func refusedUnmade(t *testing.T, name string, f func() error) {
	t.Helper()
	var err error
	panicked := func() (p any) {
		defer func() { p = recover() }()
		err = f()
		return nil
	}()
	switch {
	case panicked != nil:
		t.Errorf("%s on a zero value panicked (%v); want an error wrapping QueueMisconfigured, as a nil receiver gets", name, panicked)
	case !errors.Is(err, broker.QueueMisconfigured):
		t.Errorf("%s on a zero value returned %v; want an error wrapping QueueMisconfigured that says it was not made by its constructor", name, err)
	}
}

// noPanic calls f and fails the test if it panics.
func noPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s on a zero value panicked: %v", name, p)
		}
	}()
	f()
}

// A zero *Queue (new(broker.Queue), a field never set) was not made by
// Store.Queue: every method refuses as a nil one's does, and Wake says to
// look now, so that Consume over it meets Receive's error.
func TestAZeroQueueRefusesEveryCallAsANilOneDoes(t *testing.T) {
	q := new(broker.Queue)
	calls := []struct {
		name string
		f    func() error
	}{
		{"Publish", func() error { _, err := q.Publish(ctx(t), []byte("x")); return err }},
		{"PublishKeyed", func() error { _, err := q.PublishKeyed(ctx(t), "k", []byte("x")); return err }},
		{"PublishBatch", func() error { _, err := q.PublishBatch(ctx(t), [][]byte{[]byte("x")}); return err }},
		{"Receive", func() error { _, err := q.Receive(ctx(t), 1); return err }},
		{"Ack", func() error { return q.Ack(ctx(t), "r") }},
		{"Nack", func() error { _, err := q.Nack(ctx(t), "r", nil); return err }},
		{"Reject", func() error { return q.Reject(ctx(t), "r", nil) }},
		{"Extend", func() error { _, err := q.Extend(ctx(t), "r", time.Second); return err }},
		{"DeadLetters", func() error { _, err := q.DeadLetters(ctx(t), 1); return err }},
		{"ReplayDeadLetter", func() error { return q.ReplayDeadLetter(ctx(t), "x") }},
		{"DeleteDeadLetter", func() error { return q.DeleteDeadLetter(ctx(t), "x") }},
	}
	for _, c := range calls {
		refusedUnmade(t, "Queue."+c.name, c.f)
	}
	noPanic(t, "Queue.Stats", func() {
		if st := q.Stats(); st != (broker.QueueStats{}) {
			t.Errorf("Stats of a zero Queue = %+v; want the zero value", st)
		}
	})
	noPanic(t, "Queue.Wake", func() { mustLookNow(t, "Queue", q.Wake()) })
}

// A zero *Memory was not made by NewMemory: its calls refuse naming that,
// not a clock that panicked; Wake's signal is never nil; Close refuses.
func TestAZeroMemoryRefusesEveryCallAsANilOneDoes(t *testing.T) {
	var m broker.Memory
	refusedUnmade(t, "Memory.Publish", func() error { _, err := m.Publish(ctx(t), []byte("x")); return err })
	refusedUnmade(t, "Memory.Receive", func() error { _, err := m.Receive(ctx(t), 1); return err })
	refusedUnmade(t, "Memory.Ack", func() error { return m.Ack(ctx(t), "r") })
	refusedUnmade(t, "Memory.Close", m.Close)
	noPanic(t, "Memory.Wake", func() { mustLookNow(t, "Memory", m.Wake()) })
	noPanic(t, "Memory.Stats", func() { _ = m.Stats() })
}

// A zero *Store was not made by Open: Close and Queue refuse, Stats and
// Queues answer as for a store that holds nothing.
func TestAZeroStoreRefusesEveryCallAsANilOneDoes(t *testing.T) {
	var s broker.Store
	refusedUnmade(t, "Store.Close", s.Close)
	refusedUnmade(t, "Store.Queue", func() error { _, err := s.Queue("q", broker.PolicyValue{}); return err })
	refusedUnmade(t, "Store.Err", s.Err)
	refusedUnmade(t, "Store.Backup", func() error { return s.Backup(ctx(t), t.TempDir()+"/b") })
	noPanic(t, "Store.Stats", func() { _ = s.Stats() })
	noPanic(t, "Store.Queues", func() {
		if qs := s.Queues(); len(qs) != 0 {
			t.Errorf("Queues of a zero Store = %v; want none", qs)
		}
	})
}

// mustLookNow fails the test unless w's signal is closed already.
func mustLookNow(t *testing.T, typ string, w broker.WakeValue) {
	t.Helper()
	select {
	case <-w.Signal:
	default:
		t.Errorf("%s.Wake on a zero value: Signal %s; want a closed one (look now: the Receive that follows reports the error)", typ, fmt.Sprint(w.Signal))
	}
}

// Consume over a zero *Queue or *Memory is refused as over a nil one:
// Consume's own look at a queue's store must not dereference a store
// the queue never had.
func TestConsumeOverAZeroBrokerIsRefused(t *testing.T) {
	for _, b := range []broker.Broker{new(broker.Queue), new(broker.Memory)} {
		refusedUnmade(t, fmt.Sprintf("Consume over a %T", b), func() error {
			c, cancel := context.WithTimeout(ctx(t), 5*time.Second)
			defer cancel()
			return broker.Consume(c, b, func(context.Context, broker.DeliveryValue) error { return nil }, broker.ConsumeOptions{})
		})
	}
}
