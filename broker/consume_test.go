package broker

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	// eventually bounds a wait for what must happen soon: generous, as
	// the machines tests run on are shared, and a passing run never
	// waits for it.
	eventually = 30 * time.Second
	tick       = time.Millisecond
)

func ackAll(context.Context, DeliveryValue) error { return nil }

func TestConsumeAcksOnNil(t *testing.T) {
	f := newFake()
	for _, p := range []string{"a", "b", "c"} {
		f.Publish(context.Background(), []byte(p))
	}
	var mu sync.Mutex
	var seen []string
	r := startConsume(t, f, func(_ context.Context, d DeliveryValue) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(d.Message.Payload))
		return nil
	}, ConsumeOptions{})
	require.Eventually(t, func() bool { return f.count("ack") == 3 }, eventually, tick)
	require.ErrorIs(t, r.stop(t), context.Canceled)
	require.ElementsMatch(t, []string{"a", "b", "c"}, seen)
	require.Len(t, f.calls(), 3, "only acks")
}

func TestConsumeNacksWithError(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	boom := errors.New("boom")
	startConsume(t, f, func(context.Context, DeliveryValue) error {
		return errors.Join(errors.New("context"), boom)
	}, ConsumeOptions{})
	require.Eventually(t, func() bool { return f.count("nack") == 1 }, eventually, tick)
	c := f.calls()[0]
	require.Equal(t, "nack", c.call)
	require.ErrorIs(t, c.cause, boom)
}

func TestConsumeRejectsDoNotRetry(t *testing.T) {
	boom := errors.New("boom")
	h := func(context.Context, DeliveryValue) error { return DoNotRetry(boom) }

	t.Run("rejecter", func(t *testing.T) {
		f := newFake()
		f.Publish(context.Background(), []byte("x"))
		startConsume(t, f, h, ConsumeOptions{})
		require.Eventually(t, func() bool { return f.count("reject") == 1 }, eventually, tick)
		c := f.calls()[0]
		require.True(t, IsDoNotRetry(c.cause))
		require.ErrorIs(t, c.cause, boom)
	})
	t.Run("not a rejecter: nack", func(t *testing.T) {
		f := newFake()
		f.Publish(context.Background(), []byte("x"))
		startConsume(t, plainBroker{f}, h, ConsumeOptions{PollInterval: 5 * time.Millisecond})
		require.Eventually(t, func() bool { return f.count("nack") == 1 }, eventually, tick)
		require.True(t, IsDoNotRetry(f.calls()[0].cause))
	})
}

func TestConsumeRecoversPanic(t *testing.T) {
	f := newFake()
	bad := f.publishAt([]byte("bad"), time.Time{})
	log, logs := newTestLogger()
	startConsume(t, f, func(_ context.Context, d DeliveryValue) error {
		if string(d.Message.Payload) == "bad" {
			panic("secret-payload-bytes")
		}
		return nil
	}, ConsumeOptions{Logger: log})
	require.Eventually(t, func() bool { return f.count("nack") == 1 }, eventually, tick)

	c := f.calls()[0]
	require.Equal(t, bad.ID, c.id)
	var r interface{ Reason() string }
	require.False(t, errors.As(c.cause, &r), "a panic's cause carries no reason")
	reason, code, public, unclassified := classify(c.cause)
	require.Equal(t, ReasonUnclassified, reason)
	require.Zero(t, code)
	require.Empty(t, public)
	require.True(t, unclassified)
	require.NotContains(t, c.cause.Error(), "secret")

	text := logs.String()
	require.Contains(t, text, "secret-payload-bytes")
	require.Contains(t, text, bad.ID)
	require.Contains(t, text, "consume.go", "the stack is logged")

	// Consume goes on after a panic.
	f.Publish(context.Background(), []byte("good"))
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
}

// gatedHandler blocks every handler until the gate closes, counting the
// handlers running at once and the most ever seen.
type gatedHandler struct {
	gate    chan struct{}
	running atomic.Int64
	most    atomic.Int64
}

func newGated() *gatedHandler { return &gatedHandler{gate: make(chan struct{})} }

