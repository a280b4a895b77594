package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// MaxConsumeConcurrency bounds [ConsumeOptions.Concurrency] and
// [ConsumeOptions.Prefetch]: Consume reserves room for that many handlers
// and held deliveries before it starts, and a goroutine for each handler,
// so a mistyped count is refused rather than allowed to exhaust the
// memory.
const MaxConsumeConcurrency = 1 << 16

// ConsumeOptions configures [Consume]. The zero value is valid: one
// message at a time, one handler at a time, no lease extension, nothing
// logged by Consume (see Logger). Consume copies it; the Logger is
// retained until Consume returns.
type ConsumeOptions struct {
	// Batch is the most messages one Receive asks for. Zero means 1;
	// negative is refused ([InvalidBatchSize]). Consume never asks for more
	// than there are free handler slots, plus the room Prefetch leaves.
	// Zero is 1 whatever Concurrency is: with Concurrency set and Batch
	// not, each Receive leases one message, which over a [*Queue] under
	// [SyncAll] waits for an fdatasync of its own; Batch equal to
	// Concurrency lets one Receive fill every free slot at once.
	Batch int
	// Concurrency is how many handlers run at once. Zero means 1; negative,
	// or above [MaxConsumeConcurrency], is refused ([InvalidBatchSize]).
	// Batch bounds how many of them one Receive fills.
	Concurrency int
	// Prefetch is how many leased messages Consume may hold, waiting for a
	// handler, beyond those its handlers run. Zero (the default) holds
	// none: every message Consume leases starts at once. Negative, or
	// above [MaxConsumeConcurrency], is refused ([InvalidBatchSize]).
	//
	// With few handlers and a Batch above Concurrency, holding messages is
	// what lets one Receive lease many: Consume receives again once half
	// of what it holds has started, so that over a [*Queue] one commit
	// carries the leases of the next messages and the acks of the last
	// ones, instead of one commit for each handler that finishes.
	//
	// The price is the held messages' leases: a lease runs from its
	// Receive, while the message waits, and is not renewed before its
	// handler starts (then at once, with ExtendEvery, if it waited longer
	// than that). Keep Prefetch ÷ Concurrency × the handler's time well
	// below the queue's VisibilityTimeout, or a held message may be
	// delivered again elsewhere before it starts here. When
	// ctx ends, the messages still held are not started: each is nacked
	// with the reason [ReasonConsumerStopped], so it waits out its
	// RetryDelay and has spent a delivery (as a message received from SQS
	// or NATS and left unprocessed has); on its last delivery it goes to
	// the dead-letter store saying the consumer stopped.
	Prefetch int
	// PollInterval is how long Consume waits after an empty Receive when
	// the broker is not a [Waker] (or its Wake returned a nil Signal; then
	// never past the In it named), and after a failed Receive that does
	// not end Consume: a Receive error that is [Closed], or the failure of
	// a file-backed store that stopped for good, ends it at once (see
	// [Consume]). After a failed Receive the wait is at least 1ms, and
	// doubles with each Receive in a row that fails, up to PollInterval or
	// 1s, whichever is longer: a broker that is down for a while is not
	// asked, nor its failure logged, in a loop. A Receive that succeeds
	// (empty or not) starts it again at PollInterval. Zero means 100ms;
	// negative is refused ([QueueMisconfigured]). A Waker is trusted: its
	// broker is not polled.
	PollInterval time.Duration
	// ExtendEvery, when positive and the broker is a [LeaseExtender], makes
	// Consume renew the lease of every running handler this often, by
	// ExtendBy. Zero means no extension; negative, or MaxDeadlineOffset
	// and above, is refused ([QueueMisconfigured]). The first renewal comes
	// ExtendEvery after the handler starts, or, for a message that waited
	// for a handler (one Prefetch held, or one a broker returned beyond
	// those asked for), ExtendEvery after its Receive (at once when it
	// waited longer than that to start), so ExtendEvery must be well
	// below the queue's [PolicyValue.VisibilityTimeout] (which Consume
	// cannot see): a lease that lapses before it is lost, and the message
	// may be delivered again while the handler still runs, until that
	// renewal finds the loss and cancels the handler. A renewal that
	// fails is retried sooner than the next tick (see ExtendBy).
	ExtendEvery time.Duration
	// ExtendBy is how far each renewal reaches, measured from the renewal.
	// Zero means 2×ExtendEvery, at most [MaxDeadlineOffset]; negative, not
	// above ExtendEvery (the lease would lapse before the next renewal),
	// or above MaxDeadlineOffset (a renewal beyond any lease Consume
	// would make), is refused
	// ([QueueMisconfigured]) when ExtendEvery is positive.
	//
	// A renewal that fails for a reason that is not the lease's (neither
	// [LeaseExpired] nor [UnknownReceipt], nor a closed or stopped broker:
	// a busy disk, say) is logged and tried again before the next tick:
	// after ExtendEvery/4, or half of what is left of the lease the last
	// good renewal made (ExtendBy from it), whichever is sooner, but not
	// within 1ms, and so again while it fails; then at each tick. What
	// ExtendBy reaches past ExtendEvery is the room those retries have:
	// the default leaves a whole ExtendEvery, room for three at least,
	// while an ExtendBy barely above ExtendEvery leaves none, and one
	// failed renewal then costs the lease (the next renewal finds it
	// lapsed and cancels the handler).
	ExtendBy time.Duration
	// StopGrace is how long running handlers keep their context once ctx
	// ends. Consume receives, and starts, nothing more from that moment
	// (see Prefetch for the deliveries it then holds); a handler that
	// finishes within StopGrace is settled by its result as usual, and the
	// contexts of those still running are cancelled when it is over, or
	// as soon as Consume learns that b closed or stopped for good (see
	// Consume): nothing they do could be settled any more. Zero
	// cancels them with ctx, at once; negative is refused
	// ([QueueMisconfigured]). A graceful shutdown (a deploy, a SIGTERM)
	// sets it to what the handlers need to finish, so that stopping does
	// not cost their messages a delivery attempt. It does not spare the
	// messages Consume leased and had not started: those Prefetch holds
	// and those of a Receive under way as ctx ended (over a [*Queue] it
	// takes a commit) are nacked unstarted all the same, each spending a
	// delivery, and one on its last delivery goes to the dead-letter
	// store as [ReasonConsumerStopped].
	StopGrace time.Duration
	// Logger receives what Consume cannot return: handler failures and
	// panics (with the panic value and stack), refused Ack, Nack and
	// Extend calls, and Receive errors, each with the message ID where
	// there is one, and with the queue's name when b has a Name method
	// (a [*Queue] does), so that the Consume calls of several queues can
	// share one Logger. Nil discards them, save one thing: the text of a
	// handler's error that carries no reason is never written to disk, so
	// with no Logger here the broker logs it in its own, with the message
	// ID, as it does for a direct Nack. The brokers of this package do not
	// log again, in their own Logger, a failure Consume logged. Its
	// handler is called from Consume's goroutines, with no lock of the
	// broker held; a record it panics on is dropped (and reported to the
	// standard log package as Options.Logger says), and Consume goes on.
	Logger *slog.Logger
}

const (
	defaultPollInterval = 100 * time.Millisecond
	// minIdleWait is the shortest wait that counts as waiting: an idle wait
	// that ends sooner, when Receive keeps finding nothing, backs off from
	// this to PollInterval so that Consume never spins.
	minIdleWait = time.Millisecond
	// maxFailWait is how long the wait after a failed Receive may grow to
	// as Receive keeps failing, when PollInterval is shorter (see
	// failWait).
	maxFailWait = time.Second
	// ackDelay is the longest a finished handler's ack waits for the next
	// Receive to carry it while Consume holds prefetched messages.
	ackDelay = time.Millisecond
)

