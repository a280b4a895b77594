package natsjs_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/methodset"
)

// TestANilOrZeroQueueOrStoreRefusesEveryCall: as the file store's (see
// broker/nilreceiver.go), a nil *Queue or *Store, and a zero one that
// Open or Store.Queue did not make (new(Queue)), answers every method
// that returns an error with one wrapping QueueMisconfigured that names
// the type, and the others as for a store that holds nothing (Wake with
// a closed signal, so that the Receive that follows meets the error),
// rather than end the process with a nil dereference or, for Close,
// report success for a store that never existed. The cases are checked
// against the method sets, so a new method without a case fails here.
func TestANilOrZeroQueueOrStoreRefusesEveryCall(t *testing.T) {
	ctx := context.Background()
	var q *natsjs.Queue
	var s *natsjs.Store
	queueCalls := map[string]func() error{
		"Publish":          func() error { _, err := q.Publish(ctx, []byte("x")); return err },
		"PublishKeyed":     func() error { _, err := q.PublishKeyed(ctx, "k", []byte("x")); return err },
		"PublishBatch":     func() error { _, err := q.PublishBatch(ctx, [][]byte{[]byte("x")}); return err },
		"Receive":          func() error { _, err := q.Receive(ctx, 1); return err },
		"Ack":              func() error { return q.Ack(ctx, "r") },
		"Nack":             func() error { _, err := q.Nack(ctx, "r", nil); return err },
		"Reject":           func() error { return q.Reject(ctx, "r", nil) },
		"Extend":           func() error { _, err := q.Extend(ctx, "r", time.Second); return err },
		"DeadLetters":      func() error { _, err := q.DeadLetters(ctx, 1); return err },
		"ReplayDeadLetter": func() error { return q.ReplayDeadLetter(ctx, "0000000000000001") },
		"DeleteDeadLetter": func() error { return q.DeleteDeadLetter(ctx, "0000000000000001") },
	}
	queueZeros := map[string]func(t *testing.T){
		"Name": func(t *testing.T) {
			if name := q.Name(); name != "" {
				t.Errorf("Name: %q, want empty", name)
			}
		},
		"Wake": func(t *testing.T) {
			select {
			case <-q.Wake().Signal:
			default:
				t.Errorf("Wake: the signal is open, want closed (look now, and meet the error)")
			}
		},
		// Test-only methods (export_test.go), no part of the API.
		"SweepNow": func(*testing.T) {},
		"Unburied": func(*testing.T) {},
	}
	storeCalls := map[string]func() error{
		"Queue": func() error { _, err := s.Queue("jobs", policy()); return err },
		"Close": func() error { return s.Close() },
	}
	storeZeros := map[string]func(t *testing.T){
		"Queues": func(t *testing.T) {
			if names := s.Queues(); len(names) != 0 {
				t.Errorf("Queues: %v, want none", names)
			}
		},
	}
	if err := methodset.Check(reflect.TypeFor[*natsjs.Queue](), queueCalls, queueZeros); err != nil {
		t.Fatalf("every exported method needs a nil-receiver case: %v", err)
	}
	if err := methodset.Check(reflect.TypeFor[*natsjs.Store](), storeCalls, storeZeros); err != nil {
		t.Fatalf("every exported method needs a nil-receiver case: %v", err)
	}
	run := func(t *testing.T, typ string, calls map[string]func() error, zeros map[string]func(*testing.T)) {
		for name, call := range calls {
			t.Run(typ+"."+name, func(t *testing.T) {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				err := call()
				if !errors.Is(err, broker.QueueMisconfigured) || !strings.Contains(err.Error(), "nil *natsjs."+typ) {
					t.Fatalf("%v, want QueueMisconfigured naming the nil *natsjs.%s", err, typ)
				}
			})
		}
		for name, check := range zeros {
			t.Run(typ+"."+name, func(t *testing.T) {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				check(t)
			})
		}
	}
	receivers := []struct {
		name string
		q    *natsjs.Queue
		s    *natsjs.Store
	}{
		{"nil", nil, nil},
		{"zero", new(natsjs.Queue), new(natsjs.Store)},
	}
	for _, r := range receivers {
		t.Run(r.name, func(t *testing.T) {
			q, s = r.q, r.s // the calls above act on these
			run(t, "Queue", queueCalls, queueZeros)
			run(t, "Store", storeCalls, storeZeros)
		})
	}
}
