package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// consumeLogged runs Consume on q with h and a logger writing JSON to logs
// until cond holds, then ends it and requires that it returned for that.
func consumeLogged(t *testing.T, q *broker.Queue, logs *lockedBuffer, h broker.Handler, cond func() bool) {
	t.Helper()
	consumeUntil(t, q, h, broker.ConsumeOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil))}, cond)
}

// logged reports whether logs holds a record whose message contains msg
// and whose "message" attribute is id.
func logged(t *testing.T, logs *lockedBuffer, msg, id string) bool {
	t.Helper()
	for _, r := range logs.records(t) {
		if m, _ := r["msg"].(string); r["message"] == id && strings.Contains(m, msg) {
			return true
		}
	}
	return false
}

// An ack carried by a Receive (or sent when the queue went idle) that the
// store refuses is logged as a direct Ack's refusal is: a handler that
// outlived its lease is told so (LeaseExpired, a warning naming the
// message), and the message is delivered again.
func TestConsumeLogsACarriedAckTheStoreRefused(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute }))
	m := mustPublish(t, q, "slow")
	var logs lockedBuffer
	var mu sync.Mutex
	var deliveries []int
	consumeLogged(t, q, &logs, func(_ context.Context, d broker.DeliveryValue) error {
		mu.Lock()
		defer mu.Unlock()
		if len(deliveries) == 0 {
			e.clock.Advance(2 * time.Minute) // the handler outlives its lease
		}
		deliveries = append(deliveries, d.Deliveries)
		return nil
	}, func() bool { return q.Stats().Acked == 1 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, deliveries, "delivered again after the lapse")
	require.True(t, logged(t, &logs, "the lease was no longer held when the handler finished", m.ID), "logged: %v", logs.records(t))
}

// A handler that acks its delivery itself, as an SQS consumer deletes its
// message, has done what Consume was to do: the message is gone, and the
// warning Consume logs for its own refused Ack says that the handler may
// have settled it, not only that the lease lapsed.
func TestConsumeLogsAHandlerThatSettledItsOwnDelivery(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Minute }))
	m := mustPublish(t, q, "self-acked")
	var logs lockedBuffer
	var deliveries atomic.Int32
	consumeLogged(t, q, &logs, func(ctx context.Context, d broker.DeliveryValue) error {
		deliveries.Add(1)
		return q.Ack(ctx, d.Lease.Receipt)
	}, func() bool { return logged(t, &logs, "the lease was no longer held", m.ID) })
	require.Equal(t, int32(1), deliveries.Load())
	st := q.Stats()
	require.Equal(t, int64(1), st.Acked)
	require.Zero(t, st.Ready+st.Leased+st.Delayed, "the handler's ack removed it")
	require.True(t, logged(t, &logs, "the handler settled the delivery itself", m.ID), "logged: %v", logs.records(t))
}

// A failure on a message's last allowed delivery dead-letters it, and
// Consume says so in its log, naming the message: the handler's error
// alone (logged as a nack) does not tell that the message will not come
// back.
func TestConsumeLogsADeadLetterItMade(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	m := mustPublish(t, q, "doomed")
	var logs lockedBuffer
	consumeLogged(t, q, &logs, func(context.Context, broker.DeliveryValue) error {
		return errors.New("handler failed")
	}, func() bool { return q.Stats().DeadLetters == 1 })
	require.True(t, logged(t, &logs, "dead-lettered after its last delivery", m.ID), "logged: %v", logs.records(t))
}

// The private half of a handler's classified error stays in the failing
// process's log, joined to the dead letter by the message ID: Consume logs
// the handler's error, private detail included, naming the message, while
// the dead letter, and the disk, keep only its Reason, Code and Public
// text. Nacked or rejected (DoNotRetry), alike.
func TestConsumeLogsTheHandlersPrivateDetailWithTheMessageID(t *testing.T) {
	for _, how := range []string{"nack", "reject"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
			m := mustPublish(t, q, "work")
			const private = "PRIVATE-DETAIL-4e5f"
			var herr error = broker.NewError("CARD_DECLINED", 0x05020001, "the card was declined", private)
			if how == "reject" {
				herr = broker.DoNotRetry(herr)
			}
			var logs lockedBuffer
			consumeLogged(t, q, &logs, func(context.Context, broker.DeliveryValue) error { return herr },
				func() bool { return q.Stats().DeadLetters == 1 })

			joined := false
			for _, r := range logs.records(t) {
				if text, _ := r["error"].(string); strings.Contains(text, private) {
					require.Equal(t, m.ID, r["message"], "the record with the private detail names the message: %v", r)
					joined = true
				}
			}
			require.True(t, joined, "the private detail reaches Consume's log; logged: %v", logs.records(t))
			dls := mustDeadLetters(t, q)
			require.Len(t, dls, 1)
			require.Equal(t, m.ID, dls[0].Message.ID)
			require.Equal(t, [3]string{"CARD_DECLINED", "5.2.0.1", "the card was declined"},
				[3]string{dls[0].Reason, broker.FormatCode(dls[0].Code), dls[0].Cause})
			e.close()
			requireNotOnDisk(t, e.dir, private, "the private detail of a handler's error")
		})
	}
}

