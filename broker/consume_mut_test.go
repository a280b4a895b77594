package broker

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// TestConsumeStopGraceEndsHandlersWithTheCauseCtxEndedWith: when the
// grace is over, a running handler's context ends with the cause
// Consume's ctx ended with (a shutdown says why), not a bare Canceled.
func TestConsumeStopGraceEndsHandlersWithTheCauseCtxEndedWith(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	shutdown := errors.New("shutdown: SIGTERM")
	parent, end := context.WithCancelCause(context.Background())
	defer end(nil)
	started := make(chan struct{})
	causes := make(chan error, 1)
	r := startConsumeCtx(t, parent, f, untilCancelled(started, causes), ConsumeOptions{StopGrace: time.Millisecond})
	<-started
	end(shutdown)
	require.ErrorIs(t, r.wait(t), context.Canceled)
	require.ErrorIs(t, <-causes, shutdown, "the handler's context says why Consume stopped")
	calls := f.calls()
	require.Len(t, calls, 1)
	require.Equal(t, "nack", calls[0].call)
	reason, _, _, _ := classify(calls[0].cause)
	require.Equal(t, ReasonConsumerStopped, reason)
}

// TestConsumeLogsNothingWhenNothingGoesWrong: every record Consume logs
// is a failure or a broken promise; a run in which every Receive returns
// what was asked for and every handler succeeds logs nothing, at any level.
func TestConsumeLogsNothingWhenNothingGoesWrong(t *testing.T) {
	f := newFake()
	for range 8 {
		f.Publish(context.Background(), []byte("x"))
	}
	log, logs := newTestLogger()
	g := newGated()
	r := startConsume(t, f, g.handle, ConsumeOptions{Batch: 2, Concurrency: 2, Logger: log})
	require.Eventually(t, func() bool { return g.running.Load() == 2 }, eventually, tick)
	close(g.gate)
	require.Eventually(t, func() bool { return f.count("ack") == 8 }, eventually, tick)
	require.ErrorIs(t, r.stop(t), context.Canceled)
	f.mu.Lock()
	require.Equal(t, 2, f.receiveLen[0], "a Receive returned all it was asked for")
	f.mu.Unlock()
	require.Empty(t, logs.String())
}

// TestConsumeAWaitThatLastedEndsTheBackoff: the backoff grows only over
// idle waits that ended at once in a row; a wait that lasted (here a
// signal closed some milliseconds in) starts it again from nothing, so
// that the next empty Receive is retried at once, not after the longest
// backoff reached so far.
func TestConsumeAWaitThatLastedEndsTheBackoff(t *testing.T) {
	c, err := newConsumer(&emptyBroker{}, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.NoError(t, err)
	c.streak = 8 // eight waits in a row ended at once: the next floor is 256ms
	signal, done := make(chan struct{}), make(chan struct{})
	// Closed 5ms after idle began waiting on it, not 5ms after this line:
	// on a loaded machine a timer started here can fire before idle first
	// looks at the signal, which it then finds closed already (a wait that
	// ended at once).
	go func() {
		for !blockedIn("broker.(*consumer).idle(", "[select") {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
		time.Sleep(5 * time.Millisecond)
		close(signal)
	}()
	require.True(t, c.idle(context.Background(), WakeValue{Signal: signal}, time.Now()))
	close(done)
	require.Zero(t, c.streak, "a wait that lasted is not one that ended at once")
	require.Zero(t, c.backoff())
}

// TestConsumeARenewalThatFindsTheBrokerClosedEndsTheHandler: over a
// broker that cannot say it closed without a call, with every slot busy,
// the lease renewal is the call that finds the close: it ends the
// handler's context with the close as its cause, settles nothing, and
// renews no more; Consume then returns Closed.
func TestConsumeARenewalThatFindsTheBrokerClosedEndsTheHandler(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	log, logs := newTestLogger()
	started, causes := make(chan struct{}), make(chan error, 1)
	r := startConsume(t, f, untilCancelled(started, causes), ConsumeOptions{ExtendEvery: 5 * time.Millisecond, ExtendBy: time.Minute, Logger: log})
	<-started
	f.Close()
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, Closed)
	case <-time.After(eventually):
		t.Fatal("the handler's context did not end when a renewal found the broker closed")
	}
	require.ErrorIs(t, r.wait(t), Closed)
	require.Zero(t, f.settles.Load(), "nothing is settled on a closed broker")
	require.Equal(t, 1, strings.Count(logs.String(), "the broker closed or stopped while the handler ran"))
	require.NotContains(t, logs.String(), "will retry")
}

// TestConsumeRefusesAnExtendEveryAtMaxDeadlineOffsetForWhatItIs: the
// refusal names the option the caller set, not an ExtendBy the caller
// never gave (the default it would imply is refused as well).
func TestConsumeRefusesAnExtendEveryAtMaxDeadlineOffsetForWhatItIs(t *testing.T) {
	err := Consume(context.Background(), newFake(), ackAll, ConsumeOptions{ExtendEvery: MaxDeadlineOffset})
	require.ErrorIs(t, err, QueueMisconfigured)
	require.ErrorContains(t, err, "must be below MaxDeadlineOffset")
	require.NotContains(t, err.Error(), "ExtendBy")
}

