package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// This file holds what the power-loss, fault, damage and kernel tests
// share: a deterministic single-goroutine broker workload that journals
// what each call acknowledged, a reference projection of that journal
// (which messages exist, dead or alive, with how many deliveries), and the
// check that opens a store directory and compares what it holds with the
// projection of some prefix of the journal.

// seedEnv replays a run: it fixes the seed of every randomised test of
// this file set (each test logs the seed it used).
const seedEnv = "WALBROKER_RECOVERY_SEED"

// testSeed returns the seed of a test: seedEnv if set, else a random one.
// It is logged, so a failure names it.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	if v := os.Getenv(seedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
		t.Logf("seed %d (from %s)", seed, seedEnv)
		return seed
	}
	seed := rand.Uint64()
	t.Logf("seed %d (replay with %s=%d)", seed, seedEnv, seed)
	return seed
}

// checkReopened reopens the store in dir with the clock at `at` and checks
// that it lost nothing acknowledged and invented nothing: it holds every
// message of acked (ID → payload) with its payload, and any other message
// it holds has a payload mayHold accepts (that of a publish that failed,
// which may or may not have reached the log). what names the case.
func checkReopened(t *testing.T, dir string, at time.Time, acked map[string]string, mayHold func(payload string) bool, what string) {
	t.Helper()
	obs, err := observe(dir, at, nil, broker.Options{})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	for id, p := range acked {
		if got, ok := obs.msgs[id]; !ok || got.payload != p {
			t.Errorf("%s: acknowledged message %s lost (found %v)", what, id, got)
		}
	}
	for id, o := range obs.msgs {
		if _, ok := acked[id]; !ok && !mayHold(o.payload) {
			t.Errorf("%s: message %s (%v) was never published", what, id, o)
		}
	}
}

// openQueue opens the store in dir with opts and its queue name, declared
// with the workload's policy for that name. A failure ends the test.
func openQueue(t testing.TB, dir string, opts broker.Options, name string) (*broker.Store, *broker.Queue) {
	t.Helper()
	s, err := broker.Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	q, err := s.Queue(name, policyOf(name))
	if err != nil {
		_ = s.Close()
		t.Fatalf("queue %s: %v", name, err)
	}
	return s, q
}

// fastDir returns a fresh directory on tmpfs when the machine has one (these
// tests fdatasync a great deal and check logic, not the disk), else under
// t.TempDir. It is removed when the test ends.
func fastDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "walbroker-recovery-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// t0 is where every workload clock starts.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a broker clock that moves only when told to. Safe for
// concurrent use (the store reads it from its own goroutines).
type clock struct{ ns atomic.Int64 }

