package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/adapters/natsjs"
	"github.com/walbroker/walbroker/broker"
)

// Behaviour under time, restarts and two Stores, held against the
// contract (API.md, the port's doc comments) and the file store.

// receiveWithinFor polls Receive on q until it returns something or d passes.
func receiveWithinFor(t *testing.T, q *natsjs.Queue, d time.Duration) []broker.DeliveryValue {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ds, err := q.Receive(context.Background(), 10)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if len(ds) > 0 || time.Now().After(deadline) {
			return ds
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A replayed dead letter keeps its ID and EnqueuedAt and counts from 1;
// its ID is then no dead letter; a second death leaves one record.
func TestReplayKeepsIdentityAndIsNoDeadLetterAfter(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "x-replay", policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2 }))
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, q, 1)[0]
	if err := q.Reject(ctx, d.Lease.Receipt, errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if err := q.ReplayDeadLetter(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.DeleteDeadLetter(ctx, m.ID); !errors.Is(err, broker.DeadLetterNotFound) {
		t.Fatalf("DeleteDeadLetter of a replayed ID: %v, want DeadLetterNotFound", err)
	}
	if err := q.ReplayDeadLetter(ctx, m.ID); !errors.Is(err, broker.DeadLetterNotFound) {
		t.Fatalf("second ReplayDeadLetter: %v, want DeadLetterNotFound", err)
	}
	d = receiveN(t, q, 1)[0]
	if d.Message.ID != m.ID || !d.Message.EnqueuedAt.Equal(m.EnqueuedAt) || d.Deliveries != 1 {
		t.Fatalf("replayed: %q %v #%d, want %q %v #1", d.Message.ID, d.Message.EnqueuedAt, d.Deliveries, m.ID, m.EnqueuedAt)
	}
	if _, err := q.Nack(ctx, d.Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	d = receiveN(t, q, 1)[0]
	nv, err := q.Nack(ctx, d.Lease.Receipt, nil)
	if err != nil || !nv.DeadLettered || d.Deliveries != 2 {
		t.Fatalf("last Nack: %+v %v (#%d)", nv, err, d.Deliveries)
	}
	dls, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Message.ID != m.ID || dls[0].Deliveries != 2 || dls[0].Reason != "UNEXPLAINED" || !dls[0].Message.EnqueuedAt.Equal(m.EnqueuedAt) {
		t.Fatalf("dead letters %s", dlText(dls))
	}
}

// A message whose deliveries run out by lapses only must be a dead
// letter (LEASE_EXPIRED, Deliveries = MaxDeliveries, FailedAt its last
// lease's ExpiresAt) at the next DeadLetters of the Store that handed the
// last lease out, with no Receive: the file store sweeps lapses at every
// DeadLetters (broker/queue_dead.go, sweepLocked), and the package doc
// promises the same ("The Store that handed the lease out knows the
// message is dead from its ExpiresAt: ... each of its sweeps ... bury the
// messages of its own lapsed last leases"; DeadLetters is a call that
// looks). For a redelivered message nats-server sends no advisory until
// some consumer pulls again, so only the Store's own lapsed last lease
// can make that sweep run.
func TestLapsesOnlyMakeADeadLetterWithoutAReceive(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "x-lapse", policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = time.Second
		p.MaxDeliveries = 2
		p.Capacity = 1
	}))
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, q, 1)
	var last broker.DeliveryValue
	until(t, 10*time.Second, "the redelivery", func() bool {
		ds, err := q.Receive(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			last = ds[0]
			return true
		}
		return false
	})
	if last.Deliveries != 2 {
		t.Fatalf("redelivered #%d, want 2", last.Deliveries)
	}
	time.Sleep(time.Until(last.Lease.ExpiresAt) + 100*time.Millisecond)
	var dls []broker.DeadLetterValue
	for start := time.Now(); len(dls) == 0 && time.Since(start) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
		if dls, err = q.DeadLetters(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(dls) != 1 {
		t.Fatalf("DeadLetters, polled for 5 s from 100 ms after the last lease lapsed at %v: %s, want one dead letter", last.Lease.ExpiresAt, dlText(dls))
	}
	dl := dls[0]
	if dl.Message.ID != m.ID || dl.Reason != "LEASE_EXPIRED" || dl.Deliveries != 2 || dl.Cause != "" || dl.Code != 0 || !dl.FailedAt.Equal(last.Lease.ExpiresAt) {
		t.Fatalf("dead letter %s; want %s LEASE_EXPIRED #2 at %v", dlText(dls), m.ID, last.Lease.ExpiresAt)
	}
	if _, err := q.Publish(ctx, []byte("y")); err != nil {
		t.Fatalf("Publish into the freed place: %v", err)
	}
}

