package recovery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// The clock tests step an injected broker clock back and forth by an hour
// between operations, and across reopens, and check that nothing expires
// early by that clock: a lease lapses at its ExpiresAt and not before, a
// retry delay ends at its VisibleAt and not before, a dedup key is
// forgotten only when strictly older than the window (and never while the
// clock is behind a reading the log holds), and Receive hands messages out
// oldest EnqueuedAt first whatever the clock says when it runs.
//
// Where the contract leaves room, docs/DESIGN.md decides: a lease whose
// lapse a call observed stays lapsed in that process even if the clock
// goes back, but after a restart with the clock set back before its
// expiry it is live again (the log does not record observations of time).
// The randomised test restarts the store both ways: closed, and killed
// (nothing written after the kill, everything written before it kept), so
// that a state the store keeps in memory and writes only into the
// checkpoint Close makes, not into the log, is found out.

// stepClock is a broker clock moved only by the test. Safe for concurrent
// use.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

// clockBase is where the clock tests start.
var clockBase = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

var clockPolicy = broker.PolicyValue{
	VisibilityTimeout: 40 * time.Minute, RetryDelay: 20 * time.Minute,
	MaxDeliveries: 3, DedupWindow: 90 * time.Minute,
}

// clockStore is a store on a stepClock, reopened at will.
type clockStore struct {
	t     *testing.T
	dir   string
	clock *stepClock
	fs    *vfs.CrashFS // for kill
	s     *broker.Store
	q     *broker.Queue
}

func newClockStore(t *testing.T) *clockStore {
	cs := &clockStore{t: t, dir: filepath.Join(fastDir(t), "store"), clock: &stepClock{now: clockBase}, fs: vfs.NewCrashFS(vfs.Default)}
	cs.open()
	t.Cleanup(func() {
		if cs.s != nil {
			_ = cs.s.Close()
		}
	})
	return cs
}

func (cs *clockStore) open() {
	cs.t.Helper()
	s, err := broker.Open(cs.dir, broker.Options{Now: cs.clock.Now, FS: cs.fs, SegmentBytes: clockSegmentBytes})
	require.NoError(cs.t, err)
	q, err := s.Queue("jobs", clockPolicy)
	require.NoError(cs.t, err)
	cs.s, cs.q = s, q
}

// clockSegmentBytes keeps the segments the clock tests make (and the
// next one Open prepares) small: the log never rotates in them anyway.
const clockSegmentBytes = 4 << 20

// kill stops the store as a killed process stops: no file operation after
// it succeeds, and what was written before it stays, unsynced or not (the
// page cache). Open then recovers it.
func (cs *clockStore) kill() {
	cs.t.Helper()
	cs.fs.Crash()
	_ = cs.s.Close() // fails: it only lets go of the store's goroutines and its lock
	cs.s = nil
	cs.fs.Restart()
}

// reopen closes the store and opens it again with the clock at at.
func (cs *clockStore) reopen(at time.Time) {
	cs.t.Helper()
	require.NoError(cs.t, cs.s.Close())
	cs.s = nil
	cs.clock.Set(at)
	cs.open()
}

func (cs *clockStore) at(at time.Time) *clockStore {
	cs.clock.Set(at)
	return cs
}

func (cs *clockStore) publish(payload string) broker.MessageValue {
	cs.t.Helper()
	m, err := cs.q.Publish(context.Background(), []byte(payload))
	require.NoError(cs.t, err)
	return m
}

func (cs *clockStore) receive(max int) []broker.DeliveryValue {
	cs.t.Helper()
	ds, err := cs.q.Receive(context.Background(), max)
	require.NoError(cs.t, err)
	return ds
}

func (cs *clockStore) receiveOne() broker.DeliveryValue {
	cs.t.Helper()
	ds := cs.receive(1)
	require.Len(cs.t, ds, 1, "at %s", cs.clock.Now())
	return ds[0]
}

func (cs *clockStore) requireNothing(why string) {
	cs.t.Helper()
	ds := cs.receive(10)
	require.Empty(cs.t, ds, "at %s: %s", cs.clock.Now().Format(time.TimeOnly), why)
}

// zigzag returns readings an hour either side of from, all before until.
func zigzag(from, until time.Time) []time.Time {
	var out []time.Time
	for _, d := range []time.Duration{-time.Hour, time.Hour, -30 * time.Minute, 59 * time.Minute, -time.Hour, 0} {
		if at := from.Add(d); at.Before(until) {
			out = append(out, at)
		}
	}
	return append(out, until.Add(-time.Nanosecond))
}