func newClock(at time.Time) *clock {
	c := &clock{}
	c.ns.Store(at.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func bg() context.Context { return context.Background() }

// payloadOf is the start of the j-th payload of the workload's n-th step:
// every payload is unique, and says where it came from.
func payloadOf(queue string, n, j int) string { return fmt.Sprintf("%s/%d/%d|", queue, n, j) }

// isIOFailure reports whether err is a failure of the store (the file
// system failed under it), not one of the refusals the workload expects.
func isIOFailure(err error) bool { return err != nil && !isRefusal(err) }

// isRefusal reports whether err is one of the refusals the workload meets
// in normal operation, which change nothing: a lease that lapsed (the
// workload's clock moved past it) or a dead letter already gone.
func isRefusal(err error) bool {
	return errors.Is(err, broker.LeaseExpired) || errors.Is(err, broker.DeadLetterNotFound)
}

// The workload's queues: plain publishes, keyed publishes and batches go
// to one queue each; consumers work on all three.
var wlQueues = []string{"orders", "events", "jobs"}

func policyOf(queue string) broker.PolicyValue {
	switch queue {
	case "orders":
		return broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 3, RetryDelay: 2 * time.Second,
			MaxRetryDelay: 10 * time.Second, MaxMessageBytes: 4096}
	case "events":
		return broker.PolicyValue{VisibilityTimeout: 30 * time.Second, MaxDeliveries: 2, RetryDelay: time.Second,
			MaxMessageBytes: 4096, DedupWindow: 6 * time.Hour}
	default:
		return broker.PolicyValue{VisibilityTimeout: 20 * time.Second, MaxDeliveries: 2, RetryDelay: time.Second,
			MaxMessageBytes: 4096}
	}
}

func maxDeliveries(queue string) int { return policyOf(queue).MaxDeliveries }

// checkDelay is how long after the workload's last clock reading a store
// is inspected: every lease has lapsed and every retry delay has ended by
// then, and every dedup key is still inside its window.
const checkDelay = time.Hour

// opKind is the kind of one workload call.
type opKind uint8

const (
	opPublish opKind = iota + 1
	opKeyed
	opBatch
	opReceive
	opAck
	opNack
	opReject
	opExtend
	opDeadLetters
	opReplay
	opDelete
	opDeclare
)

var opNames = map[opKind]string{
	opPublish: "Publish", opKeyed: "PublishKeyed", opBatch: "PublishBatch", opReceive: "Receive",
	opAck: "Ack", opNack: "Nack", opReject: "Reject", opExtend: "Extend", opDeadLetters: "DeadLetters",
	opReplay: "ReplayDeadLetter", opDelete: "DeleteDeadLetter", opDeclare: "Store.Queue",
}

func (k opKind) String() string { return opNames[k] }

// call is one workload call and what it returned.
type call struct {
	op       opKind
	queue    string
	payloads []string // what a publish sent
	key      string   // a keyed publish's key
	max      int      // a Receive's max
	target   string   // the message an Ack, Nack, ... names
	err      error
	ids      []string   // what a publish returned
	dup      bool       // a keyed publish returned an earlier message
	got      []received // what a Receive returned
	dead     bool       // a Nack dead-lettered
}

type received struct {
	id         string
	deliveries int
	payload    string
}

func (c *call) String() string {
	s := fmt.Sprintf("%s(%s", c.op, c.queue)
	switch {
	case c.key != "":
		s += " key " + c.key
	case c.target != "":
		s += " " + c.target
	case c.max > 0:
		s += fmt.Sprintf(" max %d", c.max)
	}
	s += ")"
	if c.err != nil {
		return s + ": " + c.err.Error()
	}
	switch {
	case len(c.ids) > 0:
		s += fmt.Sprintf(" = %v", c.ids)
	case len(c.got) > 0:
		for _, g := range c.got {
			s += fmt.Sprintf(" %s#%d", g.id, g.deliveries)
		}
	}
	if c.dup {
		s += " (duplicate)"
	}
	if c.dead {
		s += " (dead-lettered)"
	}
	return s
}

// newPublish reports whether the call enqueued messages.
func (c *call) newPublish() bool {
	return c.err == nil && !c.dup && (c.op == opPublish || c.op == opKeyed || c.op == opBatch)
}

// journal is what one run of the workload acknowledged, call by call.
type journal struct {
	mode    broker.SyncMode
	seed    uint64
	openErr error
	// calls are the calls that returned, with a nil error or a refusal
	// (isRefusal), in order.
	calls []call
	// failed is the call that failed otherwise (the file system failed
	// under it), if any: its effect may or may not be in the log, and the
	// workload stopped there.
	failed   *call
	closeErr error
	// synced is how many leading calls a completed fdatasync of a segment
	// covered (see syncWatchFS); -1 when not watched.
	synced int
	end    time.Time // the clock when the workload stopped
	keys   []string  // every dedup key the workload used
	stats  broker.StoreStats
	// base is the state the store held before the first call, as an
	// earlier life left it (nil: an empty store); prior holds every
	// message ID that earlier life was handed or left in the store.
	base  *state
	prior map[string]bool
}

func (j *journal) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "journal (mode %v, workload seed %d, %d calls, synced %d):\n", j.mode, j.seed, len(j.calls), j.synced)
	if j.openErr != nil {
		fmt.Fprintf(&b, "  open: %v\n", j.openErr)
	}
	for i := range j.calls {
		fmt.Fprintf(&b, "  %3d %s\n", i, &j.calls[i])
	}
	if j.failed != nil {
		fmt.Fprintf(&b, "  FAILED %s\n", j.failed)
	}
	if j.closeErr != nil {
		fmt.Fprintf(&b, "  close: %v\n", j.closeErr)
	}
	return b.String()
}

