package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// classifiedCauses lists a cause of every shape with what a dead letter
// must record for it (API.md "Classified causes", §5.9).
func classifiedCauses() []struct {
	name   string
	cause  error
	reason string
	code   uint32
	public string
} {
	card := broker.NewError("CARD_DECLINED", 0x05020001, "the card was declined", "card 4111-xxxx")
	return []struct {
		name   string
		cause  error
		reason string
		code   uint32
		public string
	}{
		{"nil", nil, broker.ReasonUnexplained, 0, ""},
		{"plain error", errors.New("boom"), broker.ReasonUnclassified, 0, ""},
		{"broker.Error", card, "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"wrapped broker.Error", fmt.Errorf("charging: %w", card), "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"broker.Error wrapping a plain error", card.Wrap(errors.New("io")), "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"user type", userClassified{reason: "USER_REASON", public: "user public", private: "user private"}, "USER_REASON", 0x2A000001, "user public"},
		{"code only", codeOnly{code: 0x01020304, text: "c"}, broker.ReasonUnclassified, 0x01020304, ""},
		{"public only", publicOnly{public: "shown", text: "p"}, broker.ReasonUnclassified, 0, "shown"},
		{"DoNotRetry plain", broker.DoNotRetry(errors.New("bad input")), broker.ReasonNotRetryable, 0, ""},
		{"DoNotRetry nil", broker.DoNotRetry(nil), broker.ReasonNotRetryable, 0, ""},
		{"DoNotRetry classified", broker.DoNotRetry(card), "CARD_DECLINED", 0x05020001, "the card was declined"},
		{"DoNotRetry of DoNotRetry", broker.DoNotRetry(broker.DoNotRetry(errors.New("x"))), broker.ReasonNotRetryable, 0, ""},
		{"empty reason", broker.NewError("", 7, "pub", ""), broker.ReasonUnclassified, 7, "pub"},
	}
}

func TestRejectRecordsClassifiedCause(t *testing.T) {
	for _, c := range classifiedCauses() {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			q := e.queue("jobs", policy())
			m := mustPublish(t, q, "work")
			d := mustReceiveOne(t, q)
			e.clock.Advance(time.Second)
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, c.cause))
			dls := mustDeadLetters(t, q)
			require.Len(t, dls, 1)
			dl := dls[0]
			require.Equal(t, c.reason, dl.Reason)
			require.Equal(t, c.code, dl.Code)
			require.Equal(t, c.public, dl.Cause)
			require.Equal(t, 1, dl.Deliveries, "a rejected message keeps the count it had")
			requireSameInstant(t, t0.Add(time.Second), dl.FailedAt)
			require.Equal(t, m.ID, dl.Message.ID)
			requireSameInstant(t, m.EnqueuedAt, dl.Message.EnqueuedAt)
			require.Equal(t, "work", string(dl.Message.Payload))
		})
	}
}

func TestNackOnLastDeliveryRecordsClassifiedCause(t *testing.T) {
	for _, c := range classifiedCauses() {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = 0 }))
			mustPublish(t, q, "work")
			mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, errors.New("first failure"))
			e.clock.Advance(time.Minute)
			nv := mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, c.cause)
			require.True(t, nv.DeadLettered)
			dl := mustDeadLetters(t, q)[0]
			require.Equal(t, c.reason, dl.Reason, "the LAST failure's cause is recorded")
			require.Equal(t, c.code, dl.Code)
			require.Equal(t, c.public, dl.Cause)
			require.Equal(t, 2, dl.Deliveries, "equals MaxDeliveries when attempts ran out")
			requireSameInstant(t, t0.Add(time.Minute), dl.FailedAt)
		})
	}
}