// The same death when the Store that leased the last delivery was closed:
// another Store's Receive makes the server notice; the dead letter then
// counts MaxDeliveries and says LEASE_EXPIRED.
func TestLapseDeathOfAClosedStoresLeaseCountsItsDeliveries(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	p := policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = time.Second
		p.MaxDeliveries = 2
	})
	sa := storeOn(t, b.prefix, natsjs.Options{})
	qa := mustQueue(t, sa, "x-closed", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	first := receiveN(t, qa, 1)[0]
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	qb := mustQueue(t, b.Store, "x-closed", p)
	// The lease is honoured after its Store closed.
	if ds, err := qb.Receive(ctx, 5); err != nil || len(ds) != 0 {
		t.Fatalf("Receive during the closed Store's lease: %d, %v", len(ds), err)
	}
	if err := qb.Ack(ctx, first.Lease.Receipt); !errors.Is(err, broker.UnknownReceipt) {
		t.Fatalf("Ack of the closed Store's receipt: %v, want UnknownReceipt", err)
	}
	ds := receiveWithinFor(t, qb, 10*time.Second)
	if len(ds) != 1 || ds[0].Deliveries != 2 {
		t.Fatalf("after the lapse: %d deliveries", len(ds))
	}
	if time.Now().Before(first.Lease.ExpiresAt) {
		t.Fatalf("redelivered before %v", first.Lease.ExpiresAt)
	}
	// Now a third Store leases nothing; qb's lease lapses (qb stays open).
	time.Sleep(time.Until(ds[0].Lease.ExpiresAt) + 100*time.Millisecond)
	sc := storeOn(t, b.prefix, natsjs.Options{})
	qc := mustQueue(t, sc, "x-closed", p)
	if got, err := qc.Receive(ctx, 5); err != nil || len(got) != 0 {
		t.Fatalf("Receive after the last lapse: %d, %v", len(got), err)
	}
	dls := waitForDeadLetters(t, qc, 1, "the lapse death")
	if dls[0].Message.ID != m.ID || dls[0].Reason != "LEASE_EXPIRED" || dls[0].Deliveries != 2 {
		t.Fatalf("dead letter %s", dlText(dls))
	}
}

// A nack's retry delay and count survive the Store that nacked closing;
// the new Store's Nack on the last delivery dead-letters with its count.
func TestNackedCountSurvivesItsStore(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t)
	p := policy(func(p *broker.PolicyValue) {
		p.RetryDelay = 1500 * time.Millisecond
		p.MaxDeliveries = 2
	})
	sa := storeOn(t, b.prefix, natsjs.Options{})
	qa := mustQueue(t, sa, "x-nack", p)
	if _, err := qa.Publish(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, qa, 1)[0]
	nv, err := qa.Nack(ctx, d.Lease.Receipt, broker.NewError("FLAKY", 0x01020304, "try later", "private"))
	if err != nil {
		t.Fatal(err)
	}
	sa.Close()
	qb := mustQueue(t, b.Store, "x-nack", p)
	ds := receiveWithinFor(t, qb, 10*time.Second)
	if len(ds) != 1 || ds[0].Deliveries != 2 {
		t.Fatalf("after the retry delay: %+v", ds)
	}
	if time.Now().Before(nv.VisibleAt) {
		t.Fatalf("redelivered before VisibleAt %v", nv.VisibleAt)
	}
	nv, err = qb.Nack(ctx, ds[0].Lease.Receipt, nil)
	if err != nil || !nv.DeadLettered {
		t.Fatalf("last Nack: %+v, %v", nv, err)
	}
	dls, err := qb.DeadLetters(ctx, 5)
	if err != nil || len(dls) != 1 || dls[0].Deliveries != 2 || dls[0].Reason != "UNEXPLAINED" {
		t.Fatalf("dead letters %s %v", dlText(dls), err)
	}
}