func TestClockLeaseLapsesAtExpiresAtNotBefore(t *testing.T) {
	cs := newClockStore(t)
	m := cs.publish("a")
	d := cs.receiveOne()
	expires := d.Lease.ExpiresAt
	require.True(t, clockBase.Add(clockPolicy.VisibilityTimeout).Equal(expires), "ExpiresAt %s", expires)

	for _, at := range zigzag(clockBase, expires) {
		cs.at(at).requireNothing("the lease has not lapsed by the clock")
		dls, err := cs.q.DeadLetters(context.Background(), 10)
		require.NoError(t, err)
		require.Empty(t, dls)
		st := cs.q.Stats()
		require.Equal(t, [2]int{0, 1}, [2]int{st.Ready, st.Leased}, "at %s: ready, leased", at)
	}
	cs.reopen(expires.Add(-time.Hour))
	cs.requireNothing("a lease survives a reopen with the clock an hour back")
	cs.at(expires.Add(-time.Nanosecond)).requireNothing("one nanosecond before ExpiresAt")

	cs.at(expires)
	again := cs.receiveOne()
	require.Equal(t, m.ID, again.Message.ID, "a lease lapses AT ExpiresAt")
	require.Equal(t, 2, again.Deliveries)
	require.ErrorIs(t, cs.q.Ack(context.Background(), d.Lease.Receipt), broker.LeaseExpired)

	// The new lease, an hour back: held, and its receipt acks.
	cs.at(expires.Add(-time.Hour)).requireNothing("the new lease is held")
	require.NoError(t, cs.q.Ack(context.Background(), again.Lease.Receipt))
	cs.at(expires.Add(3 * time.Hour)).requireNothing("acked for good")
}

// A lapse a call observed stays observed in its process: stepping the
// clock back does not revive the lease. After a restart the log, which
// records no observations of time, decides: the lease is live until its
// ExpiresAt again (docs/DESIGN.md, "Time").
func TestClockObservedLapseStaysLapsedUntilRestart(t *testing.T) {
	cs := newClockStore(t)
	cs.publish("a")
	d := cs.receiveOne()
	expires := d.Lease.ExpiresAt

	cs.at(expires)
	dls, err := cs.q.DeadLetters(context.Background(), 10) // looks, and sees the lapse
	require.NoError(t, err)
	require.Empty(t, dls, "deliveries are left: not a dead letter")
	cs.at(expires.Add(-time.Hour))
	require.ErrorIs(t, cs.q.Ack(context.Background(), d.Lease.Receipt), broker.LeaseExpired,
		"an observed lapse stays lapsed with the clock set back")

	cs.reopen(expires.Add(-time.Hour))
	cs.requireNothing("after a restart with the clock set back, the lease is live again")
	require.NoError(t, cs.q.Ack(context.Background(), d.Lease.Receipt), "and its receipt acks")
}

