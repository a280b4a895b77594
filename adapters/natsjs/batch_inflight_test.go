package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
// Store are each stored whole. Their deadline is far off: the calls all
// begin together, and with the Store's Timeout (5 s) a loaded machine
// ended those still waiting for one of the Queue's 16 tokens then, which
// the test counted as refusals of batches that fit the queue.
func TestConcurrentPublishBatchesAreEachAdmitted(t *testing.T) {
	b := openBackend(t)
	q := mustQueue(t, b.Store, "batches", policy())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	publishBatchesAtOnce(t, ctx, b, q, 200)
}

// TestPublishBatchesPastTheServersRoomAreEachAdmitted: with more batches
// open than the server keeps (as Stores sharing a queue may have), a batch
// the server refused for want of room stored nothing, and is sent again.
// Two batches stop before their commits on a server with room for two
// open batches per stream; a third is refused, and, once those two ended
// (between its attempts, so that nothing here hangs on timing), is
// admitted when sent again. All three are stored whole, as answered.
// (This used to publish 200 batches at once past the server's room of
// 50, and failed on a loaded machine when room did not come back within
// the few milliseconds of a batch's retries.)
func TestPublishBatchesPastTheServersRoomAreEachAdmitted(t *testing.T) {
	st, b, _ := roomServer(t, 2)
	q := mustQueue(t, st, "room", policy())
	held := make(chan struct{}, 2)
	release := make(chan struct{})
	var commits atomic.Int64
	defer natsjs.HoldBatchCommit(func() {
		if commits.Add(1) <= 2 {
			held <- struct{}{}
			<-release
		}
	})()
	type answer struct {
		ms  []broker.MessageValue
		err error
	}
	answers := make([]answer, 3)
	payloads := func(i int) [][]byte {
		return [][]byte{[]byte(fmt.Sprintf("batch %d payload 0", i)), []byte(fmt.Sprintf("batch %d payload 1", i))}
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			ms, err := q.PublishBatch(context.Background(), payloads(i))
			answers[i] = answer{ms, err}
		})
	}
	// Both sent their first message, which the server took before
	// anything sent after on the connection: it holds both open.
	<-held
	<-held
	// end lets the two finish their commits, and waits until they did.
	end := sync.OnceFunc(func() {
		close(release)
		wg.Wait()
	})
	var retries atomic.Int64
	defer natsjs.HoldBatchRetry(func() {
		retries.Add(1)
		end()
	})()
	ms, err := q.PublishBatch(context.Background(), payloads(2))
	answers[2] = answer{ms, err}
	end()
	if n := retries.Load(); n != 1 {
		t.Errorf("the batch past the server's room was refused %d times, want once (then room came back)", n)
	}
	last, err := q.Publish(context.Background(), []byte("last"))
	if err != nil {
		t.Fatalf("Publish after the batches: %v", err)
	}
	stored := storedBatches(t, b, "_Q_room", last.ID)
	for i, a := range answers {
		if a.err != nil {
			t.Errorf("batch %d: %v", i, a.err)
			continue
		}
		for j, m := range a.ms {
			if seqs := stored[i]; len(seqs) != 2 || m.ID != fmt.Sprintf("%016x", seqs[j]) {
				t.Errorf("batch %d was answered as stored at %s, %s; the stream holds it at %v", i, a.ms[0].ID, a.ms[1].ID, seqs)
				break
			}
		}
	}
}

// TestConcurrentPublishBatchesThatGotNoAnswerAreStoredWholeOrNotAtAll: of
// batches published at once, one in ten gets no answer to its commit (as
// when the Store's Timeout passes first on a loaded machine): half of
// those because the commit is lost, so that the server never stores the
// batch, half because the answer is lost after the server stored it. Each
// of them is stored whole or not at all, the others as they were
// answered. (The check used to count every batch that failed as stored
// nothing, and a batch that got no answer as a failure.)
func TestConcurrentPublishBatchesThatGotNoAnswerAreStoredWholeOrNotAtAll(t *testing.T) {
	var commits atomic.Int64
	defer natsjs.SendBatchCommitThrough(func(send func() (*nats.Msg, error)) (*nats.Msg, error) {
		switch commits.Add(1) % 20 {
		case 0: // The commit is lost: the server abandons the batch.
			return nil, context.DeadlineExceeded
		case 10: // The answer is lost.
			if _, err := send(); err != nil {
				return nil, err
			}
			return nil, context.DeadlineExceeded
		}
		return send()
	})()
	b := openBackend(t)
	q := mustQueue(t, b.Store, "batches", policy())
	// A deadline far off, so that only the lost ones go unanswered.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	unanswered, stored := publishBatchesAtOnce(t, ctx, b, q, 200)
	if unanswered != 20 || stored != 10 {
		t.Errorf("%d batches got no answer, %d of them stored; want 20, 10 (the ones whose answer was lost)", unanswered, stored)
	}
}

