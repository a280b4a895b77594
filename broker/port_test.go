package broker

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPortConstants(t *testing.T) {
	require.Equal(t, 1<<20, DefaultMaxMessageBytes)
	require.Equal(t, 6*time.Hour, DefaultDedupWindow)
	require.Equal(t, 100*365*24*time.Hour, MaxDeadlineOffset)

	// now + MaxDeadlineOffset still fits Unix nanoseconds for any now before
	// 2162, so a policy duration never makes an unrecordable deadline.
	for _, now := range []time.Time{
		time.Unix(0, 0),
		time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2161, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		deadline := now.Add(MaxDeadlineOffset)
		require.Less(t, deadline.Year(), 2262)
		require.True(t, deadline.Equal(time.Unix(0, deadline.UnixNano())), "round-trips through Unix nanoseconds")
		require.Less(t, now.UnixNano(), int64(math.MaxInt64)-int64(MaxDeadlineOffset))
	}
}

func TestPortZeroPolicyIsInvalid(t *testing.T) {
	require.ErrorIs(t, PolicyValue{}.Validate(), QueueMisconfigured)
}

func TestPortFakeImplementsEveryInterface(t *testing.T) {
	var b Broker = newFake()
	_, ok := b.(Waker)
	require.True(t, ok)
	_, ok = b.(LeaseExtender)
	require.True(t, ok)
	_, ok = b.(Rejecter)
	require.True(t, ok)
	w := b.(Waker).Wake()
	require.NotNil(t, w.Signal, "Signal is never nil")
	require.False(t, w.Scheduled, "an empty broker schedules nothing")
}
