package fuzz

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/sentinel"
	"github.com/walbroker/walbroker/vfs"
)

// The two queues of every run, with small fixed policies: few deliveries,
// short leases and delays, a capacity and a dedup window a run reaches.
var (
	queueNames    = [2]string{"jobs", "mail"}
	queuePolicies = [2]broker.PolicyValue{
		{VisibilityTimeout: 10 * time.Second, RetryDelay: time.Second, MaxDeliveries: 2,
			MaxMessageBytes: 64, Capacity: 20, DedupWindow: time.Minute},
		{VisibilityTimeout: 5 * time.Second, RetryDelay: time.Second, MaxRetryDelay: 3 * time.Second, MaxDeliveries: 4,
			MaxMessageBytes: 32, Capacity: 8, DedupWindow: 30 * time.Second},
	}
	// policyChoices are the policies opPolicy declares each queue with:
	// the queue's own first, then changes that move every field whose
	// change has effects (lease time, the retry curve, MaxDeliveries down
	// to 1 and up, Capacity down, up and unbounded, the size bound, the
	// dedup window), and last one Validate refuses (invalidPolicy), which
	// must change nothing.
	policyChoices = [2][5]broker.PolicyValue{
		{
			queuePolicies[0],
			{VisibilityTimeout: 3 * time.Second, MaxDeliveries: 1, MaxMessageBytes: 64, Capacity: 6, DedupWindow: time.Minute},
			{VisibilityTimeout: 20 * time.Second, RetryDelay: 2 * time.Second, MaxRetryDelay: 5 * time.Second, MaxDeliveries: 4,
				MaxMessageBytes: 48, DedupWindow: 2 * time.Minute},
			{VisibilityTimeout: 10 * time.Second, RetryDelay: time.Second, MaxDeliveries: 3, MaxMessageBytes: 64, Capacity: 12,
				DedupWindow: 30 * time.Second},
			{VisibilityTimeout: 10 * time.Second, RetryDelay: time.Second, MaxMessageBytes: 64, Capacity: 20, DedupWindow: time.Minute},
		},
		{
			queuePolicies[1],
			{VisibilityTimeout: 2 * time.Second, RetryDelay: 500 * time.Millisecond, MaxRetryDelay: 4 * time.Second, MaxDeliveries: 1,
				MaxMessageBytes: 32, Capacity: 4, DedupWindow: 30 * time.Second},
			{VisibilityTimeout: 15 * time.Second, RetryDelay: 3 * time.Second, MaxDeliveries: 6, MaxMessageBytes: 40,
				DedupWindow: time.Minute},
			{VisibilityTimeout: 5 * time.Second, RetryDelay: time.Second, MaxRetryDelay: 3 * time.Second, MaxDeliveries: 2,
				MaxMessageBytes: 32, Capacity: 8, DedupWindow: 10 * time.Second},
			{VisibilityTimeout: 5 * time.Second, RetryDelay: 2 * time.Second, MaxRetryDelay: time.Second, MaxDeliveries: 4,
				MaxMessageBytes: 32, Capacity: -1, DedupWindow: 30 * time.Second},
		},
	}
	// clockStart is where every run's clock starts, but one that sets
	// inputEpoch: that starts at epochStart, 10 s before the Unix epoch,
	// so that its first leases of jobs lapse at the epoch exactly.
	clockStart = time.Unix(1_700_000_000, 0)
	epochStart = time.Unix(-10, 0)
	// clockBack is how far back from where it started a run sets its clock.
	clockBack = 24 * time.Hour
)

// Limits of one input.
const (
	maxOps      = 200
	maxRestarts = 6 // reopens, rebuilds, power losses and audits
	// invalidPolicy is the index in policyChoices of the refused policy.
	invalidPolicy = 4
	// churnUnbounded is how many messages a churn moves at most in a
	// queue of unbounded capacity.
	churnUnbounded = 20
)

// fakeClock is a run's broker clock. The store's maintenance goroutine may
// read it, hence the atomic.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// opKind is one operation of a run.
type opKind uint8

