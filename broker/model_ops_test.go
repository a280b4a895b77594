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
}

func (mc *modelCheck) publish(mq *mQueue) {
	p := mc.payload(mq)
	m, err := mq.q.Publish(ctx(mc.t), p)
	want := "ok"
	switch {
	case len(p) > mq.pol.MaxMessageBytes:
		want = "MESSAGE_TOO_LARGE"
	case mq.pol.Capacity > 0 && mq.live()+1 > mq.pol.Capacity:
		want = "QUEUE_FULL"
	}
	if mc.expect(want, err, fmt.Sprintf("Publish(%d bytes) live=%d", len(p), mq.live())) {
		mc.admit(mq, m, p)
	}
}

func (mc *modelCheck) publishKeyed(mq *mQueue) {
	key := "k" + strconv.Itoa(mc.rng.IntN(5))
	if mc.rng.IntN(30) == 0 {
		key = ""
	}
	p := mc.payload(mq)
	m, err := mq.q.PublishKeyed(ctx(mc.t), key, p)
	what := fmt.Sprintf("PublishKeyed(%q, %d bytes) live=%d lastEvict=%d", key, len(p), mq.live(), mq.lastEvict-t0.UnixNano())
	now := mc.now()
	switch {
	case key == "":
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
		}
		return
	}
	if mq.pol.Capacity > 0 && mq.live()+1 > mq.pol.Capacity {
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
	case mq.pol.Capacity > 0 && mq.live()+n > mq.pol.Capacity:
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
	}
}

func (mc *modelCheck) cause() (reason string, code uint32, public string, cause error) {
	cs := classifiedCauses()
	c := cs[mc.rng.IntN(len(cs))]
	return c.reason, c.code, c.public, c.cause
}

func (mc *modelCheck) die(m *mMsg, reason string, code uint32, public string) {
	m.state, m.failedAt, m.reason, m.code, m.cause, m.receipt, m.at = mDead, mc.now(), reason, code, public, "", 0
	m.byLapse = false
}

func (mc *modelCheck) nack(mq *mQueue) {
	r := mc.pickReceipt(mq)
	reason, code, public, cause := mc.cause()
	m, want := mc.lease(mq, r)
	nv, err := mq.q.Nack(ctx(mc.t), r, cause)
	if !mc.expect(want, err, fmt.Sprintf("Nack(%v)", cause)) {
		return
	}
	wantNV := broker.NackValue{Deliveries: m.deliveries}
	if m.deliveries >= mq.pol.MaxDeliveries {
		wantNV.DeadLettered = true
		mc.die(m, reason, code, public)
	} else {
		m.state, m.receipt, m.at = mReady, "", mc.now()+int64(retryDelay(mq.pol, m.deliveries))
		m.reason, m.code, m.cause = reason, code, public // its last failure, should its last lease lapse
		wantNV.VisibleAt = time.Unix(0, m.at)
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
		mc.die(m, reason, code, public)
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
		require.NotEqual(mc.t, r, l.Receipt, "Extend returns a new receipt")
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
		mc.expect("QUEUE_FULL", err, fmt.Sprintf("Replay %s live=%d", id, mq.live()))
		return
	}
	if mc.expect("ok", err, "Replay "+id) {
		m.state, m.deliveries, m.at, m.failedAt, m.reason, m.code, m.cause = mReady, 0, 0, 0, "", 0, ""
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
