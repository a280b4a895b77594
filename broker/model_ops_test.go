package broker_test

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// The operations of the model check (see model_test.go): each calls the
// store, predicts the answer from the model, compares, and updates the
// model.

func (mc *modelCheck) payload(mq *mQueue) []byte {
	n := mc.rng.IntN(mq.pol.MaxMessageBytes + 1)
	if mc.rng.IntN(20) == 0 {
		n = mq.pol.MaxMessageBytes + 1 + mc.rng.IntN(3)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(mc.rng.Uint32())
	}
	return b
}

func (mc *modelCheck) admit(mq *mQueue, m broker.MessageValue, payload []byte) {
	mc.t.Helper()
	require.False(mc.t, mc.ids[m.ID], "ID %s minted twice", m.ID)
	require.Equal(mc.t, mc.now(), m.EnqueuedAt.UnixNano(), "EnqueuedAt is the broker clock")
	require.True(mc.t, bytes.Equal(payload, m.Payload), "returned payload")
	mc.ids[m.ID] = true
	mc.logf("  minted %s", m.ID)
	mq.order++
	mq.msgs[m.ID] = &mMsg{id: m.ID, order: mq.order, payload: payload, enq: mc.now(), state: mReady}
	mq.minted = append(mq.minted, m.ID)
	mq.lastEvict = max(mq.lastEvict, mc.now())
	mq.c.published++
	mc.fire(mq)
}

// fire records an event that must close the queue's wake signal: a
// publish that enqueues, a Nack that hands the message back, a replay, a
// change of policy, an Extend that brings the lapse closer.
func (mc *modelCheck) fire(mq *mQueue) {
	if mq.wake != nil {
		mq.wake.fired = true
	}
}

// full is a publish refused with QueueFull: it counts as shed, once a call.
func (mq *mQueue) full(n int) bool {
	if mq.pol.Capacity > 0 && mq.live()+n > mq.pol.Capacity {
		mq.c.shed++
		return true
	}
	return false
}

func (mc *modelCheck) publish(mq *mQueue) {
	p := mc.payload(mq)
	m, err := mq.q.Publish(ctx(mc.t), p)
	want := "ok"
	switch {
	case len(p) > mq.pol.MaxMessageBytes:
		want = "MESSAGE_TOO_LARGE"
	case mq.full(1):
		want = "QUEUE_FULL"
	}
	if mc.expect(want, err, fmt.Sprintf("Publish(%d bytes) live=%d", len(p), mq.live())) {
		mc.admit(mq, m, p)
	}
}

func (mc *modelCheck) publishKeyed(mq *mQueue) {
	key := "k" + strconv.Itoa(mc.rng.IntN(5))
	switch mc.rng.IntN(60) {
	case 0, 1:
		key = ""
	case 2:
		key = strings.Repeat("k", 257) // one byte past the bound
	}
	p := mc.payload(mq)
	m, err := mq.q.PublishKeyed(ctx(mc.t), key, p)
	what := fmt.Sprintf("PublishKeyed(%q, %d bytes) live=%d lastEvict=%d", key, len(p), mq.live(), mq.lastEvict-t0.UnixNano())
	now := mc.now()
	switch {
	case key == "" || len(key) > 256:
		mc.expect("INVALID_DEDUP_KEY", err, what)
		return
	case len(p) > mq.pol.MaxMessageBytes:
		mc.expect("MESSAGE_TOO_LARGE", err, what)
		return
	}
	window := int64(mq.pol.DedupWindow)
	if now >= mq.lastEvict { // the clock going back evicts nothing
		mq.lastEvict = now
		for k, s := range mq.seen {
			if now-s.enq > window {
				delete(mq.seen, k)
			}
		}
	}
	if s, ok := mq.seen[key]; ok {
		if mc.expect("ok", err, what+" duplicate") {
			require.Equal(mc.t, s.id, m.ID, "a duplicate returns the original ID")
			require.Equal(mc.t, s.enq, m.EnqueuedAt.UnixNano(), "and its EnqueuedAt")
			require.Empty(mc.t, m.Payload, "and no payload")
			mq.c.duplicates++
		}
		return
	}
	if mq.full(1) {
		mc.expect("QUEUE_FULL", err, what)
		return
	}
	if mc.expect("ok", err, what) {
		mc.admit(mq, m, p)
		mq.seen[key] = mSeen{id: m.ID, enq: now}
	}
}