// errHandlerPanicked is what the cause Consume nacks a panicking handler's
// delivery with wraps. It carries no Reason, so it is recorded as
// UNCLASSIFIED; nothing of its text is written to disk (a cause's text
// never is). The panic value may contain payload bytes, so it goes to a
// log only: with a Logger, Consume logs it and the stack, and the cause
// says where they are; without one, the cause's text holds them, for the
// broker's Logger, which keeps the text of every unclassified cause it
// records (a refused Nack records none).
var errHandlerPanicked = errors.New("broker: handler panicked")

// errConsumerStopped is the classification Consume gives, by wrapping, to
// the error of a handler that gave up because Consume stopped (see
// stopped).
var errConsumerStopped = NewError(ReasonConsumerStopped, 0, "the consumer stopped before the handler finished", "")

// stopped returns herr as the cause to nack with. When one of ctxs (the
// handler's context, and Consume's own, which differ under a StopGrace)
// has ended and the handler returned its error (context.Canceled, or
// DeadlineExceeded) or its cause, wrapped or not, and nothing of its own,
// the cause is herr wrapped in errConsumerStopped, so that the dead letter
// it may make says why; otherwise herr itself.
func stopped(herr error, ctxs ...context.Context) error {
	if herr == nil || !bare(herr) {
		return herr
	}
	for _, ctx := range ctxs {
		err := ctx.Err()
		if err == nil {
			continue
		}
		cause := context.Cause(ctx)
		if causeIs(herr, err) || causeIs(herr, cause) {
			return errConsumerStopped.Wrap(herr)
		}
	}
	return herr
}

// inChain runs test, a look along a handler's error chain (errors.Is,
// errors.As), and reports a test that panics as false. The chain's
// methods (Unwrap, Is, As) are the handler's code, run on Consume's
// goroutine, where a panic would end the process: an error whose method
// panics counts as one that carries nothing, as Nack's classification
// takes it (see classify).
func inChain(test func() bool) (found bool) {
	returned := false // recover only when test did not return (see call)
	defer func() {
		if !returned {
			recover()
			found = false
		}
	}()
	found = test()
	returned = true
	return found
}

// Consume receives messages from b and runs h on each until ctx ends.
//
// Each delivery runs h on one of at most opts.Concurrency goroutines of
// Consume's own, one delivery at a time each, with a context derived from
// ctx. Once started, a goroutine waits for the next delivery until Consume
// returns. With opts.Prefetch, deliveries that find every goroutine busy
// wait, leased, for the next one free (see [ConsumeOptions.Prefetch]).
// When h returns nil the delivery is acked; an error marked with
// [DoNotRetry] rejects it (nacks it when b is not a [Rejecter]); any other
// error nacks it with that error as cause.
// An error whose Unwrap, Is or As method panics (the handler's code too),
// or whose chain does not end (an Unwrap that returns its own error, or
// any cycle), is nacked as one that carries nothing, UNCLASSIFIED, even
// when marked with DoNotRetry.
// A panic in h is recovered and nacked with a cause that carries no reason,
// so it is recorded as UNCLASSIFIED; the panic value and stack go to
// opts.Logger, with the message ID, or, with no Logger, into the cause's
// text, which the broker's Logger keeps (never its files) when the broker
// records the failure: a Nack the broker refuses (the lease lapsed while
// the handler ran) records nothing and logs nothing, so that only a
// Logger keeps every panic. A handler that gives up when ctx
// ends, returning ctx's error or its [context.Cause] (wrapped or not; with
// a StopGrace, its own context's too) and nothing of its own, is nacked
// with that error wrapped in a cause whose reason is
// [ReasonConsumerStopped]: the delivery counts, as any other (the message
// waits out its RetryDelay, or, on its last delivery, goes to the
// dead-letter store saying the consumer stopped). A handler that ends its goroutine
// instead (runtime.Goexit, as t.FailNow does) settles nothing, and its
// lease is no longer renewed: the message is delivered again once the
// lease lapses, and Consume goes on. The handler must not Ack, Nack or
// Reject its delivery itself: Consume settles it by what h returned, and
// finds the lease gone ([LeaseExpired], logged as a warning) when h did.
//
// When Receive finds nothing, Consume waits: on b's [Waker] when it has one
// (Wake is called before each Receive, so nothing published in between is
// missed), never past the [WakeValue.In] it named, counted from the Wake
// call (what the Receive took, an fdatasync say, is spent), or for
// PollInterval when b is not a Waker (or is one whose Wake broke its rule
// and returned a nil Signal: then for PollInterval, but still never past
// the In). It never spins: when a wait that should block ends at once and
// Receive still finds nothing, it backs off from 1ms, never past an In of
// 1ms or more (one below that, while Receive finds nothing, backs off in
// full to PollInterval). Those waits run on real time, whatever clock b runs on: a test that gives b
// a clock of its own (Options.Now, MemoryOptions.Now) and moves it forward
// does not end them. Such a test publishes (which closes the Wake signal),
// or gives b a clock that runs on real time plus an offset it moves.
//
// With opts.ExtendEvery set and b a [LeaseExtender], every running
// handler's lease is renewed on a ticker and the final Ack or Nack uses the
// newest receipt. When a renewal finds the lease lapsed, the handler's
// context is cancelled (its work is now a duplicate) and its delivery is
// neither acked nor nacked.
//
// Over a [*Queue], the acks of handlers that finished are carried by the
// next Receive, in the same commit as its leases (or, when the queue is
// idle, sent at once; while Prefetch holds messages and no Receive is
// due, within a millisecond): an ack is then made once, with less waiting
// for the device. A delivery's slot is free as soon as its handler
// returned. A Broker of the caller's own that embeds a *Queue is not a
// *Queue: Consume calls its Receive and Ack, one at a time.
//
// Ack, Nack, Reject and Extend run with context.WithoutCancel(ctx), so work
// in flight at shutdown is settled cleanly; their errors are logged, never
// fatal. A Receive error that is [Closed] ends Consume and is returned,
// and a Receive that fails once a file-backed store stopped for good (a
// write or fdatasync failed, or damage was found: it must be reopened, and
// no retry can succeed before that) ends it with the failure the store
// stopped on, whatever error the Receive returned (a decorator's own, say,
// which is then logged); any other is logged and retried after
// PollInterval, backing off while Receive keeps failing (see
// [ConsumeOptions.PollInterval]). Once Consume learns of such an end (a
// Store or a Memory tells it at once, even with every handler busy or
// during a StopGrace;
// another broker at the next Receive or lease renewal), the contexts of
// the running handlers end, with that error as their cause (nothing they
// do can be settled any more), and Consume returns it when they have
// returned (ctx's error once ctx has ended, as below). When ctx ends,
// Consume stops receiving and starts no handler more: it nacks
// unstarted, as [ConsumeOptions.Prefetch] says, the
// deliveries it holds, those of a Receive that returned after ctx ended,
// and those a broker returned beyond what Consume asked for that still
// wait for a free handler; it waits for every running handler (whose
// context ends with ctx, or opts.StopGrace later, or as above when b
// ends during the StopGrace) and its Ack or Nack, and returns ctx.Err(),
// even when b ended meanwhile. It returns an error at once for a nil b or
// h, or an option it refuses.
//
// Several Consume calls may share one broker, in one process or many; each
// leaves no goroutine behind when it returns.
func Consume(ctx context.Context, b Broker, h Handler, opts ConsumeOptions) error {
	if ctx == nil {
		return fmt.Errorf("broker: Consume: nil context: %w", QueueMisconfigured)
	}
	c, err := newConsumer(b, h, opts)
	if err != nil {
		return err
	}
	c.settleCtx = context.WithoutCancel(ctx)
	c.stopCtx = ctx
	var endGrace func()
	c.handlerCtx, endGrace = c.graceful(ctx)
	defer endGrace()
	var abandon context.CancelCauseFunc
	c.handlerCtx, abandon = context.WithCancelCause(c.handlerCtx)
	defer abandon(nil)
	err = c.loop(ctx)
	if cerr := ctx.Err(); cerr == nil || !causeIs(err, cerr) {
		// The broker closed or stopped for good: nothing the running
		// handlers do can be settled any more, so they are told now
		// rather than left to run to their end while Consume waits.
		abandon(err)
	} else if c.endedWith != nil {
		// ctx ended, and the loop found b ended as well: Consume returns
		// ctx's error, but the handlers, in their StopGrace, are told of
		// the end as above. Held deliveries are still released as at a
		// stop of ctx (see release).
		abandon(c.endedWith)
	} else if c.stopGrace > 0 {
		// ctx ended, and the handlers keep their context for the grace;
		// but should the broker close or stop meanwhile, they are told
		// as above, not left to run on to the grace's end.
		stopWatch := c.abandonOnEnd(abandon)
		defer stopWatch()
	}
	if c.prefetch > 0 {
		c.releaseHeld()
	}
	if c.acker != nil {
		// No Receive will carry the acks of handlers still running: from
		// now on each is acked on its own, and those waiting go now.
		c.ackMu.Lock()
		c.ackDirect = true
		c.ackMu.Unlock()
		c.flushAcks(c.settleCtx)
	}
	c.inflight.Wait()
	close(c.work)
	c.workers.Wait()
	if cerr := ctx.Err(); cerr != nil && !causeIs(err, cerr) {
		// b ended first, and ctx while the handlers finished: ctx's
		// error, as when ctx ends first.
		return cerr
	}
	return err
}