// Every call that looks at a queue observes its deadlines (docs/DESIGN.md,
// "Observing time"): once one ran at or past a lease's ExpiresAt, or a
// retry delay's VisibleAt, the lapse or the end stays observed in this
// process when the clock goes back, whichever call it was.
func TestClockEveryCallObservesDeadlines(t *testing.T) {
	ctx := context.Background()
	cause := broker.NewError("CLOCK_TEST", 3, "test", "")
	calls := []struct {
		name string
		call func(cs *clockStore, other broker.DeliveryValue) error
	}{
		{"Stats", func(cs *clockStore, _ broker.DeliveryValue) error { cs.q.Stats(); return nil }},
		{"Wake", func(cs *clockStore, _ broker.DeliveryValue) error { cs.q.Wake(); return nil }},
		{"DeadLetters", func(cs *clockStore, _ broker.DeliveryValue) error { _, err := cs.q.DeadLetters(ctx, 10); return err }},
		{"ReplayDeadLetter", func(cs *clockStore, _ broker.DeliveryValue) error {
			return ignore(cs.q.ReplayDeadLetter(ctx, "00000000000000ff"), broker.DeadLetterNotFound)
		}},
		{"DeleteDeadLetter", func(cs *clockStore, _ broker.DeliveryValue) error {
			return ignore(cs.q.DeleteDeadLetter(ctx, "00000000000000ff"), broker.DeadLetterNotFound)
		}},
		{"Publish", func(cs *clockStore, _ broker.DeliveryValue) error {
			_, err := cs.q.Publish(ctx, []byte("x"))
			return err
		}},
		{"PublishKeyed new key", func(cs *clockStore, _ broker.DeliveryValue) error {
			_, err := cs.q.PublishKeyed(ctx, "new", []byte("x"))
			return err
		}},
		{"PublishKeyed duplicate", func(cs *clockStore, _ broker.DeliveryValue) error {
			m, err := cs.q.PublishKeyed(ctx, "seen", []byte("x"))
			if err == nil && m.Payload != nil {
				err = fmt.Errorf("not a duplicate")
			}
			return err
		}},
		{"PublishBatch", func(cs *clockStore, _ broker.DeliveryValue) error {
			_, err := cs.q.PublishBatch(ctx, [][]byte{[]byte("x"), []byte("y")})
			return err
		}},
		{"Ack", func(cs *clockStore, o broker.DeliveryValue) error { return cs.q.Ack(ctx, o.Lease.Receipt) }},
		{"Nack", func(cs *clockStore, o broker.DeliveryValue) error {
			_, err := cs.q.Nack(ctx, o.Lease.Receipt, cause)
			return err
		}},
		{"Reject", func(cs *clockStore, o broker.DeliveryValue) error { return cs.q.Reject(ctx, o.Lease.Receipt, cause) }},
		{"Extend", func(cs *clockStore, o broker.DeliveryValue) error {
			_, err := cs.q.Extend(ctx, o.Lease.Receipt, time.Hour)
			return err
		}},
	}
	for _, c := range calls {
		t.Run("lease/"+c.name, func(t *testing.T) {
			cs := newClockStore(t)
			seen, err := cs.q.PublishKeyed(ctx, "seen", []byte("the key's original"))
			require.NoError(t, err)
			a := cs.receiveOne() // leased until base+40m
			require.Equal(t, seen.ID, a.Message.ID)
			cs.at(clockBase.Add(30 * time.Minute)).publish("b")
			b := cs.receiveOne() // leased until base+70m: live when the call runs
			require.True(t, b.Lease.ExpiresAt.After(a.Lease.ExpiresAt))

			cs.at(a.Lease.ExpiresAt)
			require.NoError(t, c.call(cs, b), "the call, at a's ExpiresAt")
			cs.at(a.Lease.ExpiresAt.Add(-time.Hour))
			require.ErrorIs(t, cs.q.Ack(ctx, a.Lease.Receipt), broker.LeaseExpired,
				"%s ran at the lease's ExpiresAt: the lapse was observed, and stays observed with the clock an hour back", c.name)
		})
		t.Run("retry delay/"+c.name, func(t *testing.T) {
			cs := newClockStore(t)
			seen, err := cs.q.PublishKeyed(ctx, "seen", []byte("the key's original"))
			require.NoError(t, err)
			a := cs.receiveOne()
			require.Equal(t, seen.ID, a.Message.ID)
			nv, err := cs.q.Nack(ctx, a.Lease.Receipt, cause) // visible at base+20m
			require.NoError(t, err)
			cs.at(clockBase.Add(10 * time.Minute)).publish("b")
			b := cs.receiveOne() // leased until base+50m: live when the call runs

			cs.at(nv.VisibleAt)
			require.NoError(t, c.call(cs, b), "the call, at a's VisibleAt")
			cs.at(nv.VisibleAt.Add(-time.Hour))
			ds := cs.receive(10)
			require.True(t, slices.ContainsFunc(ds, func(d broker.DeliveryValue) bool { return d.Message.ID == a.Message.ID }),
				"%s ran at the retry delay's end: the end was observed, and stays observed with the clock an hour back", c.name)
		})
	}
}

// ignore returns nil for an error that is target, and err otherwise.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

func TestClockRetryDelayEndsAtVisibleAtNotBefore(t *testing.T) {
	cs := newClockStore(t)
	m := cs.publish("a")
	d := cs.receiveOne()
	nv, err := cs.q.Nack(context.Background(), d.Lease.Receipt, nil)
	require.NoError(t, err)
	visible := nv.VisibleAt
	require.True(t, clockBase.Add(clockPolicy.RetryDelay).Equal(visible), "VisibleAt %s", visible)

	for _, at := range zigzag(clockBase, visible) {
		cs.at(at).requireNothing("the retry delay has not ended")
		require.Equal(t, 1, cs.q.Stats().Delayed, "at %s", at)
	}
	cs.reopen(visible.Add(-time.Hour))
	cs.requireNothing("a retry delay survives a reopen with the clock an hour back")
	cs.at(visible.Add(-time.Nanosecond)).requireNothing("one nanosecond before VisibleAt")
	again := cs.at(visible).receiveOne()
	require.Equal(t, m.ID, again.Message.ID, "visible AT VisibleAt")
	require.Equal(t, 2, again.Deliveries)
}

