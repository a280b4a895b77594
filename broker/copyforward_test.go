package broker_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A dead letter whose message is as large as a segment allows, with a long
// public cause and reason, still lets the segment it pins be reclaimed:
// copying it forward must neither build a group larger than a segment nor
// stop the store, and the dead letter keeps its payload and its cause,
// clipped to the bounds that make this possible.
func TestCopyForwardOfALargestDeadLetter(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	// The largest MaxMessageBytes the store accepts for its segment size.
	lo, hi := 1, int(broker.MinSegmentBytes)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		p := dlqPolicy
		p.MaxMessageBytes = mid
		if _, err := s.Queue("probe", p); err == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	policy := dlqPolicy
	policy.MaxMessageBytes = lo
	q, err := s.Queue("big", policy)
	require.NoError(t, err)
	payload := bytes.Repeat([]byte{'x'}, lo)
	_, err = q.Publish(ctx(t), payload)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	public := strings.Repeat("€", 8<<10) // 3 bytes each
	reason := "R" + strings.Repeat("E", 200)
	require.NoError(t, q.Reject(ctx(t), ds[0].Lease.Receipt, broker.NewError(reason, 7, public, "private")))

	// Churn that seals the dead letter's segment and several after it.
	churn, err := s.Queue("churn", jobsPolicy)
	require.NoError(t, err)
	first := s.Stats().Segments
	for s.Stats().Segments < first+4 {
		_, err := churn.Publish(ctx(t), bytes.Repeat([]byte{'c'}, 1000))
		require.NoError(t, err)
		ds, err := churn.Receive(ctx(t), 1)
		require.NoError(t, err)
		require.NoError(t, churn.Ack(ctx(t), ds[0].Lease.Receipt))
	}
	for range 3 {
		require.NoError(t, s.Maintain(), "maintenance with a largest dead letter to copy forward")
	}
	st := s.Stats()
	require.Positive(t, st.BytesReclaimed, "the segments behind the dead letter were reclaimed")
	_, err = churn.Publish(ctx(t), []byte("still works"))
	require.NoError(t, err, "the store still takes publishes")

	dead, err := q.DeadLetters(ctx(t), 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, payload, dead[0].Message.Payload)
	require.Equal(t, reason[:broker.MaxReasonBytes], dead[0].Reason, "the reason is clipped")
	require.Equal(t, strings.Repeat("€", broker.MaxPublicBytes/3), dead[0].Cause, "the cause is clipped on a rune boundary")
}
