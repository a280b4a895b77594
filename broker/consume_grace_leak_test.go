package broker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/internal/leakcheck"
)

// heldValueCtx is a caller's context whose lookup of the standard
// library's cancellation key (context.Cause asks for it) is held once
// armed: the goroutine that ends a StopGrace reads ctx's cause through it.
type heldValueCtx struct {
	context.Context
	hold *hold
}

func (c heldValueCtx) Value(key any) any {
	if _, cancelKey := key.(*int); cancelKey {
		c.hold.here()
	}
	return c.Context.Value(key)
}

// hold parks the first goroutine that reaches it once armed, until let.
type hold struct {
	mu      sync.Mutex
	armed   bool
	reached chan struct{} // closed when a goroutine is parked
	gate    chan struct{}
	let     func()
}

func newHold() *hold {
	h := &hold{reached: make(chan struct{}), gate: make(chan struct{})}
	h.let = sync.OnceFunc(func() { close(h.gate) })
	return h
}

func (h *hold) arm() {
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
}

func (h *hold) here() {
	h.mu.Lock()
	park := h.armed
	h.armed = false
	h.mu.Unlock()
	if park {
		close(h.reached)
		<-h.gate
	}
}

// consumeWaitsInGrace reports whether a goroutine running Consume waits on
// a channel inside the func that ends its StopGrace (see graceful).
func consumeWaitsInGrace() bool {
	for _, stack := range leakcheck.Running() {
		header, frames, _ := strings.Cut(stack, "\n")
		top, _, _ := strings.Cut(frames, "\n")
		if strings.Contains(header, "[chan receive") && strings.Contains(top, ").graceful.") &&
			strings.Contains(stack, "broker.Consume(") {
			return true
		}
	}
	return false
}

// With a StopGrace, Consume returns only once the goroutines its grace
// started have returned. The one that ends the grace reads ctx's cause,
// the caller's code, which holds it here: Consume must wait for it, not
// return and leave it running.
func TestConsumeLeavesNoGraceGoroutineBehind(t *testing.T) {
	before := leakcheck.Running()
	h := newHold()
	t.Cleanup(h.let) // a failure below leaves nothing parked
	f := newFake()
	f.Publish(context.Background(), []byte("x"))
	started, finish := make(chan struct{}), make(chan struct{})
	inner, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Consume(heldValueCtx{inner, h}, f, func(context.Context, DeliveryValue) error {
			close(started)
			<-finish
			return nil
		}, ConsumeOptions{StopGrace: time.Nanosecond})
	}()
	<-started
	h.arm()
	cancel()
	<-h.reached // the grace is over, and its goroutine is parked in ctx's code
	close(finish)
	for !consumeWaitsInGrace() {
		select {
		case err := <-done:
			t.Fatalf("Consume returned (%v) while a goroutine it started still ran:\n%s", err, strings.Join(leakcheck.Since(before), "\n\n"))
		case <-time.After(time.Millisecond):
		}
	}
	h.let()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return")
	}
	require.Equal(t, 1, f.count("ack"), "the handler's result settles its delivery")
	require.NoError(t, leakcheck.Check(before, t.TempDir()))
}