func TestClockDedupKeyNotForgottenEarly(t *testing.T) {
	cs := newClockStore(t)
	ctx := context.Background()
	window := clockPolicy.DedupWindow
	keyed := func(at time.Time) broker.MessageValue {
		t.Helper()
		m, err := cs.at(at).q.PublishKeyed(ctx, "k", []byte("payload"))
		require.NoError(t, err)
		return m
	}
	orig := keyed(clockBase)
	dup := func(at time.Time, why string) {
		t.Helper()
		m := keyed(at)
		require.Equal(t, orig.ID, m.ID, "at base%+v: %s", at.Sub(clockBase), why)
		require.True(t, orig.EnqueuedAt.Equal(m.EnqueuedAt), "the original's EnqueuedAt")
	}

	cs.at(clockBase.Add(time.Hour)).publish("other")
	dup(clockBase.Add(-time.Hour), "an hour back")
	dup(clockBase.Add(window), "exactly the window old: not strictly older")
	cs.reopen(clockBase.Add(window))
	dup(clockBase.Add(window), "after a reopen, exactly the window old")

	// A publish two hours on, then the clock back to where the key is older
	// than the window: the clock went backwards, so nothing is evicted.
	cs.at(clockBase.Add(2 * time.Hour)).publish("later")
	dup(clockBase.Add(window+10*time.Minute), "older than the window, but the clock is behind a reading the log holds")
	cs.reopen(clockBase.Add(window + 10*time.Minute))
	dup(clockBase.Add(window+10*time.Minute), "the same after a reopen: the later publish is in the log")

	fresh := keyed(clockBase.Add(2*time.Hour + time.Nanosecond))
	require.NotEqual(t, orig.ID, fresh.ID, "older than the window with the clock ahead of every reading: forgotten")
	require.True(t, fresh.EnqueuedAt.Equal(clockBase.Add(2*time.Hour+time.Nanosecond)))
	m := keyed(clockBase)
	require.Equal(t, fresh.ID, m.ID, "the new original is remembered, also with the clock back")
}

func TestClockReceiveOrderIgnoresTheClock(t *testing.T) {
	cs := newClockStore(t)
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	var sent []broker.MessageValue
	for i := range 40 {
		at := clockBase.Add(time.Duration(i)*time.Minute + time.Duration(rng.IntN(3)-1)*time.Hour)
		sent = append(sent, cs.at(at).publish(fmt.Sprint(i)))
	}
	want := slices.Clone(sent)
	slices.SortStableFunc(want, cmpEnqueued)
	var got []string
	for i := range sent {
		if i == 15 {
			cs.reopen(clockBase.Add(-2 * time.Hour))
		}
		cs.at(clockBase.Add(time.Duration(rng.IntN(3)-1) * time.Hour))
		d := cs.receiveOne()
		got = append(got, d.Message.ID)
		require.NoError(t, cs.q.Ack(context.Background(), d.Lease.Receipt))
	}
	require.Equal(t, ids(want), got, "oldest EnqueuedAt first, whatever the clock reads at Receive")
}

func ids(ms []broker.MessageValue) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// clockSteps is the length of the randomised clock test.
func clockSteps() int {
	if testing.Short() || raceEnabled() {
		return 300
	}
	return 3000
}

// TestClockSteppedRandomly runs random operations while the clock moves
// forward by up to a quarter of an hour and jumps an hour either way
// between operations, with reopens, against a model that knows, for each
// message, whether the clock readings so far oblige it to be receivable,
// oblige it not to be, or leave it open.
func TestClockSteppedRandomly(t *testing.T) {
	seed := testSeed(t)
	m := newClockModel(t, seed)
	steps := clockSteps()
	for step := range steps {
		if err := m.step(); err != nil {
			t.Fatalf("seed %d (replay with %s=%d), step %d at base%+v: %v\nlast operations:\n%s",
				seed, seedEnv, seed, step, m.now().Sub(clockBase), err, strings.Join(m.history(), "\n"))
		}
	}
	t.Logf("%d steps: %s", steps, m.figures())
}

