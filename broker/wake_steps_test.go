package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// wakeRun is what a step of TestStoreAndMemoryWakeAlikeStepByStep sees of
// one broker: the receipts and message IDs of the steps before it, by the
// names the steps gave them.
type wakeRun struct {
	b        fullBroker
	receipts map[string]broker.ReceiptValue
	ids      map[string]string
}

// wakeStep is one call on each broker, and what Wake says across it: does
// the call close the signal handed out before it (closes; nil where the
// port lets a broker choose, when both must still agree), and what Wake
// says after it.
type wakeStep struct {
	name      string
	do        func(ctx context.Context, r *wakeRun) error
	closes    *bool
	scheduled bool
	in        time.Duration
}

var (
	wakes     = func() *bool { v := true; return &v }()
	wakesNone = func() *bool { v := false; return &v }()
)

func publishNamed(name string) func(context.Context, *wakeRun) error {
	return func(ctx context.Context, r *wakeRun) error {
		m, err := r.b.Publish(ctx, []byte(name))
		if err == nil {
			r.ids[name] = m.ID
		}
		return err
	}
}

func receiveNamed(names ...string) func(context.Context, *wakeRun) error {
	return func(ctx context.Context, r *wakeRun) error {
		ds, err := r.b.Receive(ctx, len(names))
		if err != nil {
			return err
		}
		if len(ds) != len(names) {
			return errors.New("received " + string(rune('0'+len(ds))) + " messages")
		}
		for i, d := range ds {
			r.receipts[names[i]] = d.Lease.Receipt
		}
		return nil
	}
}

