package broker_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

func TestClassifyIsTheRecordingRule(t *testing.T) {
	reason, code, public, unclassified := broker.Classify(nil)
	require.Equal(t, []any{broker.ReasonUnexplained, uint32(0), "", false}, []any{reason, code, public, unclassified})

	reason, _, public, unclassified = broker.Classify(errors.New("payload bytes"))
	require.Equal(t, []any{broker.ReasonUnclassified, "", true}, []any{reason, public, unclassified})

	long := broker.NewError(strings.Repeat("R", 300), 9, strings.Repeat("ü", 1000), "private")
	reason, code, public, unclassified = broker.Classify(broker.DoNotRetry(long))
	require.Equal(t, strings.Repeat("R", broker.MaxReasonBytes), reason)
	require.Equal(t, uint32(9), code)
	require.Equal(t, strings.Repeat("ü", broker.MaxPublicBytes/2), public)
	require.False(t, unclassified)
}

func TestRetryDelayAfterDoublesUpToTheCeiling(t *testing.T) {
	p := broker.PolicyValue{RetryDelay: time.Second, MaxRetryDelay: 5 * time.Second}
	var got []time.Duration
	for n := 0; n <= 5; n++ {
		got = append(got, p.RetryDelayAfter(n))
	}
	require.Equal(t, []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}, got)
	require.Equal(t, 5*time.Second, p.RetryDelayAfter(math.MaxInt), "saturates, never overflows")
	p.MaxRetryDelay = 0
	require.Equal(t, time.Second, p.RetryDelayAfter(7), "no ceiling: the delay is fixed")

	for _, c := range []struct {
		base, ceiling time.Duration
		n             int
		want          time.Duration
	}{
		{-time.Second, 0, 3, 0},
		{time.Second, time.Minute, 6, 32 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Nanosecond, broker.MaxDeadlineOffset, 64, broker.MaxDeadlineOffset},
	} {
		p := broker.PolicyValue{RetryDelay: c.base, MaxRetryDelay: c.ceiling}
		require.Equal(t, c.want, p.RetryDelayAfter(c.n), "RetryDelay %v, MaxRetryDelay %v, delivery %d", c.base, c.ceiling, c.n)
	}
}

// CheckQueueName is the rule Store.Queue applies: the same names pass and
// fail, with the same text but for the package prefix.
func TestCheckQueueNameIsTheStoresRule(t *testing.T) {
	s, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone})
	require.NoError(t, err)
	defer s.Close()
	for _, name := range []string{"a", "jobs.v2", "A-Z_0-9", strings.Repeat("q", 64)} {
		require.NoError(t, broker.CheckQueueName(name), name)
		_, err := s.Queue(name, broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 1})
		require.NoError(t, err, name)
	}
	for _, name := range []string{"", ".x", "a b", "é", "a\xff", strings.Repeat("q", 65)} {
		err := broker.CheckQueueName(name)
		require.ErrorIs(t, err, broker.QueueMisconfigured, "%q", name)
		_, serr := s.Queue(name, broker.PolicyValue{VisibilityTimeout: time.Second, MaxDeliveries: 1})
		require.Equal(t, "broker: "+err.Error(), serr.Error())
	}
}
