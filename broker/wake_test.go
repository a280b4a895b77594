package broker_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWakeSignalIsNeverNil(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	w := q.Wake()
	require.NotNil(t, w.Signal)
	require.False(t, closed(w.Signal))
	require.False(t, w.Scheduled, "an empty queue holds nothing that becomes receivable on its own")
}

func TestWakeClosedByPublish(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	publishes := map[string]func(){
		"Publish":      func() { mustPublish(t, q, "a") },
		"PublishKeyed": func() { _, err := q.PublishKeyed(ctx(t), "k", nil); require.NoError(t, err) },
		"PublishBatch": func() { _, err := q.PublishBatch(ctx(t), [][]byte{nil, nil}); require.NoError(t, err) },
	}
	for name, publish := range publishes {
		w := q.Wake()
		require.False(t, closed(w.Signal), name)
		publish()
		require.True(t, closed(w.Signal), "%s closes the signal handed out before it", name)
		require.False(t, closed(q.Wake().Signal), "a fresh signal is handed out after %s", name)
	}
}

func TestWakeClosedByNackThatHandsBack(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	w := q.Wake()
	mustNack(t, q, d.Lease.Receipt, nil)
	require.True(t, closed(w.Signal))
}

func TestWakeClosedByReplay(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	m := mustPublish(t, q, "a")
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, nil))
	w := q.Wake()
	require.False(t, closed(w.Signal))
	require.NoError(t, q.ReplayDeadLetter(ctx(t), m.ID))
	require.True(t, closed(w.Signal), "§5.3: a replay makes a message receivable")
}

func TestWakeNotClosedByPublishToAnotherQueue(t *testing.T) {
	e := newEnv(t)
	a := e.queue("a", policy())
	b := e.queue("b", policy())
	wa := a.Wake()
	mustPublish(t, b, "for b")
	_, err := b.PublishBatch(ctx(t), [][]byte{nil})
	require.NoError(t, err)
	require.False(t, closed(wa.Signal), "§5.3: a publish on another queue does not wake this one")
	mustPublish(t, a, "for a")
	require.True(t, closed(wa.Signal))
}

func TestWakeBeforeReceiveDoesNotMissPublish(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	w := q.Wake()
	require.Empty(t, mustReceive(t, q, 1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := q.Publish(t.Context(), []byte("late"))
		if err != nil {
			t.Errorf("publish: %v", err)
		}
	}()
	select {
	case <-w.Signal:
	case <-time.After(10 * time.Second): // a hang guard, not a timing assumption
		t.Fatal("the publish landing after the empty Receive did not close the signal")
	}
	<-done
	require.Len(t, mustReceive(t, q, 1), 1)
}

func TestWakeScheduledNowWhenReady(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	w := q.Wake()
	require.True(t, w.Scheduled)
	require.LessOrEqual(t, w.In, time.Duration(0), "zero or less means now")
}

func TestWakeInNamesRetryDelayEnd(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 10 * time.Second }))
	mustPublish(t, q, "a")
	nv := mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	e.clock.Advance(4 * time.Second)
	w := q.Wake()
	require.True(t, w.Scheduled)
	require.Equal(t, 6*time.Second, w.In, "measured on the broker clock when Wake was called")
	e.clock.Set(nv.VisibleAt)
	w = q.Wake()
	require.True(t, w.Scheduled)
	require.LessOrEqual(t, w.In, time.Duration(0))
}

func TestWakeInNamesLeaseLapse(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Advance(time.Second)
	w := q.Wake()
	require.True(t, w.Scheduled, "a dead consumer's message becomes receivable on its own")
	require.Equal(t, d.Lease.ExpiresAt.Sub(e.clock.Now()), w.In)
}

func TestWakeInNamesEarliestMoment(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 5 * time.Second }))
	mustPublish(t, q, "a")
	mustPublish(t, q, "b")
	ds := mustReceive(t, q, 2) // leases lapse at 30 s
	mustNack(t, q, ds[0].Lease.Receipt, nil)
	require.Equal(t, 5*time.Second, q.Wake().In, "the retry delay ends before the other lease lapses")
}

