package broker_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

func TestPublishMintsIDAndEnqueuedAtOnBrokerClock(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	m1 := mustPublish(t, q, "a")
	e.clock.Advance(time.Second)
	m2 := mustPublish(t, q, "b")

	require.NotEmpty(t, m1.ID)
	require.NotEqual(t, m1.ID, m2.ID, "IDs are unique within a queue")
	requireSameInstant(t, t0, m1.EnqueuedAt)
	requireSameInstant(t, t0.Add(time.Second), m2.EnqueuedAt)
	require.Equal(t, "a", string(m1.Payload))
}

func TestPublishDoesNotRetainPayload(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	buf := []byte("original")
	m, err := q.Publish(ctx(t), buf)
	require.NoError(t, err)
	copy(buf, "XXXXXXXX") // the caller reuses its slice
	require.Equal(t, "original", string(m.Payload))
	require.Equal(t, "original", string(mustReceiveOne(t, q).Message.Payload))
}

// The message a publish returns is the caller's to keep: changing its
// payload, or appending to it, changes neither what the queue delivers
// nor another message of the same batch, in every sync mode (under
// SyncNone too, where the call returns before the device has the record).
func TestAReturnedPayloadIsTheCallersToChange(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish, broker.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, func(o *broker.Options) { o.Sync = mode })
			q := e.queue("jobs", policy())
			ms, err := q.PublishBatch(ctx(t), [][]byte{[]byte("first"), []byte("second"), []byte("third")})
			require.NoError(t, err)
			k, err := q.PublishKeyed(ctx(t), "k", []byte("keyed"))
			require.NoError(t, err)
			for i, want := range []string{"first", "second", "third"} {
				require.Equal(t, want, string(ms[i].Payload), "a later publish leaves an earlier message's payload alone")
			}
			for _, m := range append(ms, k) {
				for i := range m.Payload {
					m.Payload[i] = 'X'
				}
				grown := append(m.Payload, "-more"...)
				require.Equal(t, strings.Repeat("X", len(m.Payload))+"-more", string(grown))
			}
			for _, m := range ms[:2] {
				require.Equal(t, strings.Repeat("X", len(m.Payload)), string(m.Payload), "appending to one message's payload reaches no other")
			}
			var got []string
			for _, d := range mustReceive(t, q, 10) {
				got = append(got, string(d.Message.Payload))
			}
			require.Equal(t, []string{"first", "second", "third", "keyed"}, got)
		})
	}
}

func TestEmptyPayloadIsLegitimate(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	for _, p := range [][]byte{nil, {}} {
		m, err := q.Publish(ctx(t), p)
		require.NoError(t, err)
		d := mustReceiveOne(t, q)
		require.Equal(t, m.ID, d.Message.ID)
		require.Empty(t, d.Message.Payload)
		require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	}
}

func TestPayloadAboveMaxMessageBytesIsMessageTooLarge(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 10 }))
	_, err := q.Publish(ctx(t), bytes.Repeat([]byte("x"), 10))
	require.NoError(t, err, "a payload of exactly MaxMessageBytes fits")
	_, err = q.Publish(ctx(t), bytes.Repeat([]byte("x"), 11))
	requireErrorIs(t, err, broker.MessageTooLarge, "11", "10")
	_, err = q.PublishKeyed(ctx(t), "k", bytes.Repeat([]byte("x"), 11))
	requireErrorIs(t, err, broker.MessageTooLarge)
	_, err = q.PublishBatch(ctx(t), [][]byte{[]byte("ok"), bytes.Repeat([]byte("x"), 11)})
	requireErrorIs(t, err, broker.MessageTooLarge)

	ds := mustReceive(t, q, 10)
	require.Len(t, ds, 1, "nothing of a refused publish is enqueued")
	require.Equal(t, int64(1), q.Stats().Published)
}

func TestDefaultMaxMessageBytesIsOneMiB(t *testing.T) {
	require.Equal(t, 1<<20, broker.DefaultMaxMessageBytes)
	e := newEnv(t)
	q := e.queue("jobs", policy())
	_, err := q.Publish(ctx(t), make([]byte, broker.DefaultMaxMessageBytes))
	require.NoError(t, err)
	_, err = q.Publish(ctx(t), make([]byte, broker.DefaultMaxMessageBytes+1))
	requireErrorIs(t, err, broker.MessageTooLarge)
}