func (mc *modelCheck) publishBatch(mq *mQueue) {
	n := 1 + mc.rng.IntN(4)
	if mc.rng.IntN(20) == 0 {
		n = 0
	}
	ps := make([][]byte, n)
	tooLarge := false
	for i := range ps {
		ps[i] = mc.payload(mq)
		tooLarge = tooLarge || len(ps[i]) > mq.pol.MaxMessageBytes
	}
	ms, err := mq.q.PublishBatch(ctx(mc.t), ps)
	want := "ok"
	switch {
	case n == 0:
		want = "INVALID_BATCH_SIZE"
	case tooLarge:
		want = "MESSAGE_TOO_LARGE"
	case mq.full(n):
		want = "QUEUE_FULL"
	}
	if mc.expect(want, err, fmt.Sprintf("PublishBatch(%d) live=%d", n, mq.live())) {
		require.Len(mc.t, ms, n)
		for i, m := range ms {
			mc.admit(mq, m, ps[i])
		}
	}
}

func (mc *modelCheck) receive(mq *mQueue) {
	max := 1 + mc.rng.IntN(4)
	if mc.rng.IntN(20) == 0 {
		max = -mc.rng.IntN(2)
	}
	ds, err := mq.q.Receive(ctx(mc.t), max)
	if max <= 0 {
		mc.expect("INVALID_BATCH_SIZE", err, fmt.Sprintf("Receive(%d)", max))
		return
	}
	now := mc.now()
	want := mq.receivable(now)
	want = want[:min(max, len(want))]
	if !mc.expect("ok", err, fmt.Sprintf("Receive(%d) want %d", max, len(want))) {
		return
	}
	wantIDs := make([]string, len(want))
	for i, m := range want {
		wantIDs[i] = m.id
	}
	require.Equal(mc.t, wantIDs, ids(ds), "Receive: which messages, in which order")
	for i, d := range ds {
		m := want[i]
		m.state, m.deliveries, m.at, m.receipt = mLeased, m.deliveries+1, now+int64(mq.pol.VisibilityTimeout), d.Lease.Receipt
		require.Equal(mc.t, m.deliveries, d.Deliveries, "Deliveries of %s", m.id)
		require.Equal(mc.t, m.at, d.Lease.ExpiresAt.UnixNano(), "ExpiresAt of %s", m.id)
		require.Equal(mc.t, m.enq, d.Message.EnqueuedAt.UnixNano(), "EnqueuedAt of %s", m.id)
		require.True(mc.t, bytes.Equal(m.payload, d.Message.Payload), "payload of %s", m.id)
		_, reused := mc.owner[d.Lease.Receipt]
		require.False(mc.t, reused, "Receive: receipt of %s issued before", m.id)
		mq.c.delivered++
		mc.owner[d.Lease.Receipt] = mq.name
		mq.receipts = append(mq.receipts, d.Lease.Receipt)
		mc.logf("  delivered %s #%d until %d", m.id, m.deliveries, m.at-t0.UnixNano())
	}
}

// pickReceipt returns a receipt to settle: mostly a live one, sometimes a
// stale one, one of the other queue, or a garbled one.
func (mc *modelCheck) pickReceipt(mq *mQueue) broker.ReceiptValue {
	r := mc.rng.IntN(20)
	var leased []*mMsg
	for _, m := range mq.msgs {
		if m.state == mLeased {
			leased = append(leased, m)
		}
	}
	slices.SortFunc(leased, func(a, b *mMsg) int { return a.order - b.order })
	switch {
	case r < 13 && len(leased) > 0:
		return leased[mc.rng.IntN(len(leased))].receipt
	case r < 17 && len(mq.receipts) > 0:
		return mq.receipts[mc.rng.IntN(len(mq.receipts))]
	case r < 18:
		other := mc.qs[(slices.Index(mc.qs, mq)+1)%len(mc.qs)]
		if len(other.receipts) > 0 {
			return other.receipts[mc.rng.IntN(len(other.receipts))]
		}
	case r < 19 && len(mq.receipts) > 0:
		g := []byte(mq.receipts[mc.rng.IntN(len(mq.receipts))])
		i := mc.rng.IntN(len(g) - 1) // not the last character: it may carry only padding bits
		g[i] = "ABCDEFGHabcdefgh0123456789-_"[(strings.IndexByte("ABCDEFGHabcdefgh0123456789-_", g[i])+1+mc.rng.IntN(20))%28]
		return broker.ReceiptValue(g)
	}
	return broker.ReceiptValue([]string{"", "garbage", "AQEAAAAB"}[mc.rng.IntN(3)])
}

