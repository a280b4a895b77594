package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is the fake broker's clock: real time plus an offset the test
// moves forward, so timers in Consume and visibility in the fake agree
// until a test jumps ahead on purpose.
// fakeClock follows the wall clock, moved on by Advance, unless Freeze
// stopped it.
type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
	frozen time.Time // when not zero, the reading Advance moves from
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen.IsZero() {
		return c.frozen.Add(c.offset)
	}
	return time.Now().Add(c.offset)
}

// Freeze stops the clock where it is: from then on only Advance moves it,
// so that a lease of a few milliseconds lapses only when a test says so,
// however late a loaded machine runs the renewal that keeps it.
func (c *fakeClock) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = time.Now()
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

type fakeMsg struct {
	msg        MessageValue
	visibleAt  time.Time
	deliveries int
}

type fakeLease struct {
	m         *fakeMsg
	expiresAt time.Time
}

// settledCall records one Ack, Nack or Reject the fake accepted.
type settledCall struct {
	call    string
	id      string
	receipt ReceiptValue
	cause   error
}

type extendCall struct {
	old, new ReceiptValue
	by       time.Duration
}

// fakeBroker is an in-memory Broker, Waker, LeaseExtender and Rejecter. A
// lapsed lease is not redelivered (tests stay deterministic); settling calls
// refuse a cancelled ctx, which proves Consume settles WithoutCancel.
type fakeBroker struct {
	clock      *fakeClock
	visibility time.Duration
	retryDelay time.Duration

	receives atomic.Int64
	wakes    atomic.Int64
	// settles counts the Ack, Nack and Reject calls, refused ones too.
	settles atomic.Int64
	// extended gets a token per successful Extend (never blocks).
	extended chan struct{}

	mu               sync.Mutex
	seq              int
	ready            []*fakeMsg
	leases           map[ReceiptValue]*fakeLease
	settled          []settledCall
	extends          []extendCall
	receiveMax       []int
	receiveLen       []int
	wake             chan struct{}
	closed           bool
	receiveErrs      []error // returned by the next Receive calls, in order
	overDeliver      int     // Receive returns up to this many more than asked for
	ackErrs          []error // returned by the next Ack calls, in order
	wokeSinceReceive bool
	receiveNoWake    int // Receive calls not preceded by a Wake
	mostLeased       int // the most live leases after any Receive
}

var (
	_ Broker        = (*fakeBroker)(nil)
	_ Waker         = (*fakeBroker)(nil)
	_ LeaseExtender = (*fakeBroker)(nil)
	_ Rejecter      = (*fakeBroker)(nil)
)

func newFake() *fakeBroker {
	return &fakeBroker{
		clock:      &fakeClock{},
		visibility: time.Minute,
		retryDelay: time.Hour,
		extended:   make(chan struct{}, 1000),
		leases:     map[ReceiptValue]*fakeLease{},
		wake:       make(chan struct{}),
	}
}

func (f *fakeBroker) Publish(ctx context.Context, payload []byte) (MessageValue, error) {
	return f.publishAt(payload, time.Time{}), nil
}

// publishAt enqueues payload visible from at (now when zero).
func (f *fakeBroker) publishAt(payload []byte, at time.Time) MessageValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	if at.IsZero() {
		at = now
	}
	f.seq++
	m := &fakeMsg{msg: MessageValue{ID: fmt.Sprintf("m%d", f.seq), EnqueuedAt: now, Payload: bytes.Clone(payload)}, visibleAt: at}
	f.ready = append(f.ready, m)
	f.signalLocked()
	return m.msg
}

func (f *fakeBroker) signalLocked() {
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeBroker) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	f.receives.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.wokeSinceReceive {
		f.receiveNoWake++
	}
	f.wokeSinceReceive = false
	if len(f.receiveErrs) > 0 {
		err := f.receiveErrs[0]
		f.receiveErrs = f.receiveErrs[1:]
		return nil, err
	}
	if f.closed {
		return nil, fmt.Errorf("fake: receive: %w", Closed)
	}
	if max <= 0 {
		return nil, fmt.Errorf("fake: receive %d: %w", max, InvalidBatchSize)
	}
	f.receiveMax = append(f.receiveMax, max)
	now := f.clock.Now()
	var out []DeliveryValue
	rest := f.ready[:0:0]
	for _, m := range f.ready {
		if len(out) == max+f.overDeliver || m.visibleAt.After(now) {
			rest = append(rest, m)
			continue
		}
		f.seq++
		r := ReceiptValue(fmt.Sprintf("r%d", f.seq))
		m.deliveries++
		f.leases[r] = &fakeLease{m: m, expiresAt: now.Add(f.visibility)}
		msg := m.msg
		msg.Payload = bytes.Clone(msg.Payload)
		out = append(out, DeliveryValue{Lease: LeaseValue{ExpiresAt: now.Add(f.visibility), Receipt: r}, Message: msg, Deliveries: m.deliveries})
	}
	f.ready = rest
	f.receiveLen = append(f.receiveLen, len(out))
	if len(f.leases) > f.mostLeased {
		f.mostLeased = len(f.leases)
	}
	return out, nil
}