func TestDuplicateKeyReturnsOriginal(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	orig, err := q.PublishKeyed(ctx(t), "order-1", []byte("first"))
	require.NoError(t, err)
	e.clock.Advance(time.Minute)
	dup, err := q.PublishKeyed(ctx(t), "order-1", []byte("second"))
	require.NoError(t, err, "a duplicate is admitted, not refused")
	require.Equal(t, orig.ID, dup.ID)
	requireSameInstant(t, orig.EnqueuedAt, dup.EnqueuedAt)

	ds := mustReceive(t, q, 10)
	require.Len(t, ds, 1, "nothing is enqueued for a duplicate")
	require.Equal(t, "first", string(ds[0].Message.Payload))
}

func TestDuplicateKeyReturnsOriginalEvenAfterAck(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	orig, err := q.PublishKeyed(ctx(t), "order-1", []byte("first"))
	require.NoError(t, err)
	require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))

	dup, err := q.PublishKeyed(ctx(t), "order-1", []byte("again"))
	require.NoError(t, err)
	require.Equal(t, orig.ID, dup.ID)
	requireSameInstant(t, orig.EnqueuedAt, dup.EnqueuedAt)
	requireNoneReceivable(t, q, "the side effect already ran once")
}

func TestDuplicateKeyAdmittedWhenFull(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("a"))
	require.NoError(t, err)
	_, err = q.Publish(ctx(t), []byte("b"))
	requireErrorIs(t, err, broker.QueueFull)

	dup, err := q.PublishKeyed(ctx(t), "k", []byte("a"))
	require.NoError(t, err, "a duplicate is admitted even when the queue is full")
	require.Equal(t, orig.ID, dup.ID)
	st := q.Stats()
	require.Equal(t, int64(1), st.Duplicates)
	require.Equal(t, int64(1), st.Shed, "the duplicate is not counted as shed")
}

func TestShedPublishDoesNotEnterSeenSet(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
	mustPublish(t, q, "filler")
	_, err := q.PublishKeyed(ctx(t), "k", []byte("shed"))
	requireErrorIs(t, err, broker.QueueFull)

	require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	m, err := q.PublishKeyed(ctx(t), "k", []byte("retry"))
	require.NoError(t, err)
	d := mustReceiveOne(t, q)
	require.Equal(t, m.ID, d.Message.ID, "the retry of a shed publish is a new message, not a duplicate")
	require.Equal(t, "retry", string(d.Message.Payload))
	require.Equal(t, int64(0), q.Stats().Duplicates)
}

func TestDedupKeyEvictedOnlyWhenStrictlyOlderThanWindow(t *testing.T) {
	e := newEnv(t)
	const window = time.Hour
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("a"))
	require.NoError(t, err)

	e.clock.Set(t0.Add(window)) // exactly the window old: still remembered
	dup, err := q.PublishKeyed(ctx(t), "k", []byte("b"))
	require.NoError(t, err)
	require.Equal(t, orig.ID, dup.ID)

	e.clock.Set(t0.Add(window + time.Nanosecond)) // strictly older: forgotten
	fresh, err := q.PublishKeyed(ctx(t), "k", []byte("c"))
	require.NoError(t, err)
	require.NotEqual(t, orig.ID, fresh.ID)
	requireSameInstant(t, t0.Add(window+time.Nanosecond), fresh.EnqueuedAt)
	require.Len(t, mustReceive(t, q, 10), 2)
}

// A key enqueued centuries before a keyed publish is older than the
// window, however far apart the two instants are (API.md §5.8): the
// publish enqueues a new message. now minus the key's instant overflowed
// an int64 in Memory, and the key was taken for a duplicate for good.
func TestDedupKeyEvictedWhenOlderThanWindowByCenturies(t *testing.T) {
	for _, c := range []struct {
		name          string
		first, second time.Time
	}{
		{"1700 to 2200", time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"first to last instant", time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for name, b := range e.storeAndMemory(policy()) {
				t.Run(name, func(t *testing.T) {
					e.clock.Set(c.first)
					orig, err := b.PublishKeyed(ctx(t), "k", []byte("a"))
					require.NoError(t, err)
					require.NotNil(t, orig.Payload)
					e.clock.Set(c.second)
					fresh, err := b.PublishKeyed(ctx(t), "k", []byte("b"))
					require.NoError(t, err)
					require.NotEqual(t, orig.ID, fresh.ID, "a key %v older than its window was taken for a duplicate", c.second.Sub(c.first))
					require.NotNil(t, fresh.Payload, "the publish enqueued")
					require.Zero(t, b.Stats().Duplicates)
				})
			}
		})
	}
}

