package fuzz

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// The reference model of FuzzBrokerDifferential: the state of a store's
// queues as the contract (API.md, docs/DESIGN.md) defines it, small and
// exact. Time is an int64 of Unix nanoseconds on the broker clock.
//
// Observations. Lease lapses and retry delays take effect by the clock when
// a call looks. A call that looks at a queue (Receive, DeadLetters, replay,
// delete, Stats, and a publish that gets past its payload checks) sees
// every deadline that has come, and what it saw stays seen even if the
// clock then goes back ("a lease whose lapse a call has observed stays
// lapsed", DESIGN.md), within one process: a restart forgets it (the log
// does not record observations of time). A lease whose last allowed
// delivery lapsed is a dead letter from then on (Stats counts it, it holds
// no capacity) and is moved to the dead-letter store, failing at its
// expiry, by the next call that sweeps (Receive, DeadLetters, replay,
// delete).
//
// Known divergences of the store from this model, which
// WALBROKER_FUZZ_TOLERATE may list so that fuzzing can look past them:
// the model then follows the store where the store is deterministic
// (settle-lapse), and the clock never steps back before a deadline a call
// observed (copy-lapse, whose effect depends on when the background
// reclamation ran). Both are fixed; the store keeps every dedup clock
// reading across every restart (the former evict-restart, fixed by the
// reading each segment's preamble carries), and the model holds it to
// that with no tolerance.
//
//	settle-lapse   An Ack, Nack, Reject or Extend refused because the lease
//	               had lapsed does not count as having observed the lapse:
//	               with the clock set back before ExpiresAt the same receipt
//	               works again.
//	copy-lapse     A copy forward (background reclamation) re-applies a
//	               message's state and so forgets an observed lapse or an
//	               observed end of retry delay: with the clock set back the
//	               message is leased (or delayed) again.

// atOnce is the at of a ready message receivable at once, whatever the
// clock reads (index.AtOnce): the earliest instant, which no reading
// precedes. (Not 0: the Unix epoch is an instant like any other, which a
// run whose clock starts before it reaches; docs/DESIGN.md, "Observing
// time".)
const atOnce = math.MinInt64

type mState uint8

const (
	mReady mState = iota + 1
	mLeased
	mDead
)

func (s mState) String() string {
	return [...]string{"?", "ready", "leased", "dead"}[s]
}

// mMsg is one message of the model.
type mMsg struct {
	id         string
	seq        uint64
	payload    []byte
	enq        int64
	state      mState
	deliveries int
	// at: for a ready message, when it becomes receivable (atOnce: at
	// once);
	// for a leased one, when the lease lapses.
	at int64
	// seen: a call observed at passing (see the package comment); by
	// which: "promote" or "settle".
	seen   bool
	seenBy string
	// preOpen: a last lease that had lapsed when the store was last
	// opened. It died before the open, so its move to the dead letters
	// counts in no later process (counters are since open).
	preOpen   bool
	preOpenAt int64               // the lapse it died at; another deadline is another life
	receipt   broker.ReceiptValue // of the current lease
	// The dead letter.
	failedAt int64
	reason   string
	code     uint32
	cause    string
}

type mKey struct {
	id  string
	enq int64
}

// mCounters are a queue's counters since the store was opened.
type mCounters struct {
	published, duplicates, shed, delivered, acked, nacked, rejected, deadLettered, replayed int64
}

type mQueue struct {
	name string
	pol  broker.PolicyValue
	msgs map[string]*mMsg
	seen map[string]mKey
	// The dedup clock: the latest reading that makes "the clock went
	// backwards" (every reading of a dedup check and every enqueue
	// instant). Every restart keeps it: the log holds each reading, and
	// each segment's preamble the latest one at its start, so removing
	// old segments loses none.
	evictClock int64
	receipts   []broker.ReceiptValue // every receipt this queue issued
	c          mCounters
}

type model struct {
	qs      [2]*mQueue
	owner   map[broker.ReceiptValue]int // receipt → queue that issued it
	lastSeq uint64                      // the highest message sequence handed out
	minted  []string
}

func newModel() *model {
	m := &model{owner: map[broker.ReceiptValue]int{}}
	for i := range m.qs {
		m.qs[i] = &mQueue{name: queueNames[i], pol: queuePolicies[i], msgs: map[string]*mMsg{}, seen: map[string]mKey{},
			evictClock: math.MinInt64}
	}
	return m
}

// clone returns a deep copy, for an audit of a clone of the store.
func (m *model) clone() *model {
	c := &model{owner: maps.Clone(m.owner), lastSeq: m.lastSeq, minted: slices.Clone(m.minted)}
	for i, q := range m.qs {
		cq := *q
		cq.msgs = map[string]*mMsg{}
		for id, msg := range q.msgs {
			cm := *msg
			cq.msgs[id] = &cm
		}
		cq.seen = maps.Clone(q.seen)
		cq.receipts = slices.Clone(q.receipts)
		c.qs[i] = &cq
	}
	return c
}

// final reports whether a leased message is on its last allowed delivery.
func (q *mQueue) final(m *mMsg) bool { return m.deliveries >= q.pol.MaxDeliveries }

