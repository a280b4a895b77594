package natsjs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/walbroker/walbroker/broker"
)

// Options configures a [Store]. The zero value is usable: file storage, one
// replica, the prefix WALBROKER, a 5 s timeout per server request, a 1 s
// recheck of other processes' leases, and nothing logged.
type Options struct {
	// Prefix names this store's streams (PREFIX_Q_queue, PREFIX_D_queue,
	// PREFIX_K_queue, PREFIX_A_queue, PREFIX_F_queue) and subjects
	// (PREFIX.q.queue, ...), so that several applications share one
	// server without seeing each other's queues. 1 to 32 of
	// [A-Za-z0-9-]; empty means "WALBROKER".
	Prefix string
	// Replicas is how many servers of a cluster hold each stream and the
	// consumer's state: 1 (0 means 1) to 5. A publish returns once the
	// stream's quorum has stored it.
	Replicas int
	// Memory keeps the streams in the servers' memory instead of files:
	// faster, and lost when the servers stop. Never for a queue whose
	// messages must survive.
	Memory bool
	// Timeout bounds each request to the server made with a context that
	// has no deadline of its own. Zero means 5 s; negative is refused.
	Timeout time.Duration
	// Recheck is how long, at most, Wake lets an idle consumer sleep while
	// other processes hold leases on the queue: their lapses are invisible
	// here, and a message whose consumer died is picked up at the next
	// look. Zero means 1 s; negative disables it (then such a message waits
	// for the next publication or for this Store's own next lease event).
	Recheck time.Duration
	// Logger receives, as warnings keyed by queue, what a call cannot
	// return: the Error text of a cause with no reason, keyed by message
	// ID (it may hold payload bytes, so it is never sent to the server);
	// a Receive error after some messages were leased; a request for the
	// consumer's state that failed (Receive and Wake go on without it); a
	// failure record that could not be read (the lapse is recorded as
	// LEASE_EXPIRED) or removed once its message was settled; an
	// unreadable MAX_DELIVERIES advisory, dropped; a delivery made as the
	// Store closed that could not be handed back (it waits for its lease
	// to lapse); a replay that could not remove the copy an earlier
	// replay queued (the message may be processed twice) or release its
	// claim on the dead letter after it failed (the claim ends on its
	// own); and a failed wake subscription. Nil discards them.
	Logger *slog.Logger
}

const (
	defaultPrefix  = "WALBROKER"
	defaultTimeout = 5 * time.Second
	defaultRecheck = time.Second
	maxPrefix      = 32
	// consumerName is the durable pull consumer of every work stream.
	consumerName = "walbroker"
)

// Store is a set of named queues on a NATS JetStream server or cluster,
// reached through one connection. Each queue is five streams and one
// durable consumer (see the package documentation); nothing about a queue
// lives in the Store but its receipts' key and the leases handed out
// through it, so any number of Stores, in any number of processes, may
// serve the same queues.
//
// A Store is safe for concurrent use. It retains the connection it was
// given, which stays the caller's to close, after [Store.Close]. A nil
// or zero *Store refuses every call (see nilreceiver.go).
type Store struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	opts   Options
	key    []byte // receipts' MAC key: random, never leaves the process
	origin string // random id stamped on this Store's publishes (see wake.go)
	// clock is the adapter's clock for how long a Queue keeps the token of
	// an abandoned batch (see batchtoken.go): time.Now, which tests move.
	clock func() time.Time
	// closed is set once, by Close, before it takes mu to close the
	// queues; Queue looks at it under mu, so that every queue is either
	// refused or made before Close lists them.
	closed atomic.Bool

	// mu guards queues and connGone.
	mu     sync.Mutex
	queues map[string]*Queue
	// connGone is set when the connection closed (watchConn): the queues
	// are closed then, as by Close, and one made after is closed at once.
	connGone bool
	// connClosed hears the connection's CLOSED status (watchConn); Close
	// removes it.
	connClosed chan nats.Status
}

var _ io.Closer = (*Store)(nil)