func TestDefaultDedupWindowIsSixHours(t *testing.T) {
	require.Equal(t, 6*time.Hour, broker.DefaultDedupWindow)
	e := newEnv(t)
	q := e.queue("jobs", policy())
	orig, err := q.PublishKeyed(ctx(t), "k", nil)
	require.NoError(t, err)
	e.clock.Set(t0.Add(6 * time.Hour))
	dup, err := q.PublishKeyed(ctx(t), "k", nil)
	require.NoError(t, err)
	require.Equal(t, orig.ID, dup.ID)
	e.clock.Advance(time.Nanosecond)
	fresh, err := q.PublishKeyed(ctx(t), "k", nil)
	require.NoError(t, err)
	require.NotEqual(t, orig.ID, fresh.ID)
}

func TestClockGoingBackwardsEvictsNothing(t *testing.T) {
	e := newEnv(t)
	const window = time.Hour
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
	e.clock.Set(t0.Add(10 * time.Hour))
	late, err := q.PublishKeyed(ctx(t), "late", []byte("x")) // the broker has seen t0+10h
	require.NoError(t, err)

	e.clock.Set(t0) // the clock jumps back
	a, err := q.PublishKeyed(ctx(t), "early", []byte("a"))
	require.NoError(t, err)
	e.clock.Set(t0.Add(2 * time.Hour)) // "early" is 2h old, but the clock is still behind t0+10h
	dup, err := q.PublishKeyed(ctx(t), "early", []byte("b"))
	require.NoError(t, err)
	require.Equal(t, a.ID, dup.ID, "nothing is evicted while the clock is behind what it was")
	dupLate, err := q.PublishKeyed(ctx(t), "late", []byte("y"))
	require.NoError(t, err)
	require.Equal(t, late.ID, dupLate.ID, "a key enqueued 'in the future' is not evicted either")
	require.Equal(t, int64(2), q.Stats().Duplicates)
}

func TestDedupKeyLengthRules(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	_, err := q.PublishKeyed(ctx(t), "", []byte("x"))
	requireErrorIs(t, err, broker.InvalidDedupKey, "0 bytes")
	_, err = q.PublishKeyed(ctx(t), strings.Repeat("k", 257), []byte("x"))
	requireErrorIs(t, err, broker.InvalidDedupKey, "257")
	_, err = q.PublishKeyed(ctx(t), strings.Repeat("k", 256), []byte("x"))
	require.NoError(t, err, "a 256-byte key is allowed")
	require.Len(t, mustReceive(t, q, 10), 1)
}

func TestPublishBatchReturnsEveryMessageInOrder(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy())
	ms, err := q.PublishBatch(ctx(t), [][]byte{[]byte("a"), {}, []byte("c")})
	require.NoError(t, err)
	require.Len(t, ms, 3)
	ds := mustReceive(t, q, 10)
	require.Equal(t, []string{ms[0].ID, ms[1].ID, ms[2].ID}, ids(ds))
	require.Equal(t, []string{"a", "", "c"}, []string{string(ds[0].Message.Payload), string(ds[1].Message.Payload), string(ds[2].Message.Payload)})
	require.Equal(t, int64(3), q.Stats().Published)

	_, err = q.PublishBatch(ctx(t), nil)
	requireErrorIs(t, err, broker.InvalidBatchSize)
}

func TestPublishBatchAllOrNothingOnCapacity(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 3 }))
	mustPublish(t, q, "one")
	_, err := q.PublishBatch(ctx(t), [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	requireErrorIs(t, err, broker.QueueFull)
	require.Equal(t, 1, q.Stats().Ready, "a batch that does not fit is refused whole")
	require.Equal(t, int64(1), q.Stats().Shed, "a refused batch counts once in Shed")

	ms, err := q.PublishBatch(ctx(t), [][]byte{[]byte("a"), []byte("b")})
	require.NoError(t, err, "a batch that fits exactly is admitted")
	require.Len(t, ms, 2)
	require.Equal(t, 3, q.Stats().Ready)
}

func TestQueueFullRefusesPublishAndCountsShed(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 2 }))
	mustPublish(t, q, "a")
	mustPublish(t, q, "b")
	_, err := q.Publish(ctx(t), []byte("c"))
	requireErrorIs(t, err, broker.QueueFull, "2")
	st := q.Stats()
	require.Equal(t, int64(1), st.Shed)
	require.Equal(t, int64(2), st.Published)
	require.Equal(t, 2, st.Ready)
}

