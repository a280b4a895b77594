package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// Open a store, publish, consume with Consume, close.
func Example() {
	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := broker.Open(dir, broker.Options{}) // SyncAll: a publish is on the device when it returns
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	jobs, err := store.Queue("jobs", broker.PolicyValue{
		VisibilityTimeout: 30 * time.Second, // how long a consumer may hold a message
		MaxDeliveries:     5,                // then the dead-letter store
		RetryDelay:        time.Second,      // after a failure...
		MaxRetryDelay:     time.Minute,      // ...doubling up to a minute
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		if _, err := jobs.Publish(ctx, []byte(order)); err != nil {
			log.Fatal(err)
		}
	}

	done := 0
	err = broker.Consume(ctx, jobs, func(ctx context.Context, d broker.DeliveryValue) error {
		fmt.Printf("%s (delivery %d)\n", d.Message.Payload, d.Deliveries)
		if done++; done == 3 {
			stop() // Consume returns once this handler's Ack is done
		}
		return nil // nil acks; an error nacks; broker.DoNotRetry(err) dead-letters
	}, broker.ConsumeOptions{})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	fmt.Println("left:", jobs.Stats().Ready)
	// Output:
	// order-1 (delivery 1)
	// order-2 (delivery 1)
	// order-3 (delivery 1)
	// left: 0
}

// Stop on SIGTERM (a deploy) without costing the running handlers a
// delivery attempt: StopGrace lets them finish and be acked, then Consume
// returns and the store closes.
func ExampleConsume_stopGrace() {
	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := broker.Open(dir, broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after Consume returned: Close does not wait for handlers
	hooks, err := store.Queue("webhooks", broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 5})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := hooks.Publish(context.Background(), []byte("POST /orders/17")); err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err = broker.Consume(ctx, hooks, func(hctx context.Context, d broker.DeliveryValue) error {
		// The deploy's SIGTERM arrives while this delivery runs.
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			return err
		}
		// Consume receives nothing more from here, but the handler's
		// context lives on for StopGrace.
		<-ctx.Done()
		fmt.Println("handler still running:", hctx.Err() == nil)
		return nil
	}, broker.ConsumeOptions{
		StopGrace:   20 * time.Second, // then the handlers' contexts end; one that gives up with their error is nacked
		ExtendEvery: 10 * time.Second,
	})
	fmt.Println("Consume:", err)
	st := hooks.Stats()
	fmt.Println("acked:", st.Acked, "nacked:", st.Nacked, "leased:", st.Leased)
	// Output:
	// handler still running: true
	// Consume: context canceled
	// acked: 1 nacked: 0 leased: 0
}

