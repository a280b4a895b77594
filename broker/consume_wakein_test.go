package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// The promise these tests hold Consume to: it "never sleeps past a
// Wake.In" (API.md §3), and In is "how long, measured ... at the moment
// Wake was called, until a message ... becomes receivable" (the port's
// WakeValue). Consume calls Wake before its Receive, as the Waker contract
// asks, so whatever that Receive takes is spent from In already. Consume
// used to start the In-long wait only once the Receive returned, and so
// delivered such a message as late as the Receive had been slow: over a
// *Queue under SyncAll, by the fdatasync of the acks that Receive carried.
// These tests run on real time, as Consume's waits do, and judge by
// margins of half a second or more: the fault they guard against is a
// whole second late, or more.

// slowEmptyWaker is a Waker whose queue holds a message receivable `in`
// after each Wake (a retry delay ending), whose signal no event closes,
// and whose first Receive takes `first` (a commit that carries acks, a
// lock another consumer holds) and finds nothing all the same.
type slowEmptyWaker struct {
	plainBroker
	in, first time.Duration

	mu          sync.Mutex
	receives    []time.Time // when each Receive began
	firstReturn time.Time   // when the first one returned
}

func (b *slowEmptyWaker) Wake() WakeValue {
	return WakeValue{Signal: make(chan struct{}), In: b.in, Scheduled: true}
}

func (b *slowEmptyWaker) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	b.mu.Lock()
	b.receives = append(b.receives, time.Now())
	n := len(b.receives)
	b.mu.Unlock()
	if n == 1 {
		time.Sleep(b.first)
		b.mu.Lock()
		b.firstReturn = time.Now()
		b.mu.Unlock()
	}
	return nil, nil
}

// secondReceive returns how long after the first Receive returned the
// second one began, once there has been a second one.
func (b *slowEmptyWaker) secondReceive() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.receives) < 2 {
		return 0, false
	}
	return b.receives[1].Sub(b.firstReturn), true
}

// TestConsumeNeverSleepsPastWakeInWhenTheReceiveIsSlow: a Wake says a
// message is receivable in 1s, and the Receive after it takes 1.2s and
// finds nothing. The message is receivable by the time that Receive
// returns, so Consume receives again at once; it used to wait the whole
// second more.
func TestConsumeNeverSleepsPastWakeInWhenTheReceiveIsSlow(t *testing.T) {
	const in, first = time.Second, 1200 * time.Millisecond
	b := &slowEmptyWaker{plainBroker: plainBroker{newFake()}, in: in, first: first}
	r := startConsume(t, b, ackAll, ConsumeOptions{PollInterval: time.Hour})
	var gap time.Duration
	require.Eventually(t, func() (ok bool) { gap, ok = b.secondReceive(); return ok }, eventually, tick)
	require.ErrorIs(t, r.stop(t), context.Canceled)
	t.Logf("received again %v after the slow Receive returned", gap)
	// At once, give or take a loaded machine; the fault waits all of In.
	require.Less(t, gap, in/2,
		"Consume received again %v after a Receive that took %v, though its Wake said a message was receivable %v after it was called", gap, first, in)
}

// TestConsumeOverStoreReceivesARetriedMessageWhenItsDelayEnds: the same
// over a *Queue under SyncAll. Message A was nacked with a RetryDelay of
// 1.5s; B's handler succeeds, and the Receive that carries its ack waits
// for an fdatasync slowed to 1s (a busy or slow device) and finds nothing,
// A being still delayed, after a Wake that said "A in about 1.5s". A is
// due when its delay ends (or when that Receive returns, should the
// machine be so slow that it returns later); Consume used to wait the
// whole In again from the Receive's return, and deliver A a second late.
func TestConsumeOverStoreReceivesARetriedMessageWhenItsDelayEnds(t *testing.T) {
	const slowSync, retryDelay = time.Second, 1500 * time.Millisecond
	ffs := vfs.NewFaultFS(vfs.Default)
	var slow atomic.Bool
	synced := make(chan time.Time, 1) // when the slow fdatasync ended
	// The active segment's fdatasync, not the one of the next segment
	// made ready in the background.
	ffs.OnSync(func(name string) {
		if strings.HasPrefix(filepath.Base(name), "0000000001.seg") && slow.CompareAndSwap(true, false) {
			time.Sleep(slowSync)
			synced <- time.Now()
		}
	})
	s, err := Open(t.TempDir(), Options{FS: ffs, Sync: SyncAll})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("q", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, RetryDelay: retryDelay})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = q.Publish(ctx, []byte("A"))
	require.NoError(t, err)
	ds, err := q.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	nv, err := q.Nack(ctx, ds[0].Lease.Receipt, errors.New("try later"))
	require.NoError(t, err)
	_, err = q.Publish(ctx, []byte("B"))
	require.NoError(t, err)

	gotA := make(chan time.Time, 1)
	r := startConsume(t, q, func(_ context.Context, d DeliveryValue) error {
		if string(d.Message.Payload) == "B" {
			slow.Store(true) // the commit that carries this ack is slow
			return nil
		}
		gotA <- time.Now()
		return nil
	}, ConsumeOptions{PollInterval: time.Hour})
	var at, syncedAt time.Time
	select {
	case at = <-gotA:
	case <-time.After(10 * time.Second):
		t.Fatal("A was never delivered")
	}
	require.ErrorIs(t, r.stop(t), context.Canceled)
	select {
	case syncedAt = <-synced:
	default:
		t.Fatal("no commit was slowed: the test no longer tests what it says")
	}
	due := nv.VisibleAt
	if syncedAt.After(due) {
		due = syncedAt
	}
	t.Logf("A delivered %v after it was due", at.Sub(due))
	// At once, give or take a commit of A's lease on a loaded machine; the
	// fault delivers A the whole slow fdatasync late.
	require.Less(t, at.Sub(due), slowSync/2,
		"A became receivable at %v, the slow Receive returned at %v, and Consume delivered A at %v",
		nv.VisibleAt.Format(time.StampMilli), syncedAt.Format(time.StampMilli), at.Format(time.StampMilli))
}

// TestConsumeBackoffNeverSleepsPastWhatTheReceiveLeftOfWakeIn: the
// backoff after waits that ended at once is capped by In, and by what the
// Receive left of it, not by In counted afresh. Here Wake said 2s, the
// Receive took 1.5s and the signal was closed by then (a Nack elsewhere),
// and the backoff has grown to PollInterval: Consume waits what is left,
// half a second; it used to wait the whole 2s.
func TestConsumeBackoffNeverSleepsPastWhatTheReceiveLeftOfWakeIn(t *testing.T) {
	const in, spent = 2 * time.Second, 1500 * time.Millisecond
	c, err := newConsumer(&emptyBroker{}, ackAll, ConsumeOptions{PollInterval: time.Hour})
	require.NoError(t, err)
	c.streak = 30 // the backoff is at PollInterval
	signal := make(chan struct{})
	close(signal)
	wakeAt := time.Now().Add(-spent)
	start := time.Now()
	require.True(t, c.idle(context.Background(), WakeValue{Signal: signal, In: in, Scheduled: true}, wakeAt))
	took := time.Since(start)
	t.Logf("backed off %v", took)
	// What is left, give or take a late timer on a loaded machine; the
	// fault waits all of In.
	require.Less(t, took, (in-spent+in)/2, "the backoff slept past the In Wake named %v ago", spent)
	require.GreaterOrEqual(t, took, in-spent-10*time.Millisecond, "the backoff waits what is left of In: a message is receivable only then")
}
