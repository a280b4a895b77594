package broker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
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
