package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// t0 is where the suite's clock starts.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// testCase is one promise of the port.
type testCase struct {
	name  string
	needs []string // capability names (fields of Capabilities) the test needs
	run   func(e *env)
}

// capability reports the declared value of the capability field name.
func capability(c Capabilities, name string) bool {
	switch name {
	case "LeaseExtender":
		return c.LeaseExtender
	case "Rejecter":
		return c.Rejecter
	case "DeadLetterReader":
		return c.DeadLetterReader
	case "DeadLetterManager":
		return c.DeadLetterManager
	case "Waker":
		return c.Waker
	case "Keyed":
		return c.Keyed
	case "Batch":
		return c.Batch
	case "Capacity":
		return c.Capacity
	case "Clock":
		return c.Clock
	case "ExactExpiry":
		return c.ExactExpiry
	case "OldestFirst":
		return c.OldestFirst
	case "ReplayOnce":
		return c.ReplayOnce
	case "Closer":
		return c.Closer
	}
	panic("brokertest: unknown capability " + name) // a typo in this package, not input
}

// cases lists every promise, grouped by the file that holds them.
func cases() []testCase {
	var all []testCase
	for _, group := range [][]testCase{publishCases, receiveCases, leaseCases, nackCases, extendCases,
		deadCases, wakeCases, keyedCases, batchCases, capacityCases, consumeCases, miscCases, promiseCases, auditCases, orderCases} {
		all = append(all, group...)
	}
	return all
}

// Run runs every conformance test against f, each as a t.Run subtest: first
// "Declaration", which fails unless f.Caps matches what f's queues
// implement, then one subtest per promise. A promise whose capability f
// declares false is skipped with t.Skip naming the capability. The subtests
// run one after another, each on a backend of its own from f.Open. A call
// of the implementation that panics, on a promise's goroutine or on one
// the suite started, fails that promise (or Declaration) with the panic
// and its stack, and the suite goes on; a wait on concurrent work (Consume handing over a
// message or returning, a Wake signal) fails it after ten seconds plus
// three Tolerances. A call that never returns is bounded only by go
// test's -timeout.
func Run(t *testing.T, f Factory) {
	t.Helper()
	if f.Open == nil || f.Name == "" {
		t.Fatalf("brokertest: Factory %q needs a Name and an Open func", f.Name)
	}
	t.Run("Declaration", func(t *testing.T) {
		defer failPanicked(t, f)
		checkDeclaration(t, f)
	})
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range c.needs {
				if !capability(f.Caps, n) {
					t.Skipf("%s does not declare capability %s", f.Name, n)
				}
			}
			defer failPanicked(t, f)
			c.run(newEnv(t, f))
		})
	}
}

// failPanicked fails t with a panic of its goroutine, and the panic's
// stack, so that the subtests after it run; it is deferred directly
// (recover works only there).
func failPanicked(t *testing.T, f Factory) {
	if r := recover(); r != nil {
		t.Fatalf("%s: a call panicked: %v\n%s", f.Name, panicValue(r), panicStack(r))
	}
}

// goPanic is a panic raised in a goroutine the suite started, carried to
// the test's goroutine with the stack it was raised on: a panic that ends
// a goroutine of its own ends the test binary, with every promise after
// the one being checked left unchecked; carried, it fails that promise,
// and the suite goes on.
type goPanic struct {
	value any
	stack []byte
}

// catch recovers a panic of the goroutine that defers it, as a *goPanic
// handed to keep; it is deferred directly (recover works only there).
func catch(keep func(*goPanic)) {
	if r := recover(); r != nil {
		keep(&goPanic{value: r, stack: debug.Stack()})
	}
}

// panicValue and panicStack read a recovered panic, a *goPanic carried
// from another goroutine or one raised on the test's own.
func panicValue(r any) any {
	if p, ok := r.(*goPanic); ok {
		return p.value
	}
	return r
}

func panicStack(r any) []byte {
	if p, ok := r.(*goPanic); ok {
		return p.stack
	}
	return debug.Stack()
}

// Error makes a carried panic an error: where the suite's goroutine
// reports by error, it sends it.
func (p *goPanic) Error() string { return fmt.Sprintf("panicked: %v\n%s", p.value, p.stack) }