// abandonOnEnd calls abandon with the error b ended with, should b's end
// channel (see ender) fire or a renewal find b ended (see brokerGone),
// while Consume waits out a StopGrace, when no wait of the loop is left
// to notice. The returned stop ends the watch and waits for it.
func (c *consumer) abandonOnEnd(abandon context.CancelCauseFunc) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	ended := c.endSignal()
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-c.gone:
				abandon(c.goneErr)
				return
			case <-ended:
				if err := c.ender.endErr(); err != nil {
					abandon(err)
					return
				}
				ended = nil // (cannot happen: it ended with an error)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// graceful returns the context handlers run under, and a func that ends
// it and its timer, for Consume to call when it returns. Without a
// StopGrace it is ctx itself. With one, it keeps ctx's values and is
// cancelled StopGrace after ctx ends, with ctx's error as its cause.
// The func returns only once the goroutines that ctx's end and the timer
// started have returned (the one the timer starts reads ctx's cause,
// the caller's code): Consume leaves none behind.
func (c *consumer) graceful(ctx context.Context) (context.Context, func()) {
	if c.stopGrace == 0 {
		return ctx, func() {}
	}
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	// timer is set by the AfterFunc's func (ctx ended), and read by the
	// func returned once that has run, or once it never will.
	var timer *time.Timer
	watched, graced := make(chan struct{}), make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(watched)
		timer = time.AfterFunc(c.stopGrace, func() {
			defer close(graced)
			cancel(context.Cause(ctx))
		})
	})
	return hctx, func() {
		if !stopWatch() {
			<-watched // ctx ended: its func has started, and may not have set timer yet
		}
		if timer != nil && !timer.Stop() {
			<-graced // the grace is over: its func has started
		}
		cancel(context.Canceled)
	}
}

// queueName returns b's name for Consume's log records when b has a Name
// method, as a [*Queue] does; "" when it has none, or when its Name is
// the caller's code and panics (a log attribute is not worth failing
// Consume for).
func queueName(b Broker) (name string) {
	n, ok := b.(interface{ Name() string })
	if !ok {
		return ""
	}
	defer func() {
		if recover() != nil {
			name = ""
		}
	}()
	return n.Name()
}

// receiveAcker is implemented by brokers that can acknowledge leases in the
// same commit as the next Receive's leases (*Queue does): receiveAcking
// acks receipts and leases up to max messages (max may be 0) with one lock,
// one append and one wait. errs holds, for each receipt, what Ack would
// have refused it with, or the error that stopped the commit.
type receiveAcker interface {
	receiveAcking(ctx context.Context, max int, receipts []ReceiptValue) (ds []DeliveryValue, errs []error, err error)
}

// ownType reports whether b's type is this package's. A caller's type that
// embeds *Queue has receiveAcking promoted to it, but Consume must call
// the caller's own Receive and Ack (which may count, trace or refuse), not
// the embedded queue's behind them.
func ownType(b Broker) bool {
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == reflect.TypeFor[Queue]().PkgPath()
}

// failStopper is implemented by brokers that stop for good on a failure
// (the file-backed store: fail-stop): stopped returns that failure, or
// nil while the broker works.
type failStopper interface {
	stopped() error
}

// ender is implemented by brokers that can tell without a call that they
// closed or stopped for good: the channel ended returns is closed then,
// and endErr returns the error their calls now meet (nil while they
// work). Every wait of Consume's loop selects on it: while every handler
// slot is busy, so that a close or a failure ends the handlers at once,
// not when the first of them returns, and while it waits to Receive again
// (idle, or PollInterval after a failed Receive), so that Consume returns
// at once, not when the wait is over.
type ender interface {
	ended() <-chan struct{}
	endErr() error
}

// pendingAck is a delivery whose handler succeeded, waiting for the next
// Receive to carry its ack. Its inflight count is released once acked.
type pendingAck struct {
	d       DeliveryValue
	receipt ReceiptValue
}

// takeAcks empties the pending acks and returns them with their receipts.
func (c *consumer) takeAcks() ([]pendingAck, []ReceiptValue) {
	c.ackMu.Lock()
	acks := c.ackBuf
	c.ackBuf = nil
	c.ackMu.Unlock()
	receipts := make([]ReceiptValue, len(acks))
	for i, p := range acks {
		receipts[i] = p.receipt
	}
	return acks, receipts
}

// settled logs what the broker refused of acks and releases them.
func (c *consumer) settled(ctx context.Context, acks []pendingAck, errs []error) {
	for i, p := range acks {
		if errs[i] != nil {
			c.refused(ctx, "ack", errs[i], []any{"message", p.d.Message.ID, "deliveries", p.d.Deliveries})
		}
		c.inflight.Done()
	}
}

// flushAcks acks whatever is pending, with no Receive.
func (c *consumer) flushAcks(ctx context.Context) {
	acks, receipts := c.takeAcks()
	if len(acks) == 0 {
		return
	}
	_, errs, _ := c.acker.receiveAcking(ctx, 0, receipts)
	c.settled(ctx, acks, errs)
}

