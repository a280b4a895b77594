package broker_test

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/internal/sentinel"
	"github.com/walbroker/walbroker/vfs"
)

// The model check drives a store and a reference model of its documented
// semantics with one seeded random sequence of operations and compares
// every answer. Environment:
//
//	WALBROKER_MODEL_SEED   replay a seed (printed by every run)
//	WALBROKER_MODEL_STEPS  number of steps (default 3000, 600 with -short)
//
// Every step compares both queues' gauges, OldestReady and counters; the
// operations compare every answer (docs/DESIGN.md, "The model checks",
// lists what each compares).
//
// The broker clock readings that make "the clock went backwards" are those
// of every eviction (a keyed publish) and every enqueue instant.

type mState uint8

const (
	mReady mState = iota + 1
	mLeased
	mDead
)

// mMsg is one message as the documentation says it must be.
type mMsg struct {
	id         string
	order      int // publish order in its queue: FIFO among equal EnqueuedAt
	payload    []byte
	enq        int64
	state      mState
	deliveries int
	at         int64 // ready: visible from (0: at once); leased: expires at
	receipt    broker.ReceiptValue
	failedAt   int64
	reason     string
	code       uint32
	cause      string
	byLapse    bool // died when its last lease lapsed, at failedAt
}

type mSeen struct {
	id  string
	enq int64
}

type mQueue struct {
	name      string
	pol       broker.PolicyValue
	q         *broker.Queue
	msgs      map[string]*mMsg
	seen      map[string]mSeen
	lastEvict int64 // the latest clock reading of an eviction or an enqueue; MinInt64 before any
	receipts  []broker.ReceiptValue
	minted    []string
	order     int
	c         mCounters
	// wake is the Wake signal last handed out and not yet seen closed, or
	// nil; fired: an event that must close it happened since.
	wake *mWake
}

// mCounters are a queue's counters since the store was opened.
type mCounters struct {
	published, duplicates, shed, delivered, acked, nacked, rejected, deadLettered, replayed int64
}

type mWake struct {
	signal <-chan struct{}
	fired  bool
}

type modelCheck struct {
	t        *testing.T
	rng      *rand.Rand
	e        *env
	cfs      *vfs.CrashFS // the store's file system: a process crash stops it
	mode     broker.SyncMode
	clones   string // holds the clones power losses leave
	qs       []*mQueue
	owner    map[broker.ReceiptValue]string // receipt → queue name
	ids      map[string]bool
	history  []string
	outcomes map[string]int // "Op -> CLASS" counts, to show what a run covered
}

func TestModelCheck(t *testing.T) {
	seed := envSeed(t, "WALBROKER_MODEL_SEED")
	steps := envCount(t, "WALBROKER_MODEL_STEPS", 3000, 600)
	t.Logf("model check: seed %d, %d steps; replay with WALBROKER_MODEL_SEED=%d", seed, steps, seed)
	mc := &modelCheck{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		owner: map[broker.ReceiptValue]string{}, ids: map[string]bool{}, outcomes: map[string]int{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d; the last operations:\n%s", seed, strings.Join(mc.history, "\n"))
			for _, mq := range mc.qs {
				t.Logf("model of %s at %d: %s", mq.name, mc.now()-t0.UnixNano(), mq.dump())
			}
		}
	})
	mode := syncModes[mc.rng.IntN(len(syncModes))]
	mc.mode, mc.clones = mode, t.TempDir()
	mc.cfs = vfs.NewCrashFS(vfs.Default)
	mc.e = newEnv(t, func(o *broker.Options) {
		o.Sync = mode
		o.FS = mc.cfs
		// Small segments, so that runs rotate, checkpoint and reclaim.
		o.SegmentBytes = broker.MinSegmentBytes
		broker.ManualMaintenance(o)
	})
	for _, name := range []string{"q0", "q1"} {
		mq := &mQueue{name: name, pol: mc.randomPolicy(), msgs: map[string]*mMsg{}, seen: map[string]mSeen{}, lastEvict: math.MinInt64}
		mq.q = mc.e.queue(name, mq.pol)
		mc.qs = append(mc.qs, mq)
		t.Logf("%s: %+v (sync %v)", name, mq.pol, mode)
	}
	start := time.Now()
	for i := range steps {
		mc.step(i)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d steps in %v; outcomes: %v", steps, time.Since(start), mc.outcomes)
}