// checkDeclaration fails t for every optional interface whose declaration
// disagrees with the queue f's backend returns, and for every promise
// f keeps without declaring it where a probe can tell.
func checkDeclaration(t *testing.T, f Factory) {
	e := newEnv(t, f)
	for _, p := range declarationProblems(f, e.b, e.queue(e.policy())) {
		t.Error(p)
	}
	for _, p := range undeclaredProblems(e) {
		t.Error(p)
	}
}

// undeclaredProblems returns the promises e's implementation keeps but
// does not declare, which would leave their tests skipped, unchecked:
// Capacity (a queue of Capacity 1 refuses a second publish with
// QueueFull) and, on the suite's clock, ExactExpiry (a lease lapses AT
// its ExpiresAt and not a nanosecond before). The other behaviours
// declared are not probed: a broker that is not OldestFirst or
// ReplayOnce may look so in any one run, and without Clock the suite
// hands it no clock to try.
func undeclaredProblems(e *env) []string {
	var problems []string
	if !e.caps.Capacity {
		if q, err := e.b.Queue(e.queueName(), e.policy(func(p *broker.PolicyValue) { p.Capacity = 1 })); err == nil {
			_, err1 := q.Publish(e.ctx(), []byte("first"))
			_, err2 := q.Publish(e.ctx(), []byte("second"))
			if err1 == nil && errors.Is(err2, broker.QueueFull) {
				problems = append(problems, fmt.Sprintf("%s does not declare Capacity, but a queue of Capacity 1 refused a second publish with QueueFull (%v): declare it, so that the suite checks it", e.f.Name, err2))
			}
		}
	}
	if e.clock != nil && !e.caps.ExactExpiry {
		if q, err := e.b.Queue(e.queueName(), e.policy()); err == nil {
			if exactLapse(e, q) {
				problems = append(problems, fmt.Sprintf("%s does not declare ExactExpiry, but its lease lapsed exactly at ExpiresAt and not a nanosecond before: declare it, so that the suite checks it", e.f.Name))
			}
		}
	}
	return problems
}

// exactLapse reports whether the lease of a message published to q, on
// the suite's clock, lapses exactly at its ExpiresAt: nothing is
// receivable a nanosecond before, and the message is at the instant.
func exactLapse(e *env, q broker.Broker) bool {
	if _, err := q.Publish(e.ctx(), []byte("probe")); err != nil {
		return false
	}
	ds, err := q.Receive(e.ctx(), 1)
	if err != nil || len(ds) != 1 {
		return false
	}
	e.clock.Set(ds[0].Lease.ExpiresAt.Add(-time.Nanosecond))
	if early, err := q.Receive(e.ctx(), 1); err != nil || len(early) != 0 {
		return false
	}
	e.clock.Set(ds[0].Lease.ExpiresAt)
	at, err := q.Receive(e.ctx(), 1)
	return err == nil && len(at) == 1 && at[0].Message.ID == ds[0].Message.ID
}

// declarationProblems returns what is wrong with f's declaration, given
// a backend b and a queue q it opened.
func declarationProblems(f Factory, b Backend, q broker.Broker) []string {
	var problems []string
	check := func(name string, declared, implemented bool) {
		if declared != implemented {
			problems = append(problems, fmt.Sprintf("%s declares %s %v, but its queue (%T) implements it: %v", f.Name, name, declared, q, implemented))
		}
	}
	_, ok := q.(broker.LeaseExtender)
	check("LeaseExtender", f.Caps.LeaseExtender, ok)
	_, ok = q.(broker.Rejecter)
	check("Rejecter", f.Caps.Rejecter, ok)
	_, ok = q.(broker.DeadLetterReader)
	check("DeadLetterReader", f.Caps.DeadLetterReader, ok)
	_, ok = q.(broker.DeadLetterManager)
	check("DeadLetterManager", f.Caps.DeadLetterManager, ok)
	_, ok = q.(broker.Waker)
	check("Waker", f.Caps.Waker, ok)
	_, ok = q.(KeyedPublisher)
	check("Keyed (KeyedPublisher)", f.Caps.Keyed, ok)
	_, ok = q.(BatchPublisher)
	check("Batch (BatchPublisher)", f.Caps.Batch, ok)
	if _, ok := b.(io.Closer); f.Caps.Closer && !ok {
		problems = append(problems, fmt.Sprintf("%s declares Closer, but its backend (%T) is not an io.Closer", f.Name, b))
	}
	if f.Caps.ExactExpiry && !f.Caps.Clock {
		problems = append(problems, fmt.Sprintf("%s declares ExactExpiry without Clock: an exact instant can only be checked on the suite's clock", f.Name))
	}
	return problems
}

