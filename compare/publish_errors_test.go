package compare_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
)

// twoErrorsTarget fails each of its first two publishes, once both are
// in flight, with an error of its own type: a plain error, then one that
// wraps another, as a store's first failed call and the later ones that
// meet its poison can differ.
type twoErrorsTarget struct {
	calls   atomic.Int64
	arrived chan struct{} // closed when the second call arrives
}

func (f *twoErrorsTarget) publish(context.Context, []byte) error {
	n := f.calls.Add(1)
	if n == 2 {
		close(f.arrived)
	}
	<-f.arrived
	if n == 1 {
		return errors.New("the first failure")
	}
	return fmt.Errorf("a later failure: %w", io.ErrUnexpectedEOF)
}

func (f *twoErrorsTarget) publishBatch(context.Context, [][]byte) error { return nil }

func (f *twoErrorsTarget) drain(context.Context, int, int) error { return nil }

// TestPublishNKeepsAFailureOfEitherType: BenchmarkQueues's publish rows
// end with the error a producer met. Two producers failing with errors of
// different types must end the run with one of them, not crash it: an
// atomic.Value, which panics when a second Store has another type than the
// first, lost the failure and the process with it.
func TestPublishNKeepsAFailureOfEitherType(t *testing.T) {
	f := &twoErrorsTarget{arrived: make(chan struct{})}
	err := publishN(context.Background(), f, 2, 10, []byte("m"))
	if err == nil || (err.Error() != "the first failure" && !errors.Is(err, io.ErrUnexpectedEOF)) {
		t.Fatalf("publishN = %v; want one of the two producers' failures", err)
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d publishes; want 2: each producer stops at its failure", n)
	}
}
