package fuzz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// The Consume operation of FuzzBrokerDifferential: broker.Consume over one
// of the store's queues, with a handler whose every answer the input
// chooses, and the model's prediction of how Consume settles each delivery.
//
// Consume's waits run on real time, the store on the run's fake clock,
// which stands still while Consume runs. So the operation never lets
// Consume wait for a message: it runs only when the model says that R > 0
// messages are receivable, and the handler cancels Consume's ctx itself,
// on its k-th call, k <= R. While the clock stands still nothing becomes
// receivable (a Nack sets a positive retry delay; the operation is skipped
// under a policy whose retry delay is zero with deliveries left), so the
// messages handed out are the first of the receivable ones, in the order
// Receive hands them out, whatever the batching: the handler sees exactly
// those, one at a time (Concurrency 1). What is left to timing is how many
// of them Consume leased when ctx ended, and the operation chooses options
// that fix it:
//
//   - No Prefetch (Batch 1 to 4, which then changes nothing: Consume never
//     asks for more than there are free handler slots). The loop receives
//     once the slot is free, that is once the handler returned and its
//     Nack or Reject did; the handler's ack waits for that Receive, which
//     carries it in the commit of its own lease. The k-th handler cancels
//     ctx before it returns, and the loop checks ctx before it receives:
//     exactly k messages are leased, settled in the handler's order, the
//     last ack on its own.
//   - Prefetch P (1 to 4) and Batch P+1: the first Receive fills every
//     slot, leasing min(R, P+1) messages; the handler runs the first, the
//     others are held. When R <= P+1 that Receive took all there was, and
//     k is any of them; when R > P+1 the loop, its slots full, waits for
//     the first handler to return before receiving again, so k is 1. The
//     held deliveries the handler never started are nacked with the reason
//     CONSUMER_STOPPED (ConsumeOptions.Prefetch): they spend a delivery,
//     wait out their retry delay or, on their last delivery, die. Acks
//     then wait for a later Receive, and the held deliveries' Nacks race
//     the last handler's settling call: the calls do not follow the
//     handler's order, and the states a power loss under SyncPublish may
//     leave are not one line of states (see lost_test.go). Under
//     SyncPublish the operation therefore runs without Prefetch.
//
// Each call of the handler returns nil (an Ack), one of causes' errors (a
// Nack with it; a Reject for a DoNotRetry one), context.Canceled (a Nack
// with it; on the k-th call, when ctx has ended, wrapped in a cause whose
// reason is CONSUMER_STOPPED), or panics (a Nack, UNCLASSIFIED). Consume
// must return context.Canceled.

// consumeWatchdog is how long, on real time, Consume may take to reach the
// handler's k-th call, and then to return.
const consumeWatchdog = 30 * time.Second

// The handler's answers: causes' (whose first, nil, is an Ack), then these.
const (
	answerPanic    = 6 // len(causes)
	answerCanceled = 7
	answers        = 8
)

// stoppedPublic is the public text of the cause Consume nacks with when it
// stopped (broker/consume.go, errConsumerStopped): the contract names its
// reason, CONSUMER_STOPPED, and code, none; the text is pinned here, so
// that a change of what a dead letter says is made knowingly.
const stoppedPublic = "the consumer stopped before the handler finished"

// answer returns what the handler does on its i-th call (from 0), from the
// operation's second byte: its low 3 bits are the first answer, and each
// later one moves on by the rest.
func answer(b byte, i int) int { return (int(b&7) + i*int(b>>3)) % answers }

// answerName renders an answer for the history.
func answerName(a int) string {
	switch a {
	case 0:
		return "nil"
	case answerPanic:
		return "panic"
	case answerCanceled:
		return "context.Canceled"
	}
	return causes[a].err.Error()
}

// handled is one call of the handler: what it was handed, with its payload
// copied, and whether Consume's ctx had ended when it was called.
type handled struct {
	d     broker.DeliveryValue
	ended bool
}