// PublishKeyed: a key inside its window after the message was acked is a
// duplicate (original ID and EnqueuedAt, nothing queued); just past the
// window it enqueues afresh.
func TestKeyInsideAndPastItsWindowAfterAck(t *testing.T) {
	ctx := context.Background()
	const window = 400 * time.Millisecond
	q := mustQueue(t, openBackend(t).Store, "x-key", policy(func(p *broker.PolicyValue) { p.DedupWindow = window }))
	m := publishKeyed(t, q, "k", "one")
	d := receiveN(t, q, 1)[0]
	if err := q.Ack(ctx, d.Lease.Receipt); err != nil {
		t.Fatal(err)
	}
	dup := publishKeyed(t, q, "k", "two")
	if dup.ID != m.ID || !dup.EnqueuedAt.Equal(m.EnqueuedAt) {
		t.Fatalf("inside the window: %s %v, want %s %v", dup.ID, dup.EnqueuedAt, m.ID, m.EnqueuedAt)
	}
	if ds, _ := q.Receive(ctx, 5); len(ds) != 0 {
		t.Fatalf("a duplicate queued %d messages", len(ds))
	}
	time.Sleep(time.Until(m.EnqueuedAt.Add(window + 50*time.Millisecond)))
	fresh := publishKeyed(t, q, "k", "three")
	if fresh.ID == m.ID {
		t.Fatalf("past the window the key still answers the original %s", m.ID)
	}
	ds := receiveN(t, q, 1)
	if string(ds[0].Message.Payload) != "three" || ds[0].Message.ID != fresh.ID {
		t.Fatalf("past the window got %q %s", ds[0].Message.Payload, ds[0].Message.ID)
	}
}

// One key from two Stores at once enqueues one message and both answer it.
func TestOneKeyFromTwoStoresAtOnce(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	qa := mustQueue(t, a, "x-key2", policy())
	qb := mustQueue(t, b, "x-key2", policy())
	for round := 0; round < 10; round++ {
		key := fmt.Sprintf("k%d", round)
		var ma, mb broker.MessageValue
		var ea, eb error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ma, ea = qa.PublishKeyed(ctx, key, []byte("a")) }()
		go func() { defer wg.Done(); mb, eb = qb.PublishKeyed(ctx, key, []byte("b")) }()
		wg.Wait()
		if ea != nil || eb != nil {
			t.Fatalf("round %d: %v, %v", round, ea, eb)
		}
		if ma.ID != mb.ID || !ma.EnqueuedAt.Equal(mb.EnqueuedAt) {
			t.Fatalf("round %d: %s %v vs %s %v", round, ma.ID, ma.EnqueuedAt, mb.ID, mb.EnqueuedAt)
		}
	}
	var got []broker.DeliveryValue
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 10 && time.Now().Before(deadline) {
		ds, err := qa.Receive(ctx, 20)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	time.Sleep(300 * time.Millisecond)
	ds, _ := qb.Receive(ctx, 20)
	got = append(got, ds...)
	if len(got) != 10 {
		t.Fatalf("10 keys from two Stores queued %d messages", len(got))
	}
}