// In names how long until a lease lapses or a retry delay ends; after the
// clock stepped back centuries, that is longer than a Duration holds, and
// In is the longest one, never the "zero or less" that means now. The
// difference of the two instants wrapped round to a negative In, in the
// store and Memory alike, and an idle consumer looked again at once.
func TestWakeInStaysAheadAfterTheClockStepsBackCenturies(t *testing.T) {
	start := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, back := range []struct {
		name string
		to   time.Time
	}{
		{"500 years, more than a Duration", time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"to the first instant", time.Unix(0, math.MinInt64)},
		{"100 years, exactly", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		for _, nack := range []bool{false, true} {
			what := map[bool]string{false: "lease lapse", true: "retry delay end"}[nack]
			t.Run(back.name+"/"+what, func(t *testing.T) {
				e := newEnv(t)
				for name, b := range e.storeAndMemory(policy()) {
					t.Run(name, func(t *testing.T) {
						e.clock.Set(start)
						_, err := b.Publish(ctx(t), []byte("x"))
						require.NoError(t, err)
						ds, err := b.Receive(ctx(t), 1)
						require.NoError(t, err)
						require.Len(t, ds, 1)
						due := ds[0].Lease.ExpiresAt
						if nack {
							nv, err := b.Nack(ctx(t), ds[0].Lease.Receipt, nil)
							require.NoError(t, err)
							due = nv.VisibleAt
						}
						e.clock.Set(back.to)
						w := b.Wake()
						require.True(t, w.Scheduled)
						require.Positive(t, w.In, "a %s %v ahead is due now", what, due.Sub(back.to))
						// time.Time.Sub clamps to the longest Duration too.
						require.Equal(t, due.Sub(back.to), w.In)
					})
				}
			})
		}
	}
}

func TestWakeNotScheduledWhenOnlyDeadLetters(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, nil))
	require.False(t, q.Wake().Scheduled)
}

// A lease on the message's last allowed delivery does not make anything
// receivable when it lapses: the message goes to the dead-letter store.
// Scheduled is "false when the broker holds nothing that will become
// receivable on its own".
func TestWakeNotScheduledForLeaseOnLastDelivery(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	mustPublish(t, q, "a")
	mustReceiveOne(t, q)
	w := q.Wake()
	require.False(t, w.Scheduled, "the only message will die, not become receivable; In=%v", w.In)
}

func TestQueuesDifferOnlyByNameAndPolicy(t *testing.T) {
	e := newEnv(t)
	a := e.queue("a", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1; p.Capacity = 1 }))
	b := e.queue("b", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3; p.VisibilityTimeout = time.Minute }))

	wa, wb := a.Wake(), b.Wake()
	ma := mustPublish(t, a, "a1")
	mb, err := b.PublishKeyed(ctx(t), "k", []byte("b1"))
	require.NoError(t, err)
	require.True(t, closed(wa.Signal))
	require.True(t, closed(wb.Signal))

	_, err = a.Publish(ctx(t), []byte("a2"))
	requireErrorIs(t, err, broker.QueueFull)
	mustPublish(t, b, "b2") // b has no capacity bound
	_, err = a.PublishKeyed(ctx(t), "k", []byte("a-k"))
	requireErrorIs(t, err, broker.QueueFull) // keys are per queue: b's key is not a's duplicate

	da, db := mustReceiveOne(t, a), mustReceiveOne(t, b)
	require.Equal(t, ma.ID, da.Message.ID)
	require.Equal(t, mb.ID, db.Message.ID, "each queue delivers only its own messages")
	requireSameInstant(t, t0.Add(30*time.Second), da.Lease.ExpiresAt)
	requireSameInstant(t, t0.Add(time.Minute), db.Lease.ExpiresAt)

	require.True(t, mustNack(t, a, da.Lease.Receipt, nil).DeadLettered)
	require.False(t, mustNack(t, b, db.Lease.Receipt, nil).DeadLettered, "same call, different policy")

	sa, sb := a.Stats(), b.Stats()
	require.Equal(t, 1, sa.DeadLetters)
	require.Equal(t, 0, sb.DeadLetters)
	require.Equal(t, int64(1), sa.Published)
	require.Equal(t, int64(2), sb.Published)
	require.Equal(t, int64(2), sa.Shed)
	require.Equal(t, int64(0), sb.Shed)
	require.Empty(t, mustDeadLetters(t, b))
	requireErrorIs(t, b.ReplayDeadLetter(ctx(t), ma.ID), broker.DeadLetterNotFound)
}