// workload describes one run: its seed fixes every choice, so two runs
// over file systems that do not fail make the same calls with the same
// results (only the background maintenance, timed by the real clock,
// varies the file operations).
type workload struct {
	seed  uint64
	steps int
	mode  broker.SyncMode
	// syncInterval is Options.SyncInterval; zero for the default.
	syncInterval time.Duration
	// onFailure, if set, is called when a call fails (before the store is
	// closed) with the store, its queues and the leases held.
	onFailure func(s *broker.Store, queues map[string]*broker.Queue, leases []held)
	// opened, if set, is called once the store is open; beforeClose
	// after the last call, before the store is closed.
	opened, beforeClose func()
	// start is where the clock starts (zero: t0). base and prior describe
	// the store an earlier life left (see journal); the workload takes a
	// keyed publish that returns a prior ID for a duplicate.
	start time.Time
	base  *state
	prior map[string]bool
}

func (w workload) options(c *clock, fs vfs.FS) broker.Options {
	return broker.Options{Now: c.Now, Sync: w.mode, SyncInterval: w.syncInterval, SegmentBytes: broker.MinSegmentBytes, FS: fs}
}

// held is a lease the workload holds.
type held struct {
	queue   string
	id      string
	receipt broker.ReceiptValue
}

// run runs the workload against the store in dir, opened with fs (nil:
// the real file system), until its last step or the first call that
// fails for a reason other than a refusal. It then closes the store. If
// watch is not nil, it is told how many calls have completed after each.
func (w workload) run(dir string, fs vfs.FS, watch *syncWatchFS) *journal {
	j := &journal{mode: w.mode, seed: w.seed, synced: -1, base: w.base, prior: w.prior}
	start := w.start
	if start.IsZero() {
		start = t0
	}
	c := newClock(start)
	defer func() { j.end = c.Now() }()
	s, err := broker.Open(dir, w.options(c, fs))
	if err != nil {
		j.openErr = err
		return j
	}
	if w.opened != nil {
		w.opened()
	}
	defer func() {
		j.stats = s.Stats()
		if w.beforeClose != nil {
			w.beforeClose()
		}
		j.closeErr = s.Close()
		if watch != nil {
			j.synced = watch.Synced()
		}
	}()
	rng := rand.New(rand.NewPCG(w.seed, 0x5eed))
	queues := map[string]*broker.Queue{}
	known := maps.Clone(w.prior)
	if known == nil {
		known = map[string]bool{}
	}
	var leases []held
	// record appends a call to the journal; it reports false (stop) if the
	// call failed with something other than a refusal.
	record := func(cl call) bool {
		if isIOFailure(cl.err) {
			j.failed = &cl
			if w.onFailure != nil {
				w.onFailure(s, queues, leases)
			}
			return false
		}
		j.calls = append(j.calls, cl)
		if watch != nil {
			watch.Completed(len(j.calls))
		}
		return true
	}
	for _, name := range wlQueues {
		q, err := s.Queue(name, policyOf(name))
		if !record(call{op: opDeclare, queue: name, err: err}) {
			return j
		}
		queues[name] = q
	}
	for i := range 8 {
		j.keys = append(j.keys, fmt.Sprintf("key-%d", i))
	}
	filler := func(n int) string { return strings.Repeat(string(rune('a'+rng.IntN(26))), n) }
	takeLease := func() (held, bool) {
		if len(leases) == 0 {
			return held{}, false
		}
		i := max(0, len(leases)-1-rng.IntN(3)) // mostly recent leases, still live
		h := leases[i]
		leases = slices.Delete(leases, i, i+1)
		return h, true
	}
	for step := range w.steps {
		c.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		if rng.IntN(30) == 0 {
			c.Advance(40 * time.Second) // every lease held lapses
			if rng.IntN(2) == 0 {
				leases = leases[:0] // forgotten; otherwise their acks are refused
			}
		}
		r := rng.IntN(100)
		var cl call
		switch {
		case r < 12:
			cl = call{op: opPublish, queue: "orders", payloads: []string{payloadOf("orders", step, 0) + filler(100+rng.IntN(1300))}}
			m, err := queues[cl.queue].Publish(bg(), []byte(cl.payloads[0]))
			cl.err = err
			if err == nil {
				cl.ids = []string{m.ID}
			}
		case r < 20:
			cl = call{op: opKeyed, queue: "events", key: j.keys[rng.IntN(len(j.keys))],
				payloads: []string{payloadOf("events", step, 0) + filler(100+rng.IntN(900))}}
			m, err := queues[cl.queue].PublishKeyed(bg(), cl.key, []byte(cl.payloads[0]))
			cl.err = err
			if err == nil {
				cl.ids, cl.dup = []string{m.ID}, known[m.ID]
			}
		case r < 26:
			cl = call{op: opBatch, queue: "jobs"}
			var batch [][]byte
			for i := range 2 + rng.IntN(2) {
				p := payloadOf("jobs", step, i) + filler(50+rng.IntN(700))
				cl.payloads = append(cl.payloads, p)
				batch = append(batch, []byte(p))
			}
			ms, err := queues[cl.queue].PublishBatch(bg(), batch)
			cl.err = err
			for _, m := range ms {
				cl.ids = append(cl.ids, m.ID)
			}
		case r < 48:
			cl = call{op: opReceive, queue: wlQueues[rng.IntN(len(wlQueues))], max: 1 + rng.IntN(4)}
			ds, err := queues[cl.queue].Receive(bg(), cl.max)
			cl.err = err
			for _, d := range ds {
				cl.got = append(cl.got, received{id: d.Message.ID, deliveries: d.Deliveries, payload: string(d.Message.Payload)})
				leases = append(leases, held{queue: cl.queue, id: d.Message.ID, receipt: d.Lease.Receipt})
			}
		case r < 90 && len(leases) > 0:
			h, _ := takeLease()
			cl = call{queue: h.queue, target: h.id}
			q := queues[h.queue]
			switch {
			case r < 74:
				cl.op = opAck
				cl.err = q.Ack(bg(), h.receipt)
			case r < 80:
				cl.op = opNack
				var nv broker.NackValue
				nv, cl.err = q.Nack(bg(), h.receipt, broker.NewError("HANDLER_FAILED", 0, "the handler failed", ""))
				cl.dead = nv.DeadLettered
			case r < 83:
				cl.op = opReject
				cl.err = q.Reject(bg(), h.receipt, broker.DoNotRetry(nil))
			default:
				cl.op = opExtend
				lv, err := q.Extend(bg(), h.receipt, time.Duration(10+rng.IntN(50))*time.Second)
				cl.err = err
				if err == nil {
					leases = append(leases, held{queue: h.queue, id: h.id, receipt: lv.Receipt})
				}
			}
		case r < 90:
			cl = call{op: opReceive, queue: wlQueues[rng.IntN(len(wlQueues))], max: 1}
			ds, err := queues[cl.queue].Receive(bg(), 1)
			cl.err = err
			for _, d := range ds {
				cl.got = append(cl.got, received{id: d.Message.ID, deliveries: d.Deliveries, payload: string(d.Message.Payload)})
				leases = append(leases, held{queue: cl.queue, id: d.Message.ID, receipt: d.Lease.Receipt})
			}
		default:
			cl = call{op: opDeadLetters, queue: wlQueues[rng.IntN(len(wlQueues))]}
			dls, err := queues[cl.queue].DeadLetters(bg(), 10)
			cl.err = err
			if !record(cl) {
				return j
			}
			if len(dls) == 0 || r < 94 {
				continue
			}
			dl := dls[rng.IntN(len(dls))]
			cl = call{op: opReplay, queue: cl.queue, target: dl.Message.ID}
			if r >= 97 {
				cl.op = opDelete
				cl.err = queues[cl.queue].DeleteDeadLetter(bg(), dl.Message.ID)
			} else {
				cl.err = queues[cl.queue].ReplayDeadLetter(bg(), dl.Message.ID)
			}
		}
		for _, id := range cl.ids {
			if cl.err == nil && !cl.dup {
				known[id] = true
			}
		}
		if !record(cl) {
			return j
		}
	}
	return j
}