func (mc *modelCheck) randomPolicy() broker.PolicyValue {
	r := mc.rng
	p := broker.PolicyValue{
		VisibilityTimeout: []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}[r.IntN(3)],
		RetryDelay:        []time.Duration{0, 100 * time.Millisecond, time.Second}[r.IntN(3)],
		MaxDeliveries:     1 + r.IntN(3),
		MaxMessageBytes:   []int{8, 16, 16}[r.IntN(3)],
		DedupWindow:       []time.Duration{10 * time.Second, time.Minute}[r.IntN(2)],
	}
	if p.RetryDelay > 0 && r.IntN(2) == 0 {
		p.MaxRetryDelay = 4 * p.RetryDelay
	}
	if r.IntN(2) == 0 {
		p.Capacity = 3 + r.IntN(6)
	}
	return p
}

func (mc *modelCheck) now() int64 { return mc.e.clock.Now().UnixNano() }

func (mc *modelCheck) logf(format string, args ...any) {
	mc.history = append(mc.history, fmt.Sprintf(format, args...))
	if len(mc.history) > 400 {
		mc.history = mc.history[1:]
	}
}

func (mc *modelCheck) step(i int) {
	mq := mc.qs[mc.rng.IntN(len(mc.qs))]
	mc.settle()
	ops := []struct {
		weight int
		run    func(*mQueue)
	}{
		{14, mc.publish}, {10, mc.publishKeyed}, {5, mc.publishBatch}, {16, mc.receive},
		{10, mc.ack}, {10, mc.nack}, {4, mc.reject}, {6, mc.extend}, {4, mc.replay},
		{2, mc.delete}, {5, mc.deadLetters}, {13, func(*mQueue) { mc.moveClock() }}, {1, func(*mQueue) { mc.restart() }},
		{2, func(*mQueue) { mc.maintain() }}, {1, func(*mQueue) { mc.backup() }},
		{3, mc.wake}, {2, mc.policy},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := mc.rng.IntN(total)
	for _, o := range ops {
		if n -= o.weight; n < 0 {
			mc.logf("step %d @%d on %s:", i, mc.now()-t0.UnixNano(), mq.name)
			o.run(mq)
			break
		}
	}
	mc.settle()
	for _, q := range mc.qs {
		mc.checkGauges(q, i)
		mc.checkWake(q, i)
	}
}

// settle applies the one change time makes on its own that the model must
// record: a lease that lapses on the last allowed delivery dead-letters the
// message, failing at its ExpiresAt, with its last nack's reason, code and
// cause, or LEASE_EXPIRED when it was never nacked in its current life.
func (mc *modelCheck) settle() {
	now := mc.now()
	for _, mq := range mc.qs {
		for _, m := range mq.msgs {
			if m.state == mLeased && m.at <= now && m.deliveries >= mq.pol.MaxDeliveries {
				if m.reason == "" {
					m.reason, m.code, m.cause = broker.ReasonLeaseExpired, 0, ""
				}
				m.state, m.failedAt, m.receipt = mDead, m.at, ""
				m.byLapse = true
				// Counted by the first call that looks (the Stats of
				// the step that moved the clock at the latest); one
				// that lapsed before an open counts in no process
				// after it, and settle runs before every reopen.
				mq.c.deadLettered++
			}
		}
	}
}

func (mc *modelCheck) expect(want string, err error, what string) bool {
	mc.t.Helper()
	mc.logf("  %s -> %s", what, sentinel.Of(err))
	op, _, _ := strings.Cut(what, "(")
	op, _, _ = strings.Cut(op, " ")
	if strings.HasSuffix(what, "duplicate") {
		op += " duplicate"
	}
	mc.outcomes[op+" -> "+sentinel.Of(err)]++
	require.Equal(mc.t, want, sentinel.Of(err), what)
	return err == nil
}

func (mq *mQueue) dump() string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(mq.msgs)) {
		m := mq.msgs[id]
		fmt.Fprintf(&b, "\n  %s state=%d deliveries=%d at=%d enq=%d failedAt=%d", id, m.state, m.deliveries, m.at-t0.UnixNano(), m.enq-t0.UnixNano(), m.failedAt-t0.UnixNano())
	}
	return b.String()
}