const (
	opPublish opKind = iota
	opPublishKeyed
	opPublishBatch
	opReceive
	opAck
	opNack
	opReject
	opExtend
	opReplay
	opDelete
	opDeadLetters
	opForward
	opBack
	opStats
	opReopen
	opRebuild
	opCrash
	opAudit
	opChurn
	opPolicy
	opConsume
	opWake
	opKill
	opReopenPolicy
)

var opNames = [...]string{"publish", "publishKeyed", "publishBatch", "receive", "ack", "nack", "reject", "extend",
	"replay", "delete", "deadLetters", "forward", "back", "stats", "reopen", "rebuild", "crash", "audit", "churn", "policy", "consume", "wake", "kill", "reopenPolicy"}

func (o opKind) String() string { return opNames[o] }

// opTable maps an operation's first byte to its kind in an input of the
// first format; the repeats are the weights. It is frozen: the corpus holds
// inputs of that format, which must keep their meaning.
var opTable = []opKind{
	opPublish, opPublish, opPublish, opPublish, opPublish,
	opPublishKeyed, opPublishKeyed, opPublishKeyed, opPublishKeyed,
	opPublishBatch, opPublishBatch,
	opReceive, opReceive, opReceive, opReceive, opReceive,
	opAck, opAck, opAck, opAck,
	opNack, opNack, opNack,
	opReject,
	opExtend, opExtend,
	opReplay, opDelete, opDeadLetters,
	opForward, opForward, opForward, opForward,
	opBack, opBack,
	opStats,
	opReopen, opRebuild, opCrash, opAudit,
	opChurn, opChurn, opChurn, opChurn,
}

// opTableV2 is opTable of an input of the second format (see decodeInput):
// the same operations and a policy change.
var opTableV2 = append(slices.Clip(opTable), opPolicy, opPolicy)

// opTableConsume is opTableV2 with a Consume, for an input of the second
// format whose settings set inputConsume.
var opTableConsume = append(slices.Clip(opTableV2), opConsume, opConsume, opConsume)

// The second input format starts with inputV2 and a byte of settings
// (inputSyncPublish, inputConsume, inputMore, inputSyncNone, inputEpoch,
// the other bits unused); no input in the corpus of the first format
// starts with that byte, and none of the second set a bit above
// inputConsume before it meant something, so each keeps its meaning.
//
// inputMore adds Wake (twin.wake), a process crash (opKill) and a clean
// reopen whose first handle on a queue declares it with another policy
// (opReopenPolicy) to the operations, and to Extend's durations two whose
// deadline passes year 2262. inputSyncNone runs the store under SyncNone (over inputSyncPublish),
// where a power loss may take anything since the last background commit,
// which runs on real time: the model cannot say what, so a power loss
// (opCrash, and the clone opAudit audits) is a process crash there, which
// loses nothing a call returned for. inputEpoch starts the run's clock at
// epochStart: instants before the Unix epoch, and the epoch itself, which
// a store must not take for "at once" (docs/DESIGN.md, "Observing time").
const (
	inputV2          = 0xff
	inputSyncPublish = 1 << 0
	inputConsume     = 1 << 1
	inputMore        = 1 << 2
	inputSyncNone    = 1 << 3
	inputEpoch       = 1 << 4
)

// config is what an input's header sets.
type config struct {
	sync  broker.SyncMode
	table []opKind
	more  bool // inputMore
	epoch bool // inputEpoch
}

// decodeInput reads an input: a header of the second format and its
// operations, or operations of the first, under SyncAll.
func decodeInput(data []byte) (config, []op) {
	if len(data) < 2 || data[0] != inputV2 {
		return config{sync: broker.SyncAll, table: opTable}, decodeOps(data, opTable)
	}
	cfg := config{sync: broker.SyncAll, table: opTableV2}
	if data[1]&inputSyncPublish != 0 {
		cfg.sync = broker.SyncPublish
	}
	if data[1]&inputSyncNone != 0 {
		cfg.sync = broker.SyncNone
	}
	if data[1]&inputConsume != 0 {
		cfg.table = opTableConsume
	}
	cfg.epoch = data[1]&inputEpoch != 0
	if data[1]&inputMore != 0 {
		cfg.more = true
		cfg.table = withMore(cfg.table)
	}
	return cfg, decodeOps(data[2:], cfg.table)
}

