package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// parked holds the calls that count themselves once their records are in
// the log (duplicate and shed publishes) on their way back, once armed, until
// let: each reports on parked as it stops there.
type parked struct {
	opts   broker.Options
	armed  atomic.Bool
	parked chan struct{}
	let    func()
}

// parkAnswers returns Options (manual maintenance) that park up to n such
// calls; a failure of the test leaves none parked.
func parkAnswers(t *testing.T, n int) *parked {
	release := make(chan struct{})
	p := &parked{parked: make(chan struct{}, n), let: sync.OnceFunc(func() { close(release) })}
	t.Cleanup(p.let)
	broker.ManualMaintenance(&p.opts)
	broker.AnswerWaited(func() {
		if p.armed.Load() {
			p.parked <- struct{}{}
			<-release
		}
	})(&p.opts)
	return p
}

// Close's frozen Stats count every duplicate and shed publish the queue
// answered before Close, as they count every publish its checkpoint
// holds: however late such a call gets back from its wait to count
// itself, and even when it returns after Close. Nor does its return
// after Close move the frozen figures.
func TestClosedStatsCountAnswersInFlight(t *testing.T) {
	p := parkAnswers(t, 3)
	s, err := broker.Open(t.TempDir(), p.opts)
	require.NoError(t, err)
	q, err := s.Queue("a", broker.PolicyValue{MaxDeliveries: 3, VisibilityTimeout: time.Minute, Capacity: 1})
	require.NoError(t, err)
	_, err = q.PublishKeyed(t.Context(), "k", []byte("original"))
	require.NoError(t, err)

	p.armed.Store(true)
	calls := []func() error{
		func() error { _, err := q.PublishKeyed(t.Context(), "k", []byte("again")); return err },
		func() error { _, err := q.Publish(t.Context(), []byte("no room")); return err },
		func() error { _, err := q.PublishKeyed(t.Context(), "other", []byte("no room")); return err },
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	for range calls {
		<-p.parked
	}
	// Every call has its answer and is on its way back to count it.
	require.NoError(t, s.Close())
	want := broker.QueueStats{Published: 1, Duplicates: 1, Shed: 2}
	require.Equal(t, want, counters(q.Stats()), "Close's frozen Stats miss answers given before Close")

	p.let()
	wg.Wait()
	require.NoError(t, errs[0], "the duplicate")
	for i, err := range errs[1:] {
		require.Truef(t, errors.Is(err, broker.QueueFull), "publish %d: want QueueFull, got %v", i+1, err)
	}
	require.Equal(t, want, counters(q.Stats()), "answers returned after Close moved its frozen Stats")
}

// parkingHandler holds, on the caller's goroutine, every record whose
// message is msg until release is closed, reporting each on parked: a
// call that logs after its wait for the log (Nack and Reject log an
// unclassified cause's text there) is held at that point.
type parkingHandler struct {
	msg     string
	parked  chan struct{}
	release chan struct{}
}

func (h *parkingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *parkingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *parkingHandler) WithGroup(string) slog.Handler            { return h }
func (h *parkingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.parked <- struct{}{}
		<-h.release
	}
	return nil
}

// Close's frozen Stats count every settlement whose record its checkpoint
// holds, as the frozen gauges show it, however late its call gets back
// from its wait: here a Nack and a Reject held after their waits (by the
// Logger their unclassified causes go to, as any slow Logger holds them)
// while Close runs. Counted after the wait, they were missed: the closed
// queue showed dead letters that DeadLettered did not count, for good.
// Ack, Nack, Reject and replay count as the index applies them, under the
// queue's lock (see settledLocked), before any wait.
func TestClosedStatsCountSettlementsHeldOnTheirWayBack(t *testing.T) {
	h := &parkingHandler{msg: "broker: unclassified handler failure", parked: make(chan struct{}, 2), release: make(chan struct{})}
	let := sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(let)
	e := newEnv(t, func(o *broker.Options) {
		o.Logger = slog.New(h)
		broker.ManualMaintenance(o)
	})
	q := e.queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	mustPublish(t, q, "one")
	mustPublish(t, q, "two")
	ds, err := q.Receive(t.Context(), 2)
	require.NoError(t, err)
	require.Len(t, ds, 2)

	errs := make(chan error, 2)
	go func() {
		_, err := q.Nack(context.Background(), ds[0].Lease.Receipt, errors.New("handler failed"))
		errs <- err
	}()
	go func() { errs <- q.Reject(context.Background(), ds[1].Lease.Receipt, errors.New("handler failed")) }()
	<-h.parked // both are in the log; neither call has returned
	<-h.parked
	require.NoError(t, e.s.Close())
	e.s = nil
	let()
	require.NoError(t, <-errs, "a settlement whose record Close's checkpoint holds")
	require.NoError(t, <-errs, "a settlement whose record Close's checkpoint holds")

	st := q.Stats()
	require.Equal(t, 2, st.DeadLetters, "the closed store holds the dead letters of the Nack and the Reject")
	require.Equal(t, broker.QueueStats{Published: 2, Delivered: 2, Nacked: 1, Rejected: 1, DeadLettered: 2}, counters(st),
		"Close's frozen Stats count the dead letters in DeadLetters but not the calls that made them")
}