func TestWakeInSkipsLeaseOnLastDelivery(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = time.Minute }))
	x := mustPublish(t, q, "x")
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	e.clock.Set(t0.Add(time.Minute))
	dx := mustReceiveOne(t, q) // x's last delivery, leased until t0+90s
	require.Equal(t, x.ID, dx.Message.ID)
	require.Equal(t, 2, dx.Deliveries)
	mustPublish(t, q, "y")
	nv := mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil) // y visible at t0+120s
	w := q.Wake()
	require.True(t, w.Scheduled)
	require.Equal(t, nv.VisibleAt.Sub(e.clock.Now()), w.In, "x's lapse at %v makes nothing receivable", dx.Lease.ExpiresAt)
}

// Raising MaxDeliveries makes a lease on its last delivery one that lapses
// back into the queue: an event that may make a message receivable, so it
// closes the signal, and Wake now schedules the lapse. (A consumer waiting
// on the old signal slept until some unrelated publish.)
func TestWakeClosedByAPolicyThatGivesALastLeaseMoreDeliveries(t *testing.T) {
	e := newEnv(t)
	pol := func(max int) broker.PolicyValue {
		return policy(func(p *broker.PolicyValue) { p.MaxDeliveries = max; p.VisibilityTimeout = time.Minute })
	}
	q := e.queue("jobs", pol(1))
	mustPublish(t, q, "a")
	mustReceiveOne(t, q)
	w := q.Wake()
	require.False(t, w.Scheduled)
	e.clock.Advance(10 * time.Second)
	q = e.queue("jobs", pol(5))
	require.True(t, closed(w.Signal), "the policy change closes the signal handed out before it")
	w = q.Wake()
	require.True(t, w.Scheduled)
	require.Equal(t, 50*time.Second, w.In, "the lease's lapse")
}

// An Extend that brings a lease's lapse closer closes the signal: a
// consumer told to wait for the old lapse would sleep past the new one.
// One that pushes it further does not. The memory broker does the same.
func TestWakeClosedByAnExtendThatShortensALease(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute }))
	mem, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute }), broker.MemoryOptions{Now: e.clock.Now})
	require.NoError(t, err)
	defer mem.Close()
	for _, b := range []interface {
		broker.Broker
		broker.Waker
		broker.LeaseExtender
	}{q, mem} {
		_, err := b.Publish(ctx(t), []byte("a"))
		require.NoError(t, err)
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		w := b.Wake()
		require.Equal(t, time.Minute, w.In)
		l, err := b.Extend(ctx(t), ds[0].Lease.Receipt, 2*time.Minute)
		require.NoError(t, err)
		require.False(t, closed(w.Signal), "%T: a longer lease makes nothing receivable sooner", b)
		_, err = b.Extend(ctx(t), l.Receipt, time.Second)
		require.NoError(t, err)
		require.True(t, closed(w.Signal), "%T: a shorter lease closes the signal", b)
		require.Equal(t, time.Second, b.Wake().In, "%T", b)
	}
}

// After the store closes, Wake's Signal is closed for good and nothing is
// Scheduled, as a Memory says after its Close: the lease that would lapse
// in a second is no moment to wait for, since no Receive will hand it out.
// Asked for a Wake, the closed store does not move the queue's state
// either: Stats reports the lease still leased, not lapsed.
func TestWakeAfterCloseIsClosedAndSchedulesNothing(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	mustPublish(t, q, "a")
	mustPublish(t, q, "b")
	mustReceiveOne(t, q)
	e.close()
	e.clock.Advance(time.Hour) // past the lease's lapse
	w := q.Wake()
	require.True(t, closed(w.Signal), "the store closed: look again at once, and be told Closed")
	require.False(t, w.Scheduled, "a closed store schedules nothing")
	require.Zero(t, w.In)
	st := q.Stats()
	require.Equal(t, 1, st.Leased, "Wake of a closed store moved the queue's state: %+v", st)
}