func TestCapacityCountsReadyLeasedAndDelayed(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 3; p.RetryDelay = time.Hour }))
	mustPublish(t, q, "leased")
	mustPublish(t, q, "delayed")
	mustPublish(t, q, "ready")
	ds := mustReceive(t, q, 2)
	mustNack(t, q, ds[1].Lease.Receipt, nil)
	st := q.Stats()
	require.Equal(t, [3]int{1, 1, 1}, [3]int{st.Ready, st.Leased, st.Delayed})
	_, err := q.Publish(ctx(t), []byte("x"))
	requireErrorIs(t, err, broker.QueueFull)

	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	mustPublish(t, q, "fits after an ack")
}

func TestCapacityDoesNotCountDeadLetters(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 1 }))
	mustPublish(t, q, "a")
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, nil))
	require.Equal(t, 1, q.Stats().DeadLetters)
	mustPublish(t, q, "b")
}

// A message whose last lease lapsed is a dead letter from that instant
// (Stats says so); it must stop holding capacity then, not only once some
// later Receive or DeadLetters call happens to sweep it.
func TestCapacityDoesNotCountMessageWhoseLastLeaseLapsed(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.Capacity = 1; p.MaxDeliveries = 1 }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	e.clock.Set(d.Lease.ExpiresAt)
	st := q.Stats()
	require.Equal(t, 1, st.DeadLetters, "the last lease lapsed: the message is dead")
	require.Equal(t, 0, st.Leased+st.Ready+st.Delayed)
	_, err := q.Publish(ctx(t), []byte("b"))
	require.NoError(t, err, "dead letters do not count toward Capacity")
}

func TestQueueNameRules(t *testing.T) {
	e := newEnv(t)
	good := []string{"a", "A", "0", "jobs", "a.b", "a..b", "a_b-c.D9", "x.", "_", "-", strings.Repeat("n", 64)}
	for _, name := range good {
		_, err := e.s.Queue(name, policy())
		require.NoError(t, err, "name %q is allowed", name)
	}
	bad := map[string]string{
		"":                      "0 bytes",
		strings.Repeat("n", 65): "65 bytes",
		".":                     "'.'",
		"..":                    "'.'",
		".hidden":               "'.'",
		"a/b":                   "'/'",
		"../x":                  "'.'",
		`a\b`:                   `'\\'`,
		"a b":                   "' '",
		"a:b":                   "':'",
		"é":                     "'é' at byte 0",
		"aé":                    "'é' at byte 1",
		"a\xff":                 "byte 0xff (not UTF-8) at byte 1",
		"a\x00":                 "byte 1",
		"tab\t":                 "byte 3",
	}
	for name, mention := range bad {
		_, err := e.s.Queue(name, policy())
		requireErrorIs(t, err, broker.QueueMisconfigured, "queue name", mention)
	}
	require.ElementsMatch(t, good, e.s.Queues(), "a refused name declares nothing")
}

func TestQueueIsSameForName(t *testing.T) {
	e := newEnv(t)
	a := e.queue("jobs", policy())
	b := e.queue("jobs", policy())
	require.Same(t, a, b)
	e.queue("alpha", policy())
	require.Equal(t, []string{"alpha", "jobs"}, e.s.Queues())
}

// Queues lists every queue's name sorted, whatever the order they were
// declared in, before and after a restart.
func TestQueuesAreListedSorted(t *testing.T) {
	e := newEnv(t)
	names := []string{"m", "b", "y", "a", "q", "c", "x", "k", "z", "d"}
	for _, n := range names {
		e.queue(n, policy())
	}
	want := slices.Sorted(slices.Values(names))
	require.Equal(t, want, e.s.Queues())
	e.reopen()
	require.Equal(t, want, e.s.Queues(), "after a restart")
}