// Open returns a Store that keeps its queues on the JetStream server nc is
// connected to. It checks the options and that the server has JetStream;
// it creates nothing until [Store.Queue]. A connection closed before Open
// returns is refused with broker.Closed.
func Open(nc *nats.Conn, opts Options) (*Store, error) {
	if nc == nil {
		return nil, errors.New("natsjs: Open: nil connection")
	}
	if opts.Prefix == "" {
		opts.Prefix = defaultPrefix
	}
	if len(opts.Prefix) > maxPrefix || strings.Trim(opts.Prefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return nil, fmt.Errorf("natsjs: Open: Prefix %q must be 1 to %d of [A-Za-z0-9-]", opts.Prefix, maxPrefix)
	}
	switch {
	case opts.Replicas < 0 || opts.Replicas > 5:
		return nil, fmt.Errorf("natsjs: Open: Replicas %d must be 0 to 5", opts.Replicas)
	case opts.Replicas == 0:
		opts.Replicas = 1
	}
	switch {
	case opts.Timeout < 0:
		return nil, fmt.Errorf("natsjs: Open: Timeout %v must not be negative", opts.Timeout)
	case opts.Timeout == 0:
		opts.Timeout = defaultTimeout
	}
	if opts.Recheck == 0 {
		opts.Recheck = defaultRecheck
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(opts.Timeout))
	if err != nil {
		return nil, fmt.Errorf("natsjs: Open: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, fmt.Errorf("natsjs: Open: %v: %w", err, broker.Closed)
		}
		return nil, fmt.Errorf("natsjs: Open: the server does not offer JetStream to this account: %w", err)
	}
	afterAccountInfo()
	s := &Store{nc: nc, js: js, opts: opts, key: make([]byte, 32), clock: time.Now, queues: map[string]*Queue{}}
	var id [8]byte
	if _, err := rand.Read(s.key); err != nil {
		return nil, fmt.Errorf("natsjs: Open: receipt key: %w", err)
	}
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("natsjs: Open: origin id: %w", err)
	}
	s.origin = hex.EncodeToString(id[:])
	s.connClosed = nc.StatusChanged(nats.CLOSED)
	if nc.IsClosed() {
		// Closed before the listener was there to hear it: no queue of
		// this Store would ever hear of it (watchConn).
		nc.RemoveStatusListener(s.connClosed)
		return nil, fmt.Errorf("natsjs: Open: %v: %w", nats.ErrConnectionClosed, broker.Closed)
	}
	go s.watchConn(s.connClosed)
	return s, nil
}

// afterAccountInfo runs in Open between its request to the server and the
// status listener's registration (tests close the connection there).
var afterAccountInfo = func() {}