// A Memory and a Store queue, driven through the same random Publish,
// Receive, Nack, Ack, Extend, Reject, replay and clock steps on one clock,
// agree after every step on Wake's Scheduled and In, and on whether the
// step closed the Signal handed out before it: a consumer waits on that
// signal, and a broker that failed to close it would leave a message
// waiting (memory_differential_test compares In and Scheduled, not which
// calls close the signal).
func TestMemoryAndStoreAgreeOnWhichStepsCloseTheWakeSignal(t *testing.T) {
	seeds := 25
	if testing.Short() {
		seeds = 8 // each opens and closes a store, with its fdatasyncs
	}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 3))
		pol := broker.PolicyValue{VisibilityTimeout: 10 * time.Second, RetryDelay: time.Duration(r.IntN(3)) * time.Second, MaxRetryDelay: 0, MaxDeliveries: 1 + r.IntN(3)}
		clk := newFakeClock()
		m, err := broker.NewMemory(pol, broker.MemoryOptions{Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		s, err := broker.Open(t.TempDir(), broker.Options{Now: clk.Now, Sync: broker.SyncNone, SegmentBytes: testSegmentBytes})
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Queue("q", pol)
		if err != nil {
			t.Fatal(err)
		}
		bs := []fullBroker{m, q}
		receipts := [2][]broker.ReceiptValue{}
		var trace []string
		for step := range 60 {
			var sigs [2]<-chan struct{}
			var wakes [2]broker.WakeValue
			for i, b := range bs {
				wakes[i] = b.Wake()
				sigs[i] = wakes[i].Signal
			}
			if wakes[0].Scheduled != wakes[1].Scheduled || (wakes[0].Scheduled && wakes[0].In != wakes[1].In) {
				t.Fatalf("seed %d step %d: Memory Wake %+v, Store Wake %+v\n%v", seed, step, wakes[0], wakes[1], trace)
			}
			op := r.IntN(8)
			var outs [2]string
			var idx int
			by := time.Duration(1+r.IntN(3)) * time.Second
			adv := time.Duration(r.IntN(4000)) * time.Millisecond
			if op >= 2 && op <= 5 {
				if len(receipts[0]) != len(receipts[1]) {
					t.Fatalf("receipt count differs")
				}
				if len(receipts[0]) == 0 {
					op = 1
				} else {
					idx = r.IntN(len(receipts[0]))
				}
			}
			for i, b := range bs {
				switch op {
				case 0:
					_, err := b.Publish(context.Background(), []byte("x"))
					outs[i] = fmt.Sprint("publish ", err)
				case 1:
					ds, err := b.Receive(context.Background(), 1)
					for _, d := range ds {
						receipts[i] = append(receipts[i], d.Lease.Receipt)
					}
					outs[i] = fmt.Sprint("receive ", len(ds), err)
				case 2:
					nv, err := b.Nack(context.Background(), receipts[i][idx], nil)
					outs[i] = fmt.Sprint("nack ", nv.DeadLettered, nv.Deliveries, err != nil)
				case 3:
					err := b.Ack(context.Background(), receipts[i][idx])
					outs[i] = fmt.Sprint("ack ", err != nil)
				case 4:
					l, err := b.Extend(context.Background(), receipts[i][idx], by)
					if err == nil {
						receipts[i][idx] = l.Receipt
					}
					outs[i] = fmt.Sprint("extend ", err != nil)
				case 5:
					err := b.Reject(context.Background(), receipts[i][idx], nil)
					outs[i] = fmt.Sprint("reject ", err != nil)
				case 6:
					dls, _ := b.DeadLetters(context.Background(), 1)
					if len(dls) > 0 {
						err := b.ReplayDeadLetter(context.Background(), dls[0].Message.ID)
						outs[i] = fmt.Sprint("replay ", err)
					} else {
						outs[i] = "replay none"
					}
				case 7:
					if i == 0 {
						clk.Advance(adv)
					}
					outs[i] = "advance"
				}
			}
			trace = append(trace, outs[0])
			if outs[0] != outs[1] {
				t.Fatalf("seed %d step %d: Memory %q, Store %q\n%v", seed, step, outs[0], outs[1], trace)
			}
			var closed [2]bool
			for i := range bs {
				select {
				case <-sigs[i]:
					closed[i] = true
				default:
				}
			}
			if closed[0] != closed[1] {
				t.Errorf("seed %d step %d (%s): Memory signal closed %v, Store signal closed %v\n%v", seed, step, outs[0], closed[0], closed[1], trace)
			}
		}
		m.Close()
		s.Close()
	}
}