// env is one test's backend and clock, with the calls the tests share.
type env struct {
	*testing.T
	f     Factory
	caps  Capabilities
	clock *Clock // nil without Caps.Clock
	b     Backend
	n     int // queues opened
}

func newEnv(t *testing.T, f Factory) *env {
	e := &env{T: t, f: f, caps: f.Caps}
	var now func() time.Time
	if f.Caps.Clock {
		e.clock = NewClock(t0)
		now = e.clock.Now
	}
	e.b = f.Open(t, now)
	if e.b == nil {
		t.Fatalf("%s: Open returned a nil Backend", f.Name)
	}
	return e
}

// together makes n calls of call at once, released together, and returns
// when every one has returned: a race between callers of one queue. A
// call that panics is raised again here, on the caller's goroutine, once
// every call has returned.
func together(n int, call func()) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first *goPanic
	keep := func(p *goPanic) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = p
		}
	}
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer catch(keep)
			<-start
			call()
		}()
	}
	close(start)
	wg.Wait()
	if first != nil {
		panic(first)
	}
}

// ctx is the context of every call: the test's.
func (e *env) ctx() context.Context { return e.Context() }

// now is the broker's clock as the suite knows it: the suite's clock, or
// the real one.
func (e *env) now() time.Time {
	if e.clock != nil {
		return e.clock.Now()
	}
	return time.Now()
}

// tol is the tolerance of real timings, zero on the suite's clock.
func (e *env) tol() time.Duration {
	if e.clock != nil {
		return 0
	}
	return e.caps.tolerance()
}

// short is the duration a timing test gives a lease or a retry delay: a
// round minute on the suite's clock; in real time four tolerances, held
// between 100 ms and 2 s (a smaller Tolerance makes the checks that
// something happens NOT before its instant sharper, and the suite faster).
func (e *env) short() time.Duration {
	if e.clock != nil {
		return time.Minute
	}
	return min(max(4*e.tol(), 100*time.Millisecond), 2*time.Second)
}

// policy returns the suite's default policy, adjusted by mods: a lease
// that does not lapse during a test unless the test makes it, five
// deliveries, no retry delay.
func (e *env) policy(mods ...func(*broker.PolicyValue)) broker.PolicyValue {
	p := broker.PolicyValue{VisibilityTimeout: 10 * time.Minute, MaxDeliveries: 5}
	for _, m := range mods {
		m(&p)
	}
	return p
}

// queue opens a new queue named after the test with policy p.
func (e *env) queue(p broker.PolicyValue) broker.Broker {
	e.Helper()
	q, err := e.b.Queue(e.queueName(), p)
	if err != nil {
		e.Fatalf("Queue with %+v: %v", p, err)
	}
	if q == nil {
		e.Fatalf("Queue returned a nil Broker")
	}
	return q
}

func (e *env) queueName() string {
	e.n++
	return fmt.Sprintf("q%d", e.n)
}

// The optional interfaces of q; each fails the test when q lacks it (the
// test declared the capability, and Declaration reports the mismatch).
func (e *env) extender(q broker.Broker) broker.LeaseExtender {
	return implements[broker.LeaseExtender](e, q)
}
func (e *env) rejecter(q broker.Broker) broker.Rejecter { return implements[broker.Rejecter](e, q) }
func (e *env) reader(q broker.Broker) broker.DeadLetterReader {
	return implements[broker.DeadLetterReader](e, q)
}
func (e *env) manager(q broker.Broker) broker.DeadLetterManager {
	return implements[broker.DeadLetterManager](e, q)
}
func (e *env) waker(q broker.Broker) broker.Waker { return implements[broker.Waker](e, q) }