// diedBeforeOpen reports whether m is a last lease that had lapsed when
// the store was opened, at the same deadline still.
func (m *mMsg) diedBeforeOpen() bool { return m.preOpen && m.at == m.preOpenAt }

// exhausted reports whether m's last lease lapsed and a call saw it.
func (q *mQueue) exhausted(m *mMsg) bool { return m.state == mLeased && m.seen && q.final(m) }

// observe is a call looking at the queue at now.
func (q *mQueue) observe(now int64) {
	for _, m := range q.msgs {
		if !m.seen && (m.state == mLeased || m.state == mReady && m.at != atOnce) && m.at <= now {
			m.seen, m.seenBy = true, "promote"
		}
	}
}

// sweep observes, then moves every exhausted message to the dead letters.
func (q *mQueue) sweep(now int64) {
	q.observe(now)
	for _, m := range q.msgs {
		if q.exhausted(m) {
			if m.reason == "" { // no consumer reported anything in its life
				m.reason, m.code, m.cause = broker.ReasonLeaseExpired, 0, ""
			}
			m.state, m.failedAt = mDead, m.at
			if !m.diedBeforeOpen() {
				q.c.deadLettered++
			}
			m.at, m.seen, m.seenBy, m.receipt, m.preOpen = 0, false, "", "", false
		}
	}
}

// receivable returns what Receive hands out, oldest EnqueuedAt first.
func (q *mQueue) receivable() []*mMsg {
	var out []*mMsg
	for _, m := range q.msgs {
		if m.state == mReady && (m.at == atOnce || m.seen) || m.state == mLeased && m.seen && !q.final(m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *mMsg) int { return cmp.Or(cmp.Compare(a.enq, b.enq), cmp.Compare(a.seq, b.seq)) })
	return out
}

// dead returns the dead letters, oldest FailedAt first.
func (q *mQueue) dead() []*mMsg {
	var out []*mMsg
	for _, m := range q.msgs {
		if m.state == mDead {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *mMsg) int { return cmp.Or(cmp.Compare(a.failedAt, b.failedAt), cmp.Compare(a.seq, b.seq)) })
	return out
}

// gauges returns Ready, Leased, Delayed and DeadLetters as Stats reports
// them; the caller observed first.
func (q *mQueue) gauges() [4]int {
	var g [4]int
	g[0] = len(q.receivable())
	for _, m := range q.msgs {
		switch {
		case m.state == mDead || q.exhausted(m):
			g[3]++
		case m.state == mLeased && !m.seen:
			g[1]++
		case m.state == mReady && m.at != atOnce && !m.seen:
			g[2]++
		}
	}
	return g
}

// live is the count of messages that hold capacity.
func (q *mQueue) live() int {
	n := 0
	for _, m := range q.msgs {
		if m.state != mDead && !q.exhausted(m) {
			n++
		}
	}
	return n
}

// leaseOf returns the message whose current lease r names, if any.
func (q *mQueue) leaseOf(r broker.ReceiptValue) *mMsg {
	if r == "" {
		return nil
	}
	for _, m := range q.msgs {
		if m.state == mLeased && m.receipt == r {
			return m
		}
	}
	return nil
}

// settle is what Ack, Nack, Reject and Extend find for receipt r on queue
// qi at now: the message, or the class of the error.
func (m *model) settle(qi int, r broker.ReceiptValue, now int64) (*mMsg, string) {
	owner, ok := m.owner[r]
	if !ok || owner != qi {
		return nil, "UNKNOWN_RECEIPT"
	}
	q := m.qs[qi]
	// A call that checks a receipt looks at the queue: it observes every
	// deadline passed by now, not only this lease's.
	q.observe(now)
	msg := q.leaseOf(r)
	if msg == nil {
		return nil, "LEASE_EXPIRED"
	}
	if !msg.seen && now < msg.at {
		return msg, "ok"
	}
	if !msg.seen && !tolerated("settle-lapse") {
		// Refusing the receipt because the lease lapsed is observing
		// the lapse.
		msg.seen, msg.seenBy = true, "settle"
	}
	return nil, "LEASE_EXPIRED"
}

// evict is a keyed publish's dedup check at now, before admission: if the
// clock did not go backwards, it forgets the keys enqueued more than the
// window before now.
func (q *mQueue) evict(now int64) {
	if now < q.evictClock {
		return
	}
	q.evictClock = now
	window := int64(q.pol.DedupWindow)
	for k, s := range q.seen {
		// now - enq in uint64: a key enqueued before the Unix epoch
		// and a now near year 2262 are further apart than an int64
		// holds, and the int64 difference wrapped to a negative one.
		if now > s.enq && uint64(now)-uint64(s.enq) > uint64(window) {
			delete(q.seen, k)
		}
	}
}