// consumer is the state of one Consume call.
type consumer struct {
	b        Broker
	h        Handler
	waker    Waker         // nil when b is not one
	rejecter Rejecter      // nil when b is not one
	extender LeaseExtender // nil when b is not one or no extension was asked for
	acker    receiveAcker  // nil when b cannot carry acks with a Receive
	stopper  failStopper   // nil when b never stops for good
	ender    ender         // nil when b cannot say it ended without a call
	// endedWith is the error the loop found b ended with (see ender and
	// gone); only the loop goroutine touches it.
	endedWith error
	log       *slog.Logger
	// logging is whether opts.Logger writes anywhere. Without it Consume
	// logs nothing, so the broker's own Logger must get the text of an
	// unclassified cause (see logged).
	logging bool
	// gone is closed, once (goneOnce), when a lease renewal finds b
	// closed or stopped for good, with goneErr the error it met, set
	// before. Every wait of the loop selects on it, so that Consume learns
	// of the end from a renewal as it does from a Receive or an ender,
	// and returns it (see brokerGone).
	goneOnce sync.Once
	gone     chan struct{}
	goneErr  error
	// settleCtx is Consume's ctx without its cancellation: Receive calls
	// that carry acks and the settling calls run under it.
	settleCtx context.Context
	// handlerCtx is what handlers run under: Consume's ctx, or with a
	// StopGrace, a context that ends StopGrace after it (see graceful).
	handlerCtx context.Context

	// ackMu guards ackBuf, the acks of finished handlers that the next
	// Receive will carry (when b is a receiveAcker), and ackDirect, set
	// once no Receive will. ackReady wakes an idle loop to carry them.
	ackMu     sync.Mutex
	ackBuf    []pendingAck
	ackDirect bool
	ackReady  chan struct{}

	batch       int
	concurrency int
	prefetch    int
	poll        time.Duration
	extendEvery time.Duration
	extendBy    time.Duration
	stopGrace   time.Duration

	// slots holds one token per delivery leased and not yet settled: its
	// handler running or about to run, or (with a Prefetch) the delivery
	// held in work until a handler is free. A send takes a slot, a
	// receive frees one.
	slots    chan struct{}
	inflight sync.WaitGroup
	// work hands deliveries to handler goroutines; waiting counts those
	// waiting for one, less the deliveries sent and not yet taken, so it
	// is negative while deliveries are held. Only Consume's return closes
	// work, and workers tracks the goroutines. started counts the
	// goroutines dispatch started (a replacement takes an ended one's
	// place; see worker), never more than concurrency; only the loop
	// goroutine touches it.
	work    chan job
	waiting atomic.Int64
	workers sync.WaitGroup
	started int
	// took wakes refill when a handler takes a delivery from work: what
	// Consume holds then falls with no slot freed (a handler frees its
	// slot, then takes the next held delivery), and refill, which counts
	// what it holds, must look again. Capacity 1: a send never blocks,
	// and one token stands for any number of takes.
	took chan struct{}
	// stopCtx is Consume's ctx: once it ends, a held delivery is released
	// instead of started (see release).
	stopCtx context.Context
	// streak counts consecutive idle waits that ended at once with Receive
	// still finding nothing. Only the loop goroutine touches it.
	streak int
	// failures counts the Receives in a row that failed without ending
	// Consume (see failWait). Only the loop goroutine touches it.
	failures int
}

func newConsumer(b Broker, h Handler, opts ConsumeOptions) (*consumer, error) {
	refuse := func(format string, sentinel *Error, args ...any) error {
		return fmt.Errorf("broker: Consume: "+format+": %w", append(args, sentinel)...)
	}
	switch {
	case b == nil || isNilPointer(b):
		return nil, refuse("nil broker", QueueMisconfigured)
	case unmadeBroker(b):
		return nil, refuse("a %T its constructor did not make (a zero value)", QueueMisconfigured, b)
	case h == nil:
		return nil, refuse("nil handler", QueueMisconfigured)
	case opts.Batch < 0:
		return nil, refuse("Batch %d must not be negative", InvalidBatchSize, opts.Batch)
	case opts.Concurrency < 0:
		return nil, refuse("Concurrency %d must not be negative", InvalidBatchSize, opts.Concurrency)
	case opts.Concurrency > MaxConsumeConcurrency:
		return nil, refuse("Concurrency %d is above the maximum, %d", InvalidBatchSize, opts.Concurrency, MaxConsumeConcurrency)
	case opts.Prefetch < 0:
		return nil, refuse("Prefetch %d must not be negative", InvalidBatchSize, opts.Prefetch)
	case opts.Prefetch > MaxConsumeConcurrency:
		return nil, refuse("Prefetch %d is above the maximum, %d", InvalidBatchSize, opts.Prefetch, MaxConsumeConcurrency)
	case opts.PollInterval < 0:
		return nil, refuse("PollInterval %v must not be negative", QueueMisconfigured, opts.PollInterval)
	case opts.StopGrace < 0:
		return nil, refuse("StopGrace %v must not be negative", QueueMisconfigured, opts.StopGrace)
	case opts.ExtendEvery < 0:
		return nil, refuse("ExtendEvery %v must not be negative", QueueMisconfigured, opts.ExtendEvery)
	case opts.ExtendEvery >= MaxDeadlineOffset:
		return nil, refuse("ExtendEvery %v must be below MaxDeadlineOffset %v", QueueMisconfigured, opts.ExtendEvery, MaxDeadlineOffset)
	case opts.ExtendEvery > 0 && opts.ExtendBy > MaxDeadlineOffset:
		return nil, refuse("ExtendBy %v exceeds MaxDeadlineOffset %v", QueueMisconfigured, opts.ExtendBy, MaxDeadlineOffset)
	}
	c := &consumer{
		b:           b,
		h:           h,
		gone:        make(chan struct{}),
		log:         guardLogger(opts.Logger),
		logging:     opts.Logger != nil && opts.Logger.Handler() != nil,
		batch:       max(opts.Batch, 1),
		poll:        opts.PollInterval,
		extendEvery: opts.ExtendEvery,
		extendBy:    opts.ExtendBy,
		stopGrace:   opts.StopGrace,
		concurrency: max(opts.Concurrency, 1),
		prefetch:    opts.Prefetch,
	}
	// One slot, and room in work, for each delivery running or held.
	c.slots = make(chan struct{}, c.concurrency+c.prefetch)
	c.work = make(chan job, c.concurrency+c.prefetch)
	c.took = make(chan struct{}, 1)
	if name := queueName(b); name != "" {
		c.log = c.log.With("queue", name)
	}
	if c.poll == 0 {
		c.poll = defaultPollInterval
	}
	c.waker, _ = b.(Waker)
	c.rejecter, _ = b.(Rejecter)
	c.stopper, _ = b.(failStopper)
	c.ender, _ = b.(ender)
	if a, ok := b.(receiveAcker); ok && ownType(b) {
		c.acker = a
		c.ackReady = make(chan struct{}, 1)
	}
	if c.extendEvery > 0 {
		if c.extendBy == 0 {
			c.extendBy = min(2*c.extendEvery, MaxDeadlineOffset) // no overflow: ExtendEvery < MaxDeadlineOffset
		}
		if c.extendBy <= c.extendEvery {
			return nil, refuse("ExtendBy %v must exceed ExtendEvery %v, or the lease lapses between renewals", QueueMisconfigured, c.extendBy, c.extendEvery)
		}
		if c.extender, _ = b.(LeaseExtender); c.extender == nil {
			c.log.Warn("broker: Consume: ExtendEvery is set but the broker cannot extend leases; leases will not be renewed")
		}
	}
	return c, nil
}

// loop receives and dispatches until ctx ends, Receive reports Closed or
// the broker stopped for good, or the broker said so (ender) or a lease
// renewal found it (brokerGone).
func (c *consumer) loop(ctx context.Context) error {
	for {
		n, ok := c.acquire(ctx)
		if !ok {
			return c.why(ctx)
		}
		var wake WakeValue
		var wakeAt time.Time
		if c.waker != nil {
			wake = c.waker.Wake() // before Receive: see Waker
			// wake.In counts from here, not from the Receive's return
			// (see idle). Read as Wake returns, the moment is never
			// before the broker's own, so the wait never ends before
			// the message it names is receivable.
			wakeAt = time.Now()
		}
		ds, err := c.receive(ctx, n)
		c.dispatch(ctx, ds, n)
		brokerEnded := err != nil && (causeIs(err, Closed) || (c.stopper != nil && c.stopper.stopped() != nil))
		switch {
		case ctx.Err() != nil:
			// ctx's error, even when the Receive met b's end: ctx ended
			// before, or while, the Receive ran (see why). The handlers
			// still learn of b's end (see Consume).
			if brokerEnded {
				c.endedWith, _ = c.endOf(err)
			}
			return ctx.Err()
		case brokerEnded:
			// Closed, or the broker must be reopened: retrying cannot
			// help.
			end, instead := c.endOf(err)
			if instead {
				c.log.ErrorContext(ctx, "broker: Consume: receive failed as the broker stopped; ending with the failure it stopped on", "error", err)
			}
			return end
		case c.goneYet():
			return c.endedWith
		case err != nil:
			wait := c.failWait()
			c.failures++
			c.log.ErrorContext(ctx, "broker: Consume: receive failed; retrying", "error", err, "retry_in", wait)
			if !c.pause(ctx, wait) {
				return c.why(ctx)
			}
		case len(ds) > 0:
			c.streak, c.failures = 0, 0
		default:
			c.failures = 0
			if !c.idle(ctx, wake, wakeAt) {
				return c.why(ctx)
			}
		}
	}
}