func (g *gatedHandler) handle(ctx context.Context, _ DeliveryValue) error {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestConsumeConcurrencyBound(t *testing.T) {
	f := newFake()
	for range 12 {
		f.Publish(context.Background(), []byte("x"))
	}
	g := newGated()
	startConsume(t, f, g.handle, ConsumeOptions{Batch: 10, Concurrency: 3})
	require.Eventually(t, func() bool { return g.running.Load() == 3 }, eventually, tick)

	// Every slot is busy: Consume waits for one to free, it does not poll.
	receives := f.receives.Load()
	require.Never(t, func() bool { return f.receives.Load() != receives || g.running.Load() > 3 }, 100*time.Millisecond, 5*time.Millisecond)

	close(g.gate)
	require.Eventually(t, func() bool { return f.count("ack") == 12 }, eventually, tick)
	require.EqualValues(t, 3, g.most.Load())
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.receiveMax {
		require.LessOrEqual(t, m, 3, "never asks for more than the free slots")
	}
}

// A broker that returns more deliveries than Consume asked for breaks
// the port's promise, but the deliveries are leased all the same: Consume
// runs them, still never more handlers at once than Concurrency.
func TestConsumeConcurrencyBoundHoldsOverExtraDeliveries(t *testing.T) {
	f := newFake()
	f.overDeliver = 3
	for range 8 {
		f.Publish(context.Background(), []byte("x"))
	}
	g := newGated()
	startConsume(t, f, g.handle, ConsumeOptions{Batch: 2, Concurrency: 2})
	require.Eventually(t, func() bool { return g.running.Load() == 2 }, eventually, tick)
	require.Never(t, func() bool { return g.running.Load() > 2 }, 100*time.Millisecond, 5*time.Millisecond)

	close(g.gate)
	require.Eventually(t, func() bool { return f.count("ack") == 8 }, eventually, tick)
	require.EqualValues(t, 2, g.most.Load(), "the extra deliveries waited for free slots")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Greater(t, slices.Max(f.receiveLen), 2, "the broker did hand out more than asked")
}

func TestConsumeBatch(t *testing.T) {
	t.Run("honoured", func(t *testing.T) {
		f := newFake()
		for range 8 {
			f.Publish(context.Background(), []byte("x"))
		}
		g := newGated()
		startConsume(t, f, g.handle, ConsumeOptions{Batch: 4, Concurrency: 8})
		require.Eventually(t, func() bool { return g.running.Load() == 8 }, eventually, tick)
		close(g.gate)
		require.Eventually(t, func() bool { return f.count("ack") == 8 }, eventually, tick)
		f.mu.Lock()
		defer f.mu.Unlock()
		require.Equal(t, 4, f.receiveMax[0])
		require.Equal(t, 4, f.receiveLen[0])
		for _, m := range f.receiveMax {
			require.LessOrEqual(t, m, 4)
		}
	})
	t.Run("zero means one", func(t *testing.T) {
		f := newFake()
		for range 5 {
			f.Publish(context.Background(), []byte("x"))
		}
		startConsume(t, f, ackAll, ConsumeOptions{Concurrency: 3})
		require.Eventually(t, func() bool { return f.count("ack") == 5 }, eventually, tick)
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, m := range f.receiveMax {
			require.Equal(t, 1, m)
		}
	})
}

func TestConsumeRefusesOptions(t *testing.T) {
	f := newFake()
	for _, tc := range []struct {
		name string
		opts ConsumeOptions
		want error
	}{
		{"negative Batch", ConsumeOptions{Batch: -1}, InvalidBatchSize},
		{"negative Concurrency", ConsumeOptions{Concurrency: -1}, InvalidBatchSize},
		{"Concurrency above the maximum", ConsumeOptions{Concurrency: MaxConsumeConcurrency + 1}, InvalidBatchSize},
		{"Concurrency of math.MaxInt", ConsumeOptions{Concurrency: math.MaxInt}, InvalidBatchSize},
		{"negative Prefetch", ConsumeOptions{Prefetch: -1}, InvalidBatchSize},
		{"Prefetch above the maximum", ConsumeOptions{Prefetch: MaxConsumeConcurrency + 1}, InvalidBatchSize},
		{"negative PollInterval", ConsumeOptions{PollInterval: -1}, QueueMisconfigured},
		{"negative ExtendEvery", ConsumeOptions{ExtendEvery: -1}, QueueMisconfigured},
		{"negative ExtendBy", ConsumeOptions{ExtendEvery: time.Second, ExtendBy: -1}, QueueMisconfigured},
		{"ExtendBy not above ExtendEvery", ConsumeOptions{ExtendEvery: time.Second, ExtendBy: time.Second}, QueueMisconfigured},
		{"ExtendBy past what an Extend makes", ConsumeOptions{ExtendEvery: time.Second, ExtendBy: MaxDeadlineOffset + 1}, QueueMisconfigured},
		{"ExtendEvery past what an Extend makes", ConsumeOptions{ExtendEvery: MaxDeadlineOffset}, QueueMisconfigured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A bound on the call: an option accepted by mistake would have
			// Consume run until its ctx ends.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Consume(ctx, f, ackAll, tc.opts)
			require.ErrorIs(t, err, tc.want)
			require.Zero(t, f.receives.Load())
		})
	}
	// Each missing argument is named, a nil pointer in the interface too.
	var nilQueue *Queue
	var nilMemory *Memory
	var nilCtx context.Context
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil handler", Consume(context.Background(), f, nil, ConsumeOptions{})},
		{"nil broker", Consume(context.Background(), nil, ackAll, ConsumeOptions{})},
		{"nil broker", Consume(context.Background(), nilQueue, ackAll, ConsumeOptions{})},
		{"nil broker", Consume(context.Background(), nilMemory, ackAll, ConsumeOptions{})},
		{"nil context", Consume(nilCtx, f, ackAll, ConsumeOptions{})},
	} {
		require.ErrorIs(t, tc.err, QueueMisconfigured, tc.name)
		require.ErrorContains(t, tc.err, tc.name)
	}
	require.Zero(t, f.receives.Load())

	// The ExtendBy that a large ExtendEvery implies is within what an
	// Extend makes, not a value the caller never gave.
	c, err := newConsumer(f, ackAll, ConsumeOptions{ExtendEvery: MaxDeadlineOffset - time.Hour})
	require.NoError(t, err)
	require.Equal(t, MaxDeadlineOffset, c.extendBy)
}