// TestStoreAndMemoryWakeAlikeStepByStep drives a store's queue and a
// Memory through the same calls on one injected clock and holds every
// field of Wake to what the port says, after each call, on both: Signal
// is closed by a publish (keyed, of a key not seen; a batch), a Nack
// that hands a message back (with a retry delay or none), a replay, and
// an Extend that brings a lapse closer; not by a duplicate, a shed or
// refused publish, a Nack that dead-letters, an Ack, a Reject, a replay
// refused for want of room, a delete, nor the clock moving. In names the
// earliest retry end or lease lapse with deliveries left, and Scheduled
// is false when nothing will become receivable on its own. After Close
// the signal is closed, never nil, and nothing is Scheduled.
// (TestMemoryAndStoreAgreeOnWhichStepsCloseTheWakeSignal compares the
// two over random steps, without keys, batches, capacity or sizes, and
// without saying what either should answer.)
func TestStoreAndMemoryWakeAlikeStepByStep(t *testing.T) {
	expect := func(do func(context.Context, *wakeRun) error, want error) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error {
			if err := do(ctx, r); !errors.Is(err, want) {
				return errors.Join(errors.New("want "+want.Error()), err)
			}
			return nil
		}
	}
	nack := func(name string, dead bool) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error {
			nv, err := r.b.Nack(ctx, r.receipts[name], nil)
			if err == nil && nv.DeadLettered != dead {
				return errors.New("Nack dead-lettered " + map[bool]string{true: "", false: "nothing"}[nv.DeadLettered])
			}
			return err
		}
	}
	extend := func(name string, by time.Duration) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error {
			l, err := r.b.Extend(ctx, r.receipts[name], by)
			if err == nil {
				r.receipts[name] = l.Receipt
			}
			return err
		}
	}
	ack := func(name string) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error { return r.b.Ack(ctx, r.receipts[name]) }
	}
	reject := func(name string) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error { return r.b.Reject(ctx, r.receipts[name], nil) }
	}
	replay := func(name string) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error { return r.b.ReplayDeadLetter(ctx, r.ids[name]) }
	}
	keyed := func(name, key string) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error {
			m, err := r.b.PublishKeyed(ctx, key, []byte(name))
			if err == nil {
				r.ids[name] = m.ID
			}
			return err
		}
	}
	batch := func(names ...string) func(context.Context, *wakeRun) error {
		return func(ctx context.Context, r *wakeRun) error {
			ps := make([][]byte, len(names))
			ms, err := r.b.PublishBatch(ctx, ps)
			for i, m := range ms {
				r.ids[names[i]] = m.ID
			}
			return err
		}
	}
	var clk *fakeClock
	advance := func(d time.Duration) func(context.Context, *wakeRun) error {
		// Called once per broker: each moves the shared clock half way.
		return func(context.Context, *wakeRun) error { clk.Advance(d / 2); return nil }
	}
	now := func(name string, do func(context.Context, *wakeRun) error, closes *bool) wakeStep {
		return wakeStep{name: name, do: do, closes: closes, scheduled: true}
	}
	in := func(name string, do func(context.Context, *wakeRun) error, closes *bool, d time.Duration) wakeStep {
		return wakeStep{name: name, do: do, closes: closes, scheduled: true, in: d}
	}
	idle := func(name string, do func(context.Context, *wakeRun) error, closes *bool) wakeStep {
		return wakeStep{name: name, do: do, closes: closes}
	}
	cases := []struct {
		name   string
		policy broker.PolicyValue
		steps  []wakeStep
	}{{
		name: "retry delay, capacity and keys",
		policy: broker.PolicyValue{VisibilityTimeout: 10 * time.Second, MaxDeliveries: 2, RetryDelay: 3 * time.Second,
			Capacity: 3, DedupWindow: time.Minute, MaxMessageBytes: 8},
		steps: []wakeStep{
			now("a keyed publish of a new key", keyed("a", "k"), wakes),
			now("a keyed publish of a key seen", keyed("a again", "k"), wakesNone),
			now("a publish refused as too large", expect(publishNamed("much too large"), broker.MessageTooLarge), wakesNone),
			now("a batch", batch("b", "c"), wakes),
			now("a publish shed", expect(publishNamed("d"), broker.QueueFull), wakesNone),
			now("a Receive", receiveNamed("a"), wakesNone),
			in("a Receive of the rest", receiveNamed("b", "c"), wakesNone, 10*time.Second),
			in("the clock", advance(time.Second), wakesNone, 9*time.Second),
			in("an Extend that brings a lapse closer", extend("a", 5*time.Second), wakes, 5*time.Second),
			in("an Extend that pushes it further", extend("a", 20*time.Second), wakesNone, 9*time.Second),
			in("a Nack that hands back after a delay", nack("b", false), wakes, 3*time.Second),
			in("an Ack", ack("c"), wakesNone, 3*time.Second),
			now("the clock to the retry's end", advance(3*time.Second), wakesNone),
			// b's second delivery is its last: its lapse makes nothing
			// receivable, and a's lapse, at 21 s, is the next moment.
			in("a Receive of the last delivery", receiveNamed("b"), wakesNone, 17*time.Second),
			in("a Nack that dead-letters", nack("b", true), wakesNone, 17*time.Second),
			now("a publish", publishNamed("e"), wakes),
			in("a Receive", receiveNamed("e"), wakesNone, 10*time.Second),
			in("a Reject", reject("e"), wakesNone, 17*time.Second),
			now("a batch filling the queue", batch("f", "g"), wakes),
			now("a replay refused as the queue is full", expect(replay("b"), broker.QueueFull), wakesNone),
			in("a Receive", receiveNamed("f", "g"), wakesNone, 10*time.Second),
			in("an Ack", ack("f"), wakesNone, 10*time.Second),
			now("a replay", replay("b"), wakes),
			now("a delete", func(ctx context.Context, r *wakeRun) error { return r.b.DeleteDeadLetter(ctx, r.ids["e"]) }, wakesNone),
		},
	}, {
		name:   "no retry delay, one delivery",
		policy: broker.PolicyValue{VisibilityTimeout: 10 * time.Second, MaxDeliveries: 1},
		steps: []wakeStep{
			now("a publish", publishNamed("a"), wakes),
			// Its only delivery: its lapse makes nothing receivable.
			idle("a Receive of the last delivery", receiveNamed("a"), wakesNone),
			// Nothing becomes receivable sooner: the port lets a broker
			// close the signal or not, and the two agree.
			idle("an Extend of the last delivery that brings its lapse closer", extend("a", time.Second), nil),
			idle("the clock past the lapse", advance(2*time.Second), wakesNone),
			now("a replay of the lapsed message", replay("a"), wakes),
		},
	}, {
		name:   "no retry delay, two deliveries",
		policy: broker.PolicyValue{VisibilityTimeout: 10 * time.Second, MaxDeliveries: 2},
		steps: []wakeStep{
			now("a publish", publishNamed("a"), wakes),
			in("a Receive", receiveNamed("a"), wakesNone, 10*time.Second),
			in("(a second message, leased)", func(ctx context.Context, r *wakeRun) error {
				if err := publishNamed("b")(ctx, r); err != nil {
					return err
				}
				return receiveNamed("b")(ctx, r)
			}, wakes, 10*time.Second),
			now("a Nack that hands back at once", nack("a", false), wakes),
			in("a Receive of the last delivery", receiveNamed("a"), wakesNone, 10*time.Second),
			in("the clock", advance(4*time.Second), wakesNone, 6*time.Second),
			now("the clock past b's lapse", advance(6*time.Second), wakesNone),
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			clk = e.clock
			// The store's queue first: "in" steps read each broker's
			// Wake after both have moved.
			runs := []*wakeRun{
				{b: e.queue("jobs", tc.policy)},
				{b: e.memoryWith(tc.policy)},
			}
			names := []string{"store", "memory"}
			for _, r := range runs {
				r.receipts, r.ids = map[string]broker.ReceiptValue{}, map[string]string{}
				if w := r.b.Wake(); w.Signal == nil || closed(w.Signal) || w.Scheduled {
					t.Fatalf("an empty queue: Wake %+v", w)
				}
			}
			for i, st := range tc.steps {
				before := make([]broker.WakeValue, len(runs))
				for j, r := range runs {
					before[j] = r.b.Wake()
				}
				for j, r := range runs {
					if err := st.do(ctx(t), r); err != nil {
						t.Fatalf("step %d, %s, %s: %v", i, st.name, names[j], err)
					}
				}
				var got [2]bool
				for j, r := range runs {
					got[j] = closed(before[j].Signal)
					w := r.b.Wake()
					if w.Signal == nil || w.Scheduled != st.scheduled || (st.scheduled && w.In != st.in) || (!st.scheduled && w.In != 0) {
						t.Errorf("step %d, %s, %s: Wake after it: Scheduled %v In %v (Signal nil: %v), want Scheduled %v In %v",
							i, st.name, names[j], w.Scheduled, w.In, w.Signal == nil, st.scheduled, st.in)
					}
					if st.closes != nil && got[j] != *st.closes {
						t.Errorf("step %d, %s, %s: closed the signal handed out before it: %v, want %v", i, st.name, names[j], got[j], *st.closes)
					}
				}
				if got[0] != got[1] {
					t.Errorf("step %d, %s: the store closed the signal: %v, the Memory: %v", i, st.name, got[0], got[1])
				}
			}
			waits := make([]broker.WakeValue, len(runs))
			for j, r := range runs {
				waits[j] = r.b.Wake()
			}
			e.close()
			if err := runs[1].b.(*broker.Memory).Close(); err != nil {
				t.Fatal(err)
			}
			for j, r := range runs {
				if !closed(waits[j].Signal) {
					t.Errorf("%s: Close did not close the signal a consumer waits on", names[j])
				}
				w := r.b.Wake()
				if w.Signal == nil || !closed(w.Signal) || w.Scheduled || w.In != 0 {
					t.Errorf("%s: Wake after Close: %+v (Signal nil: %v), want a closed signal and nothing scheduled", names[j], w, w.Signal == nil)
				}
			}
		})
	}
}
