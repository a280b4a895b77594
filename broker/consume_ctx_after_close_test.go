package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestConsumeReturnsCtxErrWhenCtxEndsWhileHandlersFinishAfterAClose:
// Consume's doc: once Consume learns that b closed, the handlers' contexts
// end "and Consume returns it when they have returned (ctx's error once
// ctx has ended, as below)"; below: "returns ctx.Err(), even when b ended
// meanwhile". Here b closes, the loop ends, and while Consume waits for
// its one running handler, ctx ends; when the handler returns, ctx has
// ended, so Consume returns ctx's error.
func TestConsumeReturnsCtxErrWhenCtxEndsWhileHandlersFinishAfterAClose(t *testing.T) {
	m, err := NewMemory(PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}, MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Publish(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	hdone := make(chan error, 1)
	h := func(hctx context.Context, d DeliveryValue) error {
		close(started)
		<-hctx.Done() // the close ends it
		hdone <- context.Cause(hctx)
		<-release // cleaning up takes a while
		return hctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- Consume(ctx, m, h, ConsumeOptions{}) }()
	<-started
	m.Close()
	select {
	case cause := <-hdone:
		if !errors.Is(cause, Closed) {
			t.Fatalf("setup: the handler's context ended with %v, want Closed", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("setup: the handler's context did not end after Close")
	}
	cancel() // ctx ends while Consume waits for the handler
	close(release)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ctx had ended when the last handler returned, so Consume should return ctx's error (\"ctx's error once ctx has ended\"), got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return")
	}
}
