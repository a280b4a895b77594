package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// The memory broker's own tests. Its promises of the port are the
// conformance suite's (conformance_test.go); here are what the suite does
// not cover: its stats, its logger, Close. The differential runs against
// the file-backed store are in memory_differential_test.go.

func newMemory(t *testing.T, clock *fakeClock, mods ...func(*broker.PolicyValue)) *broker.Memory {
	t.Helper()
	m, err := broker.NewMemory(policy(mods...), broker.MemoryOptions{Now: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMemoryRefusesInvalidPolicy(t *testing.T) {
	m, err := broker.NewMemory(broker.PolicyValue{}, broker.MemoryOptions{})
	requireErrorIs(t, err, broker.QueueMisconfigured, "VisibilityTimeout", "MaxDeliveries")
	require.Nil(t, m)
	for _, line := range strings.Split(err.Error(), "\n") {
		require.True(t, strings.HasPrefix(line, "broker: memory queue: policy: "), line)
		require.Equal(t, 1, strings.Count(line, "broker:"), line)
	}
}

func TestMemoryDefaultsToTheRealClock(t *testing.T) {
	m, err := broker.NewMemory(policy(), broker.MemoryOptions{})
	require.NoError(t, err)
	before := time.Now()
	msg, err := m.Publish(ctx(t), nil)
	require.NoError(t, err)
	require.False(t, msg.EnqueuedAt.Before(before), "EnqueuedAt %v is before the call began %v", msg.EnqueuedAt, before)
	require.False(t, msg.EnqueuedAt.After(time.Now()))
}

func TestMemoryStats(t *testing.T) {
	clock := newFakeClock()
	m := newMemory(t, clock, func(p *broker.PolicyValue) { p.Capacity = 4; p.MaxDeliveries = 2; p.RetryDelay = time.Minute })
	for _, p := range []string{"a", "b", "c"} {
		_, err := m.Publish(ctx(t), []byte(p))
		require.NoError(t, err)
	}
	_, err := m.PublishKeyed(ctx(t), "k", []byte("d"))
	require.NoError(t, err)
	_, err = m.PublishKeyed(ctx(t), "k", []byte("d"))
	require.NoError(t, err)
	_, err = m.Publish(ctx(t), []byte("e"))
	requireErrorIs(t, err, broker.QueueFull)
	_, err = m.PublishBatch(ctx(t), [][]byte{[]byte("f"), []byte("g")})
	requireErrorIs(t, err, broker.QueueFull) // a refused batch counts once in Shed

	ds, err := m.Receive(ctx(t), 3)
	require.NoError(t, err)
	require.NoError(t, m.Ack(ctx(t), ds[0].Lease.Receipt))
	_, err = m.Nack(ctx(t), ds[1].Lease.Receipt, nil)
	require.NoError(t, err)
	require.NoError(t, m.Reject(ctx(t), ds[2].Lease.Receipt, nil))
	require.Equal(t, broker.QueueStats{
		Ready: 1, Delayed: 1, DeadLetters: 1, OldestReady: time.Unix(0, clock.Now().UnixNano()), // all enqueued at that instant
		Published: 4, Duplicates: 1, Shed: 2, Delivered: 3, Acked: 1, Nacked: 1, Rejected: 1, DeadLettered: 1,
	}, m.Stats())

	require.NoError(t, m.ReplayDeadLetter(ctx(t), ds[2].Message.ID))
	d, err := m.Receive(ctx(t), 1) // the replayed message, the oldest
	require.NoError(t, err)
	require.Equal(t, ds[2].Message.ID, d[0].Message.ID)
	clock.Set(d[0].Lease.ExpiresAt) // its first lease lapses: ready again
	st := m.Stats()
	require.Equal(t, [4]int{2, 0, 1, 0}, [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters})
	require.Equal(t, int64(1), st.Replayed)

	two, err := m.Receive(ctx(t), 2)
	require.NoError(t, err)
	require.Len(t, two, 2)
	require.Equal(t, 2, two[0].Deliveries, "the replayed message is on its last delivery")
	st = m.Stats()
	require.Equal(t, [4]int{0, 2, 1, 0}, [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters},
		"a lease on the last delivery is Leased until it lapses, not yet a dead letter")
	clock.Set(two[0].Lease.ExpiresAt) // the replayed one's second and last lease lapses too
	st = m.Stats()
	require.Equal(t, 1, st.DeadLetters, "a last lease lapsed is a dead letter from that instant")
	require.Equal(t, int64(2), st.DeadLettered, "and is counted so")
}

func TestMemoryLogsUnclassifiedCauseNotKeepsIt(t *testing.T) {
	var logged bytes.Buffer
	m, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }), broker.MemoryOptions{
		Logger: slog.New(slog.NewTextHandler(&logged, nil)),
	})
	require.NoError(t, err)
	msg, err := m.Publish(ctx(t), []byte("card 4111"))
	require.NoError(t, err)
	ds, err := m.Receive(ctx(t), 1)
	require.NoError(t, err)
	_, err = m.Nack(ctx(t), ds[0].Lease.Receipt, errors.New("declined card 4111"))
	require.NoError(t, err)
	require.Contains(t, logged.String(), "declined card 4111", "the unclassified text goes to the logger")
	require.Contains(t, logged.String(), msg.ID, "keyed by the message ID")
	dls, err := m.DeadLetters(ctx(t), 1)
	require.NoError(t, err)
	require.Equal(t, broker.ReasonUnclassified, dls[0].Reason)
	require.Empty(t, dls[0].Cause, "the text is not kept with the dead letter")
}

