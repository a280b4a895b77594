package broker_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// requireWake requires q's Wake to say scheduled, in, and a Signal that
// is not nil and not closed.
func requireWake(t *testing.T, q *broker.Queue, scheduled bool, in time.Duration, what string) broker.WakeValue {
	t.Helper()
	w := q.Wake()
	require.NotNil(t, w.Signal, what)
	require.False(t, closed(w.Signal), "%s: the signal of a live queue is closed", what)
	require.Equal(t, scheduled, w.Scheduled, "%s: Scheduled", what)
	if scheduled {
		require.Equal(t, in, w.In, "%s: In", what)
	}
	return w
}

// A re-declaration changes what Wake names only where it changes what
// becomes receivable on its own. A new VisibilityTimeout leaves the leases
// taken before it as they were, so In still names their lapse; a
// MaxDeliveries lowered to a lease's count makes that lease its last
// delivery, whose lapse hands nothing back (and gives up the delayed
// message that has no delivery left), so nothing is Scheduled; raising it
// again makes the lapse a hand-back, and the signal handed out before it
// is closed.
func TestWakeFollowsTheDeclaredPolicy(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout, p.RetryDelay, p.MaxDeliveries = 10*time.Second, 5*time.Second, 3
	})
	q := e.queue("jobs", pol)
	mustPublish(t, q, "leased")
	mustPublish(t, q, "delayed")
	mustReceiveOne(t, q) // lapses at 10 s
	e.clock.Advance(2 * time.Second)
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil) // receivable at 7 s
	requireWake(t, q, true, 5*time.Second, "a lease and a retry")

	shorter := pol
	shorter.VisibilityTimeout = time.Second
	q2 := e.queue("jobs", shorter)
	require.Same(t, q, q2, "a second handle on a queue is the same queue")
	requireWake(t, q, true, 5*time.Second, "a shorter VisibilityTimeout for leases to come")
	e.clock.Advance(5 * time.Second)
	requireWake(t, q, true, 0, "the retry's end")
	d := mustReceiveOne(t, q) // its second delivery, lapsing at 8 s
	require.Equal(t, "delayed", string(d.Message.Payload))
	requireWake(t, q, true, time.Second, "the new lease under the shorter VisibilityTimeout")

	lowered := shorter
	lowered.MaxDeliveries = 1
	e.queue("jobs", lowered)
	requireWake(t, q, false, 0, "two leases that are now their messages' last deliveries")

	w := q.Wake()
	e.queue("jobs", shorter)
	require.True(t, closed(w.Signal), "MaxDeliveries raised: the leases lapse back into the queue")
	requireWake(t, q, true, time.Second, "MaxDeliveries raised again")
	e.clock.Advance(time.Second)
	requireWake(t, q, true, 0, "the lapse")
	require.Len(t, mustReceive(t, q, 2), 1, "the lapsed lease is handed out again")
	requireWake(t, q, true, 2*time.Second, "the first lease, lapsing at 10 s (the new one is its message's last delivery)")
}

// A reopened store's Wake names what its log holds: the lapse of a lease
// a consumer that died still holds, and the end of a retry delay, counted
// on the clock at the call, not the lapse of a lease on its last delivery
// (which makes nothing receivable). Whether the index is read from its
// checkpoint or rebuilt from the log, it says the same.
func TestWakeAfterReopenNamesWhatTheLogHolds(t *testing.T) {
	e := newEnv(t)
	pol := policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout, p.RetryDelay, p.MaxDeliveries = 10*time.Second, 20*time.Second, 2
	})
	q := e.queue("jobs", pol)
	for _, p := range []string{"leased", "retried", "last"} {
		mustPublish(t, q, p)
	}
	mustReceiveOne(t, q) // "leased", lapsing at 10 s
	mustNack(t, q, mustReceiveOne(t, q).Lease.Receipt, nil)
	last := mustReceiveOne(t, q)
	mustNack(t, q, last.Lease.Receipt, nil)
	e.clock.Advance(20 * time.Second)
	d := mustReceive(t, q, 2)
	require.Len(t, d, 2, "the two retries")
	mustNack(t, q, d[0].Lease.Receipt, nil) // "retried": its second delivery, dead
	// "last" is leased on its last delivery, lapsing at 30 s; "leased"
	// lapsed at 10 s and is receivable again.
	e.clock.Advance(time.Second)
	requireWake(t, q, true, 0, "a lapsed lease")
	mustReceiveOne(t, q) // "leased" again, its last delivery, lapsing at 31 s
	requireWake(t, q, false, 0, "two leases on their last delivery")
	mustPublish(t, q, "new")
	require.Len(t, mustReceive(t, q, 1), 1) // lapsing at 31 s, one delivery left
	requireWake(t, q, true, 10*time.Second, "before the restart")

	for _, reopen := range []struct {
		how   string
		after time.Duration
		in    time.Duration
	}{{"from its checkpoint", 4 * time.Second, 6 * time.Second}, {"rebuilt from the log", time.Second, 5 * time.Second}} {
		e.close()
		if reopen.how == "rebuilt from the log" {
			require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
		}
		e.clock.Advance(reopen.after)
		s := e.open()
		require.Equal(t, reopen.how == "rebuilt from the log", s.Recovery().IndexRebuilt, reopen.how)
		q = e.queue("jobs", pol)
		requireWake(t, q, true, reopen.in, "reopened "+reopen.how)
	}
}