func TestPolicyRefusedNamesField(t *testing.T) {
	e := newEnv(t)
	cases := map[string]func(*broker.PolicyValue){
		"VisibilityTimeout": func(p *broker.PolicyValue) { p.VisibilityTimeout = 0 },
		"MaxDeliveries":     func(p *broker.PolicyValue) { p.MaxDeliveries = 0 },
		"MaxRetryDelay":     func(p *broker.PolicyValue) { p.MaxRetryDelay = -1 },
		"RetryDelay":        func(p *broker.PolicyValue) { p.RetryDelay = broker.MaxDeadlineOffset + 1 },
		"MaxMessageBytes":   func(p *broker.PolicyValue) { p.MaxMessageBytes = -1 },
		"Capacity":          func(p *broker.PolicyValue) { p.Capacity = -1 },
		"DedupWindow":       func(p *broker.PolicyValue) { p.DedupWindow = -time.Second },
	}
	for field, mod := range cases {
		_, err := e.s.Queue("jobs", policy(mod))
		requireErrorIs(t, err, broker.QueueMisconfigured, field)
	}
	_, err := e.s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0; p.MaxRetryDelay = time.Second }))
	requireErrorIs(t, err, broker.QueueMisconfigured, "MaxRetryDelay")
	_, err = e.s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Minute; p.MaxRetryDelay = time.Second }))
	requireErrorIs(t, err, broker.QueueMisconfigured, "MaxRetryDelay")
	require.Empty(t, e.s.Queues())
}

// TestAPolicyRefusalNamesTheQueueOnEveryLine: each violation of a refused
// policy is one line of the error, and each names the queue, once prefixed.
func TestAPolicyRefusalNamesTheQueueOnEveryLine(t *testing.T) {
	e := newEnv(t)
	_, err := e.s.Queue("jobs", broker.PolicyValue{Capacity: -1})
	requireErrorIs(t, err, broker.QueueMisconfigured, "VisibilityTimeout", "MaxDeliveries", "Capacity")
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 3, err.Error())
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, `broker: queue "jobs": policy: `), line)
		require.Equal(t, 1, strings.Count(line, "broker:"), line)
	}
}

func TestPolicyChangeAppliesFromThenOn(t *testing.T) {
	e := newEnv(t)
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 5; p.Capacity = 10 }))
	mustPublish(t, q, "a")
	old := mustReceiveOne(t, q)
	requireSameInstant(t, t0.Add(30*time.Second), old.Lease.ExpiresAt)

	q2 := e.queue("jobs", policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.Capacity = 1
		p.VisibilityTimeout = time.Minute
	}))
	require.Same(t, q, q2)
	_, err := q.Publish(ctx(t), []byte("b"))
	requireErrorIs(t, err, broker.QueueFull) // the new Capacity applies
	nv := mustNack(t, q, old.Lease.Receipt, nil)
	require.True(t, nv.DeadLettered, "the new MaxDeliveries applies to the next failure")

	mustPublish(t, q, "c")
	d := mustReceiveOne(t, q)
	requireSameInstant(t, t0.Add(time.Minute), d.Lease.ExpiresAt, "the new VisibilityTimeout applies to the next lease")

	q3 := e.reopen()
	qq, err := q3.Queue("jobs", policy(func(p *broker.PolicyValue) {
		p.MaxDeliveries = 1
		p.Capacity = 1
		p.VisibilityTimeout = time.Minute
	}))
	require.NoError(t, err)
	_, err = qq.Publish(ctx(t), []byte("d"))
	requireErrorIs(t, err, broker.QueueFull) // the changed policy survives a restart
}

// "If the clock goes backwards, nothing is evicted" must not depend on
// whether the store was restarted in between: the log holds the later
// instant the broker already saw.
func TestClockGoingBackwardsEvictsNothingAcrossRestart(t *testing.T) {
	e := newEnv(t)
	const window = time.Hour
	p := policy(func(p *broker.PolicyValue) { p.DedupWindow = window })
	q := e.queue("jobs", p)
	e.clock.Set(t0.Add(10 * time.Hour))
	_, err := q.PublishKeyed(ctx(t), "late", []byte("x")) // the broker has seen t0+10h
	require.NoError(t, err)
	e.clock.Set(t0) // the clock jumps back
	a, err := q.PublishKeyed(ctx(t), "early", []byte("a"))
	require.NoError(t, err)

	e.reopen()
	q = e.queue("jobs", p)
	e.clock.Set(t0.Add(2 * time.Hour)) // still behind t0+10h
	dup, err := q.PublishKeyed(ctx(t), "early", []byte("b"))
	require.NoError(t, err)
	require.Equal(t, a.ID, dup.ID, "the clock is still behind what the broker saw: nothing is evicted, restart or not")
}