// msgView is a message as a store shows it once every lease has lapsed:
// alive (receivable, after d deliveries) or dead.
type msgView struct {
	queue   string
	payload string
	dead    bool
	d       int
}

func (v msgView) String() string {
	state := "alive"
	if v.dead {
		state = "dead"
	}
	p := v.payload
	if i := strings.IndexByte(p, '|'); i >= 0 {
		p = p[:i+1] + fmt.Sprintf("(%d bytes)", len(v.payload))
	}
	return fmt.Sprintf("%s in %s after %d deliveries, payload %s", state, v.queue, v.d, p)
}

// state is the projection of a prefix of a journal: the messages present,
// as inspection would show them, and the dedup keys remembered.
type state struct {
	msgs map[string]msgView
	seen map[string]string // dedup key → the original's ID
}

func newState() *state { return &state{msgs: map[string]msgView{}, seen: map[string]string{}} }

func (st *state) clone() *state {
	return &state{msgs: maps.Clone(st.msgs), seen: maps.Clone(st.seen)}
}

// apply projects one call that returned. A refused call changes nothing.
func (st *state) apply(c *call) {
	if c.err != nil {
		return
	}
	switch c.op {
	case opPublish, opKeyed, opBatch:
		if c.dup {
			return
		}
		for i, id := range c.ids {
			st.msgs[id] = msgView{queue: c.queue, payload: c.payloads[i]}
		}
		if c.op == opKeyed {
			st.seen[c.key] = c.ids[0]
		}
	case opReceive:
		for _, g := range c.got {
			v := st.msgs[g.id]
			v.d = g.deliveries
			v.dead = v.dead || g.deliveries >= maxDeliveries(c.queue) // leased for the last time: it dies when the lease lapses
			st.msgs[g.id] = v
		}
	case opAck, opDelete:
		delete(st.msgs, c.target)
	case opNack, opReject:
		v := st.msgs[c.target]
		v.dead = v.dead || c.op == opReject || c.dead
		st.msgs[c.target] = v
	case opReplay:
		v := st.msgs[c.target]
		v.dead, v.d = false, 0
		st.msgs[c.target] = v
	}
}