// The limits Consume names are its last accepted values, not its first
// refused ones: Concurrency and Prefetch up to MaxConsumeConcurrency, ExtendBy up to
// MaxDeadlineOffset.
func TestConsumeAcceptsTheLimitsItNames(t *testing.T) {
	f := newFake()
	for _, opts := range []ConsumeOptions{
		{Concurrency: MaxConsumeConcurrency},
		{Concurrency: MaxConsumeConcurrency, Prefetch: MaxConsumeConcurrency},
		{ExtendEvery: time.Second, ExtendBy: MaxDeadlineOffset},
	} {
		c, err := newConsumer(f, ackAll, opts)
		require.NoError(t, err, "%+v", opts)
		require.Equal(t, max(opts.Concurrency, 1)+opts.Prefetch, cap(c.slots))
		require.Equal(t, opts.ExtendBy, c.extendBy)
	}
}

func TestConsumeWakesOnPublish(t *testing.T) {
	f := newFake()
	// PollInterval is an hour: only the Wake signal can bring the message.
	r := startConsume(t, f, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.Eventually(t, func() bool { return f.receives.Load() >= 1 }, eventually, tick)

	idle := f.receives.Load()
	require.Never(t, func() bool { return f.receives.Load() != idle }, 200*time.Millisecond, 5*time.Millisecond, "an idle consumer of a Waker does not spin or poll")

	f.Publish(context.Background(), []byte("x"))
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	require.LessOrEqual(t, f.receives.Load()-idle, int64(3))
	require.ErrorIs(t, r.stop(t), context.Canceled)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Zero(t, f.receiveNoWake, "Wake is called before every Receive")
}

func TestConsumeNeverSleepsPastWakeIn(t *testing.T) {
	f := newFake()
	later := f.publishAt([]byte("later"), f.clock.Now().Add(50*time.Millisecond))
	w := f.Wake()
	require.True(t, w.Scheduled)
	require.Greater(t, w.In, time.Duration(0))

	// Nothing closes the signal from here on: only a timer of In can wake it.
	startConsume(t, f, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	require.Equal(t, later.ID, f.calls()[0].id)
	require.LessOrEqual(t, f.receives.Load(), int64(4), "it waited, it did not poll")
}

// nackedElsewhere is a Waker whose every Receive finds nothing while
// another consumer's Nack lands during it: the Nack closes the signal Wake
// handed out (Signal: "closed by ... a Nack that hands a message back"),
// and that message's retry ends In from the Wake.
type nackedElsewhere struct {
	plainBroker
	in time.Duration

	mu       sync.Mutex
	signal   chan struct{}
	receives []time.Time
}

func (b *nackedElsewhere) Wake() WakeValue {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.signal = make(chan struct{})
	return WakeValue{Signal: b.signal, In: b.in, Scheduled: true}
}

func (b *nackedElsewhere) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.receives = append(b.receives, time.Now())
	if b.signal != nil {
		close(b.signal) // the other consumer's Nack
		b.signal = nil
	}
	return nil, nil
}

func (b *nackedElsewhere) times() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.receives...)
}

// TestConsumeBackoffNeverSleepsPastWakeIn: Consume "never sleeps past a
// Wake.In" (API.md §3), the backoff included. A signal already closed as
// the wait begins ends it at once, and Consume backs off, but no longer
// than the In Wake named: a consumer told that a message is receivable in
// 5ms used to sleep as the backoff grew, up to PollInterval, before its
// next Receive.
func TestConsumeBackoffNeverSleepsPastWakeIn(t *testing.T) {
	const in = 5 * time.Millisecond
	b := &nackedElsewhere{plainBroker: plainBroker{newFake()}, in: in}
	r := startConsume(t, b, ackAll, ConsumeOptions{PollInterval: 10 * time.Second})
	// Sixteen Receives: the backoff the fault sleeps doubles from 1ms, to
	// 8s before the sixteenth, far above any stall of a loaded machine
	// (one of 160ms was seen under `go test ./...` with twelve Receives
	// and a 150ms allowance, which the fault exceeded only at its
	// eleventh wait, of 512ms).
	const receives = 16
	require.Eventually(t, func() bool { return len(b.times()) >= receives }, eventually, tick)
	r.stop(t)

	ts := b.times()[:receives]
	var worst time.Duration
	for i := 1; i < len(ts); i++ {
		worst = max(worst, ts[i].Sub(ts[i-1]))
	}
	// In plus a generous allowance for a loaded machine.
	require.Less(t, worst, in+time.Second,
		"Consume slept %v between two Receives although each Wake said a message is receivable in %v", worst, in)
}