// withMore is table with the operations inputMore adds.
func withMore(table []opKind) []opKind {
	return append(slices.Clip(table), opWake, opWake, opKill, opReopenPolicy)
}

// encodeInput is decodeInput's inverse for the second format, for seeds:
// it sets inputConsume when one of ops is a Consume, and inputMore when
// one is a Wake or a process crash.
func encodeInput(sync broker.SyncMode, ops ...op) []byte {
	consume := slices.ContainsFunc(ops, func(o op) bool { return o.kind == opConsume })
	more := slices.ContainsFunc(ops, func(o op) bool { return o.kind >= opWake })
	header := encodeHeader(sync, consume)
	table := opTableV2
	if consume {
		table = opTableConsume
	}
	if more {
		header[1] |= inputMore
		table = withMore(table)
	}
	return append(header, encodeOpsWith(table, ops...)...)
}

// encodeHeader returns the header of an input of the second format.
func encodeHeader(sync broker.SyncMode, consume bool) []byte {
	header := []byte{inputV2, 0}
	switch sync {
	case broker.SyncPublish:
		header[1] |= inputSyncPublish
	case broker.SyncNone:
		header[1] |= inputSyncNone
	}
	if consume {
		header[1] |= inputConsume
	}
	return header
}

// op is one decoded operation: its kind, its queue and two argument bytes.
type op struct {
	kind opKind
	q    int
	a, b byte
}

// decodeOps reads operations three bytes each: the first chooses the kind
// (in table) and the queue, the other two are its arguments.
func decodeOps(data []byte, table []opKind) []op {
	var ops []op
	for i := 0; i < len(data) && len(ops) < maxOps; i += 3 {
		var b [3]byte
		copy(b[:], data[i:])
		n := len(table)
		ops = append(ops, op{kind: table[int(b[0])%n], q: (int(b[0]) / n) & 1, a: b[1], b: b[2]})
	}
	return ops
}

// encodeOps is decodeOps' inverse for the first format, for seeds.
func encodeOps(ops ...op) []byte { return encodeOpsWith(opTable, ops...) }

func encodeOpsWith(table []opKind, ops ...op) []byte {
	var out []byte
	for _, o := range ops {
		i := 0
		for table[i] != o.kind {
			i++
		}
		out = append(out, byte(i+len(table)*o.q), o.a, o.b)
	}
	return out
}

// Argument tables.
var (
	dedupKeys  = []string{"a", "b", "c", "a", "b", "d", "", strings.Repeat("k", 257)}
	extendBys  = []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, 30 * time.Second, 2 * time.Second, 7 * time.Second, 20 * time.Second, 0}
	forwardBys = []time.Duration{1, 100 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second,
		10 * time.Second, 31 * time.Second, 61 * time.Second, 10 * time.Minute, -1, -1, -2, -3, -4, time.Hour}
	backBys  = []time.Duration{1, time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, 2 * time.Minute, -1, time.Hour}
	bogusIDs = []string{"", "nope", "0000000000000000", "ffffffffffffffff", "000000000000000g", "0000000000000001x"}
)

// extendBysMore is extendBys of an input that sets inputMore: two more,
// whose deadlines pass year 2262 from any instant a run reaches.
var extendBysMore = append(slices.Clip(extendBys), 250*365*24*time.Hour, math.MaxInt64)

// codeOnly is a cause with a Code and nothing else.
type codeOnly uint32

func (c codeOnly) Error() string  { return "code only" }
func (c codeOnly) Code() uint32   { return uint32(c) }
func (c codeOnly) Public() string { return "" }