func (mc *modelCheck) ack(mq *mQueue) {
	r := mc.pickReceipt(mq)
	m, want := mc.lease(mq, r)
	if mc.expect(want, mq.q.Ack(ctx(mc.t), r), "Ack "+string(r)) {
		delete(mq.msgs, m.id)
		mq.c.acked++
	}
}

func (mc *modelCheck) cause() (reason string, code uint32, public string, cause error) {
	cs := classifiedCauses()
	c := cs[mc.rng.IntN(len(cs))]
	return c.reason, c.code, c.public, c.cause
}

func (mc *modelCheck) die(mq *mQueue, m *mMsg, reason string, code uint32, public string) {
	m.state, m.failedAt, m.reason, m.code, m.cause, m.receipt, m.at = mDead, mc.now(), reason, code, public, "", 0
	m.byLapse = false
	mq.c.deadLettered++
}

func (mc *modelCheck) nack(mq *mQueue) {
	r := mc.pickReceipt(mq)
	reason, code, public, cause := mc.cause()
	m, want := mc.lease(mq, r)
	nv, err := mq.q.Nack(ctx(mc.t), r, cause)
	if !mc.expect(want, err, fmt.Sprintf("Nack(%v)", cause)) {
		return
	}
	mq.c.nacked++
	wantNV := broker.NackValue{Deliveries: m.deliveries}
	if m.deliveries >= mq.pol.MaxDeliveries {
		wantNV.DeadLettered = true
		mc.die(mq, m, reason, code, public)
	} else {
		m.state, m.receipt, m.at = mReady, "", mc.now()+int64(retryDelay(mq.pol, m.deliveries))
		m.reason, m.code, m.cause = reason, code, public // its last failure, should its last lease lapse
		wantNV.VisibleAt = time.Unix(0, m.at)
		mc.fire(mq)
	}
	require.Equal(mc.t, wantNV.Deliveries, nv.Deliveries)
	require.Equal(mc.t, wantNV.DeadLettered, nv.DeadLettered)
	require.Equal(mc.t, wantNV.VisibleAt.IsZero(), nv.VisibleAt.IsZero(), "VisibleAt is zero exactly when dead-lettered")
	if !nv.DeadLettered {
		require.Equal(mc.t, wantNV.VisibleAt.UnixNano(), nv.VisibleAt.UnixNano(), "VisibleAt")
	}
}

func (mc *modelCheck) reject(mq *mQueue) {
	r := mc.pickReceipt(mq)
	reason, code, public, cause := mc.cause()
	m, want := mc.lease(mq, r)
	if mc.expect(want, mq.q.Reject(ctx(mc.t), r, cause), fmt.Sprintf("Reject(%v)", cause)) {
		mq.c.rejected++
		mc.die(mq, m, reason, code, public)
	}
}

func (mc *modelCheck) extend(mq *mQueue) {
	r := mc.pickReceipt(mq)
	by := time.Duration(1 + mc.rng.Int64N(int64(2*mq.pol.VisibilityTimeout)))
	switch mc.rng.IntN(20) {
	case 0:
		by = 0
	case 1:
		by = -time.Second
	case 2:
		by = math.MaxInt64
	}
	m, want := mc.lease(mq, r)
	switch {
	case by <= 0:
		want = "QUEUE_MISCONFIGURED"
	case want == "ok" && mc.now() > math.MaxInt64-int64(by):
		want = "QUEUE_MISCONFIGURED" // refused, and the lease held stays valid
	}
	l, err := mq.q.Extend(ctx(mc.t), r, by)
	if mc.expect(want, err, fmt.Sprintf("Extend(%v)", by)) {
		_, reused := mc.owner[l.Receipt]
		require.False(mc.t, reused, "Extend returns a receipt never issued before")
		if mc.now()+int64(by) < m.at {
			mc.fire(mq) // the lease lapses sooner than a waiting consumer was told
		}
		m.at, m.receipt = mc.now()+int64(by), l.Receipt
		require.Equal(mc.t, m.at, l.ExpiresAt.UnixNano(), "Extend: ExpiresAt is now + by")
		mc.owner[l.Receipt] = mq.name
		mq.receipts = append(mq.receipts, l.Receipt)
	}
}