// live returns the model's count of messages holding capacity.
func (mq *mQueue) live() int {
	n := 0
	for _, m := range mq.msgs {
		if m.state != mDead {
			n++
		}
	}
	return n
}

// receivable lists what Receive may hand out now, oldest EnqueuedAt first.
func (mq *mQueue) receivable(now int64) []*mMsg {
	var out []*mMsg
	for _, m := range mq.msgs {
		if (m.state == mReady || m.state == mLeased) && m.at <= now {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *mMsg) int {
		if a.enq != b.enq {
			return cmpInt(a.enq, b.enq)
		}
		return a.order - b.order
	})
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lease returns the message a receipt holds a live lease on, or the error
// class a call with it must get.
func (mc *modelCheck) lease(mq *mQueue, r broker.ReceiptValue) (*mMsg, string) {
	if mc.owner[r] != mq.name {
		return nil, "UNKNOWN_RECEIPT"
	}
	for _, m := range mq.msgs {
		if m.state == mLeased && m.receipt == r && mc.now() < m.at {
			return m, "ok"
		}
	}
	return nil, "LEASE_EXPIRED"
}

// retryDelay is the documented curve: RetryDelay × 2^(n−1), held at
// MaxRetryDelay when that is positive; RetryDelay (negative read as zero)
// otherwise.
func retryDelay(p broker.PolicyValue, n int) time.Duration {
	d := max(p.RetryDelay, 0)
	if p.MaxRetryDelay <= 0 {
		return d
	}
	for i := 1; i < n && d < p.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, p.MaxRetryDelay)
}

// moveClock moves the broker clock: small and large steps, jumps onto the
// next deadlines and dedup-window edges, and now and then backwards — never
// back past a lease or retry deadline already reached, whose reading a
// backwards clock leaves open (see TestLapsedLeaseStaysLapsedWhenClockGoesBack).
func (mc *modelCheck) moveClock() {
	now := mc.now()
	var marks []int64
	floor := int64(math.MinInt64)
	for _, mq := range mc.qs {
		for _, m := range mq.msgs {
			if m.state != mDead && m.at != 0 {
				marks = append(marks, m.at, m.at-1)
				if m.at <= now {
					floor = max(floor, m.at)
				}
			}
			if m.state == mDead && m.byLapse {
				floor = max(floor, m.failedAt)
			}
		}
		for _, s := range mq.seen {
			marks = append(marks, s.enq+int64(mq.pol.DedupWindow), s.enq+int64(mq.pol.DedupWindow)+1)
		}
	}
	slices.Sort(marks)
	to := now
	switch r := mc.rng.IntN(20); {
	case r < 6:
		to = now + int64([]time.Duration{1, time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second}[mc.rng.IntN(6)])
	case r < 13:
		if i, _ := slices.BinarySearch(marks, now+1); i < len(marks) {
			to = marks[i+mc.rng.IntN(min(3, len(marks)-i))]
		}
	case r < 16:
		to = now + int64(30*time.Second) + mc.rng.Int64N(int64(2*time.Minute))
	default:
		to = max(now-mc.rng.Int64N(int64(time.Minute)), floor, t0.UnixNano())
	}
	mc.e.clock.Set(time.Unix(0, to))
	mc.logf("  clock %+d -> %d", to-now, to-t0.UnixNano())
}