func TestMemoryCloseWakesWaiters(t *testing.T) {
	m := newMemory(t, newFakeClock())
	w := m.Wake()
	require.NoError(t, m.Close())
	require.True(t, closed(w.Signal), "a consumer waiting on Wake learns of the Close")
	require.NoError(t, m.Close(), "Close is idempotent")
	_, err := m.Receive(ctx(t), 1)
	requireErrorIs(t, err, broker.Closed)
	st := m.Stats()
	require.Equal(t, [4]int{}, [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters})
}

func TestMemoryConcurrentConsumers(t *testing.T) {
	m := newMemory(t, newFakeClock())
	const n = 400
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 4 {
				_, err := m.Publish(ctx(t), fmt.Appendf(nil, "%d-%d", p, i))
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	seen := map[string]int{}
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(c, m, func(_ context.Context, d broker.DeliveryValue) error {
			mu.Lock()
			defer mu.Unlock()
			seen[string(d.Message.Payload)]++
			if len(seen) == n {
				cancel()
			}
			return nil
		}, broker.ConsumeOptions{Batch: 8, Concurrency: 4})
	}()
	wg.Wait()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Len(t, seen, n)
	for k, c := range seen {
		require.Equal(t, 1, c, "message %s", k)
	}
	require.Equal(t, int64(n), m.Stats().Acked)
}

// A consumer that asks Wake after the queue was closed must not be handed a
// signal nothing will ever close: it would wait for good instead of looking
// again and being told Closed. The file-backed queue hands out its closed
// signal; so must a Memory.
func TestMemoryWakeAfterCloseHandsOutAClosedSignal(t *testing.T) {
	e := newEnv(t)
	fq := e.queue("jobs", policy())
	m := newMemory(t, e.clock)
	e.close()
	require.NoError(t, m.Close())
	require.True(t, closed(fq.Wake().Signal), "the file-backed queue")
	w := m.Wake()
	require.True(t, closed(w.Signal), "Wake after Close: a waiter must look again and find Closed")
	require.False(t, w.Scheduled, "a closed Memory holds nothing")
	_, err := m.Receive(ctx(t), 1)
	requireErrorIs(t, err, broker.Closed)
}

// A Receive refused because its lease deadline would pass year 2262 checks
// that before it observes the clock, as the file-backed queue does (and as
// Memory's doc promises: it observes where the file store does, after the
// checks of its arguments). Had it observed, the lapse of a lease it saw
// would stay seen when the clock then stepped back, and a receipt the file
// store still honours would be LeaseExpired.
func TestMemoryReceiveRefusedForItsDeadlineObservesNothing(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Hour })
	fq := e.queue("jobs", pol)
	m := newMemory(t, e.clock, func(p *broker.PolicyValue) { *p = pol })
	for name, q := range map[string]broker.Broker{"file": fq, "memory": m} {
		start := e.clock.Now()
		_, err := q.Publish(ctx(t), []byte("x"))
		require.NoError(t, err)
		ds, err := q.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)

		e.clock.Set(time.Unix(0, math.MaxInt64-int64(30*time.Minute))) // now + VisibilityTimeout passes 2262
		_, err = q.Receive(ctx(t), 1)
		requireErrorIs(t, err, broker.QueueMisconfigured, "2262")

		e.clock.Set(start.Add(time.Minute)) // back: the lease is live on this clock
		require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt), "%s: a refused Receive observed the lease lapse", name)
		e.clock.Set(start)
	}
}