// nilSignalWaker is the fake as a Waker that breaks the port's rule that
// Signal is never nil: it names In, with no signal to wait on.
type nilSignalWaker struct{ *fakeBroker }

func (b nilSignalWaker) Wake() WakeValue {
	w := b.fakeBroker.Wake()
	w.Signal = nil
	return w
}

// TestConsumeNeverSleepsPastWakeInWithANilSignal: with no signal, Consume
// polls every PollInterval, but "never past the WakeValue.In it named":
// the In still bounds the wait, which an hour's PollInterval overran.
func TestConsumeNeverSleepsPastWakeInWithANilSignal(t *testing.T) {
	f := newFake()
	later := f.publishAt([]byte("later"), f.clock.Now().Add(50*time.Millisecond))
	startConsume(t, nilSignalWaker{f}, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	require.Equal(t, later.ID, f.calls()[0].id)
	require.LessOrEqual(t, f.receives.Load(), int64(4), "it waited, it did not poll")
}

func TestConsumeNeverSpins(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name  string
		wake  func() WakeValue
		poll  time.Duration
		least time.Duration // the backoff's sum over the first 12 waits, less slack
	}{
		{"signal always closed", func() WakeValue { return WakeValue{Signal: closed} }, 0, 100 * time.Millisecond},
		{"scheduled now", func() WakeValue { return WakeValue{Signal: make(chan struct{}), Scheduled: true} }, 0, 100 * time.Millisecond},
		{"scheduled in the past", func() WakeValue { return WakeValue{Signal: make(chan struct{}), In: -time.Hour, Scheduled: true} }, 0, 100 * time.Millisecond},
		{"scheduled in a microsecond", func() WakeValue { return WakeValue{Signal: make(chan struct{}), In: time.Microsecond, Scheduled: true} }, 0, 100 * time.Millisecond},
		// A timer fires late, so a wait set just under a millisecond
		// lasts longer than one: still a wait that ends at once.
		{"scheduled just under a millisecond", func() WakeValue {
			return WakeValue{Signal: make(chan struct{}), In: 999 * time.Microsecond, Scheduled: true}
		}, 0, 100 * time.Millisecond},
		{"nil signal polls", func() WakeValue { return WakeValue{} }, 5 * time.Millisecond, 50 * time.Millisecond},
		{"tiny PollInterval", nil, time.Nanosecond, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b Broker
			e := &emptyBroker{wake: tc.wake}
			b = e
			if tc.wake == nil {
				b = struct{ Broker }{e} // not a Waker
			}
			start := time.Now()
			startConsume(t, b, ackAll, ConsumeOptions{PollInterval: tc.poll})
			require.Eventually(t, func() bool { return e.receives.Load() >= 12 }, eventually, tick)
			require.GreaterOrEqual(t, time.Since(start), tc.least)
		})
	}
}

func TestConsumeNotAWakerPolls(t *testing.T) {
	f := newFake()
	startConsume(t, plainBroker{f}, ackAll, ConsumeOptions{PollInterval: 5 * time.Millisecond})
	require.Eventually(t, func() bool { return f.receives.Load() >= 3 }, eventually, tick)
	f.Publish(context.Background(), []byte("x"))
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
}

func TestConsumeExtendsLease(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("slow"))
	var first ReceiptValue
	startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		first = d.Lease.Receipt
		return f.awaitExtends(ctx, 3)
	}, ConsumeOptions{ExtendEvery: 5 * time.Millisecond, ExtendBy: time.Minute})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)

	f.mu.Lock()
	defer f.mu.Unlock()
	require.GreaterOrEqual(t, len(f.extends), 3)
	require.Equal(t, first, f.extends[0].old)
	for i := 1; i < len(f.extends); i++ {
		require.Equal(t, f.extends[i-1].new, f.extends[i].old, "each extension uses the newest receipt")
	}
	require.Equal(t, f.extends[len(f.extends)-1].new, f.settled[0].receipt, "acked with the newest receipt")
	require.NotEqual(t, first, f.settled[0].receipt)
}