// leaseLocked finds the live lease of r.
func (f *fakeBroker) leaseLocked(ctx context.Context, r ReceiptValue) (*fakeLease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: settled with a cancelled context: %w", err)
	}
	if f.closed {
		return nil, fmt.Errorf("fake: %w", Closed)
	}
	l := f.leases[r]
	if l == nil {
		return nil, fmt.Errorf("fake: receipt %q: %w", r, UnknownReceipt)
	}
	if !f.clock.Now().Before(l.expiresAt) {
		return nil, fmt.Errorf("fake: receipt %q: %w", r, LeaseExpired)
	}
	return l, nil
}

func (f *fakeBroker) Ack(ctx context.Context, r ReceiptValue) error {
	f.settles.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ackErrs) > 0 {
		err := f.ackErrs[0]
		f.ackErrs = f.ackErrs[1:]
		return err
	}
	l, err := f.leaseLocked(ctx, r)
	if err != nil {
		return err
	}
	delete(f.leases, r)
	f.settled = append(f.settled, settledCall{"ack", l.m.msg.ID, r, nil})
	return nil
}

func (f *fakeBroker) Nack(ctx context.Context, r ReceiptValue, cause error) (NackValue, error) {
	f.settles.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.leaseLocked(ctx, r)
	if err != nil {
		return NackValue{}, err
	}
	delete(f.leases, r)
	f.settled = append(f.settled, settledCall{"nack", l.m.msg.ID, r, cause})
	l.m.visibleAt = f.clock.Now().Add(f.retryDelay)
	f.ready = append(f.ready, l.m)
	f.signalLocked()
	return NackValue{Deliveries: l.m.deliveries, VisibleAt: l.m.visibleAt}, nil
}

func (f *fakeBroker) Reject(ctx context.Context, r ReceiptValue, cause error) error {
	f.settles.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.leaseLocked(ctx, r)
	if err != nil {
		return err
	}
	delete(f.leases, r)
	f.settled = append(f.settled, settledCall{"reject", l.m.msg.ID, r, cause})
	return nil
}

// awaitExtends waits for n successful Extends, or for ctx to end, as a
// handler that works across n renewals of its lease.
func (f *fakeBroker) awaitExtends(ctx context.Context, n int) error {
	for range n {
		select {
		case <-f.extended:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *fakeBroker) Extend(ctx context.Context, r ReceiptValue, by time.Duration) (LeaseValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if by <= 0 {
		return LeaseValue{}, fmt.Errorf("fake: extend by %v: %w", by, QueueMisconfigured)
	}
	l, err := f.leaseLocked(ctx, r)
	if err != nil {
		return LeaseValue{}, err
	}
	delete(f.leases, r)
	f.seq++
	nr := ReceiptValue(fmt.Sprintf("r%d", f.seq))
	l.expiresAt = f.clock.Now().Add(by)
	f.leases[nr] = l
	f.extends = append(f.extends, extendCall{r, nr, by})
	select {
	case f.extended <- struct{}{}:
	default:
	}
	return LeaseValue{ExpiresAt: l.expiresAt, Receipt: nr}, nil
}

func (f *fakeBroker) Wake() WakeValue {
	f.wakes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wokeSinceReceive = true
	w := WakeValue{Signal: f.wake}
	now := f.clock.Now()
	for _, m := range f.ready {
		if in := m.visibleAt.Sub(now); !w.Scheduled || in < w.In {
			w.In, w.Scheduled = in, true
		}
	}
	return w
}

// Close makes every later call fail with Closed.
func (f *fakeBroker) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.signalLocked()
}

func (f *fakeBroker) calls() []settledCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]settledCall(nil), f.settled...)
}

func (f *fakeBroker) count(call string) int {
	n := 0
	for _, c := range f.calls() {
		if c.call == call {
			n++
		}
	}
	return n
}

// plainBroker hides every optional interface of the fake.
type plainBroker struct{ f *fakeBroker }

func (p plainBroker) Publish(ctx context.Context, payload []byte) (MessageValue, error) {
	return p.f.Publish(ctx, payload)
}
func (p plainBroker) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	return p.f.Receive(ctx, max)
}
func (p plainBroker) Ack(ctx context.Context, r ReceiptValue) error { return p.f.Ack(ctx, r) }
func (p plainBroker) Nack(ctx context.Context, r ReceiptValue, cause error) (NackValue, error) {
	return p.f.Nack(ctx, r, cause)
}

// emptyBroker never has work; its Wake is what the test says.
type emptyBroker struct {
	plainBroker
	wake     func() WakeValue
	receives atomic.Int64
}

func (e *emptyBroker) Receive(ctx context.Context, max int) ([]DeliveryValue, error) {
	e.receives.Add(1)
	return nil, nil
}
func (e *emptyBroker) Wake() WakeValue { return e.wake() }

// logBuffer is a goroutine-safe sink for a test's slog output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTestLogger() (*slog.Logger, *logBuffer) {
	buf := &logBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// running is one Consume call in the background.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func startConsume(t *testing.T, b Broker, h Handler, opts ConsumeOptions) *running {
	t.Helper()
	return startConsumeCtx(t, context.Background(), b, h, opts)
}

// startConsumeCtx is startConsume under a context derived from parent.
func startConsumeCtx(t *testing.T, parent context.Context, b Broker, h Handler, opts ConsumeOptions) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = Consume(ctx, b, h, opts)
		close(r.done)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// wait returns Consume's error, failing the test if it does not return.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return")
		return nil
	}
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

func (r *running) returned() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}