// observation is what a store directory holds, inspected at a clock past
// every lease: each message, and what PublishKeyed returns for each dedup
// key.
type observation struct {
	msgs     map[string]msgView
	dedup    map[string]string
	recovery broker.RecoveryReport
	// calls are the calls the inspection made, as a journal records them
	// (they change the store: the next inspection sees their effect).
	calls []call
	// failed is the call of the inspection that failed, if one did (its
	// effect is unknown), and afterFailure what a Publish returned after it
	// (it must fail too: the store stopped).
	failed       *call
	afterFailure error
}

// observe opens the store in dir with the clock at `at` (and opts'
// file system and Salvage), receives every message of every workload
// queue (so every delivery count is read), lists the dead letters, then
// publishes once with each key to see which message it names. It changes
// the store. If a call fails, it returns what it saw so far with the
// error (the observation is nil only if Open failed).
func observe(dir string, at time.Time, keys []string, opts broker.Options) (*observation, error) {
	opts.Now = newClock(at).Now
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = broker.MinSegmentBytes
	}
	s, err := broker.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	obs := &observation{msgs: map[string]msgView{}, dedup: map[string]string{}, recovery: s.Recovery()}
	err = func() error {
		for _, name := range wlQueues {
			q, err := s.Queue(name, policyOf(name))
			if err != nil {
				return err
			}
			for {
				ds, err := q.Receive(bg(), 64)
				if err != nil {
					obs.failed = &call{op: opReceive, queue: name, max: 64, err: err}
					return fmt.Errorf("Receive from %s: %w", name, err)
				}
				if len(ds) == 0 {
					break
				}
				cl := call{op: opReceive, queue: name, max: 64}
				for _, d := range ds {
					if old, ok := obs.msgs[d.Message.ID]; ok {
						return fmt.Errorf("message %s delivered twice while inspecting (%v, then %s)", d.Message.ID, old, name)
					}
					obs.msgs[d.Message.ID] = msgView{queue: name, payload: string(d.Message.Payload), d: d.Deliveries - 1}
					cl.got = append(cl.got, received{id: d.Message.ID, deliveries: d.Deliveries, payload: string(d.Message.Payload)})
				}
				obs.calls = append(obs.calls, cl)
			}
			dls, err := q.DeadLetters(bg(), 100000)
			if err != nil {
				obs.failed = &call{op: opDeadLetters, queue: name, err: err}
				return fmt.Errorf("DeadLetters of %s: %w", name, err)
			}
			for _, dl := range dls {
				if old, ok := obs.msgs[dl.Message.ID]; ok {
					return fmt.Errorf("message %s both %v and a dead letter of %s", dl.Message.ID, old, name)
				}
				obs.msgs[dl.Message.ID] = msgView{queue: name, payload: string(dl.Message.Payload), dead: true, d: dl.Deliveries}
			}
		}
		events, err := s.Queue("events", policyOf("events"))
		if err != nil {
			return err
		}
		for _, k := range keys {
			m, err := events.PublishKeyed(bg(), k, []byte("probe"))
			if err != nil {
				obs.failed = &call{op: opKeyed, queue: "events", key: k, payloads: []string{"probe"}, err: err}
				return fmt.Errorf("PublishKeyed %s: %w", k, err)
			}
			obs.dedup[k] = m.ID
			obs.calls = append(obs.calls, call{op: opKeyed, queue: "events", key: k, payloads: []string{"probe"}, ids: []string{m.ID}})
		}
		return nil
	}()
	if err != nil {
		q, qerr := s.Queue("orders", policyOf("orders"))
		if qerr == nil {
			_, qerr = q.Publish(bg(), []byte("after the failure"))
		}
		obs.afterFailure = qerr
	}
	return obs, errors.Join(err, s.Close())
}

