package fuzz

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// The operations of FuzzBrokerDifferential: each calls the store, asks the
// model what the answer must be, compares, and moves the model on.

// admit records a message the store took.
func (s *twin) admit(qi int, mv broker.MessageValue, p []byte, now int64, key string) {
	s.t.Helper()
	mq := s.m.qs[qi]
	seq, ok := parseID(mv.ID)
	s.check(ok, "message ID %q is not 16 lowercase hex digits", mv.ID)
	s.check(seq > s.m.lastSeq, "message ID %s is not above every ID handed out before (%016x): IDs are never reused", mv.ID, s.m.lastSeq)
	s.check(mv.EnqueuedAt.UnixNano() == now, "EnqueuedAt %s of %s is not the broker clock %s", rel(mv.EnqueuedAt.UnixNano()), mv.ID, rel(now))
	s.check(string(mv.Payload) == string(p), "the published payload of %s comes back otherwise", mv.ID)
	s.m.lastSeq = seq
	s.m.minted = append(s.m.minted, mv.ID)
	mq.msgs[mv.ID] = &mMsg{id: mv.ID, seq: seq, payload: append([]byte(nil), p...), enq: now, state: mReady, at: atOnce}
	mq.evictClock = max(mq.evictClock, now)
	mq.c.published++
	s.fireWake(qi)
	if key != "" {
		mq.seen[key] = mKey{id: mv.ID, enq: now}
	}
	s.logf("    minted %s", mv.ID)
}

// admission is the verdict on a publish of n messages that got past its
// payload checks: ok, or QUEUE_FULL.
func (s *twin) admission(qi, n int, now int64) string {
	mq := s.m.qs[qi]
	mq.observe(now)
	if mq.pol.Capacity > 0 && mq.live()+n > mq.pol.Capacity {
		mq.c.shed++
		return "QUEUE_FULL"
	}
	return "ok"
}

func (s *twin) publish(qi, n int) {
	mq := s.m.qs[qi]
	p := s.payload(n)
	now := s.now()
	mv, err := s.qs[qi].Publish(context.Background(), p)
	want := "MESSAGE_TOO_LARGE"
	if len(p) <= mq.pol.MaxMessageBytes {
		want = s.admission(qi, 1, now)
	}
	if s.expect(want, err, fmt.Sprintf("%s.Publish(%d bytes) live=%d", mq.name, n, mq.live())) {
		s.admit(qi, mv, p, now, "")
		s.durable()
	}
}

func (s *twin) publishKeyed(qi int, key string, n int) {
	mq := s.m.qs[qi]
	p := s.payload(n)
	now := s.now()
	mv, err := s.qs[qi].PublishKeyed(context.Background(), key, p)
	what := fmt.Sprintf("%s.PublishKeyed(%.8q, %d bytes) live=%d", mq.name, key, n, mq.live())
	switch {
	case len(key) == 0 || len(key) > 256:
		s.expect("INVALID_DEDUP_KEY", err, what)
		return
	case len(p) > mq.pol.MaxMessageBytes:
		s.expect("MESSAGE_TOO_LARGE", err, what)
		return
	}
	mq.evict(now)
	// Past its payload checks a publish looks at the queue, a duplicate
	// too: it observes the deadlines passed by now.
	mq.observe(now)
	if k, ok := mq.seen[key]; ok {
		if s.expect("ok", err, what+" duplicate") {
			s.check(mv.ID == k.id && mv.EnqueuedAt.UnixNano() == k.enq, "%s: a duplicate returns %s@%s, not the original %s@%s",
				what, mv.ID, rel(mv.EnqueuedAt.UnixNano()), k.id, rel(k.enq))
			s.check(len(mv.Payload) == 0, "%s: a duplicate carries a payload", what)
			mq.c.duplicates++
		}
		return
	}
	if s.expect(s.admission(qi, 1, now), err, what) {
		s.admit(qi, mv, p, now, key)
		s.durable()
	}
}

func (s *twin) publishBatch(qi, n int, size byte) {
	mq := s.m.qs[qi]
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = (int(size) + 11*i) % (mq.pol.MaxMessageBytes + 1)
		if size >= 224 && i == n-1 {
			sizes[i] = mq.pol.MaxMessageBytes + 1 + int(size)%4
		}
	}
	s.publishSizes(qi, sizes)
}