// An error that carries nothing of a part hides nothing of it wrapped
// inside: a nil *Error's Wrap carries its cause alone (Error.Wrap), and
// an *Error made with no reason has none ("an empty one counts as none").
// The dead letter records the classified cause's reason, code and public
// text (API.md "Classified causes", §5.9), in the store and Memory alike.
func TestAClassifiedCauseWrappedInAnErrorWithNoReasonIsRecorded(t *testing.T) {
	card := userClassified{reason: "CARD_DECLINED", public: "card declined", private: "card 4111-xxxx"}
	for _, c := range []struct {
		name  string
		cause error
	}{
		{"nil *Error", (*broker.Error)(nil).Wrap(card)},
		{"broker.Error with no reason", broker.NewError("", 0, "", "detail").Wrap(fmt.Errorf("charging: %w", card))},
		{"DoNotRetry of a nil *Error", broker.DoNotRetry((*broker.Error)(nil).Wrap(card))},
		{"errors.Join", errors.Join(broker.NewError("", 0, "", "detail"), card)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for name, b := range e.storeAndMemory(policy()) {
				t.Run(name, func(t *testing.T) {
					_, err := b.Publish(ctx(t), []byte("work"))
					require.NoError(t, err)
					ds, err := b.Receive(ctx(t), 1)
					require.NoError(t, err)
					require.Len(t, ds, 1)
					require.NoError(t, b.Reject(ctx(t), ds[0].Lease.Receipt, c.cause))
					dls, err := b.DeadLetters(ctx(t), 10)
					require.NoError(t, err)
					require.Len(t, dls, 1)
					require.Equal(t, "CARD_DECLINED", dls[0].Reason)
					require.Equal(t, uint32(0x2A000001), dls[0].Code)
					require.Equal(t, "card declined", dls[0].Cause)
				})
			}
		})
	}
}

func TestRejectDeadLettersWithCountBelowMax(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5; p.RetryDelay = 0 }))
	mustPublish(t, q, "a")
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, broker.DoNotRetry(nil)))
	requireNoneReceivable(t, q)
	require.Equal(t, 2, mustDeadLetters(t, q)[0].Deliveries)
}

func TestLeaseExhaustionDeadLettersWithLeaseExpired(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 }))
	m := mustPublish(t, q, "a")
	var last broker.DeliveryValue
	for want := 1; want <= 3; want++ {
		last = mustReceiveOne(t, q)
		require.Equal(t, want, last.Deliveries)
		e.clock.Set(last.Lease.ExpiresAt) // the consumer died
	}
	requireNoneReceivable(t, q)
	dls := mustDeadLetters(t, q)
	require.Len(t, dls, 1)
	require.Equal(t, broker.DeadLetterValue{
		FailedAt:   dls[0].FailedAt,
		Reason:     broker.ReasonLeaseExpired,
		Message:    broker.MessageValue{ID: m.ID, EnqueuedAt: dls[0].Message.EnqueuedAt, Payload: []byte("a")},
		Deliveries: 3,
	}, dls[0], "no cause, no code, LEASE_EXPIRED")
	requireSameInstant(t, last.Lease.ExpiresAt, dls[0].FailedAt, "it failed when the last lease lapsed")
	requireSameInstant(t, m.EnqueuedAt, dls[0].Message.EnqueuedAt)
}

func TestDeadLettersOldestFailedAtFirst(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	x1 := mustPublish(t, q, "x1")
	x2 := mustPublish(t, q, "x2")
	x3 := mustPublish(t, q, "x3")
	ds := mustReceive(t, q, 2) // x1 and x2, leased until t0+30s
	e.clock.Set(t0.Add(20 * time.Second))
	d3 := mustReceiveOne(t, q) // x3, leased until t0+50s
	e.clock.Set(t0.Add(25 * time.Second))
	require.NoError(t, q.Reject(ctx(t), ds[1].Lease.Receipt, nil)) // x2 dies at 25 s
	e.clock.Set(t0.Add(40 * time.Second))
	require.NoError(t, q.Reject(ctx(t), d3.Lease.Receipt, nil)) // x3 dies at 40 s
	e.clock.Set(t0.Add(time.Minute))                            // x1's last lease lapsed at 30 s; nobody looked until now
	dls := mustDeadLetters(t, q)
	require.Equal(t, []string{x2.ID, x1.ID, x3.ID}, deadIDs(dls), "ordered by FailedAt, not by enqueue or by when they were found")
	requireSameInstant(t, t0.Add(25*time.Second), dls[0].FailedAt)
	requireSameInstant(t, t0.Add(30*time.Second), dls[1].FailedAt)
	requireSameInstant(t, t0.Add(40*time.Second), dls[2].FailedAt)
}