// maintain checkpoints and reclaims old segments, which changes no state.
func (mc *modelCheck) maintain() {
	before := broker.Dump(mc.e.s)
	was := mc.e.s.Stats()
	segs := was.Segments
	require.NoError(mc.t, mc.e.s.Maintain())
	st := mc.e.s.Stats()
	mc.outcomes["Maintain: records copied forward"] += int(st.CopiedForward - was.CopiedForward)
	mc.outcomes["Maintain: bytes reclaimed"] += int(st.BytesReclaimed - was.BytesReclaimed)
	mc.logf("  maintain: segments %d -> %d, checkpoint %s, copied %d", segs, st.Segments, st.LastCheckpoint, st.CopiedForward)
	// Copies forward move records (a forgotten key dropped): positions and
	// sizes may change, nothing else.
	requireSameState(mc.t, posRE.ReplaceAllString(before, "pos=*"), posRE.ReplaceAllString(broker.Dump(mc.e.s), "pos=*"), "maintenance changed the state")
}

// reopen closes the store and opens it again, from its checkpoint or, one
// time in two, rebuilding the index from the log: either way the state is
// the one before.
// backup copies the store, which changes no state, and requires the copy
// to open to the same state.
func (mc *modelCheck) backup() {
	before := broker.Dump(mc.e.s)
	dst := filepath.Join(mc.e.dir+"-backups", fmt.Sprint(mc.rng.Uint64()))
	require.NoError(mc.t, os.MkdirAll(filepath.Dir(dst), 0o700))
	defer os.RemoveAll(filepath.Dir(dst))
	require.NoError(mc.t, mc.e.s.Backup(ctx(mc.t), dst))
	mc.outcomes["Backup -> ok"]++
	requireBackupHolds(mc.t, dst, mc.e.opts, before, "the backup opens to the store's state")
	requireSameState(mc.t, before, broker.Dump(mc.e.s), "a backup changed the store")
}

func (mc *modelCheck) reopen() {
	before := broker.Dump(mc.e.s)
	rebuild := mc.rng.IntN(2) == 0
	mc.logf("  reopen (rebuild %v)", rebuild)
	mc.e.close()
	for _, mq := range mc.qs {
		// Close closes every wake signal, for good, and refuses every
		// later call with Closed.
		if mq.wake != nil {
			require.True(mc.t, isClosed(mq.wake.signal), "%s: the wake signal is open after Close", mq.name)
		}
		_, err := mq.q.Publish(ctx(mc.t), nil)
		mc.expect("CLOSED", err, "Publish after Close")
		err = mq.q.Ack(ctx(mc.t), "AQEAAAAB")
		mc.expect("CLOSED", err, "Ack after Close")
		// Its figures are those Close left (the clock has not moved).
		mc.checkGauges(mq, -1)
	}
	if rebuild {
		require.NoError(mc.t, os.RemoveAll(filepath.Join(mc.e.dir, "index")))
	}
	mc.e.open()
	requireSameState(mc.t, before, broker.Dump(mc.e.s), fmt.Sprintf("reopen (rebuild %v) changed the state", rebuild))
	mc.redeclare()
}

// powerLoss goes on in a clone of the store that keeps only what was
// synced (vfs.CrashFS.CrashClone). Under SyncAll every call that returned
// had its change synced: the state is the one before.
func (mc *modelCheck) powerLoss() {
	before := broker.Dump(mc.e.s)
	clone := filepath.Join(mc.clones, fmt.Sprint(mc.rng.Uint64()))
	mc.logf("  power loss, on in %s", clone)
	require.NoError(mc.t, mc.cfs.CrashClone(clone, vfs.CrashOptions{Root: mc.e.dir}))
	mc.e.close()
	require.NoError(mc.t, os.RemoveAll(mc.e.dir))
	mc.e.dir = clone
	mc.cfs = vfs.NewCrashFS(vfs.Default)
	mc.e.opts.FS = mc.cfs
	mc.e.open()
	rec := mc.e.s.Recovery()
	require.True(mc.t, rec.SalvagedSpans == 0 && len(rec.LostMessages) == 0, "open after a power loss: %+v", rec)
	mc.outcomes["power loss"]++
	requireSameState(mc.t, before, broker.Dump(mc.e.s), "a power loss under SyncAll changed the state")
	mc.redeclare()
}

