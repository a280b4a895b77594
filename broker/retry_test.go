package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The schedule of a failing maintenance step: tried again after
// retryFirst, the wait doubling up to retryLongest; a reminder at most
// every retryRemindEvery; at once when the clock went back before the
// last attempt; and back to every round once it works.
func TestRetrySchedule(t *testing.T) {
	failure := errors.New("remove: permission denied")
	var r retry
	now := time.Unix(1_700_000_000, 0).UnixNano()
	require.True(t, r.isDue(now), "a step that never failed is tried at every round")
	require.Equal(t, retryQuiet, r.record(now, nil).kind)

	n := r.record(now, failure)
	require.Equal(t, retryFailed, n.kind)
	require.Equal(t, retryFirst, n.wait)
	start := now
	var waits []time.Duration
	reminders := 0
	for range 40 {
		require.False(t, r.isDue(r.next()-1), "before its wait is over")
		require.True(t, r.isDue(r.next()))
		now = r.next()
		n := r.record(now, failure)
		waits = append(waits, n.wait)
		require.Equal(t, start, n.since)
		if n.kind == retryStillFails {
			reminders++
		} else {
			require.Equal(t, retryQuiet, n.kind)
		}
	}
	require.Equal(t, []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}, waits[:6])
	elapsed := time.Duration(now - start)
	require.LessOrEqual(t, reminders, int(elapsed/retryRemindEvery))
	require.GreaterOrEqual(t, reminders, int(elapsed/retryRemindEvery)-1)

	require.True(t, r.isDue(r.last-1), "the clock went back before the last attempt: tried at once")

	n = r.record(now, nil)
	require.Equal(t, retryWorks, n.kind)
	require.Equal(t, int64(41), n.failed)
	require.Equal(t, start, n.since)
	require.Equal(t, retry{}, r, "a step that works again is tried at every round")
}
