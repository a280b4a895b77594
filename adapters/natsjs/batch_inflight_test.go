package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// The server keeps at most 50 atomic batches open per stream. A batch past
// that has its first message refused, unheard (it asks for no reply), and
// its commit fails as incomplete; PublishBatch must not hand that to its
// caller as a failure of a batch that fits the queue (API.md §2: every
// method is safe for concurrent use, and the file store admits any number
// of batches at once).

// TestConcurrentPublishBatchesAreEachAdmitted: many batches at once from one
// Store are each stored whole.
func TestConcurrentPublishBatchesAreEachAdmitted(t *testing.T) {
	b := openBackend(t)
	q := mustQueue(t, b.Store, "batches", policy())
	publishBatchesAtOnce(t, b, []*natsjs.Queue{q}, 200)
}

// TestPublishBatchesPastTheServersRoomAreEachAdmitted: with more batches
// open than the server keeps (as Stores sharing a queue may have), a batch
// the server refused for want of room stored nothing, and is sent again.
func TestPublishBatchesPastTheServersRoomAreEachAdmitted(t *testing.T) {
	t.Cleanup(natsjs.LiftBatchBound(1000))
	b := openBackend(t)
	q := mustQueue(t, b.Store, "batches", policy())
	publishBatchesAtOnce(t, b, []*natsjs.Queue{q}, 200)
}

// publishBatchesAtOnce publishes, from perQueue goroutines on each of qs at
// once, one batch of 50 payloads each, and checks every batch was stored
// whole and nothing else was.
func publishBatchesAtOnce(t *testing.T, b backend, qs []*natsjs.Queue, perQueue int) {
	t.Helper()
	ctx := context.Background()
	const size = 50
	payloads := make([][]byte, size)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprintf("payload %d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, perQueue*len(qs))
	start := make(chan struct{})
	for _, q := range qs {
		for range perQueue {
			wg.Go(func() {
				<-start
				ms, err := q.PublishBatch(ctx, payloads)
				if err == nil && len(ms) != size {
					err = fmt.Errorf("%d messages for a batch of %d", len(ms), size)
				}
				errs <- err
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if err != nil {
			first = cmpOr(first, err)
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent PublishBatch calls into an unbounded queue failed, the first with %v (QueueFull: %v)",
			failed, perQueue*len(qs), first, errors.Is(first, broker.QueueFull))
	}
	// Whatever failed stored nothing: atomicity holds either way.
	info, err := b.stream(t, "_Q_batches").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64((perQueue*len(qs) - failed) * size); info.State.Msgs != want {
		t.Errorf("the work stream holds %d messages after %d admitted batches of %d, want %d", info.State.Msgs, perQueue*len(qs)-failed, size, want)
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestABatchWaitingForItsSlotWhenTheStoreClosesSendsNothing: a
// PublishBatch that waits for one of its Queue's open-batch tokens when
// Close runs has sent nothing; once it gets the token it returns Closed,
// and stores nothing after Close returned (Close: "every later call ...
// returns ... Closed"; this one had not reached the server).
func TestABatchWaitingForItsSlotWhenTheStoreClosesSendsNothing(t *testing.T) {
	t.Cleanup(natsjs.LiftBatchBound(1))
	b := openBackend(t)
	q := mustQueue(t, b.Store, "slot", policy())
	release := natsjs.TakeBatchSlot(q)
	errc := make(chan error, 1)
	go func() {
		_, err := q.PublishBatch(context.Background(), [][]byte{[]byte("a"), []byte("b")})
		errc <- err
	}()
	until(t, 10*time.Second, "PublishBatch waits for its slot", func() bool { return waitingIn("natsjs.(*Queue).publishBatch(") })
	if err := b.Store.Close(); err != nil {
		t.Fatal(err)
	}
	release()
	select {
	case err := <-errc:
		if !errors.Is(err, broker.Closed) {
			t.Fatalf("PublishBatch that waited for its slot across Close: %v, want Closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PublishBatch did not return after its slot was freed")
	}
	info, err := b.stream(t, "_Q_slot").Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("the work stream holds %d messages: the batch was stored after Close returned", info.State.Msgs)
	}
}

// TestABatchThatNeverGetsItsSlotSaysNothingWasSent: a PublishBatch whose
// context ends while it waits for an open-batch token returns the
// context's error, saying that nothing was sent (so the caller knows the
// batch is not stored, as it cannot after a timeout at the server).
func TestABatchThatNeverGetsItsSlotSaysNothingWasSent(t *testing.T) {
	t.Cleanup(natsjs.LiftBatchBound(1))
	b := openBackend(t)
	q := mustQueue(t, b.Store, "slot", policy())
	defer natsjs.TakeBatchSlot(q)()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := q.PublishBatch(ctx, [][]byte{[]byte("a")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PublishBatch that never got its slot: %v, want DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("PublishBatch that never got its slot: %q does not say that nothing was sent", err)
	}
}

// waitingIn reports whether a goroutine is blocked in a select or a
// channel send in the function fn names.
func waitingIn(fn string) bool {
	buf := make([]byte, 4<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if (strings.Contains(g, "[select") || strings.Contains(g, "[chan send")) && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// TestABatchWhoseCommitGotNoAnswerSaysItMayBeStored: a PublishBatch whose
// commit request gets no answer (here its context ends as the commit is
// sent) cannot know whether the server stored the batch, or will: its
// error says so, and that a retry may store it twice, and wraps the
// context's error. It used to read "publish: context canceled", which
// a caller could take for a batch not stored.
func TestABatchWhoseCommitGotNoAnswerSaysItMayBeStored(t *testing.T) {
	b := openBackend(t)
	q := mustQueue(t, b.Store, "commit", policy())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer natsjs.HoldBatchCommit(cancel)()
	_, err := q.PublishBatch(ctx, [][]byte{[]byte("a"), []byte("b")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishBatch whose commit got no answer: %v, want Canceled", err)
	}
	for _, want := range []string{"may or may not have stored the whole batch", "a retry may store it twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("PublishBatch whose commit got no answer: %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "nothing was sent") || errors.Is(err, broker.Closed) {
		t.Fatalf("PublishBatch whose commit got no answer: %q says it stored nothing", err)
	}
}
