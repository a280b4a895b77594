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
// the log (answers and settlements) on their way back, once armed, until
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

// Close's frozen Stats count every Ack, Nack, Reject and replay whose
// record its checkpoint holds, as they count publishes and answers: the
// frozen gauges show what those calls did (a dead letter, a replayed
// message), and the counters must not contradict them, however late the
// calls get back from their waits to count themselves.
func TestClosedStatsCountSettlementsInFlight(t *testing.T) {
	p := parkAnswers(t, 5)
	s, err := broker.Open(t.TempDir(), p.opts)
	require.NoError(t, err)
	q, err := s.Queue("a", broker.PolicyValue{MaxDeliveries: 1, VisibilityTimeout: time.Minute})
	require.NoError(t, err)
	for range 4 {
		_, err := q.Publish(t.Context(), []byte("m"))
		require.NoError(t, err)
	}
	ds, err := q.Receive(t.Context(), 3)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	// The fourth message becomes a dead letter to replay.
	d4, err := q.Receive(t.Context(), 1)
	require.NoError(t, err)
	require.Len(t, d4, 1)
	require.NoError(t, q.Reject(t.Context(), d4[0].Lease.Receipt, broker.DoNotRetry(errors.New("bad"))))

	p.armed.Store(true)
	calls := []func() error{
		func() error { return q.Ack(t.Context(), ds[0].Lease.Receipt) },
		func() error { _, err := q.Nack(t.Context(), ds[1].Lease.Receipt, errors.New("failed")); return err },
		func() error { return q.Reject(t.Context(), ds[2].Lease.Receipt, broker.DoNotRetry(errors.New("bad"))) },
		func() error { return q.ReplayDeadLetter(t.Context(), d4[0].Message.ID) },
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	for range calls {
		select {
		case <-p.parked:
		case <-time.After(time.Minute):
			t.Fatal("a settling call never got back from its wait to count itself")
		}
	}
	// Every call's record is in the log, and it is on its way back to
	// count itself.
	require.NoError(t, s.Close())
	st := q.Stats()
	require.Equal(t, 2, st.DeadLetters, "the closed store holds the dead letters of the Nack and the Reject")
	require.Equal(t, 1, st.Ready, "and the replayed message")
	want := broker.QueueStats{Published: 4, Delivered: 4, Acked: 1, Nacked: 1, Rejected: 2, DeadLettered: 3, Replayed: 1}
	require.Equal(t, want, counters(st), "Close's frozen Stats miss settlements its checkpoint holds")

	p.let()
	wg.Wait()
	for i, err := range errs {
		require.NoErrorf(t, err, "call %d", i)
	}
	require.Equal(t, want, counters(q.Stats()), "settlements returned after Close moved its frozen Stats")
}

// parkingHandler holds, on the caller's goroutine, the first record whose
// message is msg until release is closed: a call that logs after its wait
// for the log and before it counts itself (Nack and Reject log an
// unclassified cause's text there) is held at that point.
type parkingHandler struct {
	msg     string
	parked  chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *parkingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *parkingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *parkingHandler) WithGroup(string) slog.Handler            { return h }
func (h *parkingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() {
			close(h.parked)
			<-h.release
		})
	}
	return nil
}

// A Nack held after its wait, before it counts itself (by the Logger its
// unclassified cause goes to, as any slow Logger holds it), while Close
// runs: the closed queue's Stats count it, with the dead letter it made,
// which its frozen DeadLetters shows.
func TestClosedStatsCountANackHeldByItsLogger(t *testing.T) {
	h := &parkingHandler{msg: "broker: unclassified handler failure", parked: make(chan struct{}), release: make(chan struct{})}
	let := sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(let)
	e := newEnv(t, func(o *broker.Options) {
		o.Logger = slog.New(h)
		broker.ManualMaintenance(o)
	})
	q := e.queue("jobs", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 1})
	mustPublish(t, q, "one")
	d := mustReceiveOne(t, q)

	nackErr := make(chan error, 1)
	go func() {
		_, err := q.Nack(context.Background(), d.Lease.Receipt, errors.New("handler failed"))
		nackErr <- err
	}()
	<-h.parked // the nack is in the log; its call has not counted it yet
	require.NoError(t, e.s.Close())
	e.s = nil
	let()
	require.NoError(t, <-nackErr, "the Nack whose record Close's checkpoint holds")

	st := q.Stats()
	require.Equal(t, 1, st.DeadLetters, "the closed store holds the dead letter the Nack made")
	require.Equal(t, broker.QueueStats{Published: 1, Delivered: 1, Nacked: 1, DeadLettered: 1}, counters(st),
		"Close's frozen Stats count the dead letter in DeadLetters but not the Nack that made it (Nacked, DeadLettered)")
}