// causes are the Nack and Reject causes and what a dead letter records of
// each.
var causes = []struct {
	err    error
	reason string
	code   uint32
	public string
}{
	{nil, broker.ReasonUnexplained, 0, ""},
	{errors.New("boom: payload bytes"), broker.ReasonUnclassified, 0, ""},
	{broker.NewError("CARD_DECLINED", 0x02010005, "the card was declined", "card 4111"), "CARD_DECLINED", 0x02010005, "the card was declined"},
	{broker.DoNotRetry(errors.New("bad input")), broker.ReasonNotRetryable, 0, ""},
	{broker.DoNotRetry(broker.NewError("BAD_FORMAT", 0x02020001, "bad format", "x")), "BAD_FORMAT", 0x02020001, "bad format"},
	{fmt.Errorf("wrapped: %w", codeOnly(0x03000001)), broker.ReasonUnclassified, 0x03000001, ""},
}

// twin is a store and the model it must agree with, side by side.
type twin struct {
	t       testing.TB
	m       *model
	clock   *fakeClock
	store   *broker.Store
	qs      [2]*broker.Queue
	history *[]string
	serial  *int   // payloads made, across the run
	where   string // "" for the run's store, or which clone
	// trail: under SyncPublish, the states a power loss may leave (see
	// lost_test.go); nil under SyncAll, where it leaves the model's.
	trail *trail
	more  bool  // the input sets inputMore
	floor int64 // as far back as the run sets its clock
	// wakes: the Wake signal last handed out on each queue and not yet
	// seen closed, or nil (see wake_test.go).
	wakes [2]*wakeWatch
}

func (s *twin) now() int64 { return s.clock.ns.Load() }

func (s *twin) logf(format string, args ...any) {
	line := s.where + fmt.Sprintf(format, args...)
	*s.history = append(*s.history, line)
}

// fail stops the run with what went wrong, the operations that led there
// and the model's state.
func (s *twin) fail(format string, args ...any) {
	s.t.Helper()
	h := *s.history
	if len(h) > 120 && os.Getenv("WALBROKER_FUZZ_HISTORY") != "all" {
		h = append([]string{fmt.Sprintf("(%d earlier lines: WALBROKER_FUZZ_HISTORY=all shows them)", len(h)-120)}, h[len(h)-120:]...)
	}
	figures := "closed"
	if s.store != nil {
		figures = fmt.Sprintf("%+v", s.store.Stats())
	}
	s.t.Fatalf("%s%s\n\noperations (latest last):\n%s\n\nmodel:\n%s\nstore: %s", s.where, fmt.Sprintf(format, args...),
		strings.Join(h, "\n"), s.m.dump(s.now()), figures)
}

func (s *twin) check(ok bool, format string, args ...any) {
	s.t.Helper()
	if !ok {
		s.fail(format, args...)
	}
}

// expect compares a call's error class with the model's and reports
// whether the call succeeded.
func (s *twin) expect(want string, err error, what string) bool {
	s.t.Helper()
	s.mark() // the state before the call's change: a power loss may leave it
	got := sentinel.Of(err)
	s.logf("  %s -> %s", what, got)
	if got != want {
		s.fail("%s: got %s (%v), the model says %s", what, got, err, want)
	}
	return err == nil
}

// payload returns n bytes that tell messages apart.
func (s *twin) payload(n int) []byte {
	*s.serial++
	p := make([]byte, n)
	for i := range p {
		if i < 4 {
			p[i] = byte(*s.serial >> (8 * i))
		} else {
			p[i] = byte(*s.serial*31 + i*7)
		}
	}
	return p
}

func parseID(id string) (uint64, bool) {
	if len(id) != 16 || strings.ToLower(id) != id {
		return 0, false
	}
	var seq uint64
	_, err := fmt.Sscanf(id, "%016x", &seq)
	return seq, err == nil && seq != 0
}

// runner is one input's run: a twin over a directory that power losses
// replace with their clones.
type runner struct {
	twin
	sync     broker.SyncMode
	base     string // holds every directory of the run
	dir      string
	gen      int
	cfs      *vfs.CrashFS
	restarts int
	// over: a power loss left a state the run cannot follow exactly (see
	// lost_test.go); the run ends with its audit there.
	over bool
	// What the stores of the run did, summed over their lives.
	checkpoints, copied, reclaimed int64
	// beforeRestart, if set, runs before each restart (see
	// TestTheReclaimScenariosCopyForwardAndReclaim).
	beforeRestart func(*runner)
}