// A handler's failure that carries no reason is logged once, by Consume,
// with the message's ID: the broker Consume settles it with (the file
// store or the in-memory broker, sharing Consume's logger here) does not
// log its text again. Nacked and handed back, nacked on its last delivery,
// rejected: one line each. A direct Nack still has the broker log it (see
// TestMemoryLogsUnclassifiedCauseNotKeepsIt and the callback logger tests).
func TestConsumeLogsEachUnclassifiedFailureOnce(t *testing.T) {
	const private = "PRIVATE-TEXT-7a1c"
	for _, which := range []string{"store", "memory"} {
		t.Run(which, func(t *testing.T) {
			var logs lockedBuffer
			b := loggingBroker(t, which, policy(func(p *broker.PolicyValue) { p.MaxDeliveries, p.RetryDelay = 2, 0 }), &logs)
			logger := slog.New(slog.NewJSONHandler(&logs, nil)) // Consume's, to the same records
			nacked, err := b.Publish(ctx(t), []byte("nacked"))
			require.NoError(t, err)
			rejected, err := b.Publish(ctx(t), []byte("rejected"))
			require.NoError(t, err)

			consumeUntil(t, b, func(_ context.Context, d broker.DeliveryValue) error {
				if d.Message.ID == rejected.ID {
					return broker.DoNotRetry(errors.New(private))
				}
				return errors.New(private)
			}, broker.ConsumeOptions{Logger: logger, Concurrency: 1, Batch: 1}, func() bool {
				dls, err := b.DeadLetters(ctx(t), 10)
				return err == nil && len(dls) == 2
			}, "both messages dead-lettered")

			lines := map[any]int{}
			for _, r := range logs.records(t) {
				for _, key := range []string{"error", "err"} { // Consume's, the brokers'
					if text, _ := r[key].(string); strings.Contains(text, private) {
						lines[r["message"]]++
					}
				}
			}
			require.Equal(t, map[any]int{nacked.ID: 2, rejected.ID: 1}, lines,
				"one line per failure, naming its message; logged: %v", logs.records(t))
		})
	}
}

// A Consume with no Logger (the zero ConsumeOptions) leaves the text of an
// unclassified handler failure to the broker's Logger, with the message's
// ID, as a direct Nack does: that text is never written to disk, so a log
// is the only place it is kept (API.md §1, "Classified causes"; the seed's
// Nack keeps the Private half in the failing process's log). Consume used
// to mark the cause as logged while its nil Logger discarded it, so the
// broker logged nothing either and the text reached no log at all. A
// handler's panic is such a failure: its value and stack reach the
// broker's Logger too (the cause used to say they were in the consumer's
// log, which did not exist).
func TestConsumeWithoutALoggerLeavesTheUnclassifiedTextToTheBrokersLogger(t *testing.T) {
	const private = "PRIVATE-TEXT-4711"
	for _, which := range []string{"store", "memory"} {
		for _, how := range []string{"error", "panic"} {
			t.Run(which+"/"+how, func(t *testing.T) {
				var logs lockedBuffer
				b := loggingBroker(t, which, policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }), &logs)
				msg, err := b.Publish(ctx(t), []byte("x"))
				require.NoError(t, err)

				consumeUntil(t, b, func(context.Context, broker.DeliveryValue) error {
					if how == "panic" {
						panic(private)
					}
					return errors.New(private)
				}, broker.ConsumeOptions{}, func() bool {
					dls, err := b.DeadLetters(ctx(t), 1)
					return err == nil && len(dls) == 1
				}, "the message dead-lettered")

				lines := 0
				for _, r := range logs.records(t) {
					for _, v := range r {
						if text, _ := v.(string); strings.Contains(text, private) {
							require.Equal(t, msg.ID, r["message"], "the record with the text names the message: %v", r)
							if how == "panic" {
								require.Contains(t, text, "handler panicked", "the record says the handler panicked")
								require.Contains(t, text, "goroutine", "the record holds the stack")
								require.NotContains(t, text, "consumer's log", "the record points at no log that does not exist")
							}
							lines++
						}
					}
				}
				require.Equal(t, 1, lines, "the broker's Logger has the text once; logged: %v", logs.records(t))
			})
		}
	}
}

// Consume's records name the queue when the broker has a name, so that
// the Consume calls of several queues can share one Logger and each
// failure still says where it happened: here two queues of one store,
// whose handlers fail, log to one buffer, and each record that names a
// message names that message's queue.
func TestConsumeLogsNameTheQueue(t *testing.T) {
	e := newEnv(t)
	one := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	queues := map[string]*broker.Queue{"jobs": e.queue("jobs", one), "mail": e.queue("mail", one)}
	queueOf := map[string]string{}
	for name, q := range queues {
		queueOf[mustPublish(t, q, "work for "+name).ID] = name
	}
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan error, len(queues))
	for _, q := range queues {
		go func() {
			done <- broker.Consume(ctx, q, func(context.Context, broker.DeliveryValue) error {
				return errors.New("handler failed")
			}, broker.ConsumeOptions{Logger: logger})
		}()
	}
	require.Eventually(t, func() bool {
		return queues["jobs"].Stats().DeadLetters == 1 && queues["mail"].Stats().DeadLetters == 1
	}, 30*time.Second, time.Millisecond)
	cancel()
	for range queues {
		require.ErrorIs(t, <-done, context.Canceled)
	}

	named := map[string]int{}
	for _, r := range logs.records(t) {
		id, _ := r["message"].(string)
		if id == "" {
			continue
		}
		require.Equal(t, queueOf[id], r["queue"], "the record names the queue of its message: %v", r)
		named[r["queue"].(string)]++
	}
	require.Equal(t, map[string]int{"jobs": 2, "mail": 2}, named,
		"each queue logged its failure and its dead letter; logged: %v", logs.records(t))
}

// loggingBroker returns the "store" (queue "jobs" of a new store) or the
// "memory" broker, under pol, its Logger writing JSON records to logs.
func loggingBroker(t *testing.T, which string, pol broker.PolicyValue, logs *lockedBuffer) fullBroker {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	if which == "store" {
		e := newEnv(t, func(o *broker.Options) { o.Logger = logger })
		return e.queue("jobs", pol)
	}
	m, err := broker.NewMemory(pol, broker.MemoryOptions{Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}