// A keyed publish answered as a duplicate writes no message, yet it read the
// clock: after a crash, the log alone must still know that reading, so that
// a clock that then went backwards evicts nothing, as it would have without
// the crash.
func TestDuplicateKeyedPublishClockReadingSurvivesPowerLoss(t *testing.T) {
	const window = time.Hour
	p := policy(func(p *broker.PolicyValue) { p.DedupWindow = window })
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = cfs })
	q := e.queue("jobs", p)
	b, err := q.PublishKeyed(ctx(t), "b", []byte("b"))
	require.NoError(t, err)
	e.clock.Set(t0.Add(30 * time.Minute))
	dup, err := q.PublishKeyed(ctx(t), "b", []byte("b again")) // the broker has seen t0+30m
	require.NoError(t, err)
	require.Equal(t, b.ID, dup.ID)
	e.clock.Set(t0.Add(-45 * time.Minute)) // the clock jumps back
	c, err := q.PublishKeyed(ctx(t), "c", []byte("c"))
	require.NoError(t, err)

	crashed := powerLoss(t, e, cfs, vfs.CrashOptions{})
	cq := crashed.queue("jobs", p)
	// 65 minutes after "c" was enqueued, but still behind t0+30m.
	crashed.clock.Set(t0.Add(20 * time.Minute))
	again, err := cq.PublishKeyed(ctx(t), "c", []byte("c again"))
	require.NoError(t, err)
	require.Equal(t, c.ID, again.ID, "the clock is still behind what the duplicate publish saw: nothing is evicted")
}

// A key evicted before a restart stays evicted after it: a restart must not
// change what a keyed publish answers. Here the clock steps back inside the
// window of a key that an earlier reading had already evicted; with or
// without a restart in between, the next publish of that key must get the
// same answer.
func TestEvictedKeyStaysEvictedAcrossRestart(t *testing.T) {
	const window = time.Hour
	p := policy(func(p *broker.PolicyValue) { p.DedupWindow = window })
	run := func(restart bool) (orig, again broker.MessageValue) {
		e := newEnv(t)
		q := e.queue("jobs", p)
		orig, err := q.PublishKeyed(ctx(t), "k", []byte("a"))
		require.NoError(t, err)
		e.clock.Set(t0.Add(2 * window))
		_, err = q.PublishKeyed(ctx(t), "other", nil) // evicts "k": 2h old
		require.NoError(t, err)
		e.clock.Set(t0.Add(window / 2)) // the clock steps back
		if restart {
			e.reopen()
			q = e.queue("jobs", p)
		}
		again, err = q.PublishKeyed(ctx(t), "k", []byte("b"))
		require.NoError(t, err)
		return orig, again
	}
	origA, againA := run(false)
	origB, againB := run(true)
	require.Equal(t, origA.ID == againA.ID, origB.ID == againB.ID,
		"without a restart the key is %s; with one it is %s",
		map[bool]string{true: "still a duplicate", false: "forgotten"}[origA.ID == againA.ID],
		map[bool]string{true: "still a duplicate", false: "forgotten"}[origB.ID == againB.ID])
}

// powerLoss clones e's directory as a power loss now would leave it, and
// opens the clone.
func powerLoss(t *testing.T, e *env, cfs *vfs.CrashFS, opts vfs.CrashOptions) *env {
	t.Helper()
	opts.Root = e.dir
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, opts))
	return openEnvAt(t, clone)
}

func TestReturnedCallIsOnDeviceAfterPowerLoss(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncAll, broker.SyncPublish} {
		t.Run(mode.String(), func(t *testing.T) {
			cfs := vfs.NewCrashFS(vfs.Default)
			e := newEnv(t, func(o *broker.Options) { o.FS = cfs; o.Sync = mode; o.SyncInterval = time.Hour })
			q := e.queue("jobs", policy())
			a := mustPublish(t, q, "acked")
			require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
			l := mustPublish(t, q, "leased")
			require.Equal(t, l.ID, mustReceiveOne(t, q).Message.ID)
			p := mustPublish(t, q, "pending")

			c := powerLoss(t, e, cfs, vfs.CrashOptions{}) // every unsynced byte is lost
			cq := c.queue("jobs", policy())
			c.clock.Set(t0.Add(time.Hour)) // every lease has lapsed
			got := ids(mustReceive(t, cq, 10))
			require.Subset(t, got, []string{l.ID, p.ID}, "a publish that returned is on the device")
			if mode == broker.SyncAll {
				require.Equal(t, []string{l.ID, p.ID}, got, "so is the ack")
				return
			}
			require.Subset(t, []string{a.ID, l.ID, p.ID}, got, "a lost ack only redelivers")
		})
	}
}