// publishSizes publishes a batch of payloads of these sizes.
func (s *twin) publishSizes(qi int, sizes []int) {
	mq := s.m.qs[qi]
	n := len(sizes)
	ps := make([][]byte, n)
	tooLarge := false
	for i, l := range sizes {
		ps[i] = s.payload(l)
		tooLarge = tooLarge || l > mq.pol.MaxMessageBytes
	}
	now := s.now()
	ms, err := s.qs[qi].PublishBatch(context.Background(), ps)
	var want string
	switch {
	case n == 0:
		want = "INVALID_BATCH_SIZE"
	case tooLarge:
		want = "MESSAGE_TOO_LARGE"
	default:
		want = s.admission(qi, n, now)
	}
	if s.expect(want, err, fmt.Sprintf("%s.PublishBatch(%d) live=%d", mq.name, n, mq.live())) {
		s.check(len(ms) == n, "PublishBatch of %d returned %d messages", n, len(ms))
		for i, mv := range ms {
			s.admit(qi, mv, ps[i], now, "")
		}
		s.durable()
	}
}

// receive receives up to n messages and returns their receipts.
func (s *twin) receive(qi, n int) []broker.ReceiptValue {
	mq := s.m.qs[qi]
	now := s.now()
	ds, err := s.qs[qi].Receive(context.Background(), n)
	what := fmt.Sprintf("%s.Receive(%d)", mq.name, n)
	if n <= 0 {
		s.expect("INVALID_BATCH_SIZE", err, what)
		return nil
	}
	if now > math.MaxInt64-int64(mq.pol.VisibilityTimeout) {
		// A lease deadline past year 2262 cannot be recorded: the
		// Receive is refused before it looks at anything, leasing and
		// observing nothing, whatever the queue holds.
		s.expect("QUEUE_MISCONFIGURED", err, what)
		return nil
	}
	mq.sweep(now)
	want := mq.receivable()
	want = want[:min(n, len(want))]
	if !s.expect("ok", err, what) {
		return nil
	}
	s.checkIDs(what+" delivered", "oldest EnqueuedAt, then ID", len(ds), func(i int) string { return ds[i].Message.ID }, want)
	for i, d := range ds {
		s.lease(qi, want[i], now, &d)
	}
	var rs []broker.ReceiptValue
	for _, d := range ds {
		rs = append(rs, d.Lease.Receipt)
	}
	return rs
}

// lease leases m at now, as a Receive that delivered d: it checks the
// delivery against the model. A nil d is a lease the model knows of but
// no one saw (see consume), whose receipt is not known.
func (s *twin) lease(qi int, m *mMsg, now int64, d *broker.DeliveryValue) {
	s.t.Helper()
	mq := s.m.qs[qi]
	m.state, m.deliveries, m.at, m.seen, m.seenBy, m.receipt = mLeased, m.deliveries+1, now+int64(mq.pol.VisibilityTimeout), false, "", ""
	mq.c.delivered++
	if d == nil {
		s.logf("    leased %s #%d until %s, unseen", m.id, m.deliveries, rel(m.at))
		return
	}
	s.check(d.Deliveries == m.deliveries, "%s: delivery %d, the model says %d", m.id, d.Deliveries, m.deliveries)
	s.check(d.Lease.ExpiresAt.UnixNano() == m.at, "%s: lease expires at %s, the model says %s", m.id, rel(d.Lease.ExpiresAt.UnixNano()), rel(m.at))
	s.check(d.Message.EnqueuedAt.UnixNano() == m.enq, "%s: EnqueuedAt %s, published at %s", m.id, rel(d.Message.EnqueuedAt.UnixNano()), rel(m.enq))
	s.check(string(d.Message.Payload) == string(m.payload), "%s: the payload delivered is not the one published", m.id)
	r := d.Lease.Receipt
	_, reused := s.m.owner[r]
	s.check(r != "" && !reused, "%s: receipt %q is empty or was issued before", m.id, r)
	m.receipt = r
	s.m.owner[r] = qi
	mq.receipts = append(mq.receipts, r)
	s.logf("    leased %s #%d until %s", m.id, m.deliveries, rel(m.at))
}

