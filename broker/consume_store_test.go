package broker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Over a *Queue, Consume carries acks in the commit of its next Receive.
// Every success must still be acked: in a busy queue, when the queue goes
// idle, and when ctx ends.
func TestConsumeOverStoreAcksEverySuccess(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const busy = 500
	for i := 0; i < busy; i++ {
		_, err := q.Publish(ctx, []byte{byte(i)})
		require.NoError(t, err)
	}
	var handled atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, q, func(context.Context, DeliveryValue) error {
			handled.Add(1)
			return nil
		}, ConsumeOptions{Batch: 16, Concurrency: 8})
	}()
	require.Eventually(t, func() bool { return q.Stats().Acked == busy }, 10*time.Second, time.Millisecond,
		"every message of a busy queue is acked")

	// The queue is idle now: one more message, handled, must be acked
	// without any later message to carry its ack.
	_, err := q.Publish(ctx, []byte("lone"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return q.Stats().Acked == busy+1 }, 10*time.Second, time.Millisecond,
		"a lone message's ack does not wait for another message")

	// Messages in flight when ctx ends are acked before Consume returns.
	for i := 0; i < 100; i++ {
		_, err := q.Publish(ctx, []byte{byte(i)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return handled.Load() > busy+1 }, 10*time.Second, time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return 10 s after ctx ended: it waits for an ack it never sends")
	}
	st := q.Stats()
	require.Equal(t, handled.Load(), st.Acked, "every handled message is acked when Consume returns")
	require.Zero(t, st.Leased)
	require.Equal(t, int64(busy+101)-st.Acked, int64(st.Ready))
}

// TestConsumeOnAnIdleQueueEndsWhenTheStoreCloses: "Closed ... ends Consume
// when Receive returns it" — a Consume waiting on an empty queue's wake
// signal is woken by Close, looks again and returns Closed; a Wake after
// the Close hands out a signal already closed.
func TestConsumeOnAnIdleQueueEndsWhenTheStoreCloses(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- Consume(context.Background(), q, func(context.Context, DeliveryValue) error { return nil }, ConsumeOptions{})
	}()
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.signalOut // the consumer took the signal and waits on it
	}, 10*time.Second, time.Millisecond)

	require.NoError(t, s.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, Closed)
	case <-time.After(10 * time.Second):
		t.Fatal("Consume still waits on the queue 10 s after its store closed")
	}
	select {
	case <-q.Wake().Signal:
	default:
		t.Fatal("Wake after Close handed out a signal that nothing will close")
	}
}

// deadLetterWatch is a queue whose dead-letter calls are counted.
type deadLetterWatch struct {
	*Queue
	replays, deletes atomic.Int32
}

func (w *deadLetterWatch) ReplayDeadLetter(ctx context.Context, id string) error {
	w.replays.Add(1)
	return w.Queue.ReplayDeadLetter(ctx, id)
}

func (w *deadLetterWatch) DeleteDeadLetter(ctx context.Context, id string) error {
	w.deletes.Add(1)
	return w.Queue.DeleteDeadLetter(ctx, id)
}

// Deleting a dead letter destroys a message without its consumer's
// acknowledgement, and walbroker never does it on its own: Consume
// dead-letters what fails for good and leaves the dead letters as
// evidence, replaying and deleting none of them.
func TestConsumeNeverReplaysOrDeletesADeadLetter(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	w := &deadLetterWatch{Queue: q}
	for _, p := range []string{"fails", "not retryable", "panics", "succeeds"} {
		_, err := q.Publish(t.Context(), []byte(p))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, w, func(_ context.Context, d DeliveryValue) error {
			switch string(d.Message.Payload) {
			case "fails":
				return errors.New("failed")
			case "not retryable":
				return DoNotRetry(errors.New("failed for good"))
			case "panics":
				panic("handler bug")
			}
			return nil
		}, ConsumeOptions{Batch: 4, Concurrency: 4, PollInterval: time.Millisecond})
	}()
	require.Eventually(t, func() bool {
		st := q.Stats()
		return st.Nacked == 2 && st.Rejected == 1 && st.Acked == 1
	}, 30*time.Second, time.Millisecond, "every delivery settled")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Zero(t, w.replays.Load(), "Consume replayed a dead letter")
	require.Zero(t, w.deletes.Load(), "Consume deleted a dead letter")
	dls, err := q.DeadLetters(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, dls, 3, "every dead letter is still there")
}

// failingAfterFirstReceive is a *Queue whose Receives after the first fail
// (having committed the acks they carry, which keeps them true to the
// queue): Consume then waits out its PollInterval, watching no handler.
type failingAfterFirstReceive struct {
	*Queue
	receives atomic.Int32
}

func (f *failingAfterFirstReceive) receiveAcking(ctx context.Context, max int, receipts []ReceiptValue) ([]DeliveryValue, []error, error) {
	if max == 0 || f.receives.Add(1) == 1 {
		return f.Queue.receiveAcking(ctx, max, receipts)
	}
	_, errs, err := f.Queue.receiveAcking(ctx, 0, receipts)
	if err == nil {
		err = errors.New("disk hiccup")
	}
	return nil, errs, err
}