// tally adds the store's figures to the run's before it goes.
func (r *runner) tally() {
	st := r.store.Stats()
	r.checkpoints += st.Checkpoints
	r.copied += st.CopiedForward
	r.reclaimed += st.BytesReclaimed
}

func newRunner(t testing.TB, cfg config) *runner {
	sync := cfg.sync
	r := &runner{base: fastDir(t), sync: sync}
	r.more = cfg.more
	r.t, r.m, r.clock, r.history, r.serial = t, newModel(), &fakeClock{}, new([]string), new(int)
	if sync == broker.SyncPublish {
		r.trail = &trail{}
	}
	start := clockStart
	if cfg.epoch {
		start = epochStart
	}
	r.clock.ns.Store(start.UnixNano())
	r.floor = start.Add(-clockBack).UnixNano()
	r.dir = filepath.Join(r.base, "s0")
	t.Cleanup(func() {
		if r.store != nil {
			_ = r.store.Close()
		}
	})
	r.cfs = vfs.NewCrashFS(vfs.Default)
	r.openStore(r.dir, r.cfs, r.sync, false)
	return r
}

func storeOptions(clock *fakeClock, fs vfs.FS, sync broker.SyncMode) broker.Options {
	return broker.Options{Now: clock.Now, Sync: sync, SegmentBytes: broker.MinSegmentBytes, FS: fs}
}

// open opens the store in r.dir again on a fresh CrashFS.
func (r *runner) open() {
	r.t.Helper()
	r.cfs = vfs.NewCrashFS(vfs.Default)
	r.openStore(r.dir, r.cfs, r.sync, true)
}

// openStore is openStoreWith declaring every queue with its policy.
func (s *twin) openStore(dir string, fs vfs.FS, sync broker.SyncMode, again bool) {
	s.t.Helper()
	s.openStoreWith(dir, fs, sync, again, -1, 0)
}

// openStoreWith opens the store in dir and gets both queues with the policies
// the model holds. Opened again, the store must have kept them: the
// declarations then write no declaration, where a store that came back
// with another policy would log the change. (The first handle on a queue
// may write dead letters: those of a lowering of MaxDeliveries whose
// declaration a power loss kept and whose dead letters it did not, which
// that handle finishes. The queue counts each; a declaration it does not.)
// With redeclare a queue's index, that queue is declared first, with
// policyChoices[redeclare][sel%len] (a change of policy the model knows,
// see twin.declare), and then, if that was refused, with its own; the
// check above holds for the other queue. The model has restarted.
func (s *twin) openStoreWith(dir string, fs vfs.FS, sync broker.SyncMode, again bool, redeclare int, sel byte) {
	s.t.Helper()
	st, err := broker.Open(dir, storeOptions(s.clock, fs, sync))
	if err != nil {
		s.fail("open %s: %v", dir, err)
	}
	s.store = st
	s.qs = [2]*broker.Queue{}
	if redeclare >= 0 {
		s.declare(redeclare, sel)
	}
	written := func() int64 { f := st.Stats(); return f.Records - f.OwnRecords }
	before := written()
	var declared []*broker.Queue
	for i := range s.qs {
		if s.qs[i] != nil {
			continue
		}
		mq := s.m.qs[i]
		q, err := st.Queue(mq.name, mq.pol)
		if err != nil {
			s.fail("declare %s: %v", mq.name, err)
		}
		s.qs[i] = q
		declared = append(declared, q)
	}
	if !again {
		return
	}
	var finished int64
	for _, q := range declared {
		finished += q.Stats().DeadLettered
	}
	if n := written() - before; n != finished {
		s.fail("opened again, the store holds other policies than the ones last set: declaring them wrote %d records, %d of them dead letters of a lowering a power loss cut short", n, finished)
	}
}