// implements returns q as the optional interface T, or fails the test.
func implements[T any](e *env, q broker.Broker) T {
	e.Helper()
	x, ok := q.(T)
	if !ok {
		e.Fatalf("%T is not a %v", q, reflect.TypeFor[T]())
	}
	return x
}

func (e *env) keyed(q broker.Broker) KeyedPublisher {
	e.Helper()
	x, ok := q.(KeyedPublisher)
	if !ok {
		e.Fatalf("%T has no PublishKeyed", q)
	}
	return x
}

func (e *env) batch(q broker.Broker) BatchPublisher {
	e.Helper()
	x, ok := q.(BatchPublisher)
	if !ok {
		e.Fatalf("%T has no PublishBatch", q)
	}
	return x
}

// publish publishes payload and fails the test on an error.
func (e *env) publish(q broker.Broker, payload string) broker.MessageValue {
	e.Helper()
	m, err := q.Publish(e.ctx(), []byte(payload))
	if err != nil {
		e.Fatalf("Publish(%q): %v", payload, err)
	}
	return m
}

// receive receives up to max and fails the test on an error.
func (e *env) receive(q broker.Broker, max int) []broker.DeliveryValue {
	e.Helper()
	ds, err := q.Receive(e.ctx(), max)
	if err != nil {
		e.Fatalf("Receive(%d): %v", max, err)
	}
	if len(ds) > max {
		e.Fatalf("Receive(%d) returned %d deliveries", max, len(ds))
	}
	return ds
}

// receiveOne receives and requires exactly one delivery.
func (e *env) receiveOne(q broker.Broker) broker.DeliveryValue {
	e.Helper()
	ds := e.receive(q, 10)
	if len(ds) != 1 {
		e.Fatalf("Receive returned %d deliveries %v, want 1", len(ds), ids(ds))
	}
	return ds[0]
}

// none requires that nothing is receivable now.
func (e *env) none(q broker.Broker, why string) {
	e.Helper()
	if ds := e.receive(q, 10); len(ds) != 0 {
		e.Fatalf("%s: Receive returned %v, want nothing", why, ids(ds))
	}
}

// ack acknowledges and fails the test on an error.
func (e *env) ack(q broker.Broker, r broker.ReceiptValue) {
	e.Helper()
	if err := q.Ack(e.ctx(), r); err != nil {
		e.Fatalf("Ack: %v", err)
	}
}

// nack nacks and fails the test on an error.
func (e *env) nack(q broker.Broker, r broker.ReceiptValue, cause error) broker.NackValue {
	e.Helper()
	v, err := q.Nack(e.ctx(), r, cause)
	if err != nil {
		e.Fatalf("Nack: %v", err)
	}
	return v
}

// deadLetters reads up to 100 dead letters.
func (e *env) deadLetters(q broker.Broker) []broker.DeadLetterValue {
	e.Helper()
	dls, err := e.reader(q).DeadLetters(e.ctx(), 100)
	if err != nil {
		e.Fatalf("DeadLetters: %v", err)
	}
	return dls
}

