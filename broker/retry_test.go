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
	require.True(t, r.isDue(now, true), "a step that never failed is tried at every round")
	require.Equal(t, retryQuiet, r.record(now, true, nil).kind)

	n := r.record(now, true, failure)
	require.Equal(t, retryFailed, n.kind)
	require.Equal(t, retryFirst, n.wait)
	start := now
	var waits []time.Duration
	reminders := 0
	for range 40 {
		require.False(t, r.isDue(r.next()-1, true), "before its wait is over")
		require.True(t, r.isDue(r.next(), true))
		now = r.next()
		n := r.record(now, true, failure)
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

	require.True(t, r.isDue(r.last-1, true), "the clock went back before the last attempt: tried at once")

	n = r.record(now, true, nil)
	require.Equal(t, retryWorks, n.kind)
	require.Equal(t, int64(41), n.failed)
	require.Equal(t, start, n.since)
	require.Equal(t, retry{}, r, "a step that works again is tried at every round")
}

// A failing step's attempts made while the clock cannot be read: a first
// failure then has no instant (none is made up: its records leave since
// out), and the first attempt that reads the clock is due at once and
// starts the schedule, with no reminder; a later one without a reading
// is not due, and leaves the schedule where it is.
func TestRetryScheduleWithoutAClock(t *testing.T) {
	failure := errors.New("remove: permission denied")
	var r retry
	require.True(t, r.isDue(0, false), "a step that never failed is tried without a clock too")
	n := r.record(0, false, failure)
	require.Equal(t, retryFailed, n.kind)
	require.False(t, n.sinceKnown)
	require.False(t, r.isDue(0, false), "no reading: not due")

	now := time.Unix(1_700_000_000, 0).UnixNano()
	require.True(t, r.isDue(now, true), "the first reading of the failure")
	n = r.record(now, true, failure)
	require.Equal(t, retryQuiet, n.kind, "the first WARN was the last record")
	require.False(t, n.sinceKnown, "the failure began before this reading")
	require.Equal(t, now, r.last)
	require.Equal(t, 4*time.Second, r.wait)
	require.False(t, r.isDue(now+int64(time.Second), true), "the schedule runs from the reading")

	last, wait := r.last, r.wait
	n = r.record(now+int64(time.Hour), false, failure)
	require.Equal(t, retryQuiet, n.kind, "no reminder without a reading")
	require.Equal(t, last, r.last, "the schedule stays where it is")
	require.Equal(t, min(2*wait, retryLongest), r.wait)

	n = r.record(now+int64(time.Hour), true, failure)
	require.Equal(t, retryStillFails, n.kind)
	require.False(t, n.sinceKnown)
	n = r.record(now+int64(time.Hour), true, nil)
	require.Equal(t, retryWorks, n.kind)
	require.False(t, n.sinceKnown)
	require.Equal(t, int64(4), n.failed)
	require.Equal(t, retry{}, r)
}