// watchConn closes every queue when the connection closes: each call then
// returns Closed (begin), and a consumer waiting on a queue's wake signal
// must hear of it too, as after Close, or it waits for good. The
// connection is the caller's, so its handlers are left alone: a status
// listener is enough. It returns when the connection closed, or when
// Close removed the listener.
func (s *Store) watchConn(ch chan nats.Status) {
	if _, ok := <-ch; !ok {
		return
	}
	s.mu.Lock()
	s.connGone = true
	qs := make([]*Queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	s.mu.Unlock()
	for _, q := range qs {
		_ = q.close() // the connection is gone: nothing to unsubscribe from
	}
	s.nc.RemoveStatusListener(ch)
}

// Queue returns the queue name with policy, creating its streams and
// consumer when they do not exist and updating them when they do. A policy
// different from last time applies from then on to this Store's calls,
// and to what the server keeps for every Store that serves the queue: the
// policy's VisibilityTimeout is the consumer's AckWait, its MaxDeliveries
// the consumer's MaxDeliver, its Capacity the stream's MaxMsgs, its
// DedupWindow the stream's duplicate window. What a Store decides itself
// it decides by the policy it declared last, which another Store's
// declaration does not change: the ExpiresAt of its leases, which of its
// deliveries is the last, whether its Nack dead-letters and how long the
// retry delay is, and the MaxMessageBytes and dedup window its publishes
// are checked against. So a change must be declared through every Store
// that serves the queue (see the package documentation, Policy changes).
// The same name returns the same *Queue.
//
// A policy that lowers MaxDeliveries gives up on what has no delivery
// left, as the file store's declaration does, for the messages this Store
// nacked that still wait out their retry delay with a count at or above
// the new maximum: they are dead letters when Queue returns without an
// error. The new policy is in force once the server's streams and
// consumer took it, before the burial: a burial that fails leaves the
// policy in force and those messages undelivered, Queue returns an error
// that says so, and the next declaration of the queue, even with the same
// policy, buries them before it returns. Every other message the lowering
// leaves no delivery (one whose lease lapsed with deliveries left, which
// the server may have delivered again since, or one of another Store) is
// left to the server, which delivers it no more and gives it up at a
// later pull (see the package documentation, Policy changes).
//
// name must be 1 to 64 of [A-Za-z0-9._-], not starting with '.'; an
// invalid name or policy is refused with an error wrapping
// broker.QueueMisconfigured, and so is a DedupWindow below 100 ms, which
// the server cannot keep. Once the Store or its connection is closed,
// Queue returns an error wrapping broker.Closed.
func (s *Store) Queue(name string, policy broker.PolicyValue) (*Queue, error) {
	if s.unmade() {
		return nil, nilReceiver("Store")
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := policy.Validate(); err != nil {
		return nil, eachLine(fmt.Sprintf("natsjs: queue %s: ", name), err)
	}
	if policy.DedupWindow > 0 && policy.DedupWindow < minDedupWindow {
		// The server refuses a shorter duplicate window; say so in the
		// port's terms rather than pass on its unclassified refusal.
		return nil, fmt.Errorf("natsjs: queue %s: DedupWindow %v is below %v, the shortest duplicate window a NATS server keeps: %w",
			name, policy.DedupWindow, minDedupWindow, broker.QueueMisconfigured)
	}
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout(s.opts.Timeout))
	defer cancel()
	q, lowered, err := s.declare(ctx, name, policy)
	if err != nil {
		return nil, err
	}
	// Not only a lowering declaration buries: the policy is in force once
	// declare returns, so a repeat of one whose burial failed sees no
	// change, and must still finish that burial before it reports success.
	if !lowered && len(q.exhausted(time.Now())) == 0 {
		return q, nil
	}
	// The burial runs without s.mu, which a sweep must not hold (see the
	// lock order at Queue.sweepMu). A failed one leaves the messages to
	// the next sweep (unburied stays set) and fails the declaration.
	if err := s.begin(ctx, name); err != nil {
		return nil, err
	}
	q.unburied.Store(true) // sweep now, however recent the last sweep
	if err := q.sweepDeaths(ctx); err != nil {
		return nil, fmt.Errorf("natsjs: queue %s: MaxDeliveries %d is in force, but burying the messages it left no delivery failed (declaring the queue again retries it): %w",
			name, policy.MaxDeliveries, err)
	}
	return q, nil
}

// declare makes or updates the queue's streams and consumer and returns
// its Queue, with the policy applied; lowered reports that the policy
// lowered MaxDeliveries (see Queue.setPolicy).
func (s *Store) declare(ctx context.Context, name string, policy broker.PolicyValue) (q *Queue, lowered bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() { // under s.mu: Close closes every queue made before it
		return nil, false, fmt.Errorf("natsjs: queue %s: %w", name, broker.Closed)
	}
	n := newNames(s.opts.Prefix, name)
	if err := s.provision(ctx, n, policy); err != nil {
		return nil, false, declareError(name, err)
	}
	if q := s.queues[name]; q != nil {
		return q, q.setPolicy(policy), nil
	}
	q, err = newQueue(ctx, s, name, n, policy)
	if err != nil {
		return nil, false, declareError(name, err)
	}
	s.queues[name] = q
	if s.connGone {
		// The connection closed while the queue was made: watchConn
		// closed the others already.
		_ = q.close()
	}
	return q, false, nil
}

// declareError wraps the failure of a declaration's requests, as
// broker.Closed when the connection is gone: once it closed, every call
// returns Closed (see watchConn), a declaration included, as the file
// store's Queue does once the store is closed.
func declareError(name string, err error) error {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("natsjs: queue %s: %v: %w", name, err, broker.Closed)
	}
	return fmt.Errorf("natsjs: queue %s: %w", name, err)
}

// provisionTimeout bounds the requests that declare a queue: twice the
// Options' Timeout (there are several), held at the largest Duration, so
// that a Timeout meant as "none" (math.MaxInt64) does not wrap to a
// negative bound that fails every declaration.
func provisionTimeout(timeout time.Duration) time.Duration {
	if timeout > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * timeout
}