// Drain with few handlers (each holds a scarce connection, say) and still
// lease and ack many messages per commit: Prefetch lets Consume hold
// leased messages for the next free handler, so that one Receive leases
// a whole Batch.
func ExampleConsume_prefetch() {
	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := broker.Open(dir, broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	rows, err := store.Queue("rows", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	if err != nil {
		log.Fatal(err)
	}
	batch := make([][]byte, 200)
	for i := range batch {
		batch[i] = fmt.Appendf(nil, "row %d", i)
	}
	if _, err := rows.PublishBatch(context.Background(), batch); err != nil {
		log.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	var handled, running, most atomic.Int64
	err = broker.Consume(ctx, rows, func(context.Context, broker.DeliveryValue) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if handled.Add(1) == int64(len(batch)) {
			stop()
		}
		return nil
	}, broker.ConsumeOptions{
		Batch:       64,
		Concurrency: 4,  // four handlers at most...
		Prefetch:    60, // ...and up to 60 leased messages waiting for them
		// A held message's lease runs while it waits: 60 ÷ 4 handlers ×
		// a handler's time must stay well below the VisibilityTimeout.
	})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	st := rows.Stats()
	fmt.Println("handled:", handled.Load(), "never more than 4 at once:", most.Load() <= 4)
	fmt.Println("acked:", st.Acked, "leased:", st.Leased, "ready:", st.Ready)
	// Output:
	// handled: 200 never more than 4 at once: true
	// acked: 200 leased: 0 ready: 0
}

// Back a running store up into a new directory, and open the copy.
func ExampleStore_Backup() {
	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := broker.Open(filepath.Join(dir, "store"), broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	jobs, err := store.Queue("jobs", broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 5})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.PublishKeyed(ctx, "order-1", []byte("ship order 1")); err != nil {
		log.Fatal(err)
	}

	// Calls go on meanwhile; the copy holds the state of one instant.
	backup := filepath.Join(dir, "backup-1") // must not exist yet
	if err := store.Backup(ctx, backup); err != nil {
		log.Fatal(err)
	}

	copied, err := broker.Open(backup, broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer copied.Close()
	q, err := copied.Queue("jobs", broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 5})
	if err != nil {
		log.Fatal(err)
	}
	ds, err := q.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", ds[0].Message.Payload)
	dup, err := q.PublishKeyed(ctx, "order-1", []byte("ship order 1"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the copy knows the key:", dup.ID == ds[0].Message.ID)
	// Output:
	// ship order 1
	// the copy knows the key: true
}

// Fail deliveries in Consume: an error is retried until MaxDeliveries, and
// one marked with DoNotRetry is dead-lettered at once. Then read the dead
// letters, with the reason, code and public text each failure carried,
// and replay one.
func ExampleQueue_DeadLetters() {
	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := broker.Open(dir, broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	payments, err := store.Queue("payments", broker.PolicyValue{
		VisibilityTimeout: 30 * time.Second,
		MaxDeliveries:     2, // the second failure dead-letters
		// No RetryDelay: a nacked message is receivable again at once.
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{"pay 17", "pay 18 (gateway down)", "pay ??"} {
		if _, err := payments.Publish(ctx, []byte(p)); err != nil {
			log.Fatal(err)
		}
	}

	// A program's own codes take a domain other than 7 (see NewError). The
	// private half ("dial ...") goes to ConsumeOptions.Logger when one is
	// set (none is here), never to disk.
	gatewayDown := broker.NewError("GATEWAY_DOWN", 0x01000001, "the payment gateway did not answer", "dial tcp 10.0.0.7:443: connection refused")
	malformed := broker.NewError("MALFORMED", 0x01000002, "the payment cannot be parsed", "")

	cctx, stop := context.WithCancel(ctx)
	settled := 0
	err = broker.Consume(cctx, payments, func(ctx context.Context, d broker.DeliveryValue) error {
		var result error
		switch string(d.Message.Payload) {
		case "pay 18 (gateway down)":
			result = gatewayDown // nacked, and tried again until MaxDeliveries
		case "pay ??":
			result = broker.DoNotRetry(malformed) // dead-lettered now
		}
		// Each message's last delivery is an ack, a rejection, or a failure
		// on delivery MaxDeliveries; after the third, stop.
		if result == nil || broker.IsDoNotRetry(result) || d.Deliveries == 2 {
			if settled++; settled == 3 {
				stop() // Consume returns once this delivery is settled
			}
		}
		return result
	}, broker.ConsumeOptions{})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}

	dead, err := payments.DeadLetters(ctx, 10) // oldest FailedAt first
	if err != nil {
		log.Fatal(err)
	}
	// The two failures were settled concurrently: sort for a stable output.
	slices.SortFunc(dead, func(a, b broker.DeadLetterValue) int { return bytes.Compare(a.Message.Payload, b.Message.Payload) })
	for _, dl := range dead {
		fmt.Printf("%s: %s %s %q, deliveries %d\n", dl.Message.Payload, dl.Reason, broker.FormatCode(dl.Code), dl.Cause, dl.Deliveries)
	}

	// The gateway is back: replay its dead letter, by its message's ID.
	if err := payments.ReplayDeadLetter(ctx, dead[0].Message.ID); err != nil {
		log.Fatal(err)
	}
	ds, err := payments.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("replayed: %s, delivery %d\n", ds[0].Message.Payload, ds[0].Deliveries)
	st := payments.Stats()
	fmt.Println("acked:", st.Acked, "nacked:", st.Nacked, "rejected:", st.Rejected, "dead letters:", st.DeadLetters)
	// Output:
	// pay 18 (gateway down): GATEWAY_DOWN 1.0.0.1 "the payment gateway did not answer", deliveries 2
	// pay ??: MALFORMED 1.0.0.2 "the payment cannot be parsed", deliveries 1
	// replayed: pay 18 (gateway down), delivery 1
	// acked: 1 nacked: 2 rejected: 1 dead letters: 1
}

// Publish with a key, so that a producer that sends the same work twice
// (a retry after a timeout, say) enqueues it once: a repeat within the
// queue's DedupWindow (6 h unless set) returns the first message's ID
// and a nil Payload, and enqueues nothing. Recovery says whether Open
// made a new store, as it does for a mistyped path.
func ExampleQueue_PublishKeyed() {
	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	policy := broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 5}

	store, err := broker.Open(filepath.Join(dir, "queue"), broker.Options{}) // creates the directory
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", store.Recovery().Created)
	jobs, err := store.Queue("jobs", policy)
	if err != nil {
		log.Fatal(err)
	}
	first, err := jobs.PublishKeyed(ctx, "order-17", []byte("work"))
	if err != nil {
		log.Fatal(err)
	}
	again, err := jobs.PublishKeyed(ctx, "order-17", []byte("work"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same ID:", again.ID == first.ID, "payload:", again.Payload == nil)
	st := jobs.Stats()
	fmt.Println("published:", st.Published, "duplicates:", st.Duplicates, "ready:", st.Ready)
	if err := store.Close(); err != nil {
		log.Fatal(err)
	}

	// The key outlives a restart, and Open finds the store it made.
	store, err = broker.Open(filepath.Join(dir, "queue"), broker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	fmt.Println("created:", store.Recovery().Created)
	jobs, err = store.Queue("jobs", policy)
	if err != nil {
		log.Fatal(err)
	}
	again, err = jobs.PublishKeyed(ctx, "order-17", []byte("work"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same ID:", again.ID == first.ID, "ready:", jobs.Stats().Ready)
	// Output:
	// created: true
	// same ID: true payload: true
	// published: 1 duplicates: 1 ready: 1
	// created: false
	// same ID: true ready: 1
}

// Size a store for a few small messages: segments of MinSegmentBytes, and
// queues whose MaxMessageBytes such segments hold.
func ExampleOptions_MaxMessageBytes() {
	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes}
	fmt.Println("16 KiB segments hold messages of up to", opts.MaxMessageBytes(), "bytes")
	fmt.Println("64 MiB segments hold the default 1 MiB:", broker.Options{}.MaxMessageBytes() >= broker.DefaultMaxMessageBytes)

	dir, err := os.MkdirTemp("", "walbroker-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := broker.Open(dir, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	_, err = store.Queue("small", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5})
	fmt.Println("the default MaxMessageBytes refused:", errors.Is(err, broker.QueueMisconfigured))
	_, err = store.Queue("small", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 5, MaxMessageBytes: opts.MaxMessageBytes()})
	fmt.Println("its own accepted:", err == nil)
	// Output:
	// 16 KiB segments hold messages of up to 13677 bytes
	// 64 MiB segments hold the default 1 MiB: true
	// the default MaxMessageBytes refused: true
	// its own accepted: true
}