// endOf returns what b ended with, err being the error of a call (a
// Receive, a lease renewal) that found b closed or stopped for good: err
// itself when it is Closed or carries the failure the store stopped on;
// otherwise that failure. The call may have failed for a reason of its
// own as the store stopped: ctx's error (a Receive given an ended ctx
// returns that, over a *Queue without looking at the store), or any
// other (a decorator's own error, which kept the failure's text but not
// the failure itself, or a failure the call met before the store's).
// What Consume returns, and ends the handlers' contexts with, is then the
// store's failure: it is the cause a caller can act on (close the store
// and open it again), and the one errors.Is finds. instead reports that
// it is returned in err's place (err is then the caller's to log). Not
// end != err: an error type that is not comparable would panic there.
func (c *consumer) endOf(err error) (end error, instead bool) {
	if c.stopper == nil || causeIs(err, Closed) {
		return err, false
	}
	failure := c.stopper.stopped()
	if failure == nil || causeIs(err, failure) {
		return err, false
	}
	return failure, true
}

// why returns why the loop ends after a wait ended it: ctx's error once
// ctx has ended, even when the wait found b ended too (a select picks
// either of two channels ready together: the order they were closed in
// is lost), or else the end of b that the wait found (endedWith).
func (c *consumer) why(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.endedWith
}

// brokerGone records err, which a lease renewal met, as the end of b:
// it closed or stopped for good, and neither a renewal nor a settling call
// can succeed again. The first call wins. It closes gone, which ends the
// loop's wait, whatever it is, even an idle one that no other event would
// end (a broker that is not an ender, whose Wake signal its close does not
// close): the loop returns err, and Consume cancels the other handlers'
// contexts with it, as for a Receive that met the end.
func (c *consumer) brokerGone(err error) {
	c.goneOnce.Do(func() {
		c.goneErr = err
		close(c.gone)
	})
}

// endSignal returns b's end channel (see ender), or nil, which never
// fires, when b has none. Every wait of the loop selects on it beside
// gone, and sets endedWith from endErr when it fires.
func (c *consumer) endSignal() <-chan struct{} {
	if c.ender == nil {
		return nil
	}
	return c.ender.ended()
}

// goneYet reports whether a renewal found b ended (see brokerGone), and
// if so sets endedWith to what it met. Only the loop goroutine calls it.
func (c *consumer) goneYet() bool {
	select {
	case <-c.gone:
		c.endedWith = c.goneErr
		return true
	default:
		return false
	}
}

// brokerEnded reports, without waiting, whether b has said it ended (its
// end channel, or a renewal that met the end): a delivery not started
// then is not started, since nothing its handler does can be settled. The
// handlers' context ends only once the loop has seen the end, which may be
// busy in a Wake or a Receive meanwhile.
func (c *consumer) brokerEnded() bool {
	select {
	case <-c.endSignal(): // nil, never ready, when b has no end channel
		return true
	case <-c.gone:
		return true
	default:
		return false
	}
}

// receive leases up to n messages. With a receiveAcker it also carries the
// acks of the handlers that finished since the last call, so that both
// share one commit. The call is made without ctx's cancellation once the
// acks are taken (ctx is checked just before): losing them would leave
// their messages to be delivered again.
func (c *consumer) receive(ctx context.Context, n int) ([]DeliveryValue, error) {
	if c.acker == nil {
		return c.b.Receive(ctx, n)
	}
	if err := ctx.Err(); err != nil {
		// ctx ended since the loop checked it (Wake ran between): carry
		// the acks, lease nothing, as Receive(ctx) itself would refuse.
		c.flushAcks(c.settleCtx)
		return nil, err
	}
	acks, receipts := c.takeAcks()
	ds, errs, err := c.acker.receiveAcking(c.settleCtx, n, receipts)
	c.settled(c.settleCtx, acks, errs)
	return ds, err
}