// Dead letters come oldest FailedAt first, a lapse death buried late among
// them; replay from one Store racing a delete from another: one succeeds.
func TestDeadLetterOrderAndReplayDeleteAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) { p.VisibilityTimeout = time.Second; p.MaxDeliveries = 1 })
	qa := mustQueue(t, a, "x-order", p)
	qb := mustQueue(t, b, "x-order", p)
	if _, err := qa.Publish(ctx, []byte("lapse")); err != nil {
		t.Fatal(err)
	}
	lapse := receiveN(t, qa, 1)[0]
	var held []broker.LeaseValue
	for _, s := range []string{"rej1", "rej2"} {
		if _, err := qa.Publish(ctx, []byte(s)); err != nil {
			t.Fatal(err)
		}
		d := receiveN(t, qa, 1)[0]
		l, err := qa.Extend(ctx, d.Lease.Receipt, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	time.Sleep(time.Until(lapse.Lease.ExpiresAt) + 50*time.Millisecond)
	for _, l := range held {
		if err := qa.Reject(ctx, l.Receipt, nil); err != nil {
			t.Fatal(err)
		}
	}
	all := waitForDeadLetters(t, qb, 3, "three deaths")
	if !sort.SliceIsSorted(all, func(i, j int) bool { return all[i].FailedAt.Before(all[j].FailedAt) }) || string(all[0].Message.Payload) != "lapse" {
		t.Fatalf("not oldest first: %s", dlText(all))
	}
	replayed := 0
	for _, dl := range all {
		var ra, rb error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ra = qa.ReplayDeadLetter(ctx, dl.Message.ID) }()
		go func() { defer wg.Done(); rb = qb.DeleteDeadLetter(ctx, dl.Message.ID) }()
		wg.Wait()
		if (ra == nil) == (rb == nil) {
			t.Fatalf("%s: replay %v, delete %v: want exactly one success", dl.Message.ID, ra, rb)
		}
		if ra == nil {
			replayed++
		}
	}
	var got []broker.DeliveryValue
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ds, err := qb.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := qb.Ack(ctx, d.Lease.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, ds...)
	}
	if len(got) != replayed {
		t.Fatalf("%d replays won, %d messages queued", replayed, len(got))
	}
	if left, err := qa.DeadLetters(ctx, 10); err != nil || len(left) != 0 {
		t.Fatalf("dead letters left: %s %v", dlText(left), err)
	}
}

// Another Store's replay closes this Store's Wake signal (a replay makes a
// message receivable, §5.3; the adapter closes the signal on other
// processes' publications).
func TestAnotherStoresReplayWakes(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoStores(t)
	p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 1 })
	qa := mustQueue(t, a, "x-wake", p)
	qb := mustQueue(t, b, "x-wake", p)
	m, err := qa.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	d := receiveOneWithin(t, qb, "the message")
	if err := qb.Reject(ctx, d.Lease.Receipt, nil); err != nil {
		t.Fatal(err)
	}
	if ds, _ := qb.Receive(ctx, 5); len(ds) != 0 {
		t.Fatal("unexpected message")
	}
	w := qb.Wake()
	if err := qa.ReplayDeadLetter(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Signal:
	case <-time.After(5 * time.Second):
		t.Fatalf("another Store's replay did not close the signal")
	}
}