// checkIDs checks that the broker handed over exactly the messages the
// model lists in want, in the model's order (named by order): n IDs, the
// i-th of them id(i). what says which call handed them over.
func (s *twin) checkIDs(what, order string, n int, id func(i int) string, want []*mMsg) {
	s.t.Helper()
	got := make([]string, n)
	for i := range got {
		got[i] = id(i)
	}
	wantIDs := make([]string, len(want))
	for i, m := range want {
		wantIDs[i] = m.id
	}
	s.check(strings.Join(got, ",") == strings.Join(wantIDs, ","), "%s [%s], the model says [%s] (%s)",
		what, strings.Join(got, " "), strings.Join(wantIDs, " "), order)
}

// churn receives and acknowledges up to n messages, publishes a batch of n
// nearly full-sized ones, and receives and acknowledges n again: a few KiB
// of log in one operation, so that runs rotate segments, checkpoint, copy
// forward and reclaim.
func (s *twin) churn(qi, n int) {
	drain := func() {
		for _, r := range s.receive(qi, n) {
			s.ackReceipt(qi, r)
		}
	}
	drain()
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = s.m.qs[qi].pol.MaxMessageBytes - i%5
	}
	s.publishSizes(qi, sizes)
	drain()
}

// pickReceipt returns a receipt to settle with: mostly a live lease's,
// sometimes an old one, another queue's, a garbled one or none.
func (s *twin) pickReceipt(qi int, sel byte) broker.ReceiptValue {
	mq := s.m.qs[qi]
	idx := int(sel >> 3)
	switch sel & 7 {
	case 0, 1, 2, 3, 4:
		var live []*mMsg
		for _, m := range mq.msgs {
			if m.state == mLeased {
				live = append(live, m)
			}
		}
		if len(live) > 0 {
			sortBySeq(live)
			return live[idx%len(live)].receipt
		}
	case 5:
		if len(mq.receipts) > 0 {
			return mq.receipts[idx%len(mq.receipts)]
		}
	case 6:
		if other := s.m.qs[1-qi]; len(other.receipts) > 0 {
			return other.receipts[idx%len(other.receipts)]
		}
	case 7:
		if len(mq.receipts) > 0 {
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
			g := []byte(mq.receipts[idx%len(mq.receipts)])
			i := idx % (len(g) - 1) // not the last character: it may carry only padding bits
			g[i] = alphabet[(strings.IndexByte(alphabet, g[i])+1+idx%60)%64]
			return broker.ReceiptValue(g)
		}
	}
	return broker.ReceiptValue([]string{"", "garbage", "AQEAAAAB"}[idx%3])
}

func sortBySeq(ms []*mMsg) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].seq < ms[j-1].seq; j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

func (s *twin) ack(qi int, sel byte) { s.ackReceipt(qi, s.pickReceipt(qi, sel)) }

func (s *twin) ackReceipt(qi int, r broker.ReceiptValue) {
	mq := s.m.qs[qi]
	now := s.now()
	m, want := s.m.settle(qi, r, now)
	if s.expect(want, s.qs[qi].Ack(context.Background(), r), fmt.Sprintf("%s.Ack(%.12s)", mq.name, r)) {
		delete(mq.msgs, m.id)
		mq.c.acked++
	}
}

func (s *twin) nack(qi int, sel, csel byte) {
	mq := s.m.qs[qi]
	r := s.pickReceipt(qi, sel)
	c := causes[int(csel)%len(causes)]
	now := s.now()
	m, want := s.m.settle(qi, r, now)
	nv, err := s.qs[qi].Nack(context.Background(), r, c.err)
	if !s.expect(want, err, fmt.Sprintf("%s.Nack(%.12s, %v)", mq.name, r, c.err)) {
		return
	}
	dead, at := s.retry(qi, m, now, c.reason, c.code, c.public)
	if dead {
		s.check(nv.Deliveries == m.deliveries && nv.DeadLettered && nv.VisibleAt.IsZero(),
			"Nack of %s on its last delivery %d: got %+v, want a dead letter", m.id, m.deliveries, nv)
		return
	}
	s.check(nv.Deliveries == m.deliveries && !nv.DeadLettered && nv.VisibleAt.UnixNano() == at,
		"Nack of %s after delivery %d: got %+v, want visible at %s", m.id, m.deliveries, nv, rel(at))
	s.fireWake(qi)
}