// provision creates or updates the five streams and the consumer of one
// queue to match policy.
func (s *Store) provision(ctx context.Context, n names, policy broker.PolicyValue) error {
	storage := jetstream.FileStorage
	if s.opts.Memory {
		storage = jetstream.MemoryStorage
	}
	window := dedupWindow(policy)
	capacity := int64(-1)
	if policy.Capacity > 0 {
		capacity = int64(policy.Capacity)
	}
	work := jetstream.StreamConfig{
		Name:        n.work,
		Description: "walbroker queue " + n.queue + ": messages",
		Subjects:    []string{n.workSubject},
		Retention:   jetstream.WorkQueuePolicy,
		MaxMsgs:     capacity,
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    s.opts.Replicas,
		Duplicates:  window,
		// Headers only, for the wake signal of consumers elsewhere.
		RePublish:          &jetstream.RePublish{Source: n.workSubject, Destination: n.wakeSubject, HeadersOnly: true},
		AllowAtomicPublish: true,
	}
	dead := jetstream.StreamConfig{
		Name:        n.dead,
		Description: "walbroker queue " + n.queue + ": dead letters",
		Subjects:    []string{n.deadSubject + ".*"},
		Retention:   jetstream.LimitsPolicy,
		// One record per message ID: a message that dies again replaces
		// the record a replay that crashed halfway left behind.
		MaxMsgsPerSubject: 1,
		Storage:           storage,
		Replicas:          s.opts.Replicas,
		Duplicates:        time.Minute,
	}
	// One record per key: a claim, then the message's ID (see
	// PublishKeyed). Records are guarded by a compare-and-set on their
	// subject, not by Nats-Msg-Id; the duplicate window stays for the
	// claims of earlier versions, which carried one.
	keys := jetstream.StreamConfig{
		Name:              n.keys,
		Description:       "walbroker queue " + n.queue + ": enqueue instants of dedup keys",
		Subjects:          []string{n.keySubject + ".*"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxAge:            window + keyRecordSlack,
		Storage:           storage,
		Replicas:          s.opts.Replicas,
		Duplicates:        window,
	}
	deaths := jetstream.StreamConfig{
		Name:        n.deaths,
		Description: "walbroker queue " + n.queue + ": messages whose last lease lapsed, until they are dead letters",
		Subjects:    []string{n.deathSubject},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage,
		Replicas:    s.opts.Replicas,
		// Headers only: tells the queue's Stores that there is work.
		RePublish: &jetstream.RePublish{Source: n.deathSubject, Destination: n.deathNotice, HeadersOnly: true},
	}
	// One record per message of the work stream, by its sequence: the
	// last failure a Nack reported in the message's life (a replay
	// publishes it again, at a new sequence, with none), which a lapse on
	// its last delivery records (see recordFailure).
	failures := jetstream.StreamConfig{
		Name:              n.failures,
		Description:       "walbroker queue " + n.queue + ": the last failure a nack reported for each message",
		Subjects:          []string{n.failureSubject + ".*"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		Storage:           storage,
		Replicas:          s.opts.Replicas,
	}
	for _, cfg := range []jetstream.StreamConfig{work, dead, keys, deaths, failures} {
		if _, err := s.js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	_, err := s.js.CreateOrUpdateConsumer(ctx, n.work, jetstream.ConsumerConfig{
		Durable:       consumerName,
		Description:   "walbroker queue " + n.queue,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       policy.VisibilityTimeout,
		MaxDeliver:    policy.MaxDeliveries,
		MaxAckPending: -1,
		Replicas:      s.opts.Replicas,
	})
	if err != nil {
		return fmt.Errorf("consumer %s > %s: %w", n.work, consumerName, err)
	}
	return nil
}

// dedupWindow is the policy's DedupWindow, its default when zero.
func dedupWindow(p broker.PolicyValue) time.Duration {
	if p.DedupWindow <= 0 {
		return broker.DefaultDedupWindow
	}
	return p.DedupWindow
}

// minDedupWindow is the shortest duplicate window nats-server accepts on
// a stream.
const minDedupWindow = 100 * time.Millisecond

// keyRecordSlack keeps a key's enqueue instant a little longer than the
// server remembers the key, so that a duplicate always finds it.
const keyRecordSlack = time.Minute

// Queues returns the names of the queues opened through this Store.
func (s *Store) Queues() []string {
	if s.unmade() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.queues))
	for name := range s.queues {
		out = append(out, name)
	}
	return out
}

// Close ends the Store: every later call on it or its queues returns an
// error wrapping broker.Closed. Leases it handed out stay on the server and
// lapse at their deadlines; the connection stays open (it is the
// caller's). Close does not wait for the calls under way: a call that
// looks at its lease once Close ran (Ack, Nack, Reject, Extend) returns
// Closed too, and a Receive that Close overtook (during one of its pulls or
// after, before it returned) hands everything it pulled back at once (the
// server counts those deliveries) and returns Closed, so that no lease is
// handed out after Close returned. Close is idempotent.
func (s *Store) Close() error {
	if s.unmade() {
		return nilReceiver("Store")
	}
	if s.closed.Swap(true) {
		return nil
	}
	if s.connClosed != nil {
		s.nc.RemoveStatusListener(s.connClosed) // ends watchConn
	}
	s.mu.Lock()
	qs := make([]*Queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	s.mu.Unlock()
	var errs []error
	for _, q := range qs {
		errs = append(errs, q.close())
	}
	return errors.Join(errs...)
}

// begin checks what every queue call checks first: the context, the Store
// and the connection.
func (s *Store) begin(ctx context.Context, queue string) error {
	if ctx == nil {
		return fmt.Errorf("natsjs: queue %s: nil context: %w", queue, broker.QueueMisconfigured)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return fmt.Errorf("natsjs: queue %s: the store is closed: %w", queue, broker.Closed)
	}
	if s.nc.IsClosed() {
		return fmt.Errorf("natsjs: queue %s: the connection is closed: %w", queue, broker.Closed)
	}
	return nil
}

// bounded returns ctx with the Store's Timeout when ctx has no deadline.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// checkName applies the queue-name rule of the file-backed store
// (broker.CheckQueueName), so that a name valid there is valid here and
// the reverse, and refuses with the same error.
func checkName(name string) error {
	if err := broker.CheckQueueName(name); err != nil {
		return fmt.Errorf("natsjs: %w", err)
	}
	return nil
}

// names are the server-side names of one queue.
type names struct {
	queue                     string
	work, dead, keys, deaths  string // stream names
	failures                  string // stream name
	failureSubject            string // followed by .<work-stream sequence>
	workSubject, wakeSubject  string
	deadSubject, keySubject   string // followed by .<token>
	deathSubject, deathNotice string // the server's MAX_DELIVERIES advisory, and its republication
}

// newNames maps a queue name onto stream names and subject tokens, which
// allow neither '.' nor (in stream names) much else: '_' is written "__"
// and '.' "_d", so the mapping is one to one and a queue's names never
// collide with another's (the prefix has no '_', and the kind letters
// between prefix and queue are upper case, which an escape never is).
func newNames(prefix, queue string) names {
	var b strings.Builder
	for _, c := range []byte(queue) {
		switch c {
		case '_':
			b.WriteString("__")
		case '.':
			b.WriteString("_d")
		default:
			b.WriteByte(c)
		}
	}
	enc := b.String()
	work := prefix + "_Q_" + enc
	return names{
		queue:          queue,
		work:           work,
		dead:           prefix + "_D_" + enc,
		keys:           prefix + "_K_" + enc,
		deaths:         prefix + "_A_" + enc,
		failures:       prefix + "_F_" + enc,
		workSubject:    prefix + ".q." + enc,
		wakeSubject:    prefix + ".w." + enc,
		deadSubject:    prefix + ".d." + enc,
		keySubject:     prefix + ".k." + enc,
		failureSubject: prefix + ".f." + enc,
		deathSubject:   "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + work + "." + consumerName,
		deathNotice:    prefix + ".a." + enc,
	}
}

// eachLine prefixes every error joined in err (each violation of a refused
// policy is one) with prefix, so that every line of the refusal names the
// queue.
func eachLine(prefix string, err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return fmt.Errorf("%s%w", prefix, err)
	}
	var errs []error
	for _, e := range joined.Unwrap() {
		errs = append(errs, fmt.Errorf("%s%w", prefix, e))
	}
	return errors.Join(errs...)
}