// restart is a clean reopen or, one time in two, a crash (kill): a
// restart costs most of a run's time, and the two share the rate clean
// reopens alone had.
func (mc *modelCheck) restart() {
	if mc.rng.IntN(2) == 0 {
		mc.reopen()
		return
	}
	mc.kill()
}

// redeclare gets both queues of a store just opened, with the policies
// last set, and starts their counters from zero (they count since open).
func (mc *modelCheck) redeclare() {
	for _, mq := range mc.qs {
		mq.q = mc.e.queue(mq.name, mq.pol)
		mq.c, mq.wake = mCounters{}, nil
	}
}

// kill is a process crash: the file system takes no change from then on,
// the store is abandoned, and a new one opens on the same page cache,
// which holds every byte written. In every sync mode nothing a call
// returned for is lost: the state is the one before. Under SyncAll, one
// time in two, it is a power loss instead (powerLoss).
func (mc *modelCheck) kill() {
	if mc.mode == broker.SyncAll && mc.rng.IntN(2) == 0 {
		mc.powerLoss()
		return
	}
	before := broker.Dump(mc.e.s)
	mc.logf("  process crash")
	mc.cfs.Crash()
	_ = mc.e.s.Close() // fails: every write does
	mc.e.s = nil
	mc.cfs.Restart()
	mc.e.open()
	rec := mc.e.s.Recovery()
	require.True(mc.t, rec.SalvagedSpans == 0 && len(rec.LostMessages) == 0, "open after a process crash: %+v", rec)
	mc.outcomes["process crash"]++
	requireSameState(mc.t, before, broker.Dump(mc.e.s), "a process crash changed the state")
	mc.redeclare()
}

func (mc *modelCheck) checkGauges(mq *mQueue, step int) {
	now := mc.now()
	var want [4]int
	for _, m := range mq.msgs {
		switch {
		case m.state == mDead:
			want[3]++
		case m.at <= now:
			want[0]++
		case m.state == mLeased:
			want[1]++
		default:
			want[2]++
		}
	}
	st := mq.q.Stats()
	require.Equal(mc.t, want, [4]int{st.Ready, st.Leased, st.Delayed, st.DeadLetters}, "step %d %s: gauges ready, leased, delayed, dead", step, mq.name)
	// OldestReady is the EnqueuedAt of the message Receive hands out next.
	wantOldest := "none"
	if r := mq.receivable(now); len(r) > 0 {
		wantOldest = fmt.Sprint(r[0].enq - t0.UnixNano())
	}
	gotOldest := "none"
	if !st.OldestReady.IsZero() {
		gotOldest = fmt.Sprint(st.OldestReady.UnixNano() - t0.UnixNano())
	}
	require.Equal(mc.t, wantOldest, gotOldest, "step %d %s: OldestReady", step, mq.name)
	c := mq.c
	require.Equal(mc.t,
		[]int64{c.published, c.duplicates, c.shed, c.delivered, c.acked, c.nacked, c.rejected, c.deadLettered, c.replayed},
		[]int64{st.Published, st.Duplicates, st.Shed, st.Delivered, st.Acked, st.Nacked, st.Rejected, st.DeadLettered, st.Replayed},
		"step %d %s: counters published, duplicates, shed, delivered, acked, nacked, rejected, deadLettered, replayed", step, mq.name)
}

var posRE = regexp.MustCompile(`(pos|size)=\S+`)

// requireSameState fails with the lines that differ between two Dumps.
func requireSameState(t testing.TB, want, got, what string) {
	t.Helper()
	if want == got {
		return
	}
	t.Fatalf("%s:\n%s", what, broker.StateDiff(want, got))
}

// requireBackupHolds opens the backup in dir with opts and requires it to
// hold the state want (see requireSameState).
func requireBackupHolds(t testing.TB, dir string, opts broker.Options, want, what string) {
	t.Helper()
	b, err := broker.Open(dir, opts)
	require.NoError(t, err, "%s: opening it", what)
	requireSameState(t, want, broker.Dump(b), what)
	require.NoError(t, b.Close())
}