// retry is what a Nack of m's live lease at now does, for a cause the dead
// letter would record as reason, code and public: on its last delivery m
// goes to the dead letters; otherwise it waits out the retry delay. It
// reports whether m died, and if not when it is visible again.
func (s *twin) retry(qi int, m *mMsg, now int64, reason string, code uint32, public string) (dead bool, visible int64) {
	mq := s.m.qs[qi]
	mq.c.nacked++
	if m.deliveries >= mq.pol.MaxDeliveries {
		s.die(qi, m, now, reason, code, public)
		return true, 0
	}
	delay := retryDelay(mq.pol, m.deliveries)
	at := now + int64(delay)
	m.state, m.at, m.seen, m.seenBy, m.receipt = mReady, at, false, "", ""
	// Its last failure: should its last lease lapse, the dead letter
	// records it (DeadLetterValue.Reason).
	m.reason, m.code, m.cause = reason, code, public
	if delay == 0 {
		m.at = atOnce // whatever the clock reads next (docs/DESIGN.md, "Time")
	}
	return false, at
}

// die moves m to the dead letters.
func (s *twin) die(qi int, m *mMsg, now int64, reason string, code uint32, public string) {
	m.state, m.failedAt, m.reason, m.code, m.cause = mDead, now, reason, code, public
	m.at, m.seen, m.seenBy, m.receipt = 0, false, "", ""
	s.m.qs[qi].c.deadLettered++
}

func (s *twin) reject(qi int, sel, csel byte) {
	mq := s.m.qs[qi]
	r := s.pickReceipt(qi, sel)
	c := causes[int(csel)%len(causes)]
	now := s.now()
	m, want := s.m.settle(qi, r, now)
	if s.expect(want, s.qs[qi].Reject(context.Background(), r, c.err), fmt.Sprintf("%s.Reject(%.12s, %v)", mq.name, r, c.err)) {
		mq.c.rejected++
		s.die(qi, m, now, c.reason, c.code, c.public)
	}
}

func (s *twin) extend(qi int, sel, bsel byte) {
	mq := s.m.qs[qi]
	r := s.pickReceipt(qi, sel)
	bys := extendBys
	if s.more {
		bys = extendBysMore
	}
	by := bys[int(bsel)%len(bys)]
	now := s.now()
	what := fmt.Sprintf("%s.Extend(%.12s, %v)", mq.name, r, by)
	if by <= 0 {
		_, err := s.qs[qi].Extend(context.Background(), r, by)
		s.expect("QUEUE_MISCONFIGURED", err, what)
		return
	}
	m, want := s.m.settle(qi, r, now)
	if want == "ok" && now > math.MaxInt64-int64(by) {
		// A deadline past year 2262 is refused once the receipt is
		// found good, and the lease stays as it was (LeaseExtender).
		want = "QUEUE_MISCONFIGURED"
	}
	lv, err := s.qs[qi].Extend(context.Background(), r, by)
	if !s.expect(want, err, what) {
		return
	}
	if now+int64(by) < m.at {
		s.fireWake(qi) // the lease lapses sooner than a waiting consumer was told
	}
	_, reused := s.m.owner[lv.Receipt]
	s.check(lv.Receipt != "" && !reused, "Extend of %s returned receipt %q, empty or issued before", m.id, lv.Receipt)
	s.check(lv.ExpiresAt.UnixNano() == now+int64(by), "Extend of %s: expires at %s, want %s", m.id, rel(lv.ExpiresAt.UnixNano()), rel(now+int64(by)))
	m.at, m.receipt, m.seen, m.seenBy = now+int64(by), lv.Receipt, false, ""
	s.m.owner[lv.Receipt] = qi
	mq.receipts = append(mq.receipts, lv.Receipt)
}

