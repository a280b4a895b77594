package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// leased counts the fake's live leases.
func (f *fakeBroker) leased() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.leases)
}

// "Prefetch is how many leased messages Consume may hold, waiting for a
// handler, beyond those its handlers run": with every handler busy,
// Consume holds Concurrency + Prefetch leases and no more, runs no more
// than Concurrency handlers, and runs the held ones as handlers free up.
func TestConsumePrefetchHoldsLeasesBeyondTheRunningHandlers(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		batch, conc, prefetch  int
		wantLeased, wantFirstN int
	}{
		{"none by default", 16, 2, 0, 2, 2},
		{"ten held", 16, 2, 10, 12, 12},
		// Receives of 5 and 5: with 8 held, above half of Prefetch,
		// Consume waits for handlers to take them before it receives
		// again, though 2 more would fit.
		{"a Batch below the room", 5, 2, 10, 10, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			for range 40 {
				f.Publish(context.Background(), []byte("x"))
			}
			g := newGated()
			startConsume(t, f, g.handle, ConsumeOptions{Batch: tc.batch, Concurrency: tc.conc, Prefetch: tc.prefetch})
			require.Eventually(t, func() bool { return g.running.Load() == int64(tc.conc) && f.leased() == tc.wantLeased }, eventually, tick)
			require.Never(t, func() bool { return f.leased() > tc.wantLeased || g.running.Load() > int64(tc.conc) }, 100*time.Millisecond, 5*time.Millisecond)

			close(g.gate)
			require.Eventually(t, func() bool { return f.count("ack") == 40 }, eventually, tick)
			require.EqualValues(t, tc.conc, g.most.Load(), "never more handlers than Concurrency")
			f.mu.Lock()
			defer f.mu.Unlock()
			require.Equal(t, tc.wantFirstN, f.receiveMax[0])
			for _, m := range f.receiveMax {
				require.LessOrEqual(t, m, tc.batch)
			}
		})
	}
}

// steppedHandler runs each delivery until the test lets it finish, one at
// a time, and counts the deliveries it started.
type steppedHandler struct {
	step    chan struct{}
	started atomic.Int64
}