type tri int

const (
	no tri = iota
	maybe
	yes
)

type cmState int

const (
	cmReady cmState = iota
	cmLeased
	cmDelayed
	cmDead
	cmAcked
	// cmMaybeDead: a final lease that an operation may have seen lapse (a
	// reading at or past its expiry, the clock now back before it); a call
	// that looks may then have dead-lettered it. DeadLetters tells.
	cmMaybeDead
)

// cmMsg is the model of one message.
type cmMsg struct {
	id       string
	enq      time.Time
	state    cmState
	del      int
	at       time.Time // lease expiry, or retry instant
	since    int       // the operation that set at
	serial   int       // counts leases, so that a receipt of an older one is stale
	reason   string
	failedAt time.Time
	// failure is the reason of its last nack ("" for none): a lapse on
	// its last delivery records it, LEASE_EXPIRED only when none.
	failure string
}

// lapseReason is the reason of msg's dead letter when its last lease lapses.
func (msg *cmMsg) lapseReason() string {
	if msg.failure != "" {
		return msg.failure
	}
	return broker.ReasonLeaseExpired
}

type cmHeld struct {
	id      string
	serial  int
	receipt broker.ReceiptValue
}

type cmKey struct {
	id    string
	enq   time.Time
	state tri // yes: remembered; no: forgotten; maybe: either
}

type clockModel struct {
	t    *testing.T
	rng  *rand.Rand
	cs   *clockStore
	base time.Time
	msgs map[string]*cmMsg
	held []cmHeld
	keys map[string]*cmKey
	// loggedMark is at most, allMark at least, the latest clock reading
	// that counts for "the clock went backwards".
	loggedMark, allMark time.Time

	readings  []time.Time // the clock at each operation
	procStart int         // the first operation of the current process
	log       []string
	counts    map[string]int
}

func newClockModel(t *testing.T, seed uint64) *clockModel {
	return &clockModel{t: t, rng: rand.New(rand.NewPCG(seed, 11)), cs: newClockStore(t), base: clockBase,
		msgs: map[string]*cmMsg{}, keys: map[string]*cmKey{}, counts: map[string]int{},
		loggedMark: time.Time{}, allMark: time.Time{}}
}

func (m *clockModel) now() time.Time { return m.cs.clock.Now() }

func (m *clockModel) history() []string {
	if len(m.log) > 30 {
		return m.log[len(m.log)-30:]
	}
	return m.log
}

func (m *clockModel) figures() string {
	keys := make([]string, 0, len(m.counts))
	for k := range m.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m.counts[k]))
	}
	return strings.Join(parts, ", ")
}

func (m *clockModel) note(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("base%+v %s", m.now().Sub(clockBase), fmt.Sprintf(format, args...)))
}

// maxSince is the latest reading of the operations from op on (the
// current one included), restricted to the current process if thisProc.
func (m *clockModel) maxSince(op int, thisProc bool) time.Time {
	if thisProc {
		op = max(op, m.procStart)
	}
	var out time.Time
	for _, r := range m.readings[min(op, len(m.readings)):] {
		if r.After(out) {
			out = r
		}
	}
	return out
}

// lapsed says whether msg's lease has lapsed at the current operation:
// yes at or past its ExpiresAt; no while every reading of this process
// since it was granted is before it; maybe otherwise.
func (m *clockModel) lapsed(msg *cmMsg) tri {
	switch {
	case !m.now().Before(msg.at):
		return yes
	case m.maxSince(msg.since+1, true).Before(msg.at):
		return no
	}
	return maybe
}

// receivable says whether msg may be handed out by a Receive now.
func (m *clockModel) receivable(msg *cmMsg) tri {
	switch msg.state {
	case cmReady:
		return yes
	case cmDelayed:
		switch {
		case !m.now().Before(msg.at):
			return yes
		case m.maxSince(msg.since+1, false).Before(msg.at):
			return no
		}
		return maybe
	case cmLeased:
		if msg.del >= clockPolicy.MaxDeliveries {
			return no // its lapse makes it a dead letter
		}
		return m.lapsed(msg)
	}
	return no
}