// Without ExtendBy, each renewal reaches twice ExtendEvery: one renewal
// may fail, or come late, and the lease still holds until the next.
func TestConsumeExtendsByTwiceExtendEveryByDefault(t *testing.T) {
	f := newFake()
	f.clock.Freeze() // leases of 10 ms must not lapse behind a late renewal
	f.Publish(context.Background(), []byte("slow"))
	const every = 5 * time.Millisecond
	startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		return f.awaitExtends(ctx, 2)
	}, ConsumeOptions{ExtendEvery: every})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)

	f.mu.Lock()
	defer f.mu.Unlock()
	require.GreaterOrEqual(t, len(f.extends), 2)
	for _, x := range f.extends {
		require.Equal(t, 2*every, x.by)
	}
}

func TestConsumeLeaseLostCancelsHandler(t *testing.T) {
	f := newFake()
	log, logs := newTestLogger()
	requireLostLeaseCancelsHandler(t, f, log, func() {
		f.clock.Advance(time.Hour) // the lease lapses behind the handler's back
	})
	require.Contains(t, logs.String(), "lease lost")
}

// A renewal refused with UnknownReceipt, as a broker may answer for a
// receipt that no longer names a live lease (API.md §5.7), is a lost lease
// as LeaseExpired is: the handler's context is cancelled and nothing is
// settled.
func TestConsumeTakesAnUnknownReceiptOnRenewalAsALostLease(t *testing.T) {
	f := newFake()
	requireLostLeaseCancelsHandler(t, f, nil, func() {
		f.mu.Lock()
		clear(f.leases) // the broker no longer knows the receipt
		f.mu.Unlock()
	})
}

// requireLostLeaseCancelsHandler runs Consume over f, renewing leases, with
// one message whose handler waits for its context; once the handler runs,
// lose takes its lease away. The handler's context must then be cancelled,
// and the lease neither settled nor tried.
func requireLostLeaseCancelsHandler(t *testing.T, f *fakeBroker, log *slog.Logger, lose func()) {
	t.Helper()
	f.Publish(context.Background(), []byte("slow"))
	started := make(chan struct{})
	var cancelled atomic.Bool
	r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
		return ctx.Err()
	}, ConsumeOptions{ExtendEvery: 5 * time.Millisecond, ExtendBy: time.Minute, Logger: log})
	select {
	case <-started:
	case <-time.After(eventually):
		t.Fatal("handler did not start")
	}
	lose()
	require.Eventually(t, cancelled.Load, eventually, tick, "the handler's context is cancelled")
	require.ErrorIs(t, r.stop(t), context.Canceled)
	require.Empty(t, f.calls(), "a lost lease is neither acked nor nacked")
	require.Zero(t, f.settles.Load(), "nor is it tried with the dead receipt")
}

// TestConsumeWithoutRenewalsLeavesTheHandlerCtxAtLeaseLapse pins what the
// Handler doc says: without ExtendEvery, the lease's lapse does not end
// the handler's ctx; the handler finishes, Consume tries to ack, the broker
// refuses, and Consume says the message may come again.
func TestConsumeWithoutRenewalsLeavesTheHandlerCtxAtLeaseLapse(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("slow"))
	log, logs := newTestLogger()
	started, gate := make(chan struct{}), make(chan struct{})
	var ended atomic.Bool
	r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		close(started)
		select {
		case <-gate:
		case <-ctx.Done():
			ended.Store(true)
		}
		return nil
	}, ConsumeOptions{Logger: log})
	<-started
	f.clock.Advance(time.Hour) // the lease lapses behind the handler's back
	require.Never(t, ended.Load, 100*time.Millisecond, 5*time.Millisecond, "nothing ends the handler's ctx at the lapse")
	close(gate)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "call=ack") }, eventually, tick)
	require.Contains(t, logs.String(), "the lease was no longer held when the handler finished")
	require.ErrorIs(t, r.stop(t), context.Canceled)
	require.False(t, ended.Load())
	require.Empty(t, f.calls(), "the lapsed lease's ack was refused")
}

func TestConsumeShutdownWaitsForHandlers(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	started, gate := make(chan struct{}), make(chan struct{})
	var sawCancel atomic.Bool
	r := startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		close(started)
		<-gate
		sawCancel.Store(ctx.Err() != nil)
		return nil
	}, ConsumeOptions{})
	<-started
	r.cancel()
	require.Never(t, r.returned, 100*time.Millisecond, 5*time.Millisecond, "Consume waits for the handler")
	close(gate)
	require.ErrorIs(t, r.wait(t), context.Canceled)
	require.True(t, sawCancel.Load(), "the handler's context derives from Consume's")
	require.Equal(t, 1, f.count("ack"), "acked after cancel: settling ignores cancellation")
}