// restart is what a reopen at now does to the model: observations and
// counters are gone, a last lease lapsed by now died before the open,
// and the open observes the queues at now.
// Every kind of restart keeps the messages, the keys and the dedup clock
// (under SyncAll every call that returned is in the log).
func (m *model) restart(now int64) {
	for _, q := range m.qs {
		q.c = mCounters{}
		for _, msg := range q.msgs {
			msg.seen, msg.seenBy = false, ""
			msg.preOpen = msg.state == mLeased && q.final(msg) && msg.at <= now
			msg.preOpenAt = msg.at
			// A message not leased with no delivery left: a lowering of
			// MaxDeliveries a power loss cut short (see
			// twin.setPolicy). The first handle on the queue, right
			// after the open, gives up on it at its reading of the
			// clock (Store.Queue).
			if msg.state == mReady && msg.deliveries >= q.pol.MaxDeliveries {
				if msg.reason == "" {
					msg.reason, msg.code, msg.cause = broker.ReasonLeaseExpired, 0, ""
				}
				msg.state, msg.failedAt, msg.at = mDead, now, 0
				q.c.deadLettered++
			}
		}
		// The open looks at every queue at now (index.Queue.Promote): a
		// lapse or the end of a delay it sees stays seen if the clock
		// then goes back.
		q.observe(now)
	}
}

// nextDeadline returns the earliest deadline after now (a lease's lapse, a
// retry delay's end), or false.
func (m *model) nextDeadline(now int64) (int64, bool) {
	best, ok := int64(math.MaxInt64), false
	for _, q := range m.qs {
		for _, msg := range q.msgs {
			if msg.state != mDead && msg.at > now && msg.at < best {
				best, ok = msg.at, true
			}
		}
	}
	return best, ok
}

// nextDedupEdge returns the earliest instant after now at which a key is
// still remembered but one nanosecond later is not, or false.
func (m *model) nextDedupEdge(now int64) (int64, bool) {
	best, ok := int64(math.MaxInt64), false
	for _, q := range m.qs {
		for _, k := range q.seen {
			if edge := k.enq + int64(q.pol.DedupWindow); edge > now && edge < best {
				best, ok = edge, true
			}
		}
	}
	return best, ok
}

// lastPassed returns the latest deadline at or before now that a call
// observed, or false: setting the clock back before it tests that what was
// observed stays observed.
func (m *model) lastPassed(now int64) (int64, bool) {
	best, ok := int64(math.MinInt64), false
	for _, q := range m.qs {
		for _, msg := range q.msgs {
			if msg.seen && msg.at <= now && msg.at > best {
				best, ok = msg.at, true
			}
		}
	}
	return best, ok
}

// dump renders the model for a failure message.
func (m *model) dump(now int64) string { return m.dumpState(now, true) }

// dumpState renders the model's state. With unseen, it renders all of it
// that a restart keeps and a call other than a publish or a declaration
// may change (the states a power loss under SyncPublish may leave differ
// in nothing else), what no audit sees included: the dedup clock and each
// lease's receipt. lostState tells states apart by it. Without unseen, it
// leaves those two out and keeps all that an audit compares (a dead
// letter's code and cause among it): two states rendered alike are ones
// no audit tells apart.
func (m *model) dumpState(now int64, unseen bool) string {
	var b strings.Builder
	for _, q := range m.qs {
		fmt.Fprintf(&b, "%s: %+v\n", q.name, q.pol)
		if unseen {
			fmt.Fprintf(&b, "%s: evict clock %s\n", q.name, rel(q.evictClock))
		}
		fmt.Fprintf(&b, "%s: keys:", q.name)
		for _, k := range slices.Sorted(maps.Keys(q.seen)) {
			fmt.Fprintf(&b, " %s=%s@%s", k, q.seen[k].id, rel(q.seen[k].enq))
		}
		b.WriteString("\n")
		for _, id := range slices.Sorted(maps.Keys(q.msgs)) {
			msg := q.msgs[id]
			fmt.Fprintf(&b, "  %s %s del=%d at=%s seen=%v(%s) enq=%s", id, msg.state, msg.deliveries, rel(msg.at), msg.seen, msg.seenBy, rel(msg.enq))
			if msg.state == mDead {
				fmt.Fprintf(&b, " failed=%s %s code=%#x cause=%q", rel(msg.failedAt), msg.reason, msg.code, msg.cause)
			}
			if unseen && msg.receipt != "" {
				fmt.Fprintf(&b, " receipt=%s", msg.receipt)
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "now %s\n", rel(now))
	return b.String()
}

// rel renders an instant relative to clockStart, or, within a year of the
// Unix epoch (a run that sets inputEpoch), to the epoch, as "E" and the
// offset.
func rel(at int64) string {
	const year = int64(365 * 24 * time.Hour)
	switch {
	case at == math.MinInt64:
		return "-inf"
	case -year < at && at < year:
		return "E" + time.Duration(at).String()
	}
	return time.Duration(at - clockStart.UnixNano()).String()
}

// retryDelay is the documented curve (broker/policy.go): RetryDelay
// doubled for each delivery after the first, held at MaxRetryDelay when
// that is positive; RetryDelay unchanged when it is not.
func retryDelay(p broker.PolicyValue, deliveries int) time.Duration {
	d := max(p.RetryDelay, 0)
	if p.MaxRetryDelay <= 0 || d == 0 {
		return d
	}
	for i := 1; i < deliveries && d < p.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, p.MaxRetryDelay)
}