// acquire waits for a free handler slot, then takes as many more as are
// free, up to the batch size. It returns how many it took, or false when
// ctx ended first, or b ended (endedWith then says how).
func (c *consumer) acquire(ctx context.Context) (int, bool) {
	if ctx.Err() != nil || c.goneYet() {
		return 0, false
	}
	ended := c.endSignal()
	for waiting := true; waiting; {
		select {
		case c.slots <- struct{}{}:
			waiting = false
		case <-ctx.Done():
			return 0, false
		case <-c.gone:
			c.endedWith = c.goneErr
			return 0, false
		case <-ended:
			if c.endedWith = c.ender.endErr(); c.endedWith != nil {
				return 0, false
			}
			ended = nil // (cannot happen: it ended with an error)
		}
	}
	n := 1
	if c.prefetch > 0 {
		var ok bool
		if n, ok = c.refill(ctx, ended); !ok {
			return 0, false
		}
	}
	if n < c.batch && len(c.slots) < cap(c.slots) {
		// Handlers that finish together free their slots one after the
		// other: let those already runnable finish before counting, so
		// that one Receive (one lease commit) serves them all.
		runtime.Gosched()
	}
	for n < c.batch {
		select {
		case c.slots <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

// job is a delivery on its way to a handler goroutine. at is when it
// began to wait for one, its lease running: a held one found every handler
// busy when it was dispatched (see ConsumeOptions.Prefetch), and one a
// broker returned beyond those asked for waited for a slot from its
// Receive. at is zero for one that did not wait.
type job struct {
	d  DeliveryValue
	at time.Time
}

// refill holds one slot, taken by acquire, and waits for more while
// Consume holds more than half its Prefetch: receiving then would lease a
// few messages per commit, one for each handler that finished. It
// returns how many slots it holds, or false, holding none, when ctx or b
// ended first (endedWith then says how). The acks of the handlers that
// finish meanwhile wait for the Receive that follows, or at most
// ackDelay: a slow handler's ack must not wait for the handlers after it.
func (c *consumer) refill(ctx context.Context, ended <-chan struct{}) (int, bool) {
	n := 1
	var flush <-chan time.Time // nil, which never fires, until an ack waits
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n < c.batch && len(c.work) > c.prefetch/2 {
		select {
		case c.slots <- struct{}{}:
			n++
		case <-c.took:
			// A held delivery started: look at what is held again.
		case <-c.ackReady:
			if flush == nil {
				timer = time.NewTimer(ackDelay)
				flush = timer.C
			}
		case <-flush:
			flush = nil
			c.flushAcks(c.settleCtx)
		case <-ctx.Done():
			c.giveBack(n)
			return 0, false
		case <-c.gone:
			c.endedWith = c.goneErr
			c.giveBack(n)
			return 0, false
		case <-ended:
			if c.endedWith = c.ender.endErr(); c.endedWith != nil {
				c.giveBack(n)
				return 0, false
			}
			ended = nil // (cannot happen: it ended with an error)
		}
	}
	return n, true
}

// giveBack frees n slots taken for a Receive that will not be made.
func (c *consumer) giveBack(n int) {
	for range n {
		<-c.slots
	}
}

// dispatch hands each delivery to a handler goroutine, starting one when
// none is waiting and fewer than Concurrency run, holding it in work for
// the next free handler otherwise, and frees the slots reserved for
// deliveries that did not come. A delivery beyond those asked for waits
// for a slot to free. Once ctx has ended, it starts none: it nacks each of
// the rest unstarted (see nackUnstarted). Once b ended while one waited,
// it starts none of the extra ones left: nothing can settle them, and
// their leases lapse.
func (c *consumer) dispatch(ctx context.Context, ds []DeliveryValue, reserved int) {
	if len(ds) > reserved {
		c.log.WarnContext(ctx, "broker: Consume: broker returned more deliveries than asked for", "asked", reserved, "got", len(ds))
	}
	ended := c.endSignal()
	over := false // b ended while an extra delivery waited for a slot
	received := time.Now()
	for i, d := range ds {
		slotted := i < reserved
		if !slotted && !over && ctx.Err() == nil {
			// They are leased all the same: run them, within the bound,
			// once a handler frees a slot; but that may take as long as a
			// handler runs, and ctx or b may end meanwhile.
			select {
			case c.slots <- struct{}{}:
				slotted = true
			case <-ctx.Done():
			case <-ended:
				over = true
			case <-c.gone:
				over = true
			}
		}
		if stop := ctx.Err() != nil; stop || over {
			if stop {
				// ctx ended while Receive ran (over a *Queue it runs
				// without ctx's cancellation, for the acks it carries, so
				// the window spans a whole commit), or while the delivery
				// waited for a slot: it is not started, as a held one is
				// not (see release), and its slot goes back.
				c.nackUnstarted(d, "broker: Consume: stopping; nacking a delivery received as ctx ended, without starting its handler")
			} else {
				c.log.WarnContext(c.settleCtx, "broker: Consume: the broker ended; a delivery beyond those asked for was not started, and will be delivered again once its lease lapses",
					"message", d.Message.ID, "deliveries", d.Deliveries)
			}
			if slotted {
				<-c.slots
			}
			continue
		}
		c.inflight.Add(1)
		j := job{d: d}
		if i >= reserved {
			j.at = received // it waited for a slot from its Receive
		}
		if c.waiting.Add(-1) >= 0 {
			c.work <- j // a goroutine is waiting for it, or about to
			continue
		}
		if c.started == c.concurrency {
			// Every handler is busy (only with a Prefetch: without one a
			// delivery's slot means a handler is free). The first to
			// finish takes it; waiting stays one lower until then.
			if j.at.IsZero() {
				j.at = time.Now()
			}
			c.work <- j
			continue
		}
		c.waiting.Add(1)
		c.started++
		c.workers.Add(1)
		go c.worker(c.handlerCtx, &j)
	}
	for i := len(ds); i < reserved; i++ {
		<-c.slots
	}
}

// idle waits after an empty Receive; wake is what Wake returned before it,
// at wakeAt. It returns false when ctx ended, or b ended, as its ender or
// a renewal found (endedWith then says how).
func (c *consumer) idle(ctx context.Context, wake WakeValue, wakeAt time.Time) bool {
	floor := c.backoff()
	start := time.Now()
	// What is left of wake.In: it counts from the Wake call, and the
	// Receive after it has spent some (over a *Queue, the fdatasync of the
	// acks it carried). Counted afresh from here, a message whose retry
	// delay ended during that Receive waited that long again. Zero or
	// less means now. (An In of zero or less is left as it is: it says
	// now already, and subtracting from a very negative one could
	// overflow.)
	in := wake.In
	if in > 0 {
		in -= start.Sub(wakeAt)
	}
	var signal <-chan struct{}
	wait, timed := c.poll, true
	switch {
	case c.waker == nil:
	case wake.Signal != nil:
		signal = wake.Signal
		wait, timed = in, wake.Scheduled
	case wake.Scheduled:
		// A Waker that breaks its "never nil" rule: with no signal to
		// wait on, Consume polls, but never past the In it named.
		wait = min(in, c.poll)
	}
	signalled, closedAlready := false, false
	if signal != nil {
		select {
		case <-signal:
			closedAlready = true
		default:
		}
	}
	if !timed || wait > 0 {
		var timer <-chan time.Time
		if timed {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		var ok bool
		if signalled, ok = c.sleep(ctx, signal, timer); !ok {
			return false
		}
	}
	// A wait set shorter than minIdleWait (In <= 0, a tiny In, what a
	// slow Receive left of one, or a tiny PollInterval) ended at once
	// whatever it lasted: on a busy machine a timer of a microsecond fires
	// a millisecond late, and that must not count as waiting, or a broker
	// whose Wake always says "now" would have Consume receive in a loop at
	// the scheduler's pace. A signal closed before the wait began ended it
	// at once too, however long this goroutine then waited for a core on a
	// loaded machine.
	atOnce := closedAlready || time.Since(start) < minIdleWait || (timed && wait < minIdleWait && !signalled)
	if !atOnce {
		c.streak = 0
		return true
	}
	// The wait ended at once (a tiny wait, or a signal already closed),
	// and the previous Receive found nothing. Retry at once the first
	// time; after that, back off, but never past an In of minIdleWait or
	// more: a message is receivable then (a Nack elsewhere, say, closed
	// the signal before this wait began, and its retry ends In after the
	// Wake), and the backoff, which grows to PollInterval, would leave it
	// waiting. An In shorter than that says "now" while Receive found
	// nothing, and backs off in full, or a Wake that always says so would
	// have Consume receive every millisecond.
	c.streak++
	if wake.Scheduled && wake.In >= minIdleWait {
		floor = min(floor, in) // what is left of In, as for the wait
	}
	return c.pause(ctx, floor-time.Since(start))
}

// backoff is the shortest an idle wait may last after c.streak waits in a
// row ended at once: 0, then 1ms doubling up to PollInterval (at least 1ms).
func (c *consumer) backoff() time.Duration {
	if c.streak == 0 {
		return 0
	}
	return min(minIdleWait<<min(c.streak-1, 20), max(c.poll, minIdleWait))
}

// failWait is how long the loop waits after a failed Receive that does
// not end it, c.failures Receives having failed in a row before it:
// PollInterval, but at least minIdleWait, or a broker that fails at once
// would be asked, and the failure logged, in a loop; doubled with each
// failure in a row, up to PollInterval or maxFailWait, whichever is
// longer, so that a broker that is down for a while is asked, and its
// failure logged, once a second (or PollInterval) at most.
func (c *consumer) failWait() time.Duration {
	ceiling := max(c.poll, maxFailWait)
	wait := max(c.poll, minIdleWait)
	for range c.failures {
		if wait >= ceiling/2 {
			return ceiling
		}
		wait *= 2
	}
	return wait
}

// pause waits d, or until ctx ends or b ends, as its ender or a renewal
// finds (endedWith then says how), and reports whether neither happened.
// A wait of PollInterval after a failed Receive must not outlast a close.
// Meanwhile it carries the acks of handlers that finish: they must not
// wait for the next Receive.
func (c *consumer) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil && !c.goneYet()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	_, ok := c.sleep(ctx, nil, t.C)
	return ok
}

// sleep waits until signal is closed or timer fires (a nil one never
// does), and reports which: signalled, or neither with ok false when ctx
// ended or b ended first, as its ender or a renewal found (endedWith then
// says how). A broker's close need not close its Wake signal (the Waker
// contract names only what makes a message receivable): the end is
// watched apart from it. Meanwhile it carries the acks of handlers that
// finish: with the queue idle, they must not wait for the next message.
func (c *consumer) sleep(ctx context.Context, signal <-chan struct{}, timer <-chan time.Time) (signalled, ok bool) {
	ended := c.endSignal()
	for {
		select {
		case <-signal:
			return true, true
		case <-timer:
			return false, true
		case <-c.ackReady:
			c.flushAcks(c.settleCtx)
		case <-ctx.Done():
			return false, false
		case <-c.gone:
			c.endedWith = c.goneErr
			return false, false
		case <-ended:
			if c.endedWith = c.ender.endErr(); c.endedWith != nil {
				return false, false
			}
			ended = nil // (cannot happen: it ended with an error)
		}
	}
}

// worker runs handlers: on first (when not nil), then on each delivery
// dispatch hands it, until Consume closes c.work. A goroutine per delivery
// cost more than the handling itself: creating it, growing its stack and
// ending it. A handler may end its goroutine (runtime.Goexit, as t.FailNow
// does): handle has then freed its slot and counted the goroutine as
// waiting, so a new goroutine takes its place, or a delivery dispatched to
// it would wait for nobody.
func (c *consumer) worker(ctx context.Context, first *job) {
	ended := true
	defer func() {
		if ended {
			c.workers.Add(1)
			go c.worker(ctx, nil)
		}
		c.workers.Done()
	}()
	// A delivery dispatched while ctx was live may reach its goroutine
	// after ctx ended: it is released then, as a held one is, not started.
	if first != nil && !c.release(first.d) {
		c.handle(ctx, first.d, first.at)
	}
	for j := range c.work {
		select {
		case c.took <- struct{}{}:
		default:
		}
		if c.release(j.d) {
			continue
		}
		c.handle(ctx, j.d, j.at)
	}
	ended = false
}

// releaseHeld releases (see release) the deliveries held when the loop
// ended: every handler may be busy for a while yet, running to the end of
// StopGrace, and a held delivery must not wait for one to take it. So are
// those an idle handler was about to take; while ctx and b are live
// (nothing to release), they go back for it.
func (c *consumer) releaseHeld() {
	for range len(c.work) {
		var j job
		select {
		case j = <-c.work:
		default:
			return // handlers took the rest
		}
		if !c.release(j.d) {
			c.work <- j // cannot block: it came out of work a moment ago
		}
	}
}

// release settles a delivery on its way to a handler (held, or handed to
// an idle one) without starting it when Consume is stopping, and reports
// whether it did: a delivery dispatched while ctx was live may reach its
// goroutine after ctx ended, and no handler starts then. Once Consume's ctx has ended, it
// nacks the delivery with errConsumerStopped (see
// ConsumeOptions.Prefetch); once the broker ended (the handlers' context
// was cancelled with Consume's ctx still live, or b said so before the
// loop saw it), nothing can be settled, and the message is delivered
// again when its lease lapses.
func (c *consumer) release(d DeliveryValue) bool {
	switch {
	case c.stopCtx.Err() != nil:
		c.nackUnstarted(d, "broker: Consume: stopping; nacking a delivery its handler never started")
	case c.handlerCtx.Err() != nil || c.brokerEnded():
		c.log.WarnContext(c.settleCtx, "broker: Consume: the broker ended; a delivery was not started, and will be delivered again once its lease lapses",
			"message", d.Message.ID, "deliveries", d.Deliveries)
	default:
		return false
	}
	c.free()
	c.inflight.Done()
	return true
}

// nackUnstarted nacks d, whose handler never started and never will,
// with errConsumerStopped once Consume's ctx has ended (see
// ConsumeOptions.Prefetch): the delivery is spent, as it would be had its
// handler given up. msg is the log record that says which delivery it was.
// It touches no slot and no count: that is the caller's.
func (c *consumer) nackUnstarted(d DeliveryValue, msg string) {
	attrs := []any{"message", d.Message.ID, "deliveries", d.Deliveries}
	c.log.InfoContext(c.settleCtx, msg, attrs...)
	if _, err := c.b.Nack(c.logged(c.settleCtx), d.Lease.Receipt, errConsumerStopped); err != nil {
		c.refused(c.settleCtx, "nack", err, attrs)
	}
}

// free frees the slot of a handler that is done. Its goroutine counts as
// waiting first, so that a dispatch the freed slot allows finds it and
// starts no other: there are never more handler goroutines than slots.
func (c *consumer) free() {
	c.waiting.Add(1)
	<-c.slots
}

// handle runs the handler on d, keeps its lease, and settles the outcome.
// It holds one slot, which it frees when the settling call has returned,
// or, for an ack the next Receive carries, as soon as it has left the ack
// for it (or when the lease was lost, and nothing is settled).
// heldSince is when d began to wait for a handler (zero: it did not).
func (c *consumer) handle(ctx context.Context, d DeliveryValue, heldSince time.Time) {
	handedOff := false
	defer func() {
		if !handedOff {
			c.free()
			c.inflight.Done()
		}
	}()
	receipt := d.Lease.Receipt
	var herr error
	if c.extender == nil {
		herr = c.call(ctx, d)
	} else {
		// The handler's own context exists only to be cancelled when its
		// lease is lost, which only lease extension can find out.
		hctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		var held time.Duration
		if !heldSince.IsZero() {
			held = time.Since(heldSince)
		}
		stop := c.keepLease(c.settleCtx, cancel, d, held)
		// Also when the handler ends its goroutine: renewing its lease
		// for ever would keep the message from everyone.
		defer stop()
		herr = c.call(hctx, d)
		var lost bool
		if receipt, lost = stop(); lost {
			return
		}
	}
	if herr == nil && c.acker != nil {
		c.ackMu.Lock()
		if !c.ackDirect {
			// The next Receive carries the ack, in the commit of its own
			// leases. The handler is done: its slot is free now, and
			// freeing it is what wakes the loop to Receive. At most
			// Concurrency + Prefetch acks wait, since each waited in a
			// slot.
			c.ackBuf = append(c.ackBuf, pendingAck{d: d, receipt: receipt})
			c.ackMu.Unlock()
			handedOff = true
			select {
			case c.ackReady <- struct{}{}:
			default:
			}
			c.free()
			return
		}
		c.ackMu.Unlock()
	}
	c.settle(c.settleCtx, d, receipt, stopped(herr, ctx, c.stopCtx))
}

// call runs the handler, turning a panic into errHandlerPanicked.
func (c *consumer) call(ctx context.Context, d DeliveryValue) (err error) {
	// recover is called only when the handler did not return: a call of
	// it walks the stack, and on a handler's fresh goroutine that walk
	// grew and copied the stack on every delivery. For the same reason
	// the logging is in a function of its own.
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			err = c.panicked(ctx, d, v)
		}
	}()
	err = c.h(ctx, d)
	returned = true
	return err
}

// panicked logs a handler's panic, with its stack, and returns
// errHandlerPanicked. It must be called from the deferred function that
// recovered, so that debug.Stack still holds the panicking frames.
//
//go:noinline
func (c *consumer) panicked(ctx context.Context, d DeliveryValue, v any) error {
	if !c.logging {
		return fmt.Errorf("%w: %s\n%s", errHandlerPanicked, panicText(v), debug.Stack())
	}
	c.log.ErrorContext(ctx, "broker: Consume: handler panicked; nacking",
		"message", d.Message.ID, "deliveries", d.Deliveries,
		"panic", panicText(v), "stack", string(debug.Stack()))
	return fmt.Errorf("%w; the panic value and stack are in the consumer's log under the message ID", errHandlerPanicked)
}

// keepLease renews d's lease every extendEvery while the handler runs,
// counted from the handler's start less held, how long d waited for a
// handler: a delivery held for extendEvery or more is renewed at once.
// A renewal that failed for a transient reason is tried again before the
// next tick (see renewalRetry).
// It is called
// only when extension was asked for and b can extend. The
// returned stop ends the renewals, waits for one in flight, and returns the
// newest receipt and whether the lease was lost (or the broker closed or
// stopped, which no settling call survives); when it was, cancel has been
// called with the renewal's error and the loss logged, and when b closed
// or stopped, brokerGone too. stop may be called more than once.
func (c *consumer) keepLease(ctx context.Context, cancel context.CancelCauseFunc, d DeliveryValue, held time.Duration) (stop func() (ReceiptValue, bool)) {
	receipt := d.Lease.Receipt
	quit, done := make(chan struct{}), make(chan struct{})
	lost := false
	go func() {
		defer close(done)
		first := time.NewTimer(max(c.extendEvery-held, 0))
		defer first.Stop()
		tick := first.C
		var ticker *time.Ticker
		// retry fires when a renewal that failed for a transient reason
		// is due again before the next tick (nil, never, while none is).
		var retry <-chan time.Time
		var retryTimer *time.Timer
		defer func() {
			if ticker != nil {
				ticker.Stop()
			}
			if retryTimer != nil {
				retryTimer.Stop()
			}
		}()
		// renewed is when the last renewal that succeeded was asked for
		// (zero: none yet): its lease lasts ExtendBy from then.
		var renewed time.Time
		// ticking is when the ticker started: its ticks come every
		// ExtendEvery from then.
		var ticking time.Time
		for {
			select {
			case <-quit:
				return
			case <-tick:
			case <-retry:
			}
			// Whichever fired, this is the renewal a pending retry waited
			// for.
			retry = nil
			if retryTimer != nil {
				retryTimer.Stop()
			}
			if ticker == nil {
				ticker = time.NewTicker(c.extendEvery)
				tick = ticker.C
				ticking = time.Now()
			}
			select {
			case <-quit: // the handler finished while the tick was pending
				return
			default:
			}
			asked := time.Now()
			lease, err := c.extender.Extend(ctx, receipt, c.extendBy)
			switch {
			case err == nil:
				receipt = lease.Receipt
				renewed = asked
			case causeIs(err, LeaseExpired) || causeIs(err, UnknownReceipt):
				lost = true
				c.log.WarnContext(ctx, "broker: Consume: lease lost while the handler ran; cancelling it, not settling (the message will be delivered again)",
					"message", d.Message.ID, "deliveries", d.Deliveries, "error", err)
				cancel(err)
				return
			case causeIs(err, Closed) || (c.stopper != nil && c.stopper.stopped() != nil):
				// No renewal, and no settling call, can succeed again:
				// not for this handler, nor for any other, and the loop,
				// which may be idle, must learn of it: of the failure
				// the store stopped on, whatever the renewal met (see
				// endOf).
				lost = true
				// The record names the renewal's error and, when it is
				// not, the failure the store stopped on, which the
				// handler's context and Consume end with.
				end, instead := c.endOf(err)
				attrs := []any{"message", d.Message.ID, "deliveries", d.Deliveries, "error", err}
				if instead {
					attrs = append(attrs, "stopped_on", end)
				}
				c.log.ErrorContext(ctx, "broker: Consume: the broker closed or stopped while the handler ran; cancelling it, not settling (the message will be delivered again once its lease lapses)", attrs...)
				cancel(end)
				c.brokerGone(end)
				return
			default:
				// Waiting for the next tick would be too late: with the
				// default ExtendBy the lease of the last good renewal
				// lapses at that very tick.
				in := c.renewalRetry(renewed)
				retryIn := in
				if in == 0 {
					// The retry is the next tick's renewal: the record
					// says how far off that is, not "at once".
					retryIn = c.extendEvery - time.Since(ticking)%c.extendEvery
				}
				c.log.ErrorContext(ctx, "broker: Consume: lease extension failed; will retry",
					"message", d.Message.ID, "deliveries", d.Deliveries, "error", err, "retry_in", retryIn)
				if in > 0 {
					if retryTimer == nil {
						retryTimer = time.NewTimer(in)
					} else {
						retryTimer.Reset(in)
					}
					retry = retryTimer.C
				}
			}
		}
	}()
	var once sync.Once
	return func() (ReceiptValue, bool) {
		once.Do(func() { close(quit) })
		<-done
		return receipt, lost
	}
}

// renewalRetry is how soon a renewal that failed for a transient reason
// is tried again, renewed being when the last one that succeeded was
// asked for (zero: none did yet): a quarter of ExtendEvery, or half of
// what is left of that renewal's lease, whichever is sooner, and never
// sooner than minIdleWait, so that a broker that keeps failing is not
// asked in a loop. Nothing left of it (by Consume's reckoning, which
// cannot see b's clock) means the next tick only: 0. Before any renewal
// the lease is the Receive's, of a VisibilityTimeout Consume cannot see,
// which ExtendEvery must be well below: a quarter of it then.
func (c *consumer) renewalRetry(renewed time.Time) time.Duration {
	in := c.extendEvery / 4
	if !renewed.IsZero() {
		left := c.extendBy - time.Since(renewed)
		if left <= 0 {
			return 0
		}
		in = min(in, left/2)
	}
	return max(in, minIdleWait)
}

// settle acks, rejects or nacks d under receipt according to the handler's
// error, and logs what the broker refused.
func (c *consumer) settle(ctx context.Context, d DeliveryValue, receipt ReceiptValue, herr error) {
	attrs := []any{"message", d.Message.ID, "deliveries", d.Deliveries}
	if herr == nil {
		if err := c.b.Ack(ctx, receipt); err != nil {
			c.refused(ctx, "ack", err, attrs)
		}
		return
	}
	// The error is logged here, with the message's ID; with a Logger to
	// log it in, the brokers of this package do not log its text again
	// (see logged).
	logged := c.logged(ctx)
	if c.rejecter != nil && inChain(func() bool { return IsDoNotRetry(herr) }) {
		c.log.WarnContext(ctx, "broker: Consume: handler failed, not retryable; rejecting", append(attrs, "error", herr)...)
		if err := c.rejecter.Reject(logged, receipt, herr); err != nil {
			c.refused(ctx, "reject", err, attrs)
		}
		return
	}
	c.log.WarnContext(ctx, "broker: Consume: handler failed; nacking", append(attrs, "error", herr)...)
	nv, err := c.b.Nack(logged, receipt, herr)
	switch {
	case err != nil:
		c.refused(ctx, "nack", err, attrs)
	case nv.DeadLettered:
		c.log.WarnContext(ctx, "broker: Consume: message dead-lettered after its last delivery", attrs...)
	}
}

// logged returns ctx for the Nack or Reject that settles a failed
// delivery. With a Logger, Consume has logged the cause with the message's
// ID, and ctx is marked (causeLogged) so that the broker does not log its
// text again: one failure, one line. Without one, ctx is returned as it
// is: the broker logs the text as for a direct Nack, or it would reach no
// log at all, and API.md §1 keeps it in the process's log.
func (c *consumer) logged(ctx context.Context) context.Context {
	if !c.logging {
		return ctx
	}
	return context.WithValue(ctx, causeLogged{}, true)
}

// refused logs a settling call the broker refused. A lapsed lease is
// expected now and then (the handler outran it) and is a warning.
func (c *consumer) refused(ctx context.Context, call string, err error, attrs []any) {
	attrs = append(attrs, "call", call, "error", err)
	if causeIs(err, LeaseExpired) {
		c.log.WarnContext(ctx, "broker: Consume: the lease was no longer held when the handler finished: it lapsed, and the message may be delivered again, or the handler settled the delivery itself, which it must leave to Consume", attrs...)
		return
	}
	c.log.ErrorContext(ctx, "broker: Consume: broker refused to settle a delivery", attrs...)
}

// unmadeBroker reports whether b is a *Queue or *Memory of this package
// that Store.Queue or NewMemory did not make (see nilreceiver.go): its
// methods refuse, but Consume's own look at a queue's store would not.
func unmadeBroker(b Broker) bool {
	switch b := b.(type) {
	case *Queue:
		return b.unmade()
	case *Memory:
		return b.unmade()
	}
	return false
}

// isNilPointer reports whether b is a nil pointer in a non-nil interface
// (a *Queue or *Memory variable never set), which no method can be called
// on.
func isNilPointer(b Broker) bool {
	v := reflect.ValueOf(b)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