func TestDeadLettersDoesNotRemove(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for range 3 {
		mustPublish(t, q, "a")
	}
	for _, d := range mustReceive(t, q, 3) {
		require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
	}
	first := mustDeadLetters(t, q)
	require.Len(t, first, 3)
	require.Equal(t, first, mustDeadLetters(t, q), "a second investigator sees the same evidence")
	require.Equal(t, 3, q.Stats().DeadLetters)
	requireNoneReceivable(t, q)
}

func TestDeadLettersReturnsUpToMax(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for range 4 {
		mustPublish(t, q, "a")
	}
	for _, d := range mustReceive(t, q, 4) {
		e.clock.Advance(time.Second)
		require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
	}
	all := mustDeadLetters(t, q)
	dls, err := q.DeadLetters(ctx(t), 2)
	require.NoError(t, err)
	require.Equal(t, all[:2], dls, "the oldest two")
	for _, max := range []int{0, -3} {
		_, err := q.DeadLetters(ctx(t), max)
		requireErrorIs(t, err, broker.InvalidBatchSize, "max")
	}
}

func TestReplayResetsDeliveriesKeepsIDAndEnqueuedAt(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = time.Hour }))
	m := mustPublish(t, q, "work")
	e.clock.Advance(time.Minute)
	newer := mustPublish(t, q, "newer")
	d := mustReceiveOne(t, q)
	require.Equal(t, m.ID, d.Message.ID)
	require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, broker.NewError("BAD", 1, "bad", "")))

	require.NoError(t, q.ReplayDeadLetter(ctx(t), m.ID))
	require.Empty(t, mustDeadLetters(t, q), "the dead-letter record is gone once the message is queued again")
	ds := mustReceive(t, q, 2)
	require.Equal(t, []string{m.ID, newer.ID}, ids(ds), "visible at once, at its old place (its EnqueuedAt)")
	r := ds[0]
	require.Equal(t, 1, r.Deliveries, "its next delivery counts 1")
	requireSameInstant(t, m.EnqueuedAt, r.Message.EnqueuedAt)
	require.Equal(t, "work", string(r.Message.Payload))

	nv := mustNack(t, q, r.Lease.Receipt, nil)
	require.False(t, nv.DeadLettered, "it gets MaxDeliveries attempts again")
	e.clock.Set(nv.VisibleAt)
	nv = mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	require.True(t, nv.DeadLettered)
	require.Equal(t, int64(1), q.Stats().Replayed)
}

func TestReplayOrDeleteOfUnknownIsDeadLetterNotFound(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	other := e.queue("other", policy())
	live := mustPublish(t, q, "live")
	od := mustPublish(t, other, "dead elsewhere")
	require.NoError(t, other.Reject(ctx(t), mustReceiveOne(t, other).Lease.Receipt, nil))

	for _, id := range []string{"", "nope", live.ID, od.ID, "0000000000000000", "ffffffffffffffff"} {
		requireErrorIs(t, q.ReplayDeadLetter(ctx(t), id), broker.DeadLetterNotFound, id)
		requireErrorIs(t, q.DeleteDeadLetter(ctx(t), id), broker.DeadLetterNotFound, id)
	}
	d := mustReceiveOne(t, q)
	require.Equal(t, 1, d.Deliveries, "nothing was queued or reset")
	requireNoneReceivable(t, q)
	require.Len(t, mustDeadLetters(t, other), 1, "another queue's dead letter is not touched")
}

// TestAnIDIsTheStringHandedOut: an ID spelled otherwise (its hex digits
// in upper case) names nothing the store holds.
func TestAnIDIsTheStringHandedOut(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	var dead broker.MessageValue
	for dead.ID == strings.ToUpper(dead.ID) { // an ID with a letter in it
		dead = mustPublish(t, q, "m")
	}
	for _, d := range mustReceive(t, q, 100) {
		require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
	}
	other := strings.ToUpper(dead.ID)
	requireErrorIs(t, q.ReplayDeadLetter(ctx(t), other), broker.DeadLetterNotFound, other)
	requireErrorIs(t, q.DeleteDeadLetter(ctx(t), other), broker.DeadLetterNotFound, other)
	require.Contains(t, deadIDs(mustDeadLetters(t, q)), dead.ID)
	require.NoError(t, q.ReplayDeadLetter(ctx(t), dead.ID))
}

