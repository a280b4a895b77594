package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// consumeLogged runs Consume on q with h and a logger writing JSON to logs
// until cond holds, then ends it and requires that it returned for that.
func consumeLogged(t *testing.T, q *broker.Queue, logs *lockedBuffer, h broker.Handler, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- broker.Consume(ctx, q, h, broker.ConsumeOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	}()
	require.Eventually(t, cond, 30*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
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
	require.True(t, logged(t, &logs, "lease lapsed before the handler finished", m.ID), "logged: %v", logs.records(t))
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