// A nil *broker.Error handed over as a cause — the classic typed nil of a
// handler that declared `var err *broker.Error` and returned it — is a nil
// cause: Nack and Reject accept it and record an unexplained failure
// instead of panicking on it, on a Memory as on the file-backed queue.
func TestNackAndRejectTakeANilErrorPointerAsNoCause(t *testing.T) {
	for _, b := range memoryAndFile(t, policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })) {
		name, q := b.name, b.q
		var typedNil *broker.Error
		ds := leaseAll(t, q, "nacked", "rejected", "rejected not retryable")
		require.NotPanics(t, func() {
			nv, err := q.Nack(ctx(t), ds[0].Lease.Receipt, typedNil)
			require.NoError(t, err, name)
			require.True(t, nv.DeadLettered, name)
			require.NoError(t, q.Reject(ctx(t), ds[1].Lease.Receipt, typedNil), name)
			require.NoError(t, q.Reject(ctx(t), ds[2].Lease.Receipt, broker.DoNotRetry(typedNil)), name)
		}, name)
		dls, err := q.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		got := map[string]string{}
		for _, dl := range dls {
			require.Empty(t, dl.Cause, "%s: %s", name, dl.Message.Payload)
			require.Zero(t, dl.Code, "%s: %s", name, dl.Message.Payload)
			got[string(dl.Message.Payload)] = dl.Reason
		}
		require.Equal(t, map[string]string{
			"nacked":                 broker.ReasonUnexplained,
			"rejected":               broker.ReasonUnexplained,
			"rejected not retryable": broker.ReasonNotRetryable,
		}, got, name)
	}
}

// brittle is a user's error type whose every method reads through its
// pointer: a nil *brittle panics in each of them.
type brittle struct{ detail string }

func (b *brittle) Error() string  { return b.detail }
func (b *brittle) Reason() string { return b.detail }

// TestACauseWhoseMethodsPanicIsUnclassifiedAndTheQueueGoesOn: a cause's
// methods are the caller's code. One that panics is bad input: Nack and
// Reject record it as a cause that carries nothing (UNCLASSIFIED), log
// that its method panicked, and the queue goes on serving — the file
// queue used to run them with its lock held, so a panic there would have
// left the lock held for good.
func TestACauseWhoseMethodsPanicIsUnclassifiedAndTheQueueGoesOn(t *testing.T) {
	queues := memoryAndFile(t, policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
	for _, b := range queues {
		name, q := b.name, b.q
		var cause *brittle
		ds := leaseAll(t, q, "nacked", "rejected")
		require.NotPanics(t, func() {
			nv, err := q.Nack(ctx(t), ds[0].Lease.Receipt, cause)
			require.NoError(t, err, name)
			require.False(t, nv.DeadLettered, name)
			require.NoError(t, q.Reject(ctx(t), ds[1].Lease.Receipt, cause), name)
		}, name)
		dls, err := q.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Len(t, dls, 1, name)
		require.Equal(t, "rejected", string(dls[0].Message.Payload), name)
		require.Equal(t, broker.ReasonUnclassified, dls[0].Reason, name)
		require.Empty(t, dls[0].Cause, name)
		require.Zero(t, dls[0].Code, name)
		require.Equal(t, 2, strings.Count(b.log.String(), "unclassified handler failure"), "%s: one line for the Nack, one for the Reject:\n%s", name, b.log)
		require.Equal(t, 2, strings.Count(b.log.String(), "a method of the cause (*broker_test.brittle) panicked"), "%s: each line says a method panicked:\n%s", name, b.log)

		// The queue goes on: the nacked message comes back after its delay.
		b.clock.Advance(time.Minute)
		ds, err = q.Receive(ctx(t), 1)
		require.NoError(t, err, name)
		require.Len(t, ds, 1, name)
		require.Equal(t, "nacked", string(ds[0].Message.Payload), name)
		require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt), name)
	}
}

// A namedQueue is a queue of one broker under test, with its clock and
// what its logger wrote.
type namedQueue struct {
	name string
	q    interface {
		broker.Broker
		broker.Rejecter
		broker.DeadLetterReader
	}
	clock *fakeClock
	log   *bytes.Buffer
}