func TestDeleteDeadLetterRemovesForGood(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	m := mustPublish(t, q, "a")
	keep := mustPublish(t, q, "b")
	for _, d := range mustReceive(t, q, 2) {
		require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
	}
	require.NoError(t, q.DeleteDeadLetter(ctx(t), m.ID))
	require.Equal(t, []string{keep.ID}, deadIDs(mustDeadLetters(t, q)))
	requireErrorIs(t, q.DeleteDeadLetter(ctx(t), m.ID), broker.DeadLetterNotFound)
	requireErrorIs(t, q.ReplayDeadLetter(ctx(t), m.ID), broker.DeadLetterNotFound)
	e.reopen()
	q = e.queue("jobs", policy())
	require.Equal(t, []string{keep.ID}, deadIDs(mustDeadLetters(t, q)), "deleted for good, across a restart")
	requireNoneReceivable(t, q)
}

func TestReplayOfLeaseExhaustedMessage(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	m := mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt) // dead from this instant, before anyone looked
	require.NoError(t, q.ReplayDeadLetter(ctx(t), m.ID))
	r := mustReceiveOne(t, q)
	require.Equal(t, m.ID, r.Message.ID)
	require.Equal(t, 1, r.Deliveries)
}

// TestALeaseLapsedOnItsLastDeliveryStaysDeadWhenThePolicyIsRaised: a
// lease that lapsed on its last allowed delivery is a dead letter from the
// instant it lapsed; raising MaxDeliveries afterwards does not revive it,
// before a restart or after one.
func TestALeaseLapsedOnItsLastDeliveryStaysDeadWhenThePolicyIsRaised(t *testing.T) {
	for _, reopen := range []bool{false, true} {
		e := newEnv(t)
		one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
		three := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 3 })
		q := e.queue("jobs", one)
		m := mustPublish(t, q, "a")
		mustReceiveOne(t, q)
		e.clock.Advance(time.Minute) // the lease lapses on delivery 1 of 1
		require.Equal(t, 1, q.Stats().DeadLetters)

		q = e.queue("jobs", three)
		if reopen {
			e.reopen()
			q = e.queue("jobs", three)
		}
		requireNoneReceivable(t, q)
		dead := mustDeadLetters(t, q)
		require.Len(t, dead, 1, "reopen %v", reopen)
		require.Equal(t, m.ID, dead[0].Message.ID)
		require.Equal(t, broker.ReasonLeaseExpired, dead[0].Reason)
		require.Equal(t, 1, dead[0].Deliveries)
		requireSameInstant(t, t0.Add(30*time.Second), dead[0].FailedAt)
	}
}

// TestAConsumerStoppedOnTheLastDeliveryLeavesADeadLetterThatSaysSo: a
// handler that gives up at shutdown on a message's last delivery sends it
// to the dead-letter store, recorded as CONSUMER_STOPPED, not as an
// unclassified failure.
func TestAConsumerStoppedOnTheLastDeliveryLeavesADeadLetterThatSaysSo(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	msg := mustPublish(t, q, "interrupted")
	c, cancel := context.WithCancel(ctx(t))
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- broker.Consume(c, q, func(hctx context.Context, d broker.DeliveryValue) error {
			close(started)
			<-hctx.Done()
			return hctx.Err()
		}, broker.ConsumeOptions{})
	}()
	<-started
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	dls := mustDeadLetters(t, q)
	require.Len(t, dls, 1)
	require.Equal(t, msg.ID, dls[0].Message.ID)
	require.Equal(t, broker.ReasonConsumerStopped, dls[0].Reason)
	require.Equal(t, "the consumer stopped before the handler finished", dls[0].Cause)
}