func (s *steppedHandler) handle(ctx context.Context, _ DeliveryValue) error {
	s.started.Add(1)
	select {
	case <-s.step:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// "Consume receives again once half of what it holds has started": not
// for each handler that finishes, which would lease one message per
// commit.
func TestConsumePrefetchReceivesAgainOnceHalfOfWhatItHoldsStarted(t *testing.T) {
	f := newFake()
	for range 40 {
		f.Publish(context.Background(), []byte("x"))
	}
	s := &steppedHandler{step: make(chan struct{})}
	startConsume(t, f, s.handle, ConsumeOptions{Batch: 8, Concurrency: 1, Prefetch: 8})
	// One Receive of 8: one runs, seven are held.
	require.Eventually(t, func() bool { return s.started.Load() == 1 && f.leased() == 8 }, eventually, tick)
	require.EqualValues(t, 1, f.receives.Load())

	// Two finish: five or six held, above half of 8.
	for i := range 2 {
		s.step <- struct{}{}
		require.Eventually(t, func() bool { return s.started.Load() == int64(i+2) }, eventually, tick)
	}
	require.Never(t, func() bool { return f.receives.Load() != 1 }, 100*time.Millisecond, 5*time.Millisecond,
		"no Receive while more than half of Prefetch is held")

	// The next one or two bring what is held to half: one Receive fills
	// every slot they freed, in one call.
	finished := 2
	for f.receives.Load() == 1 {
		require.Less(t, finished, 4, "Consume did not receive once half of what it held had started")
		s.step <- struct{}{}
		finished++
		require.Eventually(t, func() bool {
			return s.started.Load() == int64(finished+1) && (f.receives.Load() > 1 || finished < 4)
		}, eventually, tick)
		time.Sleep(20 * time.Millisecond) // let a Receive the freed slot allows happen
	}
	f.mu.Lock()
	second := f.receiveMax[1]
	f.mu.Unlock()
	require.GreaterOrEqual(t, second, 3, "the Receive after the wait asks for every slot freed meanwhile")
	close(s.step)
	require.Eventually(t, func() bool { return f.count("ack") == 40 }, eventually, tick)
}

// "When ctx ends, the messages still held are not started: each is nacked
// with the reason ReasonConsumerStopped"; the handler that runs finishes
// within StopGrace and is acked.
func TestConsumeNacksHeldMessagesUnstartedWhenCtxEnds(t *testing.T) {
	f := newFake()
	for range 5 {
		f.Publish(context.Background(), []byte("x"))
	}
	s := &steppedHandler{step: make(chan struct{})}
	r := startConsume(t, f, s.handle, ConsumeOptions{Batch: 5, Concurrency: 1, Prefetch: 4, StopGrace: time.Minute})
	require.Eventually(t, func() bool { return s.started.Load() == 1 && f.leased() == 5 }, eventually, tick)

	r.cancel()
	require.Eventually(t, func() bool { return f.count("nack") == 4 }, eventually, tick,
		"the held deliveries are nacked while the running handler still runs")
	require.False(t, r.returned(), "Consume waits for the running handler")
	s.step <- struct{}{}
	require.ErrorIs(t, r.wait(t), context.Canceled)

	require.EqualValues(t, 1, s.started.Load(), "no held delivery was started after ctx ended")
	require.Equal(t, 1, f.count("ack"))
	for _, c := range f.calls() {
		if c.call != "nack" {
			continue
		}
		var reason interface{ Reason() string }
		require.True(t, errors.As(c.cause, &reason), "cause %v", c.cause)
		require.Equal(t, ReasonConsumerStopped, reason.Reason())
	}
	require.Zero(t, f.leased())
}

// Over a *Queue: with two handlers, a Prefetch lets each commit lease and
// ack many messages, not two; every message is acked once, and the
// queue ends empty.
func TestConsumeOverStorePrefetchMakesFewerCommits(t *testing.T) {
	const n = 400
	commits := map[int]int64{}
	for _, prefetch := range []int{0, 30} {
		q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = []byte{byte(i)}
		}
		_, err := q.PublishBatch(context.Background(), batch)
		require.NoError(t, err)
		before := q.s.Stats().Commits
		var handled atomic.Int64
		r := startConsume(t, q, func(context.Context, DeliveryValue) error {
			handled.Add(1)
			return nil
		}, ConsumeOptions{Batch: 32, Concurrency: 2, Prefetch: prefetch})
		require.Eventually(t, func() bool { return q.Stats().Acked == n }, eventually, tick)
		require.ErrorIs(t, r.stop(t), context.Canceled)
		commits[prefetch] = q.s.Stats().Commits - before
		st := q.Stats()
		require.EqualValues(t, n, handled.Load(), "prefetch %d", prefetch)
		require.EqualValues(t, n, st.Delivered, "prefetch %d: each message delivered once", prefetch)
		require.Zero(t, st.Ready+st.Leased, "prefetch %d", prefetch)
	}
	t.Logf("commits to drain %d messages with 2 handlers: %d without Prefetch, %d with 30", n, commits[0], commits[30])
	require.GreaterOrEqual(t, commits[0], int64(n/2), "without Prefetch each commit leases at most the two free handlers' messages")
	require.Less(t, commits[30]*4, commits[0], "with Prefetch commits carry many leases and acks")
}

// "The acks of the handlers that finish meanwhile wait for the Receive
// that follows, or at most ackDelay": a handler that finished while the
// next one is slow is acked without waiting for it.
func TestConsumeOverStorePrefetchDoesNotHoldAnAckBackForTheNextHandler(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}, "fast", "slow", "c", "d", "e", "f", "g", "h")
	slow := make(chan struct{})
	r := startConsume(t, q, func(ctx context.Context, d DeliveryValue) error {
		if string(d.Message.Payload) == "slow" {
			select {
			case <-slow:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, ConsumeOptions{Batch: 8, Concurrency: 1, Prefetch: 8})
	require.Eventually(t, func() bool { return q.Stats().Acked == 1 }, eventually, tick,
		"the fast handler's ack is sent while the slow one runs and six are held")
	require.EqualValues(t, 7, q.Stats().Leased)
	close(slow)
	require.Eventually(t, func() bool { return q.Stats().Acked == 8 }, eventually, tick)
	require.ErrorIs(t, r.stop(t), context.Canceled)
}

// Once the store closes under Consume, the held deliveries are never
// started: nothing a handler did with them could be settled.
func TestConsumeStartsNoHeldDeliveryAfterTheStoreClosed(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	for range 6 {
		_, err := q.Publish(context.Background(), []byte("x"))
		require.NoError(t, err)
	}
	var started atomic.Int64
	var once sync.Once
	running := make(chan struct{})
	r := startConsume(t, q, func(ctx context.Context, _ DeliveryValue) error {
		started.Add(1)
		once.Do(func() { close(running) })
		<-ctx.Done()
		return ctx.Err()
	}, ConsumeOptions{Batch: 6, Concurrency: 1, Prefetch: 5})
	<-running
	require.NoError(t, s.Close())
	require.ErrorIs(t, r.wait(t), Closed)
	require.EqualValues(t, 1, started.Load(), "the five held deliveries were not started")
}

// Random shapes, handler times and stops: whatever Prefetch holds, no
// more than Concurrency handlers run, no more than Concurrency + Prefetch
// leases are live, every delivery is started at most once, and when
// Consume returns every lease it took is settled: acked or nacked by its
// handler, or nacked unstarted with the reason CONSUMER_STOPPED.
func TestConsumePrefetchKeepsItsBoundsUnderRandomStops(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for round := range 20 {
		conc, prefetch, batch := 1+rng.IntN(4), rng.IntN(12), 1+rng.IntN(16)
		grace := time.Duration(rng.IntN(2)) * time.Second
		f := newFake()
		const n = 60
		for range n {
			f.Publish(context.Background(), []byte("x"))
		}
		var mu sync.Mutex
		startedBy := map[ReceiptValue]int{}
		var running, most atomic.Int64
		delays := make([]time.Duration, 64)
		for i := range delays {
			delays[i] = time.Duration(rng.IntN(300)) * time.Microsecond
		}
		var calls atomic.Int64
		h := func(ctx context.Context, d DeliveryValue) error {
			r := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			mu.Lock()
			startedBy[d.Lease.Receipt]++
			mu.Unlock()
			select {
			case <-time.After(delays[calls.Add(1)%int64(len(delays))]):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Consume(ctx, f, h, ConsumeOptions{Batch: batch, Concurrency: conc, Prefetch: prefetch, StopGrace: grace})
		}()
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(eventually):
			t.Fatalf("round %d (seed %d): Consume did not return", round, seed)
		}

		shape := fmt.Sprintf("round %d (seed %d): Batch %d, Concurrency %d, Prefetch %d", round, seed, batch, conc, prefetch)
		require.LessOrEqual(t, most.Load(), int64(conc), shape)
		f.mu.Lock()
		require.LessOrEqual(t, f.mostLeased, conc+prefetch, shape)
		require.Empty(t, f.leases, "%s: every lease taken is settled", shape)
		f.mu.Unlock()
		mu.Lock()
		for r, times := range startedBy {
			require.Equal(t, 1, times, "%s: receipt %s started once", shape, r)
		}
		for _, c := range f.calls() {
			if c.call == "nack" && startedBy[c.receipt] == 0 {
				var reason interface{ Reason() string }
				require.True(t, errors.As(c.cause, &reason), shape)
				require.Equal(t, ReasonConsumerStopped, reason.Reason(), shape)
			}
			if c.call == "ack" {
				require.Equal(t, 1, startedBy[c.receipt], "%s: an ack is of a started delivery", shape)
			}
		}
		mu.Unlock()
	}
}

// "The first renewal comes ExtendEvery after the handler starts, or, for
// a message Prefetch held, ExtendEvery after its Receive (at once when it
// waited longer than that to start)": a held message whose lease has run
// for longer than ExtendEvery is renewed as its handler starts, not a
// whole ExtendEvery later, when it may have lapsed.
func TestConsumeRenewsAHeldMessageAsItStartsWhenItWaitedLongerThanExtendEvery(t *testing.T) {
	f := newFake()
	f.clock.Freeze() // no lease lapses: the test looks only at when renewals come
	first, _ := f.Publish(context.Background(), []byte("first"))
	f.Publish(context.Background(), []byte("held"))
	const every = time.Second
	release := make(chan struct{})
	renewedAfter := make(chan time.Duration, 1)
	r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		if d.Message.ID == first.ID {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		start := time.Now()
		for {
			f.mu.Lock()
			renewed := false
			for _, e := range f.extends {
				renewed = renewed || e.old == d.Lease.Receipt
			}
			f.mu.Unlock()
			if renewed {
				renewedAfter <- time.Since(start)
				return nil
			}
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}, ConsumeOptions{Batch: 2, Concurrency: 1, Prefetch: 1, ExtendEvery: every, ExtendBy: time.Minute})
	require.Eventually(t, func() bool { return f.leased() == 2 }, eventually, tick)
	time.Sleep(every + every/5) // the held message's lease has run past one ExtendEvery
	close(release)
	select {
	case d := <-renewedAfter:
		require.Less(t, d, every/2, "renewed %v after its handler started; it had waited longer than ExtendEvery", d)
	case <-time.After(eventually):
		t.Fatal("the held message's lease was never renewed")
	}
	require.ErrorIs(t, r.stop(t), context.Canceled)
	require.Equal(t, 2, f.count("ack"))
}