func (m *clockModel) step() error {
	m.base = m.base.Add(time.Duration(m.rng.IntN(15*60)) * time.Second)
	m.cs.clock.Set(m.base.Add(time.Duration(m.rng.IntN(3)-1) * time.Hour))
	m.readings = append(m.readings, m.now())
	op := len(m.readings) - 1
	switch r := m.rng.IntN(100); {
	case r < 18:
		return m.publish(op)
	case r < 30:
		return m.publishKeyed(op)
	case r < 55:
		return m.receive(op)
	case r < 88 && len(m.held) > 0:
		return m.settle(op)
	case r < 95:
		return m.deadLetters(op)
	case r < 96:
		m.note("reopen")
		m.counts["reopen"]++
		require.NoError(m.t, m.cs.s.Close())
		m.cs.s = nil
		m.cs.open()
		m.procStart = op
		return nil
	case r < 97:
		m.note("kill and restart")
		m.counts["kill"]++
		m.cs.kill()
		m.cs.open()
		m.procStart = op
		return nil
	}
	return m.receive(op)
}

func (m *clockModel) publish(op int) error {
	msg, err := m.cs.q.Publish(context.Background(), []byte(fmt.Sprint("p", op)))
	if err != nil {
		return err
	}
	m.counts["publish"]++
	m.note("publish -> %s", msg.ID)
	if !msg.EnqueuedAt.Equal(m.now()) {
		return fmt.Errorf("EnqueuedAt %s, the clock read %s", msg.EnqueuedAt, m.now())
	}
	m.msgs[msg.ID] = &cmMsg{id: msg.ID, enq: msg.EnqueuedAt, state: cmReady}
	m.mark(true)
	return nil
}

// mark raises the readings that count for "the clock went backwards":
// logged ones (publishes, evictions) raise both bounds, others only the
// upper one.
func (m *clockModel) mark(logged bool) {
	if logged && m.now().After(m.loggedMark) {
		m.loggedMark = m.now()
	}
	if m.now().After(m.allMark) {
		m.allMark = m.now()
	}
}

func (m *clockModel) publishKeyed(op int) error {
	key := fmt.Sprintf("k%d", m.rng.IntN(6))
	now, window := m.now(), clockPolicy.DedupWindow
	// Eviction, before the lookup: certain when the clock is at or past
	// every reading that could count, impossible when it is behind one the
	// log surely holds, unknown in between.
	certain := !now.Before(m.allMark)
	impossible := now.Before(m.loggedMark)
	evictedSurely := false
	for _, k := range m.keys {
		if k.state == no || now.Sub(k.enq) <= window {
			continue
		}
		switch {
		case certain:
			evictedSurely = evictedSurely || k.state == yes
			k.state = no
		case !impossible:
			k.state = maybe
		}
	}
	// The reading is in the log: a new message's publish record carries
	// it; a duplicate logs it when it is the latest (docs/DESIGN.md,
	// "Observing time").
	if evictedSurely {
		m.mark(true)
	}
	m.mark(true)
	msg, err := m.cs.q.PublishKeyed(context.Background(), key, []byte(fmt.Sprint("k", op)))
	if err != nil {
		return err
	}
	k := m.keys[key]
	dup := msg.Payload == nil
	m.note("publishKeyed(%s) -> %s dup=%v", key, msg.ID, dup)
	switch {
	case dup && (k == nil || k.state == no):
		return fmt.Errorf("PublishKeyed(%s) returned %s as a duplicate: the key was never published or was certainly forgotten", key, msg.ID)
	case dup:
		if msg.ID != k.id || !msg.EnqueuedAt.Equal(k.enq) {
			return fmt.Errorf("PublishKeyed(%s) returned %s enqueued %s; the original is %s enqueued %s", key, msg.ID, msg.EnqueuedAt, k.id, k.enq)
		}
		k.state = yes
		m.counts["duplicate"]++
	case k != nil && k.state == yes:
		return fmt.Errorf("PublishKeyed(%s) at %s made a new message %s: the key's original %s (enqueued %s) is not forgotten by any reading (window %v)",
			key, now, msg.ID, k.id, k.enq, window)
	default:
		if !msg.EnqueuedAt.Equal(now) {
			return fmt.Errorf("EnqueuedAt %s, the clock read %s", msg.EnqueuedAt, now)
		}
		m.keys[key] = &cmKey{id: msg.ID, enq: now, state: yes}
		m.msgs[msg.ID] = &cmMsg{id: msg.ID, enq: now, state: cmReady}
		m.mark(true)
		m.counts["keyed new"]++
	}
	return nil
}

