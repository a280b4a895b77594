package broker

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A store that closes or fails shuts every queue's wake signal under its
// lock (shutQueues), after it set closed or failed. A Queue call that
// looked at the store before that, and took the store's lock only after,
// declared a queue all the same: one that shutQueues never saw, whose
// wake signal nothing would ever close, on a store that had stopped. The
// call now looks again under the lock. Here the test holds the lock while
// the store fails: the call waits for it having passed its first look,
// and the goroutine that shuts the queues waits for it too; whichever
// takes it first, the call must be refused.
func TestAQueueDeclaredAsTheStoreStopsIsRefused(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentBytes: 4 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)

	s.mu.Lock()
	declared := make(chan error, 1)
	go func() {
		_, err := s.Queue("late", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
		declared <- err
	}()
	require.Eventually(t, func() bool { return waitsForALock("broker.(*Store).Queue(") }, eventually, tick,
		"the declaration waits for the store's lock")
	injected := errors.New("injected failure")
	failure := s.failure(injected) // as a failed append does: stop shuts the queues, once it has the lock
	s.mu.Unlock()

	select {
	case err := <-declared:
		require.ErrorIs(t, err, injected, "a queue was declared on a store that had failed")
		require.Equal(t, failure, err)
	case <-time.After(eventually):
		t.Fatal("the declaration did not return")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotContains(t, s.queues, "late")
}

// waitsForALock reports whether a goroutine running fn (as a stack names
// it) is waiting for a sync.Mutex.
func waitsForALock(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