// isErr requires that err wraps target.
func (e *env) isErr(err, target error, what string) {
	e.Helper()
	if !errors.Is(err, target) {
		e.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

// gone requires that a receipt that no longer names a live lease is
// refused with LeaseExpired or UnknownReceipt (API.md §5.7: the
// implementation's choice).
func (e *env) gone(err error, what string) {
	e.Helper()
	if !errors.Is(err, broker.LeaseExpired) && !errors.Is(err, broker.UnknownReceipt) {
		e.Fatalf("%s: got error %v, want LeaseExpired or UnknownReceipt", what, err)
	}
}

// sameInstant requires two instants to be equal (time.Time.Equal: the
// location and monotonic reading do not matter).
func (e *env) sameInstant(want, got time.Time, what string) {
	e.Helper()
	if !want.Equal(got) {
		e.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// set moves the suite's clock to at.
func (e *env) set(at time.Time) {
	e.Helper()
	if e.clock == nil {
		e.Fatalf("set: the test needs the Clock capability")
	}
	e.clock.Set(at)
}

// appearsAt requires that the next delivery of q is made at instant at
// and not before, and returns it. On the suite's clock it checks the
// boundary exactly (nothing at at−1ns, the delivery at at) when exact,
// else within Tolerance; without it, it polls Receive until a delivery
// comes, failing if it came before at−Tolerance or not by at+3·Tolerance
// plus a second.
func (e *env) appearsAt(q broker.Broker, at time.Time, exact bool, what string) broker.DeliveryValue {
	e.Helper()
	if e.clock != nil {
		before, after := at.Add(-time.Nanosecond), at
		if !exact {
			before, after = at.Add(-e.caps.tolerance()), at.Add(e.caps.tolerance())
		}
		if e.clock.Now().Before(before) {
			e.clock.Set(before)
			e.none(q, what+": before its instant")
		}
		if e.clock.Now().Before(after) {
			e.clock.Set(after) // never backwards: that is a test of its own
		}
		return e.receiveOne(q)
	}
	tol := e.tol()
	deadline := at.Add(3*tol + time.Second)
	for {
		start := time.Now()
		ds := e.receive(q, 10)
		if len(ds) > 1 {
			e.Fatalf("%s: Receive returned %d deliveries %v, want 1", what, len(ds), ids(ds))
		}
		if len(ds) == 1 {
			if start.Before(at.Add(-tol)) {
				e.Fatalf("%s: delivered at %v, before %v less the tolerance %v", what, start, at, tol)
			}
			return ds[0]
		}
		if time.Now().After(deadline) {
			e.Fatalf("%s: nothing delivered by %v (due at %v, tolerance %v)", what, deadline, at, tol)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hiddenUntil requires that nothing is receivable from q now, when now is
// safely before at: on the suite's clock always, on the real one only
// when the call starts before at−Tolerance (a stalled test machine must
// not make the suite flaky).
func (e *env) hiddenUntil(q broker.Broker, at time.Time, what string) {
	e.Helper()
	start := e.now()
	ds := e.receive(q, 10)
	if len(ds) > 0 && start.Before(at.Add(-e.tol())) {
		e.Fatalf("%s: Receive at %v returned %v, want nothing before %v", what, start, ids(ds), at)
	}
}

// patience is how long the suite waits in real time for concurrent work
// (Consume handing out a message, returning after its context ended)
// before it fails the promise it checks: ten seconds plus three
// Tolerances, whatever the clock.
func (e *env) patience() time.Duration { return 10*time.Second + 3*e.caps.tolerance() }

// eventually polls cond until it holds or a real-time deadline passes. It
// is for concurrent work (Consume), not for the broker's timings.
func (e *env) eventually(what string, cond func() bool) {
	e.Helper()
	deadline := time.Now().Add(e.patience())
	for !cond() {
		if time.Now().After(deadline) {
			e.Fatalf("%s: did not happen by %v", what, deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// within waits for a value from ch for at most e.patience(), and reports
// whether one came. The suite waits with it, or with eventually, for
// whatever Consume or a Wake signal must do: a broken broker, or a
// Consume over it that never delivers or never returns, fails the promise
// being checked instead of hanging the test binary until its -timeout. (A
// call of the implementation that never returns is left to that -timeout,
// which names the case it hung in.)
func within[T any](e *env, ch <-chan T) (T, bool) {
	t := time.NewTimer(e.patience())
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// ctxCanceled is what a call given a cancelled context returns, wrapped.
var ctxCanceled = context.Canceled

// contextWithCancel returns a context of the test that cancel ends.
func contextWithCancel(e *env) (context.Context, context.CancelFunc) {
	return context.WithCancel(e.ctx())
}

func itoa(n int) string { return fmt.Sprint(n) }

func ids(ds []broker.DeliveryValue) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Message.ID
	}
	return out
}

// deliveryCounts returns the Deliveries of each of ds.
func deliveryCounts(ds []broker.DeliveryValue) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.Deliveries
	}
	return out
}

func payloads(ds []broker.DeliveryValue) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Message.Payload)
	}
	return out
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}
