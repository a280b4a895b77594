package compare

import (
	"context"
	"errors"
)

// Queue is a durable queue as the benchmark drives it. Implementations are
// safe for concurrent use by multiple goroutines.
type Queue interface {
	// Publish appends payload and returns the ID the queue gave it. When it
	// returns nil the message is on the device. It does not retain payload.
	Publish(ctx context.Context, payload []byte) (uint64, error)
	// PublishBatch appends every payload in one write that is on the device
	// when it returns nil: all of them, or none after a crash. It returns
	// their IDs in order and retains none of the payloads.
	PublishBatch(ctx context.Context, payloads [][]byte) ([]uint64, error)
	// Receive leases up to max of the oldest messages that are neither
	// leased nor acknowledged and returns them, oldest first; the leases
	// are on the device when it returns. An empty queue yields an empty
	// slice and a nil error. A message whose lease lapses, at run time or
	// across a reopen, can be received again. max must be positive.
	Receive(ctx context.Context, max int) ([]Message, error)
	// Ack removes leased messages for good, all of them in one write that
	// is on the device when it returns nil. An ID that is not leased now
	// is ErrNotLeased, and then nothing is removed.
	Ack(ctx context.Context, ids []uint64) error
	// Close waits for calls in flight and closes the store. Calls after
	// Close return ErrClosed.
	Close() error
}

// Message is one received message. Payload is the caller's: the queue
// keeps no reference to it.
type Message struct {
	ID      uint64
	Payload []byte
}

var (
	// ErrClosed is returned by every call on a queue after its Close.
	// Check with errors.Is.
	ErrClosed = errors.New("queue is closed")
	// ErrNotLeased is returned by Ack for an ID that is not leased now:
	// never published, never received, already acknowledged, or whose
	// lease lapsed. An acknowledgement names a message, not one lease of
	// it: after a lapse and a new Receive, the first holder's Ack would
	// end the second holder's lease, which a broker must refuse and these
	// minimal queues do not. Check with errors.Is.
	ErrNotLeased = errors.New("message is not leased")
	// ErrInvalidMax is returned by Receive for a max below 1. Check with
	// errors.Is.
	ErrInvalidMax = errors.New("receive max must be positive")
)
