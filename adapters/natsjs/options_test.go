package natsjs_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
)

// TestTheLargestTimeoutDeclaresQueues: Open accepts any Timeout that is
// not negative, math.MaxInt64 (a natural "no timeout") included, and a
// Store opened so declares queues and uses them: the bound of a
// declaration, twice the Timeout, is held at the largest Duration rather
// than wrapping to a negative one that failed every Queue with "context
// deadline exceeded".
func TestTheLargestTimeoutDeclaresQueues(t *testing.T) {
	nc := connect(t, sharedServer(t).ClientURL())
	prefix := "LARGETIMEOUT"
	st, err := natsjs.Open(nc, natsjs.Options{Prefix: prefix, Timeout: time.Duration(math.MaxInt64)})
	if err != nil {
		t.Fatalf("Open refused the Timeout: %v", err)
	}
	t.Cleanup(func() { st.Close(); deleteStreams(t, nc, prefix) })
	q, err := st.Queue("jobs", policy())
	if err != nil {
		t.Fatalf("Open accepted Timeout %v, but Queue fails: %v", time.Duration(math.MaxInt64), err)
	}
	ctx := context.Background()
	if _, err := q.Publish(ctx, []byte("x")); err != nil {
		t.Fatalf("Publish with the largest Timeout: %v", err)
	}
	ackAll(t, q, receiveN(t, q, 1))
}
