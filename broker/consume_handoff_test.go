package broker

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flipCtx is a context whose cancellation a test places at one
// exact point: once armed, the next Err call reads ctx as live and
// cancels it before returning, as if another goroutine cancelled ctx
// right after that read.
type flipCtx struct {
	context.Context
	cancel context.CancelFunc
	armed  atomic.Bool
	// by is the function whose Err call found ctx live and ended it.
	by atomic.Value
}

func newFlipCtx() *flipCtx {
	ctx, cancel := context.WithCancel(context.Background())
	return &flipCtx{Context: ctx, cancel: cancel}
}

func (c *flipCtx) Err() error {
	if c.armed.CompareAndSwap(true, false) {
		err := c.Context.Err() // nil: the read comes before the cancel
		if pc, _, _, ok := runtime.Caller(1); ok {
			c.by.Store(runtime.FuncForPC(pc).Name())
		}
		c.cancel()
		return err
	}
	return c.Context.Err()
}

// armingBroker arms ctx as its Receive call number armAt returns
// deliveries: the next ctx.Err call, dispatch's check of the delivery,
// finds ctx live, and ctx has ended when that call returns.
type armingBroker struct {
	*fakeBroker
	ctx   *flipCtx
	armAt int64
	calls atomic.Int64
}

func (b *armingBroker) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	ds, err := b.fakeBroker.Receive(ctx, max)
	if len(ds) > 0 && b.calls.Add(1) == b.armAt {
		b.ctx.armed.Store(true)
	}
	return ds, err
}

// "When ctx ends, Consume stops receiving and starts no handler more":
// ctx ends just after dispatch checked it for a delivery, before the
// handler goroutine (a fresh one, or one parked in worker) took it. The
// worker re-checks ctx only for a held job; an unheld one is started
// regardless, after ctx ended, and with a StopGrace under a live context.
func TestConsumeStartsNoHandlerAfterCtxEndedOnItsWay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		armAt int64 // 1: a fresh goroutine takes it; 2: the parked worker does
		grace time.Duration
	}{
		{"fresh worker", 1, 0},
		{"parked worker", 2, 0},
		{"parked worker, StopGrace", 2, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			for range 2 {
				f.Publish(context.Background(), []byte("x"))
			}
			ctx := newFlipCtx()
			defer ctx.cancel()
			b := &armingBroker{fakeBroker: f, ctx: ctx, armAt: tc.armAt}
			var mu sync.Mutex
			var late []string
			h := func(hctx context.Context, d DeliveryValue) error {
				if ctx.Context.Err() != nil { // the inner ctx: no flip
					mu.Lock()
					late = append(late, d.Message.ID)
					mu.Unlock()
				}
				return nil
			}
			done := make(chan error, 1)
			go func() { done <- Consume(ctx, b, h, ConsumeOptions{StopGrace: tc.grace}) }()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Consume returned %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return")
			}
			if by, _ := ctx.by.Load().(string); !strings.HasSuffix(by, "(*consumer).dispatch") {
				t.Fatalf("setup: ctx was ended by an Err call from %q, want dispatch's check", by)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(late) > 0 {
				acked := 0
				for _, c := range f.calls() {
					if c.call == "ack" && c.id == late[0] {
						acked++
					}
				}
				t.Fatalf("the handler of %v started after Consume's ctx had ended (and its delivery was acked %d time(s)); want no handler started once ctx ended, the delivery nacked unstarted with %s", late, acked, ReasonConsumerStopped)
			}
		})
	}
}