// When ctx ends, every handler that succeeded is acked before Consume
// returns: one whose ack waits for a Receive that will not come (the loop
// was waiting out a Receive error), and one that finishes after the loop
// stopped, when no Receive can carry its ack.
func TestConsumeOverStoreAcksTheSuccessesPendingWhenCtxEnds(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}, "before", "after")

	gates := map[string]chan struct{}{"before": make(chan struct{}), "after": make(chan struct{})}
	var started sync.WaitGroup
	started.Add(2)
	w := &failingAfterFirstReceive{Queue: q}
	r := startConsume(t, w, func(_ context.Context, d DeliveryValue) error {
		started.Done()
		<-gates[string(d.Message.Payload)]
		return nil
	}, ConsumeOptions{Batch: 2, Concurrency: 3, PollInterval: time.Hour})
	started.Wait()
	require.Eventually(t, func() bool { return w.receives.Load() >= 2 }, eventually, tick, "the loop waits out a Receive error")

	close(gates["before"])
	require.Never(t, r.returned, 100*time.Millisecond, 5*time.Millisecond, "Consume runs until ctx ends")
	r.cancel()
	require.Never(t, r.returned, 100*time.Millisecond, 5*time.Millisecond, "Consume waits for the running handler")
	close(gates["after"])
	require.ErrorIs(t, r.wait(t), context.Canceled)

	st := q.Stats()
	require.EqualValues(t, 2, st.Acked, "both successes are acked")
	require.Zero(t, st.Leased)
	require.Zero(t, st.Ready)
}

// A handler that finishes while the queue is idle is acked at once: no
// Receive is coming to carry its ack, and the loop is waiting on the
// queue, which has nothing for it for an hour (the handler's own lease).
func TestConsumeOverAnIdleStoreAcksAHandlerThatFinishesLate(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3}, "slow")
	started, gate := make(chan struct{}), make(chan struct{})
	startConsume(t, q, func(context.Context, DeliveryValue) error {
		close(started)
		<-gate
		return nil
	}, ConsumeOptions{Concurrency: 2, PollInterval: time.Hour})
	<-started
	require.Never(t, func() bool { return q.Stats().Acked > 0 }, 100*time.Millisecond, 5*time.Millisecond, "acked before the handler returned")
	close(gate)
	require.Eventually(t, func() bool { return q.Stats().Acked == 1 }, 10*time.Second, time.Millisecond,
		"the ack waits for a Receive that is not coming")
}

// storeQueue opens a store in a fresh directory, closed at cleanup, and
// its queue "jobs" under p, holding one message per payload.
func storeQueue(t *testing.T, p PolicyValue, payloads ...string) *Queue {
	t.Helper()
	s, err := Open(t.TempDir(), Options{SegmentBytes: 4 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	q, err := s.Queue("jobs", p)
	require.NoError(t, err)
	for _, payload := range payloads {
		_, err := q.Publish(context.Background(), []byte(payload))
		require.NoError(t, err)
	}
	return q
}

// A graceful stop over a *Queue: the handlers running when ctx ends
// finish within StopGrace and their messages are acked, none nacked, none
// left leased; what was not yet received stays ready for the next
// consumer, its delivery count untouched.
func TestConsumeOverStoreStopGraceAcksWhatRunningHandlersFinish(t *testing.T) {
	q := storeQueue(t, PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	for i := range 10 {
		_, err := q.Publish(context.Background(), []byte{byte(i)})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var running sync.WaitGroup
	running.Add(4)
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, q, func(hctx context.Context, d DeliveryValue) error {
			running.Done()
			<-release
			return hctx.Err()
		}, ConsumeOptions{Batch: 4, Concurrency: 4, StopGrace: time.Hour})
	}()
	running.Wait()
	cancel()
	close(release)
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return 10 s after its handlers finished")
	}
	st := q.Stats()
	require.Equal(t, int64(4), st.Acked)
	require.Zero(t, st.Nacked, "MaxDeliveries 1: a nack would have dead-lettered")
	require.Zero(t, st.DeadLetters+st.Leased)
	require.Equal(t, 6, st.Ready)
}

// leasesRefusedAfterFirst is a *Queue whose Receive, after the first,
// refuses to lease (it still makes the acks it carries), as a store does
// whose clock reached the end of what it can record.
type leasesRefusedAfterFirst struct {
	*Queue
	calls   atomic.Int32
	refused chan struct{} // one send per refusal, if there is room
}

func (f *leasesRefusedAfterFirst) receiveAcking(ctx context.Context, max int, receipts []ReceiptValue) ([]DeliveryValue, []error, error) {
	if max > 0 && f.calls.Add(1) > 1 {
		_, errs, _ := f.Queue.receiveAcking(ctx, 0, receipts)
		select {
		case f.refused <- struct{}{}:
		default:
		}
		return nil, errs, errors.New("no lease can be recorded (test)")
	}
	return f.Queue.receiveAcking(ctx, max, receipts)
}

// TestConsumeAcksWhileItWaitsToRetryAReceive: a handler that finishes
// while Consume waits out PollInterval after a failed Receive is acked at
// once, not when the wait ends.
func TestConsumeAcksWhileItWaitsToRetryAReceive(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = q.Publish(context.Background(), []byte("x"))
	require.NoError(t, err)
	b := &leasesRefusedAfterFirst{Queue: q, refused: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, b, func(context.Context, DeliveryValue) error {
			<-release
			return nil
		}, ConsumeOptions{Concurrency: 2, PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	}()
	<-b.refused // Consume now waits an hour to Receive again
	close(release)
	require.Eventually(t, func() bool { return q.Stats().Acked == 1 }, 10*time.Second, 5*time.Millisecond,
		"the ack waited for the next Receive, an hour away")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