// Extend runs without ctx's cancellation, like the settling calls: a
// handler that finishes its work after ctx ended keeps its lease renewed
// until it returns, and is acked with the newest receipt.
func TestConsumeRenewsTheLeaseOfAHandlerStillRunningAfterCtxEnded(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("slow"))
	started, gate := make(chan struct{}), make(chan struct{})
	r := startConsume(t, f, func(context.Context, DeliveryValue) error {
		close(started)
		<-gate
		return nil
	}, ConsumeOptions{ExtendEvery: 5 * time.Millisecond, ExtendBy: time.Minute})
	<-started
	r.cancel()
	f.mu.Lock()
	renewed := len(f.extends)
	f.mu.Unlock()
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.extends) >= renewed+3
	}, eventually, tick, "renewals go on after ctx ended")
	close(gate)
	require.ErrorIs(t, r.wait(t), context.Canceled)

	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.settled, 1)
	require.Equal(t, "ack", f.settled[0].call)
	require.Equal(t, f.extends[len(f.extends)-1].new, f.settled[0].receipt, "acked with the newest receipt")
}

// TestConsumeAlreadyCancelled: a ctx that has ended lets Consume receive
// nothing, even from a broker that would ignore the ctx (as the fake
// does). A free handler slot is ready as well as ctx.Done, and a select
// over both picks either, so one call could pass by chance: many calls
// cannot.
func TestConsumeAlreadyCancelled(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		require.ErrorIs(t, Consume(ctx, f, ackAll, ConsumeOptions{}), context.Canceled)
	}
	require.Zero(t, f.receives.Load())
	require.Zero(t, f.wakes.Load())
	require.Empty(t, f.calls())
}

func TestConsumeClosedEndsIt(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	r := startConsume(t, f, ackAll, ConsumeOptions{})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	f.Close()
	require.ErrorIs(t, r.wait(t), Closed)
}

func TestConsumeRetriesReceiveErrors(t *testing.T) {
	f := newFake()
	f.receiveErrs = []error{errors.New("disk hiccup")}
	f.Publish(context.Background(), []byte("x"))
	log, logs := newTestLogger()
	startConsume(t, f, ackAll, ConsumeOptions{PollInterval: 5 * time.Millisecond, Logger: log})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	require.Contains(t, logs.String(), "disk hiccup")
}