// TestRacingReplaysOfOneDeadLetterQueueItOnce: the port lets replays of
// one dead letter racing each other both queue it on a broker that cannot
// tell them apart, and asks each broker to say which it is. The store and
// Memory tell them apart: one replay queues the message, every other one
// is DeadLetterNotFound, and the message is receivable once.
func TestRacingReplaysOfOneDeadLetterQueueItOnce(t *testing.T) {
	e := newEnv(t)
	for name, q := range e.storeAndMemory(policy()) {
		t.Run(name, func(t *testing.T) {
			for round := range 20 {
				m, err := q.Publish(ctx(t), []byte("dead"))
				require.NoError(t, err)
				ds, err := q.Receive(ctx(t), 1)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				require.NoError(t, q.Reject(ctx(t), ds[0].Lease.Receipt, nil))

				const racers = 8
				start := make(chan struct{})
				errs := make(chan error, racers)
				for range racers {
					go func() {
						<-start
						errs <- q.ReplayDeadLetter(ctx(t), m.ID)
					}()
				}
				close(start)
				queued := 0
				for range racers {
					if err := <-errs; err == nil {
						queued++
					} else {
						requireErrorIs(t, err, broker.DeadLetterNotFound)
					}
				}
				require.Equal(t, 1, queued, "round %d: replays that queued the message", round)
				ds, err = q.Receive(ctx(t), 10)
				require.NoError(t, err)
				require.Len(t, ds, 1, "round %d: the replayed message is receivable once", round)
				require.Equal(t, m.ID, ds[0].Message.ID)
				require.Equal(t, 1, ds[0].Deliveries)
				require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
			}
			require.Equal(t, int64(20), q.Stats().Replayed)
		})
	}
}

// TestALeaseLapsedOnTheLastDeliveryRecordsTheEarlierNacksCause: LEASE_EXPIRED
// is for a message no consumer ever reported on (the seed's
// DeadLetterValue.Reason): a message nacked with a classified cause on
// its first delivery, whose last lease then lapses, records that nack's
// reason, code and public text; the in-memory broker records the same.
func TestALeaseLapsedOnTheLastDeliveryRecordsTheEarlierNacksCause(t *testing.T) {
	e := newEnv(t)
	two := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.RetryDelay = 0 })
	for name, b := range e.storeAndMemory(two) {
		_, err := b.Publish(ctx(t), []byte("a"))
		require.NoError(t, err)
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		_, err = b.Nack(ctx(t), ds[0].Lease.Receipt, broker.NewError("HTTP_5XX", 42<<24|500, "target answered 500", ""))
		require.NoError(t, err)
		ds, err = b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, 2, ds[0].Deliveries)
		e.clock.Set(ds[0].Lease.ExpiresAt)
		dead, err := b.DeadLetters(ctx(t), 10)
		require.NoError(t, err)
		require.Len(t, dead, 1, name)
		require.Equal(t, "HTTP_5XX", dead[0].Reason, name)
		require.Equal(t, uint32(42<<24|500), dead[0].Code, name)
		require.Equal(t, "target answered 500", dead[0].Cause, name)
		require.Equal(t, 2, dead[0].Deliveries, name)
	}
}

// TestAReplayedDeadLetterIsReceivedBeforeLaterMessages: a replay keeps
// the message's EnqueuedAt, and Receive goes oldest EnqueuedAt first, so
// a replayed dead letter comes before the messages published after it
// was first published, in the store and in the memory broker alike.
func TestAReplayedDeadLetterIsReceivedBeforeLaterMessages(t *testing.T) {
	e := newEnv(t)
	one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	for name, b := range e.storeAndMemory(one) {
		old, err := b.Publish(ctx(t), []byte("old"))
		require.NoError(t, err)
		ds, err := b.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.NoError(t, b.Reject(ctx(t), ds[0].Lease.Receipt, nil))
		e.clock.Advance(time.Second)
		_, err = b.Publish(ctx(t), []byte("new"))
		require.NoError(t, err)
		e.clock.Advance(time.Second)
		require.NoError(t, b.ReplayDeadLetter(ctx(t), old.ID))
		ds, err = b.Receive(ctx(t), 2)
		require.NoError(t, err)
		require.Len(t, ds, 2, name)
		require.Equal(t, "old", string(ds[0].Message.Payload), name)
		require.Equal(t, "new", string(ds[1].Message.Payload), name)
	}
}