// close closes the store cleanly, and checks that it and its queues are
// closed for good.
func (r *runner) close() {
	r.t.Helper()
	r.tally()
	if err := r.store.Close(); err != nil {
		r.fail("Close: %v", err)
	}
	r.check(sentinel.Of(r.store.Close()) == "CLOSED", "a second Close is not Closed")
	_, err := r.qs[0].Publish(context.Background(), []byte("late"))
	r.check(sentinel.Of(err) == "CLOSED", "a publish on a closed store: %v", err)
	_, err = r.qs[1].Receive(context.Background(), 1)
	r.check(sentinel.Of(err) == "CLOSED", "a receive on a closed store: %v", err)
	r.closedWakes()
	r.store = nil
}

// restart applies a reopen, a rebuild, a power loss or an audit.
func (r *runner) restart(o op) {
	kind := o.kind
	if r.restarts >= maxRestarts {
		r.logf("%v: past the limit of %d, stats instead", kind, maxRestarts)
		r.stats()
		return
	}
	r.restarts++
	r.logf("%v", kind)
	if r.beforeRestart != nil {
		r.beforeRestart(r)
	}
	switch kind {
	case opReopen, opReopenPolicy:
		// A clean Close makes everything durable (Store.Close), under
		// SyncPublish too: the state is the model's.
		r.close()
		r.m.restart(r.now())
		r.cfs = vfs.NewCrashFS(vfs.Default)
		redeclare := -1
		if kind == opReopenPolicy {
			// A new process's first handle on the queue declares
			// another policy: it first finishes what a lowering a power
			// loss cut short left (model.restart), then changes it.
			redeclare = o.q
		}
		r.openStoreWith(r.dir, r.cfs, r.sync, true, redeclare, o.a)
		rec := r.store.Recovery()
		r.check(!rec.IndexRebuilt && !rec.TornTail && rec.SalvagedSpans == 0, "reopen after a clean Close: %+v", rec)
	case opRebuild:
		r.close()
		if err := os.RemoveAll(filepath.Join(r.dir, "index")); err != nil {
			r.fail("remove index: %v", err)
		}
		r.open()
		rec := r.store.Recovery()
		r.check(rec.IndexRebuilt && rec.SalvagedSpans == 0, "reopen without index/: %+v", rec)
		r.m.restart(r.now())
	case opCrash, opKill:
		if !r.powerLoss(kind) {
			r.kill()
			break
		}
		r.gen++
		clone := filepath.Join(r.base, fmt.Sprintf("s%d", r.gen))
		if err := r.cfs.CrashClone(clone, r.crashOptions(kind)); err != nil {
			r.fail("CrashClone: %v", err)
		}
		r.close()
		if err := os.RemoveAll(r.dir); err != nil {
			r.fail("remove %s: %v", r.dir, err)
		}
		r.dir = clone
		if r.trail != nil {
			// Under SyncPublish the model cannot say which of the
			// states since the last commit it left: find it.
			m, sound := r.lostState(clone)
			r.m, r.over = m, !sound
		} else {
			r.m.restart(r.now())
		}
		r.open()
		rec := r.store.Recovery()
		r.check(rec.SalvagedSpans == 0 && len(rec.LostMessages) == 0, "open after a crash: %+v", rec)
		r.logf("  recovered: %+v", rec)
	case opAudit:
		r.auditClone()
		return
	}
	r.durable()
	r.stats()
}

// kill is a process crash: the store's file system stops taking any
// change, the store is abandoned (closed, which can change nothing now:
// Close only releases the directory), and a new one opened on the same
// page cache, which holds every byte written and every change of names,
// unsynced until an fdatasync or a directory sync covers it. A power loss
// after the reopen then keeps what the reopen built on (docs/DESIGN.md,
// "Recovery": the open makes the tail it appends to durable). Nothing a
// call returned for is lost, in any sync mode: the state is the model's.
func (r *runner) kill() {
	r.t.Helper()
	r.cfs.Crash()
	r.tally()
	_ = r.store.Close() // fails: every write does
	r.store, r.wakes = nil, [2]*wakeWatch{}
	r.cfs.Restart()
	r.m.restart(r.now())
	r.openStore(r.dir, r.cfs, r.sync, true)
	rec := r.store.Recovery()
	r.check(rec.SalvagedSpans == 0 && len(rec.LostMessages) == 0, "open after a process crash: %+v", rec)
	r.logf("  recovered: %+v", rec)
}