// pickID returns a message ID to replay or delete: mostly a dead letter's.
func (mc *modelCheck) pickID(mq *mQueue) string {
	var dead []string
	for _, m := range mq.msgs {
		if m.state == mDead {
			dead = append(dead, m.id)
		}
	}
	slices.Sort(dead)
	r := mc.rng.IntN(10)
	switch {
	case r < 6 && len(dead) > 0:
		return dead[mc.rng.IntN(len(dead))]
	case r < 8:
		all := append(append([]string(nil), mc.qs[0].minted...), mc.qs[1].minted...)
		if len(all) > 0 {
			return all[mc.rng.IntN(len(all))]
		}
	}
	return []string{"", "nope", "0000000000000000"}[mc.rng.IntN(3)]
}

func (mc *modelCheck) replay(mq *mQueue) {
	id := mc.pickID(mq)
	err := mq.q.ReplayDeadLetter(ctx(mc.t), id)
	m := mq.msgs[id]
	if m == nil || m.state != mDead {
		mc.expect("DEAD_LETTER_NOT_FOUND", err, "Replay "+id)
		return
	}
	if mq.pol.Capacity > 0 && mq.live() >= mq.pol.Capacity {
		// Not a publish: it counts in no Shed.
		mc.expect("QUEUE_FULL", err, fmt.Sprintf("Replay %s live=%d", id, mq.live()))
		return
	}
	if mc.expect("ok", err, "Replay "+id) {
		m.state, m.deliveries, m.at, m.failedAt, m.reason, m.code, m.cause = mReady, 0, 0, 0, "", 0, ""
		mq.c.replayed++
		mc.fire(mq)
	}
}

func (mc *modelCheck) delete(mq *mQueue) {
	id := mc.pickID(mq)
	err := mq.q.DeleteDeadLetter(ctx(mc.t), id)
	m := mq.msgs[id]
	if m == nil || m.state != mDead {
		mc.expect("DEAD_LETTER_NOT_FOUND", err, "Delete "+id)
		return
	}
	if mc.expect("ok", err, "Delete "+id) {
		delete(mq.msgs, id)
	}
}

func (mc *modelCheck) deadLetters(mq *mQueue) {
	max := 1 + mc.rng.IntN(5)
	if mc.rng.IntN(20) == 0 {
		max = -mc.rng.IntN(2)
	}
	dls, err := mq.q.DeadLetters(ctx(mc.t), max)
	if max <= 0 {
		mc.expect("INVALID_BATCH_SIZE", err, fmt.Sprintf("DeadLetters(%d)", max))
		return
	}
	if !mc.expect("ok", err, fmt.Sprintf("DeadLetters(%d)", max)) {
		return
	}
	var dead []*mMsg
	for _, m := range mq.msgs {
		if m.state == mDead {
			dead = append(dead, m)
		}
	}
	slices.SortFunc(dead, func(a, b *mMsg) int { return cmpInt(a.failedAt, b.failedAt) })
	require.Len(mc.t, dls, min(max, len(dead)), "DeadLetters: how many")
	seen := map[string]bool{}
	for i, dl := range dls {
		// Oldest FailedAt first; among equal FailedAt any order will do.
		require.Equal(mc.t, dead[i].failedAt, dl.FailedAt.UnixNano(), "FailedAt of dead letter %d", i)
		m := mq.msgs[dl.Message.ID]
		require.NotNil(mc.t, m, "dead letter %s is not one", dl.Message.ID)
		require.False(mc.t, seen[m.id])
		seen[m.id] = true
		require.Equal(mc.t, mDead, m.state, "dead letter %s", m.id)
		require.Equal(mc.t, []any{m.failedAt, m.reason, m.code, m.cause, m.deliveries, m.enq},
			[]any{dl.FailedAt.UnixNano(), dl.Reason, dl.Code, dl.Cause, dl.Deliveries, dl.Message.EnqueuedAt.UnixNano()},
			"dead letter %s: FailedAt, Reason, Code, Cause, Deliveries, EnqueuedAt", m.id)
		require.True(mc.t, bytes.Equal(m.payload, dl.Message.Payload), "dead letter payload")
	}
}