// diff compares an observation with the projection st of a journal
// prefix. If failed is not nil, the observation may also show the effect
// of that call, whose outcome is unknown. It returns "" when they agree,
// else what differs.
func diff(obs *observation, st *state, failed *call) string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	maybePublished := map[string]bool{} // payloads the failed call may have enqueued
	var receivedByFailed int
	if failed != nil && (failed.op == opPublish || failed.op == opBatch || failed.op == opKeyed && st.seen[failed.key] == "") {
		for _, p := range failed.payloads {
			maybePublished[p] = true
		}
	}
	foundFailed := 0
	for _, id := range sortedKeys(obs.msgs) {
		o := obs.msgs[id]
		want, ok := st.msgs[id]
		if !ok {
			if maybePublished[o.payload] && o.queue == failed.queue && !o.dead && o.d == 0 {
				foundFailed++
				continue
			}
			add("message %s is there (%v) but no acknowledged call put it there", id, o)
			continue
		}
		if o.queue != want.queue || o.payload != want.payload {
			add("message %s is %v, want %v", id, o, want)
			continue
		}
		if o.dead == want.dead && o.d == want.d {
			continue
		}
		if failed != nil && failedMayExplain(failed, id, want, o) {
			if failed.op == opReceive {
				receivedByFailed++
			}
			continue
		}
		add("message %s is %v, want %v", id, o, want)
	}
	for _, id := range sortedKeys(st.msgs) {
		if _, ok := obs.msgs[id]; ok {
			continue
		}
		if failed != nil && failed.target == id && (failed.op == opAck || failed.op == opDelete) {
			continue
		}
		add("message %s is missing, want %v", id, st.msgs[id])
	}
	if failed != nil && failed.op == opReceive && receivedByFailed > failed.max {
		add("%d messages of %s have one more delivery than acknowledged, but the failed Receive asked for %d", receivedByFailed, failed.queue, failed.max)
	}
	if foundFailed != 0 && foundFailed != len(maybePublished) {
		add("%d of the %d messages of the failed %v are there: a publish is all or nothing", foundFailed, len(maybePublished), failed)
	}
	for _, k := range sortedKeys(obs.dedup) {
		got := obs.dedup[k]
		if want, ok := st.seen[k]; ok {
			if got != want {
				add("PublishKeyed %s returned %s, want the original %s", k, got, want)
			}
			continue
		}
		if o, ok := obs.msgs[got]; ok {
			if !(failed != nil && failed.op == opKeyed && failed.key == k && maybePublished[o.payload]) {
				add("PublishKeyed %s returned %s (%v), but the key was never acknowledged", k, got, o)
			}
		}
	}
	return strings.Join(out, "\n")
}