// pickID returns a message ID to replay or delete: mostly one of a dead
// letter or a message on its way there, sometimes any, sometimes none.
func (s *twin) pickID(qi int, sel byte) string {
	mq := s.m.qs[qi]
	idx := int(sel >> 2)
	switch sel & 3 {
	case 0, 1:
		var cands []*mMsg
		for _, m := range mq.msgs {
			if m.state == mDead || m.state == mLeased && mq.final(m) {
				cands = append(cands, m)
			}
		}
		if len(cands) > 0 {
			sortBySeq(cands)
			return cands[idx%len(cands)].id
		}
	case 2:
		if len(s.m.minted) > 0 {
			return s.m.minted[idx%len(s.m.minted)]
		}
	}
	return bogusIDs[idx%len(bogusIDs)]
}

func (s *twin) changeDead(qi int, sel byte, replay bool) {
	mq := s.m.qs[qi]
	id := s.pickID(qi, sel)
	now := s.now()
	var err error
	what := fmt.Sprintf("%s.DeleteDeadLetter(%q)", mq.name, id)
	if replay {
		err = s.qs[qi].ReplayDeadLetter(context.Background(), id)
		what = fmt.Sprintf("%s.ReplayDeadLetter(%q)", mq.name, id)
	} else {
		err = s.qs[qi].DeleteDeadLetter(context.Background(), id)
	}
	mq.sweep(now)
	m := mq.msgs[id]
	if m == nil || m.state != mDead {
		s.expect("DEAD_LETTER_NOT_FOUND", err, what)
		return
	}
	if replay && mq.pol.Capacity > 0 && mq.live() >= mq.pol.Capacity {
		s.expect("QUEUE_FULL", err, what)
		return
	}
	if !s.expect("ok", err, what) {
		return
	}
	if !replay {
		delete(mq.msgs, id)
		return
	}
	m.state, m.deliveries, m.at, m.seen, m.seenBy = mReady, 0, atOnce, false, ""
	m.failedAt, m.reason, m.code, m.cause = 0, "", 0, ""
	mq.c.replayed++
	s.fireWake(qi)
}

func (s *twin) deadLetters(qi, n int) {
	mq := s.m.qs[qi]
	now := s.now()
	dls, err := s.qs[qi].DeadLetters(context.Background(), n)
	what := fmt.Sprintf("%s.DeadLetters(%d)", mq.name, n)
	if n <= 0 {
		s.expect("INVALID_BATCH_SIZE", err, what)
		return
	}
	mq.sweep(now)
	want := mq.dead()
	want = want[:min(n, len(want))]
	if !s.expect("ok", err, what) {
		return
	}
	s.checkIDs(what+" listed", "oldest FailedAt, then ID", len(dls), func(i int) string { return dls[i].Message.ID }, want)
	for i, d := range dls {
		m := want[i]
		gotF := fmt.Sprintf("failed %s %q code %#x cause %q deliveries %d enqueued %s", rel(d.FailedAt.UnixNano()), d.Reason, d.Code, d.Cause, d.Deliveries, rel(d.Message.EnqueuedAt.UnixNano()))
		wantF := fmt.Sprintf("failed %s %q code %#x cause %q deliveries %d enqueued %s", rel(m.failedAt), m.reason, m.code, m.cause, m.deliveries, rel(m.enq))
		s.check(gotF == wantF, "dead letter %s: %s, the model says %s", m.id, gotF, wantF)
		s.check(string(d.Message.Payload) == string(m.payload), "dead letter %s: the payload is not the one published", m.id)
	}
}