func TestSyncAllLeaseIsOnDeviceAfterPowerLoss(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, func(o *broker.Options) { o.FS = cfs })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	mustPublish(t, q, "a")
	d := mustReceiveOne(t, q)
	c := powerLoss(t, e, cfs, vfs.CrashOptions{})
	cq := c.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 }))
	requireNoneReceivable(t, cq, "the lease a Receive took is durable")
	c.clock.Set(d.Lease.ExpiresAt)
	requireNoneReceivable(t, cq, "and so is its delivery count: it was the last one")
	require.Len(t, mustDeadLetters(t, cq), 1)
}

func TestPublishBatchAllOrNothingAcrossPowerLoss(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, func(o *broker.Options) { o.FS = cfs; o.Sync = broker.SyncNone; o.SyncInterval = time.Hour })
	q := e.queue("jobs", policy())
	batch := make([][]byte, 12)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte{byte('a' + i)}, 1500) // the batch spans several 4 KiB blocks
	}
	ms, err := q.PublishBatch(ctx(t), batch)
	require.NoError(t, err)
	seen := map[int]int{} // messages found → power losses
	check := func(c *env, what string) {
		ds := mustReceive(t, c.queue("jobs", policy()), 100)
		seen[len(ds)]++
		if len(ds) == 0 {
			return
		}
		require.Len(t, ds, len(batch), "%s: every message of the batch or none", what)
		for i, d := range ds {
			require.Equal(t, ms[i].ID, d.Message.ID, what)
			require.Equal(t, batch[i], d.Message.Payload, what)
		}
	}
	for seed := range uint64(40) {
		opts := []vfs.CrashOptions{
			{KeepUnsyncedFraction: 0.5, TearLastWrite: true}, // torn: never all of it
			{KeepUnsyncedFraction: 0.8},                      // blocks lost at random
			{KeepUnsyncedFraction: 1},                        // the page cache made it
		}[seed%3]
		opts.Rand = rand.New(rand.NewPCG(seed, 1))
		check(powerLoss(t, e, cfs, opts), fmt.Sprintf("seed %d", seed))
		if seed%5 == 0 {
			// Every fifth, the same power loss with unsynced names and
			// sizes kept apart from the data.
			mopts, state := metadataCrashOptions(int64(seed/5), "", opts.Rand.Uint64())
			check(powerLoss(t, e, cfs, mopts), fmt.Sprintf("seed %d, %s", seed, state))
		}
	}
	t.Logf("messages found after 48 power losses: %v", seen)
	require.Positive(t, seen[len(batch)], "some clones kept the whole batch")
	require.Positive(t, seen[0], "some lost it")
}

// A batch of many small messages whose records, frames included, do not fit
// in one segment is refused as InvalidBatchSize, and the store goes on: the
// check counts each record's framing, not only the payload bytes.
func TestPublishBatchTooManyFramesForASegmentIsRefused(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	batch := make([][]byte, 1000) // 1000 bytes of payload, some 31 KB of records
	for i := range batch {
		batch[i] = []byte("m")
	}
	_, err := q.PublishBatch(ctx(t), batch)
	requireErrorIs(t, err, broker.InvalidBatchSize, "does not fit in one log segment")
	ms, err := q.PublishBatch(ctx(t), batch[:300])
	require.NoError(t, err, "the store still works")
	require.Len(t, ms, 300)
	require.Equal(t, 300, q.Stats().Ready)
}

// "If the clock goes backwards, nothing is evicted" counts every reading
// the broker made, also those whose records reclamation removed: here the
// only record of the reading at 10 h (a publish since acked) is in a
// segment that is reclaimed, and the index is then rebuilt from what is
// left of the log. At 2 h the clock is still behind 10 h, so the key
// published at 0 h stays a duplicate: every segment's preamble carries
// the queue's latest reading.
func TestDedupClockReadingSurvivesReclamationAndRebuild(t *testing.T) {
	const window = time.Hour
	small := func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }
	p := policy(small, func(p *broker.PolicyValue) { p.DedupWindow = window })
	e := newEnv(t, func(o *broker.Options) {
		o.SegmentBytes = broker.MinSegmentBytes
		broker.ManualMaintenance(o)
	})
	q := e.queue("jobs", p)
	e.clock.Set(t0.Add(10 * time.Hour))
	mustPublish(t, q, "late")
	require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	e.clock.Set(t0) // the clock steps back
	early, err := q.PublishKeyed(ctx(t), "early", []byte("a"))
	require.NoError(t, err)

	churn := e.queue("churn", policy(small))
	first := e.s.Stats().Segments
	for e.s.Stats().Segments < first+4 {
		mustPublish(t, churn, strings.Repeat("c", 1000))
		require.NoError(t, churn.Ack(ctx(t), mustReceiveOne(t, churn).Lease.Receipt))
	}
	for range 3 {
		require.NoError(t, e.s.Maintain())
	}
	require.Positive(t, e.s.Stats().BytesReclaimed, "the segment with the publish at 10 h is reclaimed")

	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.open()
	require.True(t, e.s.Recovery().IndexRebuilt)
	q = e.queue("jobs", p)
	e.clock.Set(t0.Add(2 * time.Hour)) // still behind 10 h
	again, err := q.PublishKeyed(ctx(t), "early", []byte("b"))
	require.NoError(t, err)
	require.Equal(t, early.ID, again.ID, "the clock is behind a reading the store made: nothing is evicted, reclamation and rebuild or not")
}