// memoryAndFile returns a Memory and a file-backed queue with policy pol,
// on one fake clock, each logging to a buffer of its own.
func memoryAndFile(t *testing.T, pol broker.PolicyValue) []namedQueue {
	t.Helper()
	var fileLog, memLog bytes.Buffer
	e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(slog.NewTextHandler(&fileLog, nil)) })
	m, err := broker.NewMemory(pol, broker.MemoryOptions{Now: e.clock.Now, Logger: slog.New(slog.NewTextHandler(&memLog, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return []namedQueue{{"memory", m, e.clock, &memLog}, {"file", e.queue("jobs", pol), e.clock, &fileLog}}
}

// leaseAll publishes payloads to q and leases them all.
func leaseAll(t *testing.T, q broker.Broker, payloads ...string) []broker.DeliveryValue {
	t.Helper()
	for _, p := range payloads {
		_, err := q.Publish(ctx(t), []byte(p))
		require.NoError(t, err)
	}
	ds, err := q.Receive(ctx(t), len(payloads))
	require.NoError(t, err)
	require.Len(t, ds, len(payloads))
	return ds
}

// TestAMemoryLetsGoOfWhatItNoLongerHolds checks the retention promise of
// Memory: a payload is kept until its message is acknowledged or its dead
// letter deleted, and not after. A deleted dead letter that stayed in the
// queue's map behaved the same through every call, and kept its payload
// for the life of the queue.
func TestAMemoryLetsGoOfWhatItNoLongerHolds(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, newFakeClock())
	acked, err := m.Publish(ctx, []byte("acked"))
	require.NoError(t, err)
	dead, err := m.Publish(ctx, []byte("dead"))
	require.NoError(t, err)
	ds, err := m.Receive(ctx, 2)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.Equal(t, []string{acked.ID, dead.ID}, []string{ds[0].Message.ID, ds[1].Message.ID})
	require.NoError(t, m.Ack(ctx, ds[0].Lease.Receipt))
	require.NoError(t, m.Reject(ctx, ds[1].Lease.Receipt, nil))
	require.Equal(t, 1, broker.MemoryHeld(m), "the dead letter is held, the acknowledged message is not")

	require.NoError(t, m.DeleteDeadLetter(ctx, dead.ID))
	require.Zero(t, broker.MemoryHeld(m), "a deleted dead letter is let go of, payload and all")
	require.ErrorIs(t, m.DeleteDeadLetter(ctx, dead.ID), broker.DeadLetterNotFound)
}

// A message published with an empty payload comes back from a Memory as it
// does from the file-backed queue: an empty, non-nil Payload, from Receive
// and from DeadLetters alike. Nil means something in this API (a
// duplicate's Payload from PublishKeyed), and Memory promises the Store's
// semantics, so a test written against a Memory must get the answer the
// Store gives.
func TestMemoryHandsOutAnEmptyPayloadAsTheStoreDoes(t *testing.T) {
	e := newEnv(t)
	qs := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	got := map[string][2][]byte{}
	for _, name := range []string{"store", "memory"} {
		q := qs[name]
		_, err := q.Publish(ctx(t), []byte{})
		require.NoError(t, err, name)
		ds, err := q.Receive(ctx(t), 1)
		require.NoError(t, err, name)
		require.Len(t, ds, 1, name)
		require.NoError(t, q.Reject(ctx(t), ds[0].Lease.Receipt, nil), name)
		dls, err := q.DeadLetters(ctx(t), 1)
		require.NoError(t, err, name)
		require.Len(t, dls, 1, name)
		got[name] = [2][]byte{ds[0].Message.Payload, dls[0].Message.Payload}
	}
	require.NotNil(t, got["store"][0], "the store's Receive: an empty, non-nil payload")
	require.NotNil(t, got["store"][1], "the store's DeadLetters: an empty, non-nil payload")
	require.Equal(t, got["store"][0], got["memory"][0], "Receive: the Memory hands out %#v where the store hands out %#v", got["memory"][0], got["store"][0])
	require.Equal(t, got["store"][1], got["memory"][1], "DeadLetters: the Memory hands out %#v where the store hands out %#v", got["memory"][1], got["store"][1])
}

// panickyReason is a caller's error whose Reason method panics while its
// Error method works.
type panickyReason struct{}

func (panickyReason) Error() string  { return "lookup failed" }
func (panickyReason) Reason() string { panic("reason table not loaded") }

// A cause whose Reason method panics (its Error method works) is recorded
// UNCLASSIFIED, and the logger is told that the method panicked and with
// what, beside the cause's text, by the Memory and the Store alike.
func TestALoggerIsToldThatACauseMethodPanicked(t *testing.T) {
	var fileLog, memLog bytes.Buffer
	e := newEnv(t, func(o *broker.Options) { o.Logger = slog.New(slog.NewTextHandler(&fileLog, nil)) })
	mem, err := broker.NewMemory(policy(), broker.MemoryOptions{Now: e.clock.Now, Logger: slog.New(slog.NewTextHandler(&memLog, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })
	for _, tc := range []struct {
		name string
		b    fullBroker
		log  *bytes.Buffer
	}{{"memory", mem, &memLog}, {"store", e.queue("jobs", policy()), &fileLog}} {
		name := tc.name
		_, err := tc.b.Publish(ctx(t), []byte("x"))
		require.NoError(t, err)
		ds, err := tc.b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.NoError(t, tc.b.Reject(ctx(t), ds[0].Lease.Receipt, panickyReason{}), name)
		dls, err := tc.b.DeadLetters(ctx(t), 1)
		require.NoError(t, err)
		require.Equal(t, broker.ReasonUnclassified, dls[0].Reason, name)
		for _, want := range []string{"a method of the cause (broker_test.panickyReason) panicked", "reason table not loaded", "lookup failed"} {
			require.Contains(t, tc.log.String(), want, "%s: the log line", name)
		}
	}
}