func (m *clockModel) receive(op int) error {
	max := 1 + m.rng.IntN(4)
	m.sweep(op) // Receive looks first
	ds, err := m.cs.q.Receive(context.Background(), max)
	if err != nil {
		return err
	}
	m.counts["receive"]++
	got := make([]string, len(ds))
	for i, d := range ds {
		got[i] = d.Message.ID
	}
	m.note("receive(%d) -> %v", max, got)
	for i, d := range ds {
		msg := m.msgs[d.Message.ID]
		if msg == nil {
			return fmt.Errorf("received unknown message %s", d.Message.ID)
		}
		if m.receivable(msg) == no {
			return fmt.Errorf("received %s (state %d, at %s, since op %d): nothing the clock read makes it receivable", msg.id, msg.state, msg.at, msg.since)
		}
		if i > 0 && cmpEnqueued(ds[i-1].Message, d.Message) > 0 {
			return fmt.Errorf("received %s after %s, which was enqueued later", d.Message.ID, ds[i-1].Message.ID)
		}
		if d.Deliveries != msg.del+1 {
			return fmt.Errorf("received %s as delivery %d; it had %d", msg.id, d.Deliveries, msg.del)
		}
		if !d.Lease.ExpiresAt.Equal(m.now().Add(clockPolicy.VisibilityTimeout)) {
			return fmt.Errorf("lease of %s expires %s, not now plus the visibility timeout", msg.id, d.Lease.ExpiresAt)
		}
	}
	// Every message that must be receivable and is older than the last one
	// handed out (or any, if fewer than max came) must have come.
	for _, msg := range m.msgs {
		if m.receivable(msg) != yes || slices.Contains(got, msg.id) {
			continue
		}
		mv := broker.MessageValue{ID: msg.id, EnqueuedAt: msg.enq}
		if len(ds) < max || cmpEnqueued(mv, ds[len(ds)-1].Message) < 0 {
			return fmt.Errorf("%s (state %d, at %s) must be receivable and is older than what came, but was not received", msg.id, msg.state, msg.at)
		}
	}
	for _, d := range ds {
		msg := m.msgs[d.Message.ID]
		msg.state, msg.del, msg.at, msg.since = cmLeased, d.Deliveries, d.Lease.ExpiresAt, op
		msg.serial++
		m.held = append(m.held, cmHeld{id: msg.id, serial: msg.serial, receipt: d.Lease.Receipt})
	}
	return nil
}

// sweep applies what a call that looks (Receive, DeadLetters) does first:
// every final lease that has lapsed by now becomes a dead letter, and one
// whose lapse an earlier reading may have shown may become one.
func (m *clockModel) sweep(op int) {
	for _, msg := range m.msgs {
		if msg.state != cmLeased && msg.state != cmMaybeDead || msg.del < clockPolicy.MaxDeliveries {
			continue
		}
		switch m.lapsed(msg) {
		case yes:
			msg.state, msg.reason, msg.failedAt = cmDead, msg.lapseReason(), msg.at
		case maybe:
			msg.state = cmMaybeDead
		}
	}
}

