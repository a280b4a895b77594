package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// More dedup keys remembered within the window than one segment holds as
// copies (a caller publishing many distinct keys and acknowledging their
// messages) do not set reclamation chasing its own copies: the copies of
// a segment's keys fill more than one new segment, each of those is
// pinned by keys alone, and judged by the bytes of live messages only it
// looked free to copy, again and again, for as long as the keys lived. A
// maintenance pass ends, and copies each key a bounded number of times.
func TestMoreKeysThanASegmentHoldsDoNotKeepReclamationCopying(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes; broker.ManualMaintenance(o) })
	q := e.queue("jobs", keyedJobs) // a window of an hour: every key stays
	const keys = 3000               // their copies take about ten 16 KiB segments
	for i := range keys {
		_, err := q.PublishKeyed(ctx(t), fmt.Sprintf("key-%06d", i), []byte("x"))
		require.NoError(t, err)
		require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
	}
	done := make(chan error, 1)
	go func() { done <- e.s.Maintain() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute): // against a hang only
		t.Fatalf("Maintain has not returned after a minute: %+v", e.s.Stats())
	}
	st := e.s.Stats()
	require.LessOrEqual(t, st.CopiedForward, int64(2*2*keys), "records copied forward: a publish and an ack per key, at most twice")
	require.NoError(t, e.s.Maintain())
	require.LessOrEqual(t, e.s.Stats().CopiedForward, int64(2*2*keys), "a second pass finds nothing worth copying")

	e.reopen()
	q = e.queue("jobs", keyedJobs)
	for _, i := range []int{0, keys / 2, keys - 1} {
		m, err := q.PublishKeyed(ctx(t), fmt.Sprintf("key-%06d", i), []byte("x"))
		require.NoError(t, err)
		require.Nil(t, m.Payload, "key %d is still remembered: a duplicate", i)
	}
}