// stats compares both queues' gauges (OldestReady among them) and
// counters.
func (s *twin) stats() {
	now := s.now()
	for qi, mq := range s.m.qs {
		st := s.qs[qi].Stats()
		mq.observe(now)
		g := mq.gauges()
		exhausted := int64(0)
		for _, m := range mq.msgs {
			if mq.exhausted(m) && !m.diedBeforeOpen() {
				exhausted++
			}
		}
		// OldestReady: the EnqueuedAt of the message Receive hands out
		// next, or the zero Time when none is receivable.
		oldest, wantOldest := "none", "none"
		if !st.OldestReady.IsZero() {
			oldest = rel(st.OldestReady.UnixNano())
		}
		if r := mq.receivable(); len(r) > 0 {
			wantOldest = rel(r[0].enq)
		}
		got := fmt.Sprintf("oldest %s ready %d leased %d delayed %d dead %d; published %d duplicates %d shed %d delivered %d acked %d nacked %d rejected %d deadLettered %d replayed %d",
			oldest, st.Ready, st.Leased, st.Delayed, st.DeadLetters, st.Published, st.Duplicates, st.Shed, st.Delivered, st.Acked, st.Nacked, st.Rejected, st.DeadLettered, st.Replayed)
		c := mq.c
		want := fmt.Sprintf("oldest %s ready %d leased %d delayed %d dead %d; published %d duplicates %d shed %d delivered %d acked %d nacked %d rejected %d deadLettered %d replayed %d",
			wantOldest, g[0], g[1], g[2], g[3], c.published, c.duplicates, c.shed, c.delivered, c.acked, c.nacked, c.rejected, c.deadLettered+exhausted, c.replayed)
		s.logf("  %s.Stats: %s", mq.name, got)
		s.check(got == want, "%s.Stats:\n  got   %s\n  model %s", mq.name, got, want)
	}
}

// setPolicy declares the queue again with one of policyChoices. A refused
// policy changes nothing; the same policy does nothing; another one is a
// change (docs/DESIGN.md, "A policy change keeps the dead letters the old
// policy made"): the queue is swept under the old policy first (the last
// leases that lapsed are dead letters), a message not leased (ready,
// delayed, or seen to lapse with deliveries left) that the new
// MaxDeliveries has no delivery left for is dead-lettered at the
// declaration (its last failure, else LEASE_EXPIRED; its count), and every
// later call judges by the new policy (what is leased or delayed keeps its
// instant; a lease now on its last delivery dies when it lapses). Queue
// declarations are fdatasynced whatever the sync mode, and with them all
// that came before.
func (s *twin) setPolicy(qi int, sel byte) { s.declare(qi, sel) }

// declare is setPolicy's declaration, also that of the first handle on a
// queue the store opened (s.qs[qi] nil), which it then sets.
func (s *twin) declare(qi int, sel byte) {
	mq := s.m.qs[qi]
	i := int(sel) % len(policyChoices[qi])
	p := policyChoices[qi][i]
	now := s.now()
	q, err := s.store.Queue(mq.name, p)
	want := "ok"
	if i == invalidPolicy {
		want = "QUEUE_MISCONFIGURED"
	}
	if !s.expect(want, err, fmt.Sprintf("Queue(%s, policy %d)", mq.name, i)) {
		return
	}
	if s.qs[qi] == nil {
		s.qs[qi] = q
	}
	s.check(q == s.qs[qi], "Queue(%s) with a new policy returned another *Queue", mq.name)
	if p == mq.pol {
		return
	}
	mq.sweep(now)
	// The declaration is the change's commit point, and is fdatasynced;
	// under SyncPublish the dead letters that follow it in the log are
	// not, and a power loss may keep it without them: then the messages
	// they give up on are ready again, spent (see model.restart).
	var cut []mMsg
	for _, m := range mq.msgs {
		// Not leased (ready, delayed, or back from a lapsed lease) and
		// out of deliveries under the new MaxDeliveries: dead now.
		if (m.state == mReady || m.state == mLeased && m.seen) && m.deliveries >= p.MaxDeliveries {
			before := *m
			before.state, before.seen, before.seenBy, before.receipt = mReady, false, "", ""
			cut = append(cut, before)
			reason, code, public := m.reason, m.code, m.cause
			if reason == "" {
				reason, code, public = broker.ReasonLeaseExpired, 0, ""
			}
			s.die(qi, m, now, reason, code, public)
			s.logf("    %s dead-lettered by the policy change, %d deliveries", m.id, m.deliveries)
		}
	}
	mq.pol = p
	s.fireWake(qi)
	s.durable()
	if s.trail != nil && len(cut) > 0 {
		c := s.m.clone()
		for _, m := range cut {
			*c.qs[qi].msgs[m.id] = m
		}
		s.trail.states = append(s.trail.states, c)
	}
}