func (m *clockModel) settle(op int) error {
	// Mostly a receipt of a lease still in place; now and then any one
	// (a lapsed, replaced or settled one must be refused).
	var current []int
	for i, h := range m.held {
		if msg := m.msgs[h.id]; msg.serial == h.serial && (msg.state == cmLeased || msg.state == cmMaybeDead) {
			current = append(current, i)
		}
	}
	i := m.rng.IntN(len(m.held))
	if len(current) > 0 && m.rng.IntN(5) > 0 {
		i = current[m.rng.IntN(len(current))]
	}
	h := m.held[i]
	m.held = slices.Delete(m.held, i, i+1)
	msg := m.msgs[h.id]
	live := no
	if (msg.state == cmLeased || msg.state == cmMaybeDead) && msg.serial == h.serial {
		live = map[tri]tri{yes: no, no: yes, maybe: maybe}[m.lapsed(msg)]
		if msg.state == cmMaybeDead && live == yes {
			// A sweep may have dead-lettered it, durably: a restart with
			// the clock back does not make it live again.
			live = maybe
		}
	}
	ctx := context.Background()
	var err error
	var call string
	var nv broker.NackValue
	var lv broker.LeaseValue
	by := time.Duration(10+m.rng.IntN(110)) * time.Minute
	switch r := m.rng.IntN(10); {
	case r < 4:
		call, err = "ack", m.cs.q.Ack(ctx, h.receipt)
	case r < 7:
		call = "nack"
		nv, err = m.cs.q.Nack(ctx, h.receipt, broker.NewError("CLOCK_RETRY", 1, "retry", ""))
	case r < 8:
		call, err = "reject", m.cs.q.Reject(ctx, h.receipt, broker.NewError("CLOCK_REJECT", 2, "reject", ""))
	default:
		call = "extend"
		lv, err = m.cs.q.Extend(ctx, h.receipt, by)
	}
	m.note("%s %s (lease %d, expires %s, live %d) -> %v", call, h.id, h.serial, msg.at, live, err)
	switch {
	case err == nil && live == no:
		return fmt.Errorf("%s of %s succeeded, but its lease is gone (expires %s, serial %d of %d)", call, h.id, msg.at, h.serial, msg.serial)
	case err != nil && !errors.Is(err, broker.LeaseExpired):
		return err
	case err != nil && live == yes:
		return fmt.Errorf("%s of %s refused (%v), but no reading since its lease reached its ExpiresAt %s", call, h.id, err, msg.at)
	case err != nil:
		m.counts[call+" refused"]++
		return nil
	}
	m.counts[call]++
	now := m.now()
	switch call {
	case "ack":
		msg.state = cmAcked
	default:
		if msg.state == cmMaybeDead {
			msg.state = cmLeased // the lease was live: it was no dead letter
		}
	}
	switch call {
	case "nack":
		if msg.del >= clockPolicy.MaxDeliveries {
			if !nv.DeadLettered {
				return fmt.Errorf("nack of the last delivery of %s did not dead-letter it", h.id)
			}
			msg.state, msg.reason, msg.failedAt = cmDead, "CLOCK_RETRY", now
			break
		}
		if nv.DeadLettered || !nv.VisibleAt.Equal(now.Add(clockPolicy.RetryDelay)) {
			return fmt.Errorf("nack of %s: %+v, want VisibleAt %s", h.id, nv, now.Add(clockPolicy.RetryDelay))
		}
		msg.state, msg.at, msg.since = cmDelayed, nv.VisibleAt, op
		msg.failure = "CLOCK_RETRY"
	case "reject":
		msg.state, msg.reason, msg.failedAt = cmDead, "CLOCK_REJECT", now
	case "extend":
		if !lv.ExpiresAt.Equal(now.Add(by)) {
			return fmt.Errorf("Extend of %s by %v at %s: ExpiresAt %s", h.id, by, now, lv.ExpiresAt)
		}
		msg.at, msg.since = lv.ExpiresAt, op
		msg.serial++
		m.held = append(m.held, cmHeld{id: msg.id, serial: msg.serial, receipt: lv.Receipt})
	}
	return nil
}

func (m *clockModel) deadLetters(op int) error {
	m.sweep(op)
	dls, err := m.cs.q.DeadLetters(context.Background(), 1000)
	if err != nil {
		return err
	}
	m.counts["deadletters"]++
	got := map[string]broker.DeadLetterValue{}
	for i, dl := range dls {
		got[dl.Message.ID] = dl
		if i > 0 && (dls[i-1].FailedAt.After(dl.FailedAt) || dls[i-1].FailedAt.Equal(dl.FailedAt) && dls[i-1].Message.ID > dl.Message.ID) {
			return fmt.Errorf("dead letters out of order: %s after %s", dl.Message.ID, dls[i-1].Message.ID)
		}
	}
	m.note("deadletters -> %d", len(dls))
	for _, msg := range m.msgs {
		dl, isDead := got[msg.id]
		if msg.state == cmMaybeDead {
			msg.state = cmLeased
			if isDead {
				msg.state, msg.reason, msg.failedAt = cmDead, msg.lapseReason(), msg.at
			}
		}
		switch {
		case msg.state == cmDead && !isDead:
			return fmt.Errorf("%s is dead (%s) but not among the dead letters", msg.id, msg.reason)
		case msg.state != cmDead && isDead:
			return fmt.Errorf("%s (state %d, lease until %s) is a dead letter (%s at %s), which no reading justifies", msg.id, msg.state, msg.at, dl.Reason, dl.FailedAt)
		case isDead && (dl.Reason != msg.reason || !dl.FailedAt.Equal(msg.failedAt) || dl.Deliveries != msg.del):
			return fmt.Errorf("dead letter %s: %s at %s after %d deliveries, want %s at %s after %d", msg.id, dl.Reason, dl.FailedAt, dl.Deliveries, msg.reason, msg.failedAt, msg.del)
		}
	}
	return nil
}