// wake checks Wake's answer: Scheduled with In zero when a message is
// receivable now; else Scheduled at the earliest end of a retry delay or
// lapse of a lease with deliveries left (a last lease that lapses makes a
// dead letter, never a receivable message); else not Scheduled. Its
// signal is open, and is watched from then on (checkWake).
func (mc *modelCheck) wake(mq *mQueue) {
	now := mc.now()
	w := mq.q.Wake()
	want := "not scheduled"
	if len(mq.receivable(now)) > 0 {
		want = "in 0s"
	} else {
		next := int64(math.MaxInt64)
		for _, m := range mq.msgs {
			due := m.state == mReady || m.state == mLeased && m.deliveries < mq.pol.MaxDeliveries
			if due && m.at > now {
				next = min(next, m.at)
			}
		}
		if next != math.MaxInt64 {
			want = "in " + time.Duration(next-now).String()
		}
	}
	got := "not scheduled"
	if w.Scheduled {
		got = "in " + w.In.String()
	}
	mc.outcomes["Wake "+strings.Fields(want)[0]]++
	mc.logf("  Wake -> %s", got)
	require.Equal(mc.t, want, got, "Wake")
	require.NotNil(mc.t, w.Signal, "Wake's signal")
	require.False(mc.t, isClosed(w.Signal), "Wake handed out a signal closed already")
	mq.wake = &mWake{signal: w.Signal}
}

// checkWake requires the queue's wake signal to be closed exactly when an
// event that must close it happened since Wake handed it out; one seen
// closed is let go.
func (mc *modelCheck) checkWake(mq *mQueue, step int) {
	if mq.wake == nil {
		return
	}
	c := isClosed(mq.wake.signal)
	require.Equal(mc.t, mq.wake.fired, c, "step %d %s: the wake signal is closed (true) or open (false); the model says otherwise", step, mq.name)
	if c {
		mq.wake = nil
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// policy declares the queue again with another policy, now and then one
// Validate refuses (which changes nothing). A change judges every later
// call by the new policy: what is leased or delayed keeps its instant; a
// message not leased (ready, delayed, or back from a lapsed lease) that
// the new MaxDeliveries leaves no delivery is dead-lettered at the
// declaration, with its last failure, else LEASE_EXPIRED (docs/DESIGN.md,
// "A policy change keeps the dead letters the old policy made").
func (mc *modelCheck) policy(mq *mQueue) {
	p := mc.randomPolicy()
	if mc.rng.IntN(10) == 0 {
		p.MaxDeliveries = 0
	}
	now := mc.now()
	q, err := mc.e.s.Queue(mq.name, p)
	want := "ok"
	if p.MaxDeliveries == 0 {
		want = "QUEUE_MISCONFIGURED"
	}
	if !mc.expect(want, err, fmt.Sprintf("Queue(%s, %+v)", mq.name, p)) {
		return
	}
	require.Same(mc.t, mq.q, q, "a queue declared again is the same *Queue")
	if p == mq.pol {
		return
	}
	var ids []string
	for _, m := range mq.msgs {
		if (m.state == mReady || m.state == mLeased && m.at <= now) && m.deliveries >= p.MaxDeliveries {
			ids = append(ids, m.id)
		}
	}
	for _, id := range ids {
		m := mq.msgs[id]
		reason, code, public := m.reason, m.code, m.cause
		if reason == "" {
			reason, code, public = broker.ReasonLeaseExpired, 0, ""
		}
		mc.die(mq, m, reason, code, public)
		mc.logf("    %s dead-lettered by the change, %d deliveries", id, m.deliveries)
	}
	mq.pol = p
	mc.fire(mq)
}