// TestAKeyedPublishSaysByItsPayloadWhetherItEnqueued: a duplicate's Payload
// is nil, a new message's never is, even for an empty payload.
func TestAKeyedPublishSaysByItsPayloadWhetherItEnqueued(t *testing.T) {
	e := newEnv(t)
	for name, q := range e.storeAndMemory(policy()) {
		for _, payload := range [][]byte{nil, {}, []byte("work")} {
			key := fmt.Sprintf("%s-%d", name, len(payload)) + fmt.Sprint(payload == nil)
			first, err := q.PublishKeyed(ctx(t), key, payload)
			require.NoError(t, err)
			require.NotNil(t, first.Payload, "%s: a new message (payload %q)", name, payload)
			require.Equal(t, string(payload), string(first.Payload))
			again, err := q.PublishKeyed(ctx(t), key, payload)
			require.NoError(t, err)
			require.Nil(t, again.Payload, "%s: a duplicate", name)
			require.Equal(t, first.ID, again.ID)
		}
	}
}

// A keyed publish checks its payload's size before its key: a payload
// above MaxMessageBytes is MessageTooLarge even when the key was seen, in
// the file store and in Memory, and the original stays the only message.
func TestAKeyedPublishChecksItsSizeBeforeItsKey(t *testing.T) {
	small := func(p *broker.PolicyValue) { p.MaxMessageBytes = 16 }
	e := newEnv(t)
	for name, q := range e.storeAndMemory(policy(small)) {
		orig, err := q.PublishKeyed(ctx(t), "k", []byte("fits"))
		require.NoError(t, err, name)
		_, err = q.PublishKeyed(ctx(t), "k", make([]byte, 17))
		require.ErrorIs(t, err, broker.MessageTooLarge, "%s: a seen key with a payload too large", name)
		dup, err := q.PublishKeyed(ctx(t), "k", []byte("again"))
		require.NoError(t, err, name)
		require.Equal(t, orig.ID, dup.ID, "%s: the key is still the original's", name)
		ds, err := q.Receive(ctx(t), 10)
		require.NoError(t, err, name)
		require.Len(t, ds, 1, name)
		require.Equal(t, "fits", string(ds[0].Message.Payload), name)
	}
}

// PublishKeyed checks the key's length before anything else, then the
// payload's size before the key is looked up, in the Store and the Memory
// alike (both docs say so): an empty key with an oversized payload is
// InvalidDedupKey, and an oversized payload under a key seen within the
// window is MessageTooLarge, not a duplicate.
func TestPublishKeyedChecksTheKeyThenThePayloadThenLooksTheKeyUp(t *testing.T) {
	e := newEnv(t)
	qs := e.storeAndMemory(policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 }))
	for _, name := range []string{"store", "memory"} {
		q := qs[name]
		_, err := q.PublishKeyed(ctx(t), "", []byte("12345"))
		requireErrorIs(t, err, broker.InvalidDedupKey, "0 bytes")
		first, err := q.PublishKeyed(ctx(t), "k", []byte("1234"))
		require.NoError(t, err, name)
		require.NotNil(t, first.Payload, name)
		_, err = q.PublishKeyed(ctx(t), "k", []byte("12345"))
		requireErrorIs(t, err, broker.MessageTooLarge, "5")
		dup, err := q.PublishKeyed(ctx(t), "k", []byte("9"))
		require.NoError(t, err, name)
		require.Equal(t, first.ID, dup.ID, "%s: the key was still seen", name)
		require.Nil(t, dup.Payload, name)
	}
}
