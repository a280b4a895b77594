// Package brokertest is the conformance suite of walbroker's port: the
// promises the doc comments of package broker make about [broker.Broker]
// and its optional interfaces that a caller can observe through them (not
// durability across crashes and restarts, which each broker tests on its
// own), as tests any implementation runs with [Run].
//
// An implementation describes itself with a [Factory]: a name, the
// [Capabilities] it declares, and a constructor of empty backends. The
// suite checks that the declaration is honest — an optional interface
// declared is implemented, and one implemented is declared; Capacity and,
// on the suite's clock, ExactExpiry are probed when declared false — and
// skips, by name, the tests of a promise declared not kept. When the
// implementation runs on the suite's [Clock], timing promises are checked
// exactly, at the boundary instant and one nanosecond before it; otherwise
// they are checked with short real durations, polling until a deadline,
// within [Capabilities.Tolerance].
//
// [Table] renders the declarations of several implementations as the
// markdown table of walbroker's README, and [CheckReadme] fails a test
// whose README column disagrees with a declaration.
package brokertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// Capabilities declares which promises of the port an implementation keeps.
// The suite verifies every interface field against the queue it is given:
// declaring one not implemented fails, and implementing one not declared
// fails too. Of the other fields, Capacity and (with Clock) ExactExpiry
// are probed when declared false, and a probe that finds the promise kept
// fails the declaration; Clock, OldestFirst and ReplayOnce cannot be
// probed, and declaring one false only skips its tests.
type Capabilities struct {
	// LeaseExtender, Rejecter, DeadLetterReader, DeadLetterManager and
	// Waker declare the optional interfaces of package broker that the
	// implementation's queues implement.
	LeaseExtender, Rejecter, DeadLetterReader, DeadLetterManager, Waker bool
	// Keyed declares that its queues implement [KeyedPublisher] with the
	// dedup of API.md §4: a key seen within the policy's DedupWindow
	// returns the original message's ID and EnqueuedAt and enqueues
	// nothing, even when the queue is full and after the original was
	// acknowledged; a key of 0 or more than 256 bytes is
	// [broker.InvalidDedupKey].
	Keyed bool
	// Batch declares that its queues implement [BatchPublisher]: every
	// payload is enqueued or none is, and an empty batch is
	// [broker.InvalidBatchSize].
	Batch bool
	// Capacity declares that it enforces [broker.PolicyValue.Capacity]:
	// a publish beyond it is [broker.QueueFull] and enqueues nothing.
	Capacity bool
	// Clock declares that it runs on the suite's clock (the now func given
	// to [Factory.Open]): enqueue instants, retry delays and dedup windows
	// follow it exactly, and lease lapses too when ExactExpiry is declared
	// (without it, within Tolerance of it).
	Clock bool
	// ExactExpiry declares that a lease lapses exactly AT
	// [broker.LeaseValue.ExpiresAt] and not a nanosecond before; false
	// means the implementation's server decides, within Tolerance. It
	// needs Clock (an instant is checked exactly only on the suite's
	// clock): declaring it without Clock fails the Declaration subtest.
	ExactExpiry bool
	// OldestFirst declares that Receive returns the visible messages
	// oldest EnqueuedAt first, redeliveries included.
	OldestFirst bool
	// ReplayOnce declares that of replays of one dead letter racing each
	// other, one queues it and every other is [broker.DeadLetterNotFound].
	// The port lets a broker that cannot tell racing replays apart queue
	// the message once per replay — a duplicate the at-least-once
	// guarantee permits — provided it says so: without ReplayOnce the
	// suite requires only that each racing replay succeed or find the dead
	// letter gone, and that the message be queued at least once and at
	// most once per replay that succeeded.
	ReplayOnce bool
	// Tolerance is, without Clock, how far real timings may stray from
	// the policy (a lease lapsing, a retry delay ending, an instant the
	// broker reports). The suite then gives leases and retry delays four
	// Tolerances (at least 100 ms, at most 2 s), waits for what must happen
	// until the instant plus three Tolerances plus a second, and asserts
	// that something did NOT happen yet only when the call began more than
	// a Tolerance before its instant. Zero means 2 s. With Clock it is
	// only the slack of a lapse when ExactExpiry is false.
	Tolerance time.Duration
	// Closer declares that the Backend implements io.Closer and that every
	// call on one of its queues after Close returns an error wrapping
	// [broker.Closed]. It is checked one way only: a Backend may have a
	// Close of its own for cleanup without declaring the promise.
	Closer bool
}

// tolerance returns Tolerance, or its default.
func (c Capabilities) tolerance() time.Duration {
	if c.Tolerance > 0 {
		return c.Tolerance
	}
	return 2 * time.Second
}

// KeyedPublisher is the idempotent publish of [Capabilities.Keyed].
type KeyedPublisher interface {
	PublishKeyed(ctx context.Context, key string, payload []byte) (broker.MessageValue, error)
}

// BatchPublisher is the all-or-nothing publish of [Capabilities.Batch].
type BatchPublisher interface {
	PublishBatch(ctx context.Context, payloads [][]byte) ([]broker.MessageValue, error)
}

// Backend is one broker instance: a store of named queues. The suite calls
// Queue once per queue name; it may call it from one goroutine at a time
// only.
type Backend interface {
	// Queue opens (creating it if needed) the queue name with policy. An
	// invalid policy is an error wrapping [broker.QueueMisconfigured].
	Queue(name string, policy broker.PolicyValue) (broker.Broker, error)
}

// Factory makes backends for the suite.
type Factory struct {
	// Name identifies the implementation in the suite's messages (a skip
	// names it, as does every failure of its declaration) and is its
	// column header in the README table.
	Name string
	// Caps is what the implementation declares it keeps.
	Caps Capabilities
	// Open returns a new, empty backend. now is the suite's clock when
	// Caps.Clock, else nil. Open registers its own cleanup with t.Cleanup
	// and fails t (t.Fatal) when it cannot open one.
	Open func(t *testing.T, now func() time.Time) Backend
}

// Clock is a controllable clock: it stands still until told to move. It is
// exported so that implementations' own tests can drive theirs the way the
// suite does. Safe for concurrent use; the zero value is not usable, see
// [NewClock].
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock that reads start until moved.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's reading. It is the func to hand to a broker.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d, which may be negative (a clock stepped
// backwards), and returns the new reading.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