// Consume over the adapter: errors, panics and DoNotRetry are classified
// as the file store classifies them, every message that succeeds is
// acknowledged exactly once, and ctx ends it.
func TestConsumeClassifiesLikeTheFileStore(t *testing.T) {
	p := policy(func(p *broker.PolicyValue) { p.MaxDeliveries = 2; p.VisibilityTimeout = 2 * time.Second })
	fs, err := broker.Open(t.TempDir(), broker.Options{Sync: broker.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	fq, err := fs.Queue("x-consume", p)
	if err != nil {
		t.Fatal(err)
	}
	nq := mustQueue(t, openBackend(t).Store, "x-consume", p)
	const n = 40
	run := func(q interface {
		broker.Broker
		broker.DeadLetterReader
	}) (map[string]int, []string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := 0; i < n; i++ {
			if _, err := q.Publish(ctx, []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		done := map[string]int{}
		h := func(_ context.Context, d broker.DeliveryValue) error {
			var i int
			fmt.Sscan(string(d.Message.Payload), &i)
			switch i % 6 {
			case 0:
				if d.Deliveries == 1 {
					panic("first try")
				}
			case 1:
				if d.Deliveries == 1 {
					return errors.New("flaky")
				}
			case 2:
				return broker.DoNotRetry(errors.New("bad input"))
			case 3:
				panic("always")
			case 4:
				return broker.NewError("DOWN", 0x0a000001, "downstream", "detail")
			}
			mu.Lock()
			done[string(d.Message.Payload)]++
			mu.Unlock()
			return nil
		}
		errc := make(chan error, 1)
		go func() { errc <- broker.Consume(ctx, q, h, broker.ConsumeOptions{Concurrency: 4, Batch: 4}) }()
		want := 0
		for i := 0; i < n; i++ {
			if i%6 == 0 || i%6 == 1 || i%6 == 5 {
				want++
			}
		}
		dead := n - want
		until(t, 30*time.Second, "every message settled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			dls, _ := q.DeadLetters(context.Background(), 100)
			return len(done) == want && len(dls) == dead
		})
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Consume: %v", err)
		}
		dls, err := q.DeadLetters(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, dl := range dls {
			out = append(out, fmt.Sprintf("%s:%s:%d:%q:#%d", dl.Message.Payload, dl.Reason, dl.Code, dl.Cause, dl.Deliveries))
		}
		sort.Strings(out)
		mu.Lock()
		defer mu.Unlock()
		return done, out
	}
	fdone, fdl := run(fq)
	ndone, ndl := run(nq)
	for k, c := range ndone {
		if c != 1 {
			t.Errorf("natsjs handled %s successfully %d times", k, c)
		}
	}
	if fmt.Sprint(fdone) != fmt.Sprint(ndone) {
		t.Errorf("handled: file %v, natsjs %v", fdone, ndone)
	}
	if fmt.Sprint(fdl) != fmt.Sprint(ndl) {
		t.Errorf("dead letters:\nfile   %v\nnatsjs %v", fdl, ndl)
	}
}

// After the last lease lapsed, a Receive of the same Store (which makes
// the server notice) and then DeadLetters show the death dated by that
// lease's ExpiresAt and counted 2.
func TestLapseDeathAfterAReceiveIsDatedByTheLastLease(t *testing.T) {
	ctx := context.Background()
	q := mustQueue(t, openBackend(t).Store, "x-lapse2", policy(func(p *broker.PolicyValue) {
		p.VisibilityTimeout = time.Second
		p.MaxDeliveries = 2
	}))
	m, err := q.Publish(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, q, 1)
	var last broker.DeliveryValue
	until(t, 10*time.Second, "the redelivery", func() bool {
		ds, err := q.Receive(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			last = ds[0]
		}
		return len(ds) == 1
	})
	time.Sleep(time.Until(last.Lease.ExpiresAt) + 100*time.Millisecond)
	if ds, err := q.Receive(ctx, 5); err != nil || len(ds) != 0 {
		t.Fatalf("Receive after the last lapse: %d, %v", len(ds), err)
	}
	dls := waitForDeadLetters(t, q, 1, "the lapse death")
	dl := dls[0]
	if dl.Message.ID != m.ID || dl.Reason != "LEASE_EXPIRED" || dl.Deliveries != 2 || !dl.FailedAt.Equal(last.Lease.ExpiresAt) {
		t.Fatalf("dead letter %s at %v; want %s LEASE_EXPIRED #2 at %v", dlText(dls), dl.FailedAt, m.ID, last.Lease.ExpiresAt)
	}
}