// publishBatchesAtOnce publishes n batches of 50 payloads on q at once,
// each its own payloads, and checks what each was answered against what
// the work stream then holds. Each batch must be admitted: stored whole,
// its messages consecutive, at the IDs it was answered with. A batch
// whose commit got no answer (on a loaded machine the Store's Timeout may
// pass first) cannot be called a failure: it may be stored, whole or not
// at all. No batch is stored in part or twice, and nothing else is
// stored. It reports how many batches got no answer, and how many of
// those were stored.
func publishBatchesAtOnce(t *testing.T, ctx context.Context, b backend, q *natsjs.Queue, n int) (unanswered, unansweredStored int) {
	t.Helper()
	const size = 50
	type answer struct {
		ms  []broker.MessageValue
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		payloads := make([][]byte, size)
		for j := range payloads {
			payloads[j] = []byte(fmt.Sprintf("batch %d payload %d", i, j))
		}
		wg.Go(func() {
			<-start
			ms, err := q.PublishBatch(ctx, payloads)
			answers[i] = answer{ms, err}
		})
	}
	close(start)
	wg.Wait()

	// The server takes what one connection sends in order: once a publish
	// sent after every commit is answered, each commit that was sent has
	// been stored or refused, and a batch not stored by now never will be.
	settle, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last, err := q.Publish(settle, []byte("last"))
	if err != nil {
		t.Fatalf("Publish after the batches: %v", err)
	}
	stored := storedBatches(t, b, "_Q_batches", last.ID)

	failed := 0
	var first error
	for i, a := range answers {
		seqs := stored[i]
		whole := len(seqs) == size
		for j := 1; whole && j < size; j++ {
			whole = seqs[j] == seqs[0]+uint64(j)
		}
		if len(seqs) != 0 && !whole {
			t.Errorf("batch %d is stored in part or out of order: %d of its %d messages, at %v", i, len(seqs), size, seqs)
			continue
		}
		switch {
		case a.err == nil:
			if len(a.ms) != size {
				t.Errorf("batch %d: %d messages for a batch of %d", i, len(a.ms), size)
				continue
			}
			if len(seqs) == 0 {
				t.Errorf("batch %d was answered as stored at %s to %s, and is not stored", i, a.ms[0].ID, a.ms[size-1].ID)
				continue
			}
			for j, m := range a.ms {
				if want := fmt.Sprintf("%016x", seqs[j]); m.ID != want {
					t.Errorf("batch %d: message %d was answered as %s, and is stored at %s", i, j, m.ID, want)
					break
				}
			}
		case strings.Contains(a.err.Error(), "may or may not have stored the whole batch"):
			unanswered++
			if whole {
				unansweredStored++
			}
		default:
			// An answer, and a refusal: it stored nothing, and an
			// unbounded queue should not have refused it.
			first = cmpOr(first, a.err)
			failed++
			if len(seqs) != 0 {
				t.Errorf("batch %d was refused (%v), and is stored whole", i, a.err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent PublishBatch calls into an unbounded queue were refused, the first with %v (QueueFull: %v)",
			failed, n, first, errors.Is(first, broker.QueueFull))
	}
	if unanswered > 0 {
		t.Logf("%d of %d batches got no answer to their commit; %d of those are stored", unanswered, n, unansweredStored)
	}
	return unanswered, unansweredStored
}

// storedBatches reads the whole stream named the backend's prefix, then
// suffix, which holds the batches of publishBatchesAtOnce and then the
// message last, and returns the sequences at which each batch's payloads
// are stored, in payload order, by batch. It fails the test for a
// message it cannot place, a payload stored twice, and a stream that
// does not end at last.
func storedBatches(t *testing.T, b backend, suffix, last string) map[int][]uint64 {
	t.Helper()
	ctx := context.Background()
	stream := b.stream(t, suffix)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%016x", info.State.LastSeq); got != last {
		t.Fatalf("the stream ends at %s, want %s (the publish after the batches)", got, last)
	}
	bySeq := make(map[int]map[int]uint64)
	for seq := info.State.FirstSeq; seq < info.State.LastSeq; seq++ {
		raw, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		var batch, payload int
		if _, err := fmt.Sscanf(string(raw.Data), "batch %d payload %d", &batch, &payload); err != nil {
			t.Fatalf("message %d holds %q, which no batch published", seq, raw.Data)
		}
		if bySeq[batch] == nil {
			bySeq[batch] = make(map[int]uint64)
		}
		if at, ok := bySeq[batch][payload]; ok {
			t.Fatalf("batch %d payload %d is stored twice, at %d and %d", batch, payload, at, seq)
		}
		bySeq[batch][payload] = seq
	}
	stored := make(map[int][]uint64, len(bySeq))
	for batch, payloads := range bySeq {
		seqs := make([]uint64, 0, len(payloads))
		for j := 0; ; j++ {
			seq, ok := payloads[j]
			if !ok {
				break
			}
			seqs = append(seqs, seq)
		}
		if len(seqs) != len(payloads) {
			t.Errorf("batch %d is stored with a gap: payloads %v", batch, payloads)
		}
		stored[batch] = seqs
	}
	return stored
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