// TestConsumeSaysWhenItCannotRenewLeases: ExtendEvery over a broker that
// cannot extend leases is accepted, but said, since the handlers' leases
// will lapse however long they run.
func TestConsumeSaysWhenItCannotRenewLeases(t *testing.T) {
	f := newFake()
	log, logs := newTestLogger()
	r := startConsume(t, plainBroker{f}, ackAll, ConsumeOptions{ExtendEvery: time.Second, PollInterval: time.Hour, Logger: log})
	require.ErrorIs(t, r.stop(t), context.Canceled)
	require.Contains(t, logs.String(), "the broker cannot extend leases")
}

// TestConsumeReturnsAtOnceWhenItsOwnReceiveStopsTheStore: a Receive whose
// lease commit fails stops the store for good; Consume returns that
// failure at once, rather than log it and retry after PollInterval.
func TestConsumeReturnsAtOnceWhenItsOwnReceiveStopsTheStore(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	s, err := Open(t.TempDir(), Options{SegmentBytes: 4 << 20, FS: ffs})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = q.Publish(context.Background(), []byte("x"))
	require.NoError(t, err)
	// The next write to the first segment (its file keeps the name it was
	// made under) is Consume's first Receive's lease commit, and fails.
	// Not counted among all writes: the store's own (a reservation mark,
	// the next segment's zero-fill) come when they will.
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, NameContains: "0000000001.seg", Err: syscall.ENOSPC})
	log, logs := newTestLogger()
	r := startConsume(t, q, ackAll, ConsumeOptions{PollInterval: time.Hour, Logger: log})
	err = r.wait(t)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.False(t, errors.Is(err, Closed))
	require.NotContains(t, logs.String(), "retrying")
}

// TestConsumeADeliveryEndsTheBackoff: a Receive that found work ends the
// streak of idle waits that ended at once; the next empty Receive starts
// the backoff again from nothing.
func TestConsumeADeliveryEndsTheBackoff(t *testing.T) {
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &cancellingReceive{fakeBroker: f, after: 1, cancel: cancel}
	c, err := newConsumer(b, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.NoError(t, err)
	c.settleCtx, c.handlerCtx, c.stopCtx = context.Background(), ctx, ctx
	c.streak = 8 // eight idle waits in a row ended at once before the message came
	require.ErrorIs(t, c.loop(ctx), context.Canceled)
	c.inflight.Wait()
	close(c.work)
	c.workers.Wait()
	require.Equal(t, 1, f.count("ack"))
	require.Zero(t, c.streak)
}

// cancellingReceive is the fake, whose Receive calls after the first
// `after` cancel a context and find nothing, as a Receive that ctx ended
// during finds.
type cancellingReceive struct {
	*fakeBroker
	after  int
	calls  int
	cancel context.CancelFunc
}

func (b *cancellingReceive) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	if b.calls++; b.calls > b.after {
		b.cancel()
		return nil, ctx.Err()
	}
	return b.fakeBroker.Receive(ctx, max)
}

// TestConsumeLogsNothingWhenItsCtxEndsDuringAReceive: a Receive refused
// because ctx ended while Consume was calling it is how Consume stops,
// not a failure to log and retry.
func TestConsumeLogsNothingWhenItsCtxEndsDuringAReceive(t *testing.T) {
	m, err := NewMemory(PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}, MemoryOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log, logs := newTestLogger()
	// Wake runs between the loop's look at ctx and its Receive.
	b := cancellingWake{Memory: m, cancel: cancel}
	require.ErrorIs(t, Consume(ctx, b, ackAll, ConsumeOptions{Logger: log}), context.Canceled)
	require.Empty(t, logs.String())
}

// cancellingWake is a Memory whose Wake cancels a context.
type cancellingWake struct {
	*Memory
	cancel context.CancelFunc
}

func (b cancellingWake) Wake() WakeValue {
	b.cancel()
	return b.Memory.Wake()
}

// namedBroker is a broker whose Name is what the test says.
type namedBroker struct {
	plainBroker
	name func() string
}

func (n namedBroker) Name() string { return n.name() }

// Consume names the queue in its records only when the broker has a
// name: a broker without a Name method, or whose Name panics, gives no
// queue attribute, and Consume runs as it would without it.
func TestQueueNameForConsumesLog(t *testing.T) {
	require.Equal(t, "", queueName(plainBroker{}))
	require.Equal(t, "orders", queueName(namedBroker{name: func() string { return "orders" }}))
	require.Equal(t, "", queueName(namedBroker{name: func() string { panic("no name") }}))

	log, buf := newTestLogger()
	c, err := newConsumer(namedBroker{name: func() string { panic("no name") }}, ackAll, ConsumeOptions{Logger: log})
	require.NoError(t, err)
	c.log.Warn("probe")
	require.NotContains(t, buf.String(), "queue=")
}