// powerLoss reports whether a restart of kind (opCrash or opKill) is a
// power loss: opCrash but under SyncNone (see inputSyncNone). Otherwise
// it is a process crash.
func (r *runner) powerLoss(kind opKind) bool { return kind == opCrash && r.sync != broker.SyncNone }

// crashOptions returns the options of the clone a restart of kind (opCrash
// or opKill) would leave: after a power loss, only what was synced; after
// a process crash, every byte written and every change of names made, as
// the page cache holds them (an audit's clone; a run's own process crash
// is kill).
func (r *runner) crashOptions(kind opKind) vfs.CrashOptions {
	if r.powerLoss(kind) {
		return vfs.CrashOptions{Root: r.dir}
	}
	return vfs.CrashOptions{Root: r.dir, KeepUnsyncedFraction: 1, KeepUnsyncedNames: vfs.KeepAll}
}

// auditClone audits, without changing the run, what a power loss now
// would leave: a clone opened beside the run's store, with a copy of the
// model (under SyncPublish, with each state the loss may leave until one
// passes; under SyncNone, what a process crash would leave).
func (r *runner) auditClone() {
	r.gen++
	clone := filepath.Join(r.base, fmt.Sprintf("audit%d", r.gen))
	if err := r.cfs.CrashClone(clone, r.crashOptions(opCrash)); err != nil {
		r.fail("CrashClone: %v", err)
	}
	defer func() { _ = os.RemoveAll(clone) }()
	if r.trail != nil {
		_, _ = r.lostState(clone)
		return
	}
	a := twin{t: r.t, m: r.m.clone(), clock: &fakeClock{}, history: r.history, serial: r.serial, where: "[audit] "}
	a.clock.ns.Store(r.now())
	a.m.restart(a.now())
	a.openStore(clone, nil, r.sync, true)
	defer func() {
		if a.store != nil {
			_ = a.store.Close()
		}
	}()
	a.audit()
	if err := a.store.Close(); err != nil {
		a.fail("close the clone: %v", err)
	}
	a.store = nil
}

// runInput runs one input through a fresh store and its model, and
// returns the runner, for its counts.
func runInput(t testing.TB, data []byte) *runner { return runInputWith(t, data, nil) }

// runInputWith is runInput with a hook run before each restart.
func runInputWith(t testing.TB, data []byte, beforeRestart func(*runner)) *runner {
	cfg, ops := decodeInput(data)
	r := newRunner(t, cfg)
	r.beforeRestart = beforeRestart
	r.logf("sync %v", cfg.sync)
	for i, o := range ops {
		r.logf("op %d: %v q%d %d %d @%s", i, o.kind, o.q, o.a, o.b, rel(r.now()))
		r.mark()
		switch o.kind {
		case opReopen, opRebuild, opCrash, opAudit, opKill, opReopenPolicy:
			r.restart(o)
		default:
			r.run(o)
		}
		r.checkWakes()
		if r.over {
			r.logf("the run ends here: the state the power loss left is not known exactly")
			break
		}
	}
	r.logf("final audit")
	r.audit()
	r.tally()
	t.Logf("final store: %+v", r.store.Stats())
	t.Logf("%d operations, %d restarts; the stores wrote %d checkpoints, copied %d records forward, reclaimed %d bytes",
		len(ops), r.restarts, r.checkpoints, r.copied, r.reclaimed)
	return r
}

// FuzzBrokerDifferential runs the input's operations on a store and on the
// reference model, and compares every answer (see the package
// documentation).
func FuzzBrokerDifferential(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = runInput(t, data)
	})
}