// failedMayExplain reports whether the failed call, had it taken effect,
// turns message id from want into got.
func failedMayExplain(failed *call, id string, want, got msgView) bool {
	switch failed.op {
	case opReceive:
		return failed.queue == want.queue && !want.dead && got.d == want.d+1 && got.dead == (got.d >= maxDeliveries(want.queue))
	case opReject, opNack:
		return failed.target == id && !want.dead && got.dead && got.d == want.d
	case opReplay:
		return failed.target == id && want.dead && !got.dead && got.d == 0
	}
	return false
}

// match looks for a prefix of j, at least lo calls long, whose projection
// the observation shows (the failed call counting as a possible last
// one). It returns that prefix's length, or -1 and what differs from the
// closest candidate.
func match(j *journal, obs *observation, lo int) (int, string) {
	st := project(j, min(lo, len(j.calls)))
	best := ""
	for n := lo; n <= len(j.calls); n++ {
		d := diff(obs, st, nil)
		if d == "" {
			return n, ""
		}
		if best == "" || strings.Count(d, "\n") < strings.Count(best, "\n") {
			best = fmt.Sprintf("closest: the first %d calls:\n%s", n, d)
		}
		if n < len(j.calls) {
			st.apply(&j.calls[n])
		}
	}
	if j.failed != nil {
		d := diff(obs, st, j.failed)
		if d == "" {
			return len(j.calls) + 1, ""
		}
		if strings.Count(d, "\n") <= strings.Count(best, "\n") {
			best = fmt.Sprintf("closest: every call and maybe the failed one:\n%s", d)
		}
	}
	return -1, best
}

// project returns the projection of the first n calls of j, from the
// state an earlier life left (j.base) if there was one.
func project(j *journal, n int) *state {
	st := newState()
	if j.base != nil {
		st = j.base.clone()
	}
	for i := range n {
		st.apply(&j.calls[i])
	}
	return st
}

// lowerBound is how many leading calls of j must survive a power loss:
// those a completed fdatasync covered, and, by the sync mode's promise,
// every call up to the last that waited for one. keepAll says that every
// written byte survived (though no name change a directory sync had not
// made durable: see vfs.CrashOptions.KeepUnsyncedFraction): then every
// call that returned must be there.
func lowerBound(j *journal, keepAll bool) int {
	if keepAll {
		return len(j.calls)
	}
	lo := max(j.synced, 0)
	switch j.mode {
	case broker.SyncAll:
		return len(j.calls)
	case broker.SyncPublish:
		for i := range j.calls {
			if j.calls[i].newPublish() {
				lo = max(lo, i+1)
			}
		}
	}
	return min(lo, len(j.calls))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