// A Receive error other than Closed is retried after PollInterval, also
// over a Waker: a broker that keeps failing is not asked again at once.
func TestConsumeWaitsPollIntervalAfterAReceiveError(t *testing.T) {
	f := newFake()
	for range 1000 {
		f.receiveErrs = append(f.receiveErrs, errors.New("disk hiccup"))
	}
	f.Publish(context.Background(), []byte("x"))
	startConsume(t, f, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.Eventually(t, func() bool { return f.receives.Load() >= 1 }, eventually, tick)
	require.Never(t, func() bool { return f.receives.Load() > 1 }, 100*time.Millisecond, 5*time.Millisecond,
		"Receive asked again before PollInterval passed")
	require.Zero(t, f.count("ack"))
}

// failingReceive is a fakeBroker whose Receive always fails with an error
// that neither ends Consume (it is not Closed) nor says the broker stopped:
// a broker that is down for a while.
type failingReceive struct {
	*fakeBroker
	receives atomic.Int64
}

func (b *failingReceive) Receive(context.Context, int) ([]DeliveryValue, error) {
	b.receives.Add(1)
	return nil, errTransient
}

// Consume never busy-spins (API.md §3), not even on a Receive that keeps
// failing with a PollInterval set tiny (a caller after low latency from a
// broker that is not a Waker): the wait after a failure is at least a
// millisecond and doubles with each failure in a row, as an idle wait's
// backoff does. It used to be PollInterval, with no floor: Consume
// called Receive, and logged an error, thousands of times in 100ms.
func TestConsumeBacksOffAReceiveThatKeepsFailing(t *testing.T) {
	b := &failingReceive{fakeBroker: newFake()}
	log, logs := newTestLogger()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := Consume(ctx, b, func(context.Context, DeliveryValue) error { return nil },
		ConsumeOptions{PollInterval: time.Microsecond, Logger: log})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// 1ms doubling makes seven calls in 100ms; 50 leaves room for any
	// machine, and is far from the thousands a spin makes.
	n := b.receives.Load()
	require.LessOrEqual(t, n, int64(50), "Receive calls in 100ms")
	require.GreaterOrEqual(t, n, int64(2), "a failed Receive is retried")
	require.LessOrEqual(t, strings.Count(logs.String(), "receive failed"), int(n), "one log line per failure at most")
}

func TestConsumeSettleErrorsAreNotFatal(t *testing.T) {
	f := newFake()
	f.ackErrs = []error{errors.New("transient"), LeaseExpired}
	for range 3 {
		f.Publish(context.Background(), []byte("x"))
	}
	log, logs := newTestLogger()
	var handled atomic.Int64
	r := startConsume(t, f, func(context.Context, DeliveryValue) error {
		handled.Add(1)
		return nil
	}, ConsumeOptions{Logger: log})
	require.Eventually(t, func() bool { return f.count("ack") == 1 && handled.Load() == 3 }, eventually, tick)
	require.False(t, r.returned())
	text := logs.String()
	require.Contains(t, text, "transient")
	require.Contains(t, text, "the lease was no longer held")
}

// tickExtender is a fakeBroker on a frozen clock that each Extend call
// moves on by the real time since the call before it (the first, by
// every), rounded to the nearest quarter of every: a renewal on a tick
// moves it by a whole every, however late the scheduler ran either
// tick, and one that comes a quarter of every after the call before, by
// that quarter. The Extend calls numbered in fail fail with a transient
// error that says nothing of the lease, as a busy disk's would.
type tickExtender struct {
	*fakeBroker
	every time.Duration
	calls atomic.Int32
	fail  map[int32]bool

	mu   sync.Mutex
	last time.Time // when the call before was made
}

func (f *tickExtender) Extend(ctx context.Context, r ReceiptValue, by time.Duration) (LeaseValue, error) {
	n := f.calls.Add(1)
	f.mu.Lock()
	step := f.every
	if !f.last.IsZero() {
		quarter := f.every / 4
		step = (time.Since(f.last) + quarter/2) / quarter * quarter
	}
	f.last = time.Now()
	f.mu.Unlock()
	f.clock.Advance(step)
	if f.fail[n] {
		return LeaseValue{}, errTransient
	}
	return f.fakeBroker.Extend(ctx, r, by)
}

// With the default ExtendBy (2×ExtendEvery), one renewal that fails for a
// transient reason, after one that succeeded, must not cost the lease:
// the next tick is the very instant the lease of the good renewal lapses
// (a lease lapses at its ExpiresAt), so the failed renewal is retried
// well before it, and the handler goes on under the lease the retry
// made. Retried only at the next tick, the renewal was refused
// LeaseExpired and the handler cancelled, although the failure was
// logged as one that "will retry".
func TestConsumeRetriesAFailedRenewalBeforeTheLeaseLapses(t *testing.T) {
	// The fake clock follows real time between renewals (tickExtender):
	// with every at 100 ms, a retry the scheduler of a loaded machine
	// runs up to 75 ms late still comes before the lease lapses (at 40
	// ms, 30 ms late was enough to fail the test now and then).
	const every = 100 * time.Millisecond
	f := &tickExtender{fakeBroker: newFake(), every: every, fail: map[int32]bool{2: true}}
	f.clock.Freeze()
	f.Publish(context.Background(), []byte("slow"))
	log, logs := newTestLogger()
	result := make(chan error, 1)
	startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		// Four renewals: the good one, the failed one, its retry and
		// the next tick's.
		for ctx.Err() == nil && f.calls.Load() < 4 {
			time.Sleep(time.Millisecond)
		}
		result <- context.Cause(ctx)
		return ctx.Err()
	}, ConsumeOptions{ExtendEvery: every, Logger: log})
	select {
	case cause := <-result:
		require.NoError(t, cause, "the handler was cancelled after %d Extend calls\nlog:\n%s", f.calls.Load(), logs.String())
	case <-time.After(eventually):
		t.Fatal("the handler did not finish")
	}
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	require.Equal(t, 1, strings.Count(logs.String(), "lease extension failed; will retry"), logs.String())
}

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	fields := strings.Fields(string(buf))
	if len(fields) < 2 {
		return ""
	}
	return fields[1]
}

// requireNoConsumerGoroutines fails t unless the goroutines running the
// consumer's code are soon gone. Not at once: a goroutine that told
// Consume it was done (a WaitGroup's Done, a closed channel) is still on
// its way out for a moment, with the consumer's frames on its stack. One
// kept alive (a lease renewed for ever) stays, and fails.
func requireNoConsumerGoroutines(t *testing.T, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return consumerGoroutines() == 0 }, eventually, tick, msgAndArgs...)
}

// consumerGoroutines counts the goroutines running the consumer's code.
func consumerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "broker.(*consumer)") {
			n++
		}
	}
	return n
}