// consume runs broker.Consume over queue qi. Of a, bits 0 and 1 choose
// the Batch (the Prefetch when bit 2 asks for one), the rest the call on
// which the handler stops Consume among those the model says come; b
// chooses the handler's answers (see answer).
func (s *twin) consume(qi int, a, b byte) {
	mq := s.m.qs[qi]
	now := s.now()
	s.check(len(causes) == answerPanic, "causes has %d entries: renumber the handler's answers", len(causes))
	if mq.pol.RetryDelay <= 0 && mq.pol.MaxDeliveries > 1 {
		s.logf("  consume skipped: a Nack would make its message receivable again at once, and the order of deliveries would depend on timing")
		return
	}
	// What the first Receive will find, on a copy: the model observes only
	// when the store does.
	probe := s.m.clone().qs[qi]
	probe.sweep(now)
	r := len(probe.receivable())
	if r == 0 {
		s.logf("  consume skipped: nothing is receivable, and Consume would wait for a message on real time")
		return
	}
	prefetch := a&4 != 0 && s.trail == nil
	opts := broker.ConsumeOptions{Concurrency: 1, Batch: 1 + int(a&3), Logger: slog.New(slog.DiscardHandler)}
	k := 1 + int(a>>3)%r
	leased := k
	if prefetch {
		opts.Prefetch = 1 + int(a&3)
		opts.Batch = opts.Prefetch + 1
		leased = min(r, opts.Batch)
		if r > opts.Batch {
			k = 1
		}
	}
	var plan []string
	for i := range k {
		plan = append(plan, answerName(answer(b, i)))
	}
	what := fmt.Sprintf("Consume(%s, Batch %d, Prefetch %d), stopped by call %d of %d receivable: %s",
		mq.name, opts.Batch, opts.Prefetch, k, r, strings.Join(plan, ", "))
	s.logf("  %s", what)
	// Consume waits on Wake, and its Nacks close the signal: the run
	// lets go of the one it holds (its next Wake takes the queue's).
	s.wakes[qi] = nil

	var mu sync.Mutex
	var calls []handled
	reached := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := func(hctx context.Context, d broker.DeliveryValue) error {
		mu.Lock()
		i := len(calls)
		d.Message.Payload = bytes.Clone(d.Message.Payload)
		calls = append(calls, handled{d: d, ended: ctx.Err() != nil})
		mu.Unlock()
		if i >= k {
			return nil // a call too many: the check below reports it
		}
		if i == k-1 {
			close(reached) // first: Consume cannot return for this cancel before
			cancel()
		}
		switch ans := answer(b, i); ans {
		case 0:
			return nil
		case answerPanic:
			panic(fmt.Sprintf("handler panics on call %d", i))
		case answerCanceled:
			return context.Canceled
		default:
			return causes[ans].err
		}
	}
	done := make(chan error, 1)
	go func() { done <- broker.Consume(ctx, s.qs[qi], h, opts) }()
	var err error
	returned := false
	select {
	case <-reached:
	case err = <-done:
		returned = true
	case <-time.After(consumeWatchdog):
		cancel()
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		s.fail("%s: the handler was called %d times in %v, the model says it is called at least %d times", what, n, consumeWatchdog, k)
	}
	select {
	case <-reached:
	default:
		s.fail("%s: returned %v before the handler's call %d", what, err, k)
	}
	if !returned {
		select {
		case err = <-done:
		case <-time.After(consumeWatchdog):
			s.fail("%s: did not return %v after ctx ended", what, consumeWatchdog)
		}
	}
	s.check(errors.Is(err, context.Canceled), "%s returned %v, not ctx's error", what, err)

	// The model, in the order of the store's calls.
	s.mark()
	mq.sweep(now)
	want := mq.receivable()[:leased]
	s.checkIDs(what+": the handler saw", "oldest EnqueuedAt, then ID", len(calls), func(i int) string { return calls[i].d.Message.ID }, want[:k])
	for i, c := range calls {
		s.check(!c.ended, "%s: call %d ran after ctx ended", what, i+1)
	}
	settle := func(i int) {
		m, ans := want[i], answer(b, i)
		switch {
		case ans == 0:
			delete(mq.msgs, m.id)
			mq.c.acked++
			s.logf("    acked %s", m.id)
			return
		case ans == answerPanic:
			s.retry(qi, m, now, broker.ReasonUnclassified, 0, "")
		case ans == answerCanceled && i == k-1:
			s.retry(qi, m, now, broker.ReasonConsumerStopped, 0, stoppedPublic)
		case ans == answerCanceled:
			s.retry(qi, m, now, broker.ReasonUnclassified, 0, "")
		case broker.IsDoNotRetry(causes[ans].err):
			mq.c.rejected++
			s.die(qi, m, now, causes[ans].reason, causes[ans].code, causes[ans].public)
		default:
			c := causes[ans]
			s.retry(qi, m, now, c.reason, c.code, c.public)
		}
		s.logf("    settled %s: %s, %s", m.id, m.state, rel(m.at))
	}
	if prefetch {
		// One Receive leased them all; then each handler's settling call,
		// the acks later, and the Nacks of the held ones.
		for i, m := range want {
			var d *broker.DeliveryValue
			if i < k {
				d = &calls[i].d
			}
			s.lease(qi, m, now, d)
		}
		for i := range k {
			settle(i)
		}
		for _, m := range want[k:] {
			s.retry(qi, m, now, broker.ReasonConsumerStopped, 0, stoppedPublic)
			s.logf("    held %s, never started: %s, %s", m.id, m.state, rel(m.at))
		}
		return
	}
	// One message at a time: each Receive carries the previous handler's
	// ack, if any, in the commit of its lease.
	ack := -1
	for i := range k {
		if i > 0 {
			s.mark()
		}
		if ack >= 0 {
			settle(ack)
			ack = -1
		}
		s.lease(qi, want[i], now, &calls[i].d)
		if answer(b, i) == 0 {
			ack = i
			continue
		}
		s.mark()
		settle(i)
	}
	if ack >= 0 {
		s.mark()
		settle(ack)
	}
}