// moveClock sets the clock forward (back) by the chosen amount; the
// negative entries of the tables name targets the model knows.
func (s *twin) moveClock(sel byte, back bool) {
	now := s.now()
	to := now
	if back {
		switch by := backBys[int(sel)%len(backBys)]; by {
		case -1: // just before the latest deadline a call observed
			if at, ok := s.m.lastPassed(now); ok {
				to = at - 1
			}
		default:
			to = now - int64(by)
		}
		to = max(to, s.floor)
		if tolerated("copy-lapse") {
			// What was observed would depend on whether a copy forward
			// ran meanwhile: stay at or after every observed deadline.
			if at, ok := s.m.lastPassed(now); ok {
				to = max(to, at)
			}
		}
	} else {
		switch by := forwardBys[int(sel)%len(forwardBys)]; by {
		case -1, -2: // the next deadline, or just before it
			if at, ok := s.m.nextDeadline(now); ok {
				to = at + int64(by+1)
			}
		case -3, -4: // the last instant a key is remembered, or the first it is not
			if at, ok := s.m.nextDedupEdge(now); ok {
				to = at - int64(by+3)
			}
		default:
			to = now + int64(by)
		}
	}
	s.clock.ns.Store(to)
	s.logf("  clock %+v -> %s", time.Duration(to-now), rel(to))
}

// run applies one decoded operation.
func (s *twin) run(o op) {
	a, b := o.a, o.b
	mq := s.m.qs[o.q]
	switch o.kind {
	case opPublish:
		s.publish(o.q, int(a)%(mq.pol.MaxMessageBytes+9))
	case opPublishKeyed:
		s.publishKeyed(o.q, dedupKeys[int(a)%len(dedupKeys)], int(b)%(mq.pol.MaxMessageBytes+9))
	case opPublishBatch:
		s.publishBatch(o.q, int(a)%6, b)
	case opReceive:
		s.receive(o.q, int(a)%6)
	case opAck:
		s.ack(o.q, a)
	case opNack:
		s.nack(o.q, a, b)
	case opReject:
		s.reject(o.q, a, b)
	case opExtend:
		s.extend(o.q, a, b)
	case opReplay:
		s.changeDead(o.q, a, true)
	case opDelete:
		s.changeDead(o.q, a, false)
	case opDeadLetters:
		s.deadLetters(o.q, int(a)%8)
	case opChurn:
		s.churn(o.q, 1+int(a)%cmp.Or(mq.pol.Capacity, churnUnbounded))
	case opPolicy:
		s.setPolicy(o.q, a)
	case opConsume:
		s.consume(o.q, a, b)
	case opWake:
		s.wake(o.q)
	case opForward:
		s.moveClock(a, false)
	case opBack:
		s.moveClock(a, true)
	default:
		s.stats()
	}
}

// walkDeadlines sets the clock to each deadline the model knows (a lease's
// lapse, a retry delay's end), the first 64 of them, and to the instant
// before it, comparing the gauges at each: a store that holds a lease or a
// delay to another instant shows it there.
func (s *twin) walkDeadlines() {
	for range 64 {
		at, ok := s.m.nextDeadline(s.now())
		if !ok {
			return
		}
		for _, to := range []int64{at - 1, at} {
			s.clock.ns.Store(to)
			s.logf("  clock -> %s", rel(to))
			s.stats()
		}
	}
}

// audit drains what the store holds and compares all of it: the gauges,
// each key's answer, every dead letter and every receivable message, then
// at every deadline still ahead, and again once every lease and delay has
// run out. It changes the store.
func (s *twin) audit() {
	steps := []func(){s.stats}
	for qi := range s.m.qs {
		for _, k := range []string{"a", "b", "c", "d"} {
			steps = append(steps, func() { s.publishKeyed(qi, k, 3) })
		}
	}
	drain := func() {
		for qi := range s.m.qs {
			s.deadLetters(qi, 1000)
			s.receive(qi, 1000)
		}
		s.stats()
	}
	steps = append(steps, drain, s.walkDeadlines, func() {
		s.clock.ns.Add(int64(24 * time.Hour))
		s.logf("  clock +24h -> %s", rel(s.now()))
	}, s.stats, drain)
	for _, step := range steps {
		step()
	}
}