func TestConsumeRunsHandlersOnAtMostConcurrencyGoroutines(t *testing.T) {
	f := newFake()
	const messages, concurrency = 200, 4
	for range messages {
		f.Publish(context.Background(), []byte("x"))
	}
	var mu sync.Mutex
	ids := map[string]int{}
	r := startConsume(t, f, func(context.Context, DeliveryValue) error {
		mu.Lock()
		ids[goroutineID()]++
		mu.Unlock()
		return nil
	}, ConsumeOptions{Batch: 8, Concurrency: concurrency})
	require.Eventually(t, func() bool { return f.count("ack") == messages }, eventually, tick)
	r.cancel()
	require.ErrorIs(t, r.wait(t), context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.NotContains(t, ids, "")
	require.LessOrEqual(t, len(ids), concurrency, "handlers ran on %d goroutines", len(ids))
	total := 0
	for _, n := range ids {
		total += n
	}
	require.Equal(t, messages, total)
}

func TestConsumeLeavesNoGoroutineBehind(t *testing.T) {
	for _, store := range []bool{false, true} {
		var b Broker = newFake()
		if store {
			s, err := Open(t.TempDir(), Options{})
			require.NoError(t, err)
			defer s.Close()
			q, err := s.Queue("q", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
			require.NoError(t, err)
			b = q
		}
		for range 50 {
			_, err := b.Publish(context.Background(), []byte("x"))
			require.NoError(t, err)
		}
		var handled atomic.Int64
		r := startConsume(t, b, func(context.Context, DeliveryValue) error {
			handled.Add(1)
			return nil
		}, ConsumeOptions{Batch: 8, Concurrency: 16})
		require.Eventually(t, func() bool { return handled.Load() == 50 }, eventually, tick)
		require.Positive(t, consumerGoroutines(), "the probe sees a running Consume")
		r.cancel()
		require.ErrorIs(t, r.wait(t), context.Canceled)
		requireNoConsumerGoroutines(t, "store=%v: goroutines left after Consume returned", store)
	}
}

// A handler may end its goroutine (runtime.Goexit, which t.FailNow calls):
// its delivery is neither acked nor nacked, as if the handler had hung up,
// and Consume goes on running the others at full concurrency and returns
// when asked, leaving no goroutine behind.
func TestConsumeSurvivesAHandlerThatEndsItsGoroutine(t *testing.T) {
	for _, extend := range []time.Duration{0, time.Millisecond} {
		f := newFake()
		f.clock.Freeze() // leases of 2 ms must not lapse behind a late ack
		const messages, concurrency = 40, 2
		for range messages {
			f.Publish(context.Background(), []byte("x"))
		}
		var calls atomic.Int64
		r := startConsume(t, f, func(context.Context, DeliveryValue) error {
			if calls.Add(1) <= 3 {
				if extend > 0 {
					time.Sleep(5 * extend) // a renewal or two first
				}
				runtime.Goexit()
			}
			return nil
		}, ConsumeOptions{Batch: 4, Concurrency: concurrency, ExtendEvery: extend})
		require.Eventually(t, func() bool { return f.count("ack") == messages-3 }, eventually, tick, "ExtendEvery %v", extend)
		r.cancel()
		require.ErrorIs(t, r.wait(t), context.Canceled)
		require.Zero(t, f.count("nack"), "a goroutine that ended settled nothing")
		requireNoConsumerGoroutines(t, "ExtendEvery %v: goroutines left after Consume returned (a lease renewed for ever?)", extend)
	}
}

// flakyExtender is a fakeBroker whose first failures Extend calls fail
// with an error that says nothing of the lease (a transient one).
type flakyExtender struct {
	*fakeBroker
	failures atomic.Int32
}

var errTransient = errors.New("transient: the disk is busy")

func (f *flakyExtender) Extend(ctx context.Context, r ReceiptValue, by time.Duration) (LeaseValue, error) {
	if f.failures.Add(-1) >= 0 {
		return LeaseValue{}, errTransient
	}
	return f.fakeBroker.Extend(ctx, r, by)
}

// A renewal that fails for a reason that is not the lease's (neither
// LeaseExpired nor UnknownReceipt, nor a closed or stopped broker) is
// logged and tried again with the same receipt: the handler goes on, its
// context is not cancelled, and it is acked under the newest receipt.
// (When the retry comes, before the lease lapses, is
// TestConsumeRetriesAFailedRenewalBeforeTheLeaseLapses's.)
func TestConsumeRetriesARenewalThatFailedForAnotherReason(t *testing.T) {
	f := &flakyExtender{fakeBroker: newFake()}
	f.clock.Freeze() // leases of 10 ms must not lapse behind a late renewal
	f.failures.Store(2)
	f.Publish(context.Background(), []byte("slow"))
	log, logs := newTestLogger()
	var first ReceiptValue
	cancelled := make(chan error, 1)
	startConsume(t, f, func(ctx context.Context, d DeliveryValue) error {
		first = d.Lease.Receipt
		err := f.awaitExtends(ctx, 2)
		if ctx.Err() != nil {
			cancelled <- context.Cause(ctx)
		}
		return err
	}, ConsumeOptions{ExtendEvery: 5 * time.Millisecond, Logger: log})
	require.Eventually(t, func() bool { return f.count("ack") == 1 }, eventually, tick)
	require.Empty(t, cancelled, "the handler's context was not cancelled")

	require.Equal(t, 2, strings.Count(logs.String(), "lease extension failed; will retry"), logs.String())
	require.Contains(t, logs.String(), errTransient.Error())
	f.mu.Lock()
	defer f.mu.Unlock()
	require.GreaterOrEqual(t, len(f.extends), 2)
	require.Equal(t, first, f.extends[0].old, "the first renewal that succeeded used the receipt the failed ones had")
	require.Equal(t, f.extends[len(f.extends)-1].new, f.settled[0].receipt, "acked with the newest receipt")
}
