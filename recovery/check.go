package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/walbroker/walbroker/broker"
)

// Violation is one invariant a store or a journal broke.
type Violation struct {
	Cycle int    // the cycle whose journal or store showed it
	ID    string // the message concerned, if one
	What  string
}

func (v Violation) String() string {
	if v.ID != "" {
		return fmt.Sprintf("cycle %d: message %s: %s", v.Cycle, v.ID, v.What)
	}
	return fmt.Sprintf("cycle %d: %s", v.Cycle, v.What)
}

// ViolationError reports violations, with the journal entries about the
// messages concerned.
type ViolationError struct {
	Violations []Violation
	Excerpt    []string
}

func (e *ViolationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d invariant violation(s):\n", len(e.Violations))
	for i, v := range e.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(e.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if len(e.Excerpt) > 0 {
		b.WriteString("journal entries about these messages (cycle: entry):\n")
		for _, l := range e.Excerpt {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}

// msg is what the journal says about one message.
type msg struct {
	queue string
	ref   string // its payload's reference; "" while known only from a duplicate
	key   string
	enq   int64
	// journaled: a publish of it returned nil; otherwise it is the publish
	// a killed child had in flight, found later.
	journaled bool
	cycle     int

	// Its fate.
	// gone: "acked" or "deleted" once such a call returned nil, or once
	// a store drained after a kill no longer held the message while an
	// ack or delete of it was in flight (see goneAfterAll).
	gone      string
	mayBeGone bool // an ack or delete was attempted with no known outcome
	// dead: a reject or dead-lettering nack returned nil, or a store
	// after a kill showed the dead letter of one in flight, or of a replay
	// in flight that did not happen (see deadAfterAll); and no replay since.
	dead    bool
	deadDel int
	deadWhy string
	deadT0  int64
	deadT1  int64

	// The current epoch of deliveries (a replay starts a new one).
	// maxDel, lastExp and the floors below are those of its latest
	// certain delivery (deliveries are placed in the order their process
	// handed them out, see orderKey).
	maxDel  int
	lastExp int64 // the last delivery's lease expiry (extended), if its lease may still hold
	// extendFloor: an Extend meant for the last delivery has not been
	// confirmed; if it happened, the lease expires no earlier than this
	// (it measures from the call, after the delivery, so it may shorten it).
	extendFloor int64
	visibleAt   int64 // after a nack that returned nil
	// delayMet is the visibleAt that a later process received on the
	// queue before (see delaysAcrossKill), counted once.
	delayMet int64
	// nackFloor: a nack meant for the last delivery, with deliveries
	// left, has not been confirmed; if it happened, it ended the lease
	// early, and the message is visible again no earlier than this: the
	// clock Receive read (the lease's ExpiresAt less the visibility
	// timeout; the nack read its clock later) plus the retry delay. A
	// reject, or a nack of the last delivery, in flight leaves the
	// message dead or leased, so the lease stays the floor then.
	nackFloor    int64
	lastDelCycle int
	nackDel      int // the delivery count of the last delivery a nack was meant for
	// nackMeant has bit d set if a nack was meant for delivery d of the
	// current epoch (it may have happened). A lease that then lapses on
	// the last delivery dead-letters with that nack's reason
	// (DeadLetterValue.Reason keeps LEASE_EXPIRED for a message no
	// consumer ever reported on), so a nack-reasoned dead letter need not
	// come from a nack of the last delivery. A nack refused as
	// LeaseExpired reported nothing, so its bit is cleared again.
	nackMeant uint64
	// nackMeantBefore holds nackMeant as it stood at each replay since the
	// last one proved to have happened (its confirmation, or a certain
	// first delivery after it). A power loss under SyncPublish may take a
	// replay with the death it undid and the lease before that, so that
	// the store goes on with the earlier epoch: its next lapse on the last
	// delivery then records the failure a nack of that epoch reported.
	nackMeantBefore uint64
	// maybe is the latest delivery of the current epoch journaled only as
	// a maybe (see maybeDelivered) counting above every certain one; the
	// zero maybeLease once a certain delivery follows (one of its process
	// that does not count more or does not respect its lease is reported
	// first; see handedOut).
	maybe maybeLease
	// returned is the latest settle of the current epoch journaled as
	// returned, maybe not durable (see returnedSettled).
	returned returnedSettle
	// intentDel and intentExp name the delivery whose consumer's intent
	// was noted last (its count and its lease's expiry as Receive
	// returned it), the latest its process handed out: a refused settle
	// undoes what that intent noted only if it is this delivery's (see
	// settleFailed).
	intentDel int
	intentExp int64
	// intentCycle is the cycle whose process handed that delivery out;
	// intentRenewed says Consume handed it out on the queue itself (its
	// entry's T0 is 0), which renews the lease while the handler runs and
	// journals no renewal: the lease may have held, and the reject or
	// nack the intent meant come, any time until the kill.
	intentCycle   int
	intentRenewed bool
	// nackConfirmed: a nack of some delivery of the current epoch returned
	// nil. A consumer reported on this life for certain, so a lapse of its
	// last lease cannot record LEASE_EXPIRED. A nack in flight (at a kill,
	// or held until a power loss could no longer take it) sets only
	// nackMeant: it may not have happened, and then LEASE_EXPIRED is due.
	nackConfirmed bool
	rejectDel     int
	// preReplays are the dead letters replays were attempted on since the
	// last replay known to have happened (confirmed, or proved by a
	// certain delivery or by a store opened after a kill), oldest first:
	// if the replay of one did not happen, the store still shows that dead
	// letter (and none of the later ones). There are more than one only
	// where a power loss may take what returned (SyncPublish): the janitor
	// read the later dead letter once the earlier replay had returned,
	// which a process crash keeps, but until a commit covers that replay a
	// power loss takes it with everything written after it, and its
	// confirmation is held until then.
	preReplays []pendingReplay
	// replayedAt is when the last replay of it known to have happened
	// started (one that returned nil; for one in flight at a kill that a
	// store after the kill showed done, when its dead letter was read):
	// every dead letter of it since failed after its replay, so one that
	// failed before this is the one the replay took out of the store.
	replayedAt int64
}

// maybeLease is a delivery journaled only as a maybe, as the process
// that handed it out held it. A power loss may take its lease record, but
// no delivery returns after the power failed, so in that process every
// later delivery of the message came while the lease and count were live
// in memory, and must respect them as those of a certain delivery.
type maybeLease struct {
	cycle int   // the cycle whose process handed it out
	del   int   // its delivery count
	exp   int64 // its lease's ExpiresAt, as Receive returned it
	// leaseFloor is the earliest its lease may lapse: exp, or the clock
	// after Receive plus the Extend its intent asks for (which may
	// shorten the lease), if earlier.
	leaseFloor int64
	// nackFloor, if its intent nacks with deliveries left, is the
	// earliest the nack may make the message visible again (see
	// nackFloorOf); 0 otherwise.
	nackFloor int64
}

// returnedSettle is an Ack, Nack, Reject or Extend that returned nil
// where a power loss may take its record (OpReturned), as the process
// that made it held it: the index applied it in memory, and only a power
// loss undoes it, after which no call returns in that process. So there
// the message is never handed out again after an ack, a reject or a nack
// that dead-lettered it (until a replay), nor before a nack's VisibleAt
// or an Extend's ExpiresAt. The next process may see none of it.
type returnedSettle struct {
	cycle int    // the cycle whose process made the call; 0 if none
	call  string // "ack", "nack", "reject" or "extend"
	del   int    // the delivery it settled
	// gone: the message left the queue's receivable messages in that
	// process (acked, or dead).
	gone bool
	// until: it is not handed out before this in that process (a nack's
	// VisibleAt, an Extend's ExpiresAt).
	until int64
	// nackFloor, for an Extend of a delivery whose consumer meant to nack
	// it, is the earliest that nack, in flight, may have made the message
	// visible again (see nackFloorOf); 0 otherwise.
	nackFloor int64
}

// deadLetter is a dead letter as a store showed it.
type deadLetter struct {
	reason   string
	del      int
	failedAt int64
}

// pendingReplay is a replay attempted on a dead letter, not yet known to
// have happened.
type pendingReplay struct {
	dl   deadLetter
	read int64 // when the janitor read the dead letter; the replay started after
}

// pendingReplayOf returns the index in m.preReplays of the replay of dl,
// or -1.
func (m *msg) pendingReplayOf(dl deadLetter) int {
	return slices.IndexFunc(m.preReplays, func(p pendingReplay) bool { return p.dl == dl })
}

// leaseFloor is the earliest instant the last delivery's lease may lapse,
// or 0 if none is known.
func (m *msg) leaseFloor() int64 {
	if m.lastExp != 0 && m.extendFloor != 0 {
		return min(m.lastExp, m.extendFloor)
	}
	return m.lastExp
}

// failedBeforeExpiry reports whether a dead letter failed at failedAt cannot be
// the lapse of m's last lease: it failed before the lease's expiry (as far
// as the journal knows it).
func (m *msg) failedBeforeExpiry(failedAt int64) bool {
	exp := m.leaseFloor()
	return exp != 0 && failedAt < exp
}

type keyState struct {
	id  string
	enq int64
}

type attemptKey struct {
	cycle int
	who   string
}

// attempt is what a publishing goroutine of one cycle journaled: its last
// attempt number and the attempts that failed (which may have happened).
type attempt struct {
	last   int64
	failed map[int64]bool
}

// CheckFigures count what the checker saw.
type CheckFigures struct {
	Entries, Published, Duplicates, Deliveries, Acks, Nacks, Rejects, Extends int
	Replays, Deletes, SettlesRefused                                          int
	// InFlight counts messages whose publish had not returned when their
	// child was killed, found later: in a store, or named as the original
	// by a duplicate.
	InFlight int
	// InFlightBatches counts the PublishBatch calls among them, each
	// checked whole.
	InFlightBatches int
	// Drains counts stores drained and compared with the journal, Drained
	// the messages received, DeadLetters the dead letters read there.
	Drains, Drained, DeadLetters int
	// TornTails, IndexRebuilt count the opens that found a torn log tail,
	// or rebuilt the index from the log.
	TornTails, IndexRebuilt int
	PoisonRounds            int // poison messages that reached the dead-letter store

	// What the rules that only some runs of the workload meet were
	// checked on (a soak must meet each of them):
	//
	// DelaysAcrossKill counts the retry delays of nacks that a later
	// process received on their queue while they were still pending
	// (each delivery of the message is checked against them);
	// SettlesLapsed the settles refused as LeaseExpired (checked to come
	// at or after the lease's ExpiresAt); LapsesRead the LEASE_EXPIRED
	// dead letters the janitor read (checked against the last lease and
	// the nacks of the message's life). FlowAcks, FlowNacks, FlowRejects
	// and FlowExtends count the results of Consume's calls on the flow
	// queue journaled.
	DelaysAcrossKill, SettlesLapsed, LapsesRead   int
	FlowAcks, FlowNacks, FlowRejects, FlowExtends int
	// SettlesReturned counts the acks, nacks, rejects and extends that
	// returned nil where a power loss could take them, journaled as they
	// returned (OpReturned), whose promises were checked in the process
	// that made them (only cycles that lose power under SyncPublish have
	// them).
	SettlesReturned int
}

func (f CheckFigures) String() string {
	return fmt.Sprintf("journal: %d entries, %d published, %d duplicates, %d deliveries, %d acks, %d nacks, %d rejects, %d extends, %d replays, %d deletes, %d settles refused\n"+
		"stores: %d drained (%d messages received, %d dead letters read), %d in-flight publishes found (%d batches, checked whole), %d torn log tails, %d index rebuilds, %d poison rounds completed\n"+
		"rules met: %d retry delays pending at a later process's Receive, %d settles refused as lapsed, %d LEASE_EXPIRED dead letters read by the janitor; "+
		"Consume on flow: %d acks, %d nacks, %d rejects, %d extends journaled; "+
		"%d settles returned, maybe not durable, held to their promises in their process",
		f.Entries, f.Published, f.Duplicates, f.Deliveries, f.Acks, f.Nacks, f.Rejects, f.Extends, f.Replays, f.Deletes, f.SettlesRefused,
		f.Drains, f.Drained, f.DeadLetters, f.InFlight, f.InFlightBatches, f.TornTails, f.IndexRebuilt, f.PoisonRounds,
		f.DelaysAcrossKill, f.SettlesLapsed, f.LapsesRead, f.FlowAcks, f.FlowNacks, f.FlowRejects, f.FlowExtends,
		f.SettlesReturned)
}

// Checker keeps the model of the store that the journals describe, and
// checks each cycle's journal, and each store opened after a kill, against
// it. The invariants are those of a process crash: the page cache
// survives, so everything a call returned for must be there, whatever the
// sync mode. A power loss under SyncAll is held to the same; under
// SyncPublish the child journals what a power loss may take as OpMaybe and
// OpReturned, which bind only the process that made them, and holds the
// rest until a publish made it certain.
//
// A Checker is not safe for concurrent use.
type Checker struct {
	journalPath func(cycle int) string
	cycle       int
	msgs        map[string]*msg
	// live holds, by queue, the messages not acked or deleted for sure.
	live       map[string]map[string]*msg
	refs       map[string]string // payload reference → ID
	keys       map[string]keyState
	attempts   map[attemptKey]*attempt
	poisonDone map[string]bool
	// batches holds the PublishBatch calls in flight at a kill that a
	// store or a journal showed messages of, by the reference of their
	// first message, until the next drain checks them whole.
	batches map[string]Ref
	// returnedCalls holds the settles of the current cycle journaled as
	// returned (OpReturned) and already checked, until their certain
	// entry, which repeats every field, comes: that is the same call, and
	// its checks were made (see confirmsReturned).
	returnedCalls map[returnedCall]bool
	// maybeReports holds, for each delivery of the current cycle
	// journaled as a maybe (OpMaybe), what checking it reported, until its
	// certain entry, which repeats every field, comes: that is the same
	// delivery, and it reports only what the maybe did not (see
	// confirmedMaybe).
	maybeReports map[deliveryCall][]string
	violations   []Violation

	Figures CheckFigures
}

// NewChecker returns a checker; journalPath names each cycle's journal,
// for the excerpts of its reports.
func NewChecker(journalPath func(cycle int) string) *Checker {
	return &Checker{journalPath: journalPath, msgs: map[string]*msg{}, live: map[string]map[string]*msg{}, refs: map[string]string{},
		keys: map[string]keyState{}, attempts: map[attemptKey]*attempt{}, poisonDone: map[string]bool{}, batches: map[string]Ref{}}
}

func (c *Checker) violate(id, format string, args ...any) {
	c.violations = append(c.violations, Violation{Cycle: c.cycle, ID: id, What: fmt.Sprintf(format, args...)})
}

// Err returns the violations found so far as a *ViolationError, or nil.
func (c *Checker) Err() error {
	if len(c.violations) == 0 {
		return nil
	}
	var ids []string
	for _, v := range c.violations {
		if v.ID != "" && !slices.Contains(ids, v.ID) {
			ids = append(ids, v.ID)
		}
	}
	return &ViolationError{Violations: c.violations, Excerpt: c.Excerpt(ids, 60)}
}

// Excerpt returns the journal lines that name any of the first 8 of ids,
// the last max of them.
func (c *Checker) Excerpt(ids []string, max int) []string {
	if len(ids) > 8 {
		ids = ids[:8]
	}
	var out []string
	for cycle := 1; cycle <= c.cycle; cycle++ {
		entries, _, err := ReadJournal(c.journalPath(cycle))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if slices.Contains(ids, e.ID) || slices.ContainsFunc(e.IDs, func(id string) bool { return slices.Contains(ids, id) }) {
				out = append(out, fmt.Sprintf("c%d: %s", cycle, e))
			}
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// add makes m the message id.
func (c *Checker) add(id string, m *msg) {
	c.msgs[id] = m
	if c.live[m.queue] == nil {
		c.live[m.queue] = map[string]*msg{}
	}
	c.live[m.queue][id] = m
}

// setGone records that m was acked or deleted for good.
func (c *Checker) setGone(id string, m *msg, how string) {
	m.gone, m.mayBeGone = how, false
	delete(c.live[m.queue], id)
}

func maxDeliveries(queue string) int {
	p, _ := Policy(queue)
	return p.MaxDeliveries
}

// retryDelay is the wait a nack of delivery d of queue asks for (the
// policy's backoff curve).
func retryDelay(queue string, d int) time.Duration {
	p, _ := Policy(queue)
	if p.MaxRetryDelay <= 0 || p.RetryDelay == 0 {
		return p.RetryDelay
	}
	delay := p.RetryDelay
	for i := 1; i < d && delay < p.MaxRetryDelay; i++ {
		delay *= 2
	}
	return min(delay, p.MaxRetryDelay)
}

func ns(t int64) string { return time.Unix(0, t).UTC().Format("15:04:05.000000") }

// orderKey places an entry of a cycle in the order its call took effect.
// Goroutines journal their results after their calls return, so another
// goroutine may journal what it saw of an effect (a delivery of a nacked
// message, a dead letter just rejected) before the goroutine that caused
// it journals the result. An effect happens after its call started and an
// observation before its call returned, so a result is placed at the start
// of its call and an observation (a dead letter read) at the end of its:
// an effect seen is then always placed before the sight. Entries of one
// goroutine keep their order: each call starts after the previous one
// returned.
//
// A delivery is placed at the instant it was handed out (see receivedAt),
// not at the clock its consumer read after Receive returned, which one
// stalled past the lease reads late, after the message was handed out
// again, settled, or dead-lettered and replayed. The broker reads that
// instant under the queue's lock, by the clock the journal reads too, so
// every effect that let it hand the message out came at an earlier
// reading: a lapse or an Extend's ExpiresAt passed, a nack's VisibleAt
// (the clock during the nack plus a retry delay, never 0 on a queue that
// is nacked), a replay (which starts after the janitor's clock reading
// its entry is placed at). And what its consumer does with it comes after
// Receive returned. So a process's deliveries of a message are placed in
// the order it handed them out, each after what allowed it and before
// what followed from it, and are checked against each other in that
// order: a count that did not grow, or a lease not respected, is one the
// store handed out. An instant outside the call (a fault handedOut
// reports) places the delivery at the end of its call.
//
// A dead letter read is placed at the clock the janitor read after
// DeadLetters returned, which one stalled there reads late. That moves
// nothing: the message is dead from before the read until the janitor's
// replay or delete, which starts after that reading, and meanwhile no
// settle of it succeeds (a refused one, wherever it is placed, only
// undoes an intent that never happened). Every delivery of the life the
// dead letter ended was handed out before the read, and is placed before
// it; every one of the next life after the replay started, and is placed
// after it; and one handed out between is placed in the dead life and
// reported.
func orderKey(e *Entry) int64 {
	switch e.Op {
	case OpDelivered, OpMaybe:
		if at := receivedAt(*e); at <= e.T1 && at >= e.T0 {
			return at
		}
		return e.T1
	case OpReplaying, OpDeleting:
		return e.T1
	}
	return e.T0
}

// AddCycle checks a cycle's journal and folds it into the model. Within a
// cycle, publishes are taken first (a consumer may journal a delivery
// before the publisher journals the publish that returned), then the rest
// in the order of orderKey.
func (c *Checker) AddCycle(cycle int, entries []Entry) {
	c.cycle = cycle
	c.returnedCalls = map[returnedCall]bool{} // a certain entry follows in its own cycle's journal
	c.maybeReports = map[deliveryCall][]string{}
	c.Figures.Entries += len(entries)
	for _, e := range entries {
		if e.Op != OpPublished && e.Op != OpDuplicate && e.Op != OpFailed || e.N == 0 {
			continue
		}
		a := c.attempt(cycle, e.Who)
		a.last = max(a.last, e.N)
		if e.Op == OpFailed {
			a.failed[e.N] = true
		}
	}
	for _, e := range entries {
		switch e.Op {
		case OpPublished:
			c.published(e)
		case OpDuplicate:
			c.duplicate(e)
		}
	}
	c.delaysAcrossKill(entries)
	ordered := slices.Clone(entries)
	slices.SortStableFunc(ordered, func(a, b Entry) int { return cmp.Compare(orderKey(&a), orderKey(&b)) })
	for _, e := range ordered {
		switch e.Op {
		case OpStart, OpPublished, OpDuplicate:
		case OpDelivered:
			c.delivered(e)
		case OpMaybe:
			c.maybeDelivered(e)
		case OpReturned:
			c.returnedSettled(e)
		case OpAcked:
			c.Figures.Acks++
			c.flowSettled(e)
			if m := c.settled(e, "ack", c.confirmsReturned(e)); m != nil {
				c.setGone(e.ID, m, "acked")
			}
		case OpNacked:
			c.Figures.Nacks++
			c.flowSettled(e)
			c.nacked(e, c.confirmsReturned(e))
		case OpRejected:
			c.Figures.Rejects++
			c.flowSettled(e)
			if m := c.settled(e, "reject", c.confirmsReturned(e)); m != nil {
				m.dead, m.deadDel, m.deadWhy, m.deadT0, m.deadT1 = true, e.Del, Reason(e.Queue, IntentReject), e.T0, e.T1
				m.mayBeGone, m.lastExp = false, 0
			}
		case OpExtended:
			c.Figures.Extends++
			c.flowSettled(e)
			checked := c.confirmsReturned(e)
			if m := c.settled(e, "extend", checked); m != nil {
				if !checked {
					c.checkExtendResult(e, "")
				}
				m.lastExp, m.extendFloor = e.Exp, 0
			}
		case OpSettleFailed:
			c.settleFailed(e)
		case OpReplaying, OpDeleting:
			c.deadLetterSeen(e.Queue, e.ID, payloadRef(e), e.Enq, e.Del, e.Reason, e.Code, e.Cause, e.Failed, "DeadLetters")
			if e.Err != "" {
				c.violate(e.ID, "a dead letter's payload is not what it was published with: %s", e.Err)
			}
			if e.Reason == broker.ReasonLeaseExpired {
				c.Figures.LapsesRead++
			}
			m := c.msgs[e.ID]
			if m == nil {
				continue
			}
			if e.Op == OpReplaying {
				c.Figures.Replays++
				dl := deadLetter{reason: e.Reason, del: e.Del, failedAt: e.Failed}
				if i := m.pendingReplayOf(dl); i >= 0 {
					// Read again: the earlier attempt did not happen (a
					// store after a kill still showed its dead letter).
					m.preReplays[i].read = e.T1
				} else {
					m.preReplays = append(m.preReplays, pendingReplay{dl: dl, read: e.T1})
				}
				// Whether or not the replay happens, the message stays
				// (dead or ready); its next delivery may count from 1.
				m.dead, m.maxDel, m.lastExp, m.visibleAt, m.nackFloor, m.extendFloor = false, 0, 0, 0, 0, 0
				m.nackMeantBefore |= m.nackMeant
				m.nackDel, m.rejectDel, m.nackMeant, m.nackConfirmed = 0, 0, 0, false
				m.intentDel, m.intentExp, m.intentCycle, m.intentRenewed = 0, 0, 0, false
				m.maybe, m.returned = maybeLease{}, returnedSettle{}
			} else {
				c.Figures.Deletes++
				m.mayBeGone = true
			}
		case OpReplayed:
			if m := c.msgs[e.ID]; m != nil {
				// It happened, and so did every replay whose dead letter
				// was read before it started; one read since is a later
				// replay, still in doubt.
				m.preReplays = slices.DeleteFunc(m.preReplays, func(p pendingReplay) bool { return p.read <= e.T0 })
				m.replayedAt = e.T0
				if len(m.preReplays) == 0 {
					m.nackMeantBefore = 0
				}
			}
		case OpDeleted:
			if m := c.msgs[e.ID]; m != nil {
				c.setGone(e.ID, m, "deleted")
			}
		case OpFailed:
			c.violate("", "%s: a call on queue %s failed: %s", e.Who, e.Queue, e.Err)
		default:
			c.violate("", "unknown journal entry %s", e)
		}
	}
}

// delaysAcrossKill counts the retry delays, set by nacks of earlier
// processes, that were still pending when this cycle's process first
// received on their queue (as its journal shows: the earliest start of a
// Receive that returned a delivery; a delivery with T0 0, whose Receive
// Consume made on the queue itself, says nothing of when it started).
// Every delivery of the message from then on is checked to come no
// earlier than the delay's end, so a delay that a kill and Open lost
// would show.
func (c *Checker) delaysAcrossKill(entries []Entry) {
	first := map[string]int64{}
	for _, e := range entries {
		if (e.Op == OpDelivered || e.Op == OpMaybe) && e.T0 != 0 {
			if at, ok := first[e.Queue]; !ok || e.T0 < at {
				first[e.Queue] = e.T0
			}
		}
	}
	for queue, at := range first {
		for _, m := range c.live[queue] {
			if !m.dead && m.visibleAt > at && m.delayMet != m.visibleAt {
				m.delayMet = m.visibleAt
				c.Figures.DelaysAcrossKill++
			}
		}
	}
}

// flowSettled counts a result of Consume's on the flow queue.
func (c *Checker) flowSettled(e Entry) {
	if e.Queue != QueueFlow {
		return
	}
	switch e.Op {
	case OpAcked:
		c.Figures.FlowAcks++
	case OpNacked:
		c.Figures.FlowNacks++
	case OpRejected:
		c.Figures.FlowRejects++
	case OpExtended:
		c.Figures.FlowExtends++
	}
}

func (c *Checker) attempt(cycle int, who string) *attempt {
	k := attemptKey{cycle, who}
	a := c.attempts[k]
	if a == nil {
		a = &attempt{failed: map[int64]bool{}}
		c.attempts[k] = a
	}
	return a
}

func (c *Checker) published(e Entry) {
	if len(e.IDs) == 0 || len(e.IDs) != len(e.Refs) {
		c.violate("", "malformed publish entry %s", e)
		return
	}
	if e.Enq < e.T0 || e.Enq > e.T1 {
		c.violate(e.IDs[0], "EnqueuedAt %s is not the broker clock during the publish (%s to %s)", ns(e.Enq), ns(e.T0), ns(e.T1))
	}
	seen := map[string]bool{}
	for i, id := range e.IDs {
		c.Figures.Published++
		if seen[id] {
			c.violate(id, "one PublishBatch returned ID %s twice", id)
		}
		seen[id] = true
		if old := c.msgs[id]; old != nil {
			c.violate(id, "ID handed out twice: already the message %q (cycle %d), now %q", old.ref, old.cycle, e.Refs[i])
			continue
		}
		if other, ok := c.refs[e.Refs[i]]; ok {
			c.violate(id, "payload %q published under two IDs: %s and %s", e.Refs[i], other, id)
		}
		c.refs[e.Refs[i]] = id
		c.add(id, &msg{queue: e.Queue, ref: e.Refs[i], key: e.Key, enq: e.Enq, journaled: true, cycle: c.cycle})
	}
	if e.Key == "" {
		return
	}
	id := e.IDs[0]
	if ks, ok := c.keys[e.Key]; ok && e.T1-ks.enq <= int64(DedupWindow) {
		c.violate(id, "PublishKeyed(%q) enqueued a new message while the key's original %s (enqueued %s) was within the %v window until the call ended (%s)",
			e.Key, ks.id, ns(ks.enq), DedupWindow, ns(e.T1))
	}
	c.keys[e.Key] = keyState{id: id, enq: e.Enq}
}

func (c *Checker) duplicate(e Entry) {
	c.Figures.Duplicates++
	m := c.msgs[e.ID]
	if m != nil && m.key != e.Key {
		c.violate(e.ID, "PublishKeyed(%q) returned as its original message %s, published with key %q", e.Key, e.ID, m.key)
		return
	}
	ks, known := c.keys[e.Key]
	switch {
	case m != nil && m.enq != e.Enq:
		// The original is known (its publish returned, a store showed it,
		// or an earlier duplicate named it): a duplicate returns it as it
		// was enqueued.
		c.violate(e.ID, "PublishKeyed(%q) returned the original with EnqueuedAt %s; it was enqueued at %s", e.Key, ns(e.Enq), ns(m.enq))
	case known && ks.id != e.ID && (m != nil && m.journaled || e.Enq <= ks.enq):
		c.violate(e.ID, "PublishKeyed(%q) returned %s (enqueued %s), not the key's latest original %s (enqueued %s)",
			e.Key, e.ID, ns(e.Enq), ks.id, ns(ks.enq))
	}
	// A key strictly older than the window at the broker's now is evicted
	// before the lookup, unless the clock reads earlier than an instant
	// the queue recorded. The workload's store runs on the real clock
	// (the child leaves Options.Now nil: time.Now), and T0 is a reading of
	// that clock taken before the call, so the broker's now during the
	// call is no earlier than T0; and every instant the queue recorded
	// (enqueues, eviction readings, of this child or an earlier one) is an
	// earlier reading of that clock: the drains that run an hour ahead
	// open copies, or the store once no child follows. So an original
	// enqueued more than the window before T0 was forgotten, and the call
	// had to enqueue a new message. (Only a wall clock stepped back during
	// a run could make this report a sound store.)
	if age := e.T0 - e.Enq; age > int64(DedupWindow) {
		c.violate(e.ID, "PublishKeyed(%q), called at %s, returned as a duplicate the original enqueued at %s, %v earlier: past the %v window, the key was forgotten and a new message due",
			e.Key, ns(e.T0), ns(e.Enq), time.Duration(age), DedupWindow)
	}
	c.keys[e.Key] = keyState{id: e.ID, enq: e.Enq}
	if c.msgs[e.ID] == nil {
		// The original is a publish a killed child had in flight: it was
		// in the log when this duplicate was answered, so it exists.
		c.add(e.ID, &msg{queue: QueueWork, key: e.Key, enq: e.Enq, cycle: c.cycle})
		c.Figures.InFlight++
	}
}

// lookup returns the message id (of queue, with payload reference ref and
// EnqueuedAt enq, as a store showed it), checking that it is the one
// published. A message the journal does not know must be a publish a
// killed child had in flight: the next attempt of its goroutine in its
// cycle, or one that failed (a publisher stops at its first failed call,
// so no attempt follows one), and of the cycle last killed: the store
// after each kill is drained before the next child opens it, so a publish
// in flight at an earlier kill that no drain showed never happened.
//
// ref is "" for a payload that is not what its reference makes (see
// payloadRef): the caller reported that, and the reference such a payload
// carries, if any, is not evidence of which message it is. The message is
// then the one its ID names, checked for its queue and EnqueuedAt only; if
// the journal does not know it, lookup returns nil and reports nothing
// more, since a corrupt payload cannot tell a publish in flight at a kill
// from a message that never was.
func (c *Checker) lookup(id, queue, ref string, enq int64, where string) *msg {
	m := c.msgs[id]
	if ref == "" && m == nil {
		return nil
	}
	if ref != "" && (m == nil || m.ref == "") {
		r, err := ParseRef(ref)
		if err != nil {
			c.violate(id, "%s: unknown message: %v", where, err)
			return nil
		}
		a := c.attempts[attemptKey{r.Cycle, r.Who}]
		inFlight := r.Cycle == c.cycle && (a == nil && r.N == 1 || a != nil && (r.N == a.last+1 && !a.failed[a.last] || a.failed[r.N]))
		if !inFlight {
			c.violate(id, "%s: unknown message %q: no publish of it returned, and it is not the publish its goroutine had in flight when killed", where, ref)
			return nil
		}
		if other, ok := c.refs[ref]; ok && other != id {
			c.violate(id, "%s: payload %q is also message %s", where, ref, other)
			return nil
		}
		c.refs[ref] = id
		if r.Of > 0 {
			first := r
			first.Index = 0
			c.batches[MakeRef(first)] = first
		}
		if m == nil {
			m = &msg{queue: r.Queue, key: r.Key, enq: enq, cycle: r.Cycle}
			c.add(id, m)
			c.Figures.InFlight++
			if ks, ok := c.keys[r.Key]; r.Key != "" {
				// A keyed publish enqueues a new message only once the
				// key's original is forgotten: a keyed publish evicted it
				// at a clock reading more than the window after the
				// original's EnqueuedAt. That reading is no later than
				// the one this publish evicted and enqueued at, its
				// message's EnqueuedAt (all that is known of a call that
				// did not return): the store runs on the real clock (see
				// duplicate; only a wall clock stepped back during a run
				// could make this report a sound store).
				//
				// The key's original known here came from an earlier
				// call: a key is its publisher's alone, and the call in
				// flight is its publisher's last, started after every
				// earlier one returned. So a message enqueued before that
				// original is no older original the journal missed: its
				// EnqueuedAt is a reading its call could not have made,
				// and it is a new message within the window all the same.
				switch {
				case ok && enq < ks.enq:
					c.violate(id, "%s: PublishKeyed(%q), in flight at a kill, enqueued a new message at %s, before the key's original %s (enqueued %s), which an earlier call published",
						where, r.Key, ns(enq), ks.id, ns(ks.enq))
				case ok && enq-ks.enq <= int64(DedupWindow):
					c.violate(id, "%s: PublishKeyed(%q), in flight at a kill, enqueued a new message at %s while the key's original %s (enqueued %s) was within the %v window",
						where, r.Key, ns(enq), ks.id, ns(ks.enq), DedupWindow)
				}
				// A keyed publish in flight at a kill that the store kept
				// is its key's original from then on, held to the window
				// like one whose publish returned. (One the journal knew
				// only from a duplicate set the key state there.)
				c.keys[r.Key] = keyState{id: id, enq: enq}
			}
		} else if m.key != r.Key {
			c.violate(id, "%s: message %q carries key %q; a duplicate named it the original of key %q", where, ref, r.Key, m.key)
		}
		m.ref = ref
	}
	if m.queue != queue {
		c.violate(id, "%s: in queue %s; it was published to %s", where, queue, m.queue)
	}
	if ref != "" && m.ref != ref {
		c.violate(id, "%s: payload %q; it was published with %q", where, ref, m.ref)
	}
	if m.enq != enq {
		c.violate(id, "%s: EnqueuedAt %s; it was enqueued at %s", where, ns(enq), ns(m.enq))
	}
	return m
}

// payloadRef returns the reference of the payload entry e read, or "" if
// the payload is not what its reference makes (e.Err says why; see
// lookup).
func payloadRef(e Entry) string {
	if e.Err != "" {
		return ""
	}
	return e.Ref
}

func (c *Checker) delivered(e Entry) {
	c.Figures.Deliveries++
	before := len(c.violations)
	m := c.handedOut(e, deliveredWhere)
	c.confirmedMaybe(e, before)
	if m == nil {
		return
	}
	m.lastDelCycle, m.preReplays = c.cycle, nil
	if e.Del == 1 {
		m.nackMeantBefore = 0 // a new epoch began: the replays before it happened
	}
	m.maxDel, m.lastExp, m.visibleAt, m.extendFloor = e.Del, e.Exp, 0, 0
	if e.By != 0 {
		m.extendFloor = e.T1 + e.By
	}
	// The floors of this delivery hold from now on; a maybe of its
	// process came before it (see orderKey).
	m.nackFloor, m.mayBeGone, m.maybe = 0, false, maybeLease{}
	m.expect(e.Intent, e.Del, e.Exp)
	m.intentCycle, m.intentRenewed = c.cycle, e.T0 == 0
}

// receivedAt returns the instant the broker handed out the delivery e
// journals: the clock Receive read, its lease's ExpiresAt less the
// visibility timeout (checked to lie within the call, see handedOut).
func receivedAt(e Entry) int64 {
	p, _ := Policy(e.Queue)
	return e.Exp - int64(p.VisibilityTimeout)
}

// handedOut checks what a Receive returned, whether or not the delivery
// survives the child: the payload, that the message was neither acked,
// deleted nor dead, that its count is above every earlier certain one and
// within MaxDeliveries, that the lease's ExpiresAt is the clock plus the
// visibility timeout (no later than Receive's end plus it; no earlier than
// its start plus it, when the start is known: T0 is 0 for a delivery
// Consume received on the queue itself), that it came after the previous
// lease and retry delay ended, and that a poison message goes to one
// delivery per process. It returns the message, or nil if it is unknown.
func (c *Checker) handedOut(e Entry, where string) *msg {
	if e.Err != "" {
		c.violate(e.ID, "%s with a payload that is not what was published: %s", where, e.Err)
	}
	m := c.lookup(e.ID, e.Queue, payloadRef(e), e.Enq, where)
	if m == nil {
		return nil
	}
	c.checkDelivery(e.ID, m, e.Del, where)
	p, _ := Policy(e.Queue)
	if e.T0 != 0 && e.Exp < e.T0+int64(p.VisibilityTimeout) || e.Exp > e.T1+int64(p.VisibilityTimeout) {
		c.violate(e.ID, "%s: lease ExpiresAt %s is not the clock during Receive (%s to %s) plus the visibility timeout %v",
			where, ns(e.Exp), ns(e.T0), ns(e.T1), p.VisibilityTimeout)
	}
	// A delivery journaled as a maybe and then as certain was checked as
	// the maybe, whose intent set the floors that follow it.
	confirmsMaybe := e.Op == OpDelivered && e.Del == m.intentDel && e.Exp == m.intentExp
	if exp := m.leaseFloor(); exp != 0 && !confirmsMaybe {
		switch {
		case m.nackFloor == 0 && e.T1 < exp:
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) before the previous lease expired (%s)", where, e.Del, ns(e.T1), ns(exp))
		case m.nackFloor != 0 && e.T1 < min(exp, m.nackFloor):
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) before the previous lease expired (%s) or a nack in flight could have made it visible (%s)",
				where, e.Del, ns(e.T1), ns(exp), ns(m.nackFloor))
		}
	}
	if mb := m.maybe; mb.cycle == c.cycle && !(e.Op == OpDelivered && e.Del == mb.del && e.Exp == mb.exp) {
		// The process that handed out the maybe held its lease and count
		// in memory: only a power loss takes them, and after it no
		// delivery returns. (Its confirmation is the same delivery.)
		if e.Del <= mb.del {
			c.violate(e.ID, "%s with delivery count %d in the process that had handed it out as delivery %d (journaled as a maybe)", where, e.Del, mb.del)
		}
		switch {
		case mb.nackFloor == 0 && e.T1 < mb.leaseFloor:
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) in the process that had leased it as delivery %d (journaled as a maybe), before that lease expired (%s)",
				where, e.Del, ns(e.T1), mb.del, ns(mb.leaseFloor))
		case mb.nackFloor != 0 && e.T1 < min(mb.leaseFloor, mb.nackFloor):
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) in the process that had leased it as delivery %d (journaled as a maybe), before that lease expired (%s) or the nack meant for it could have made it visible (%s)",
				where, e.Del, ns(e.T1), mb.del, ns(mb.leaseFloor), ns(mb.nackFloor))
		}
	}
	if r := m.returned; r.cycle == c.cycle {
		// The process that made the settle held its effect in memory:
		// only a power loss undoes it, and after it no delivery returns.
		switch {
		case r.gone:
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) in the process where the %s of delivery %d returned nil (journaled as returned, maybe not durable)",
				where, e.Del, ns(e.T1), r.call, r.del)
		case r.nackFloor == 0 && e.T1 < r.until:
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) in the process where the %s of delivery %d returned nil (journaled as returned, maybe not durable), before the instant it returned (%s)",
				where, e.Del, ns(e.T1), r.call, r.del, ns(r.until))
		case r.nackFloor != 0 && e.T1 < min(r.until, r.nackFloor):
			c.violate(e.ID, "%s again (delivery %d, Receive ended %s) in the process where the %s of delivery %d returned nil (journaled as returned, maybe not durable), before the instant it returned (%s) or the nack meant for it could have made it visible (%s)",
				where, e.Del, ns(e.T1), r.call, r.del, ns(r.until), ns(r.nackFloor))
		}
	}
	if m.visibleAt != 0 && e.T1 < m.visibleAt {
		c.violate(e.ID, "%s again (delivery %d, Receive ended %s) before its retry delay ended (%s)", where, e.Del, ns(e.T1), ns(m.visibleAt))
	}
	if e.Queue == QueuePoison && m.lastDelCycle == c.cycle {
		c.violate(e.ID, "a poison message delivered twice to one process")
	}
	return m
}

// expect notes what the consumer of delivery del (leased until exp) will
// do with it, which a kill or a power loss may leave done or not: an ack
// may have removed the message, a nack ended its lease (no earlier than
// nackFloor allows it back), a reject dead-lettered it.
func (m *msg) expect(intent Intent, del int, exp int64) {
	m.intentDel, m.intentExp = del, exp
	switch intent {
	case IntentAck, IntentExtendAck:
		m.mayBeGone = true
	case IntentNack, IntentExtendNack:
		m.nackDel, m.nackMeant = del, m.nackMeant|1<<uint(del)
		if f := nackFloorOf(m.queue, intent, del, exp); f != 0 {
			m.nackFloor = f
		}
	case IntentReject:
		m.rejectDel = del
	}
}

// nackFloorOf returns the earliest instant a nack meant for delivery del
// of queue (leased until exp), if intent is one, may make the message
// visible again: the clock Receive read (exp less the visibility timeout;
// the nack read its clock later) plus the retry delay. It returns 0 if
// intent nacks nothing, or nacks the last delivery the queue allows (that
// nack dead-letters the message).
func nackFloorOf(queue string, intent Intent, del int, exp int64) int64 {
	if intent != IntentNack && intent != IntentExtendNack || del >= maxDeliveries(queue) {
		return 0
	}
	p, _ := Policy(queue)
	return exp - int64(p.VisibilityTimeout) + int64(retryDelay(queue, del))
}

// maybeDelivered checks a delivery a power loss may take (OpMaybe): what
// Receive returned is checked like any delivery (see handedOut), since it
// was handed out in a live process whether or not its lease record
// survives, and its consumer's intent is noted: it may have been carried
// out (the message may be gone, or dead, or back in the queue with this
// count). It raises neither the count nor the lease the certain
// deliveries set, since the power loss may take its lease record with
// its count: the store after it then holds the message as the last
// certain delivery left it, and the next child hands it out again
// counting as this delivery did, which is sound. In its own process,
// though, its lease and count were live in memory until the power failed,
// and no delivery returns after that: the later deliveries there must
// count more and come after its lease (or the retry delay of the nack its
// intent meant) ended, as after a certain delivery whose settle is in
// flight (see maybeLease). It is checked again, and then holds everything
// later, if OpDelivered follows; that check reports only what this one
// did not (see confirmedMaybe).
func (c *Checker) maybeDelivered(e Entry) {
	before := len(c.violations)
	m := c.handedOut(e, maybeWhere)
	var reports []string
	for _, v := range c.violations[before:] {
		reports = append(reports, strings.TrimPrefix(v.What, maybeWhere))
	}
	c.maybeReports[deliveryCallOf(e)] = reports
	if m == nil {
		return
	}
	m.expect(e.Intent, e.Del, e.Exp)
	m.intentCycle, m.intentRenewed = c.cycle, e.T0 == 0
	if e.Del <= m.maxDel {
		return // reported: it holds nothing above the certain floors
	}
	m.maybe = maybeLease{cycle: c.cycle, del: e.Del, exp: e.Exp, leaseFloor: e.Exp, nackFloor: nackFloorOf(e.Queue, e.Intent, e.Del, e.Exp)}
	if e.By != 0 {
		m.maybe.leaseFloor = min(e.Exp, e.T1+e.By)
	}
}

// deliveredWhere and maybeWhere name a certain delivery and one
// journaled as a maybe in what checking it reports; every report of
// handedOut that names the delivery begins with one of them.
const (
	deliveredWhere = "delivered"
	maybeWhere     = "delivered (maybe)"
)

// deliveryCall names a delivery by what its entries record: the certain
// entry of a delivery journaled as a maybe repeats every field.
type deliveryCall struct {
	who, queue, id, ref string
	enq, exp, by        int64
	t0, t1              int64
	del                 int
	intent              Intent
	err                 string
}

func deliveryCallOf(e Entry) deliveryCall {
	return deliveryCall{who: e.Who, queue: e.Queue, id: e.ID, ref: e.Ref, enq: e.Enq, exp: e.Exp, by: e.By,
		t0: e.T0, t1: e.T1, del: e.Del, intent: e.Intent, err: e.Err}
}

// confirmedMaybe drops, from the violations checking the certain
// delivery e reported (those from index before on), each one its maybe
// reported already, so that one fault in what Receive returned (its
// payload, its lease's ExpiresAt, its count) is reported once. Checking
// the maybe saw the model as it stood then; what only the certain entry
// sees (an ack placed between the two, say) reads differently and is
// kept. A certain delivery no maybe announced keeps all it reported.
func (c *Checker) confirmedMaybe(e Entry, before int) {
	k := deliveryCallOf(e)
	reports, ok := c.maybeReports[k]
	if !ok {
		return
	}
	delete(c.maybeReports, k)
	kept := c.violations[:before]
	for _, v := range c.violations[before:] {
		if i := slices.Index(reports, strings.TrimPrefix(v.What, deliveredWhere)); i >= 0 {
			reports = slices.Delete(reports, i, i+1)
			continue
		}
		kept = append(kept, v)
	}
	c.violations = kept
}

// returnedSettled notes an Ack, Nack, Reject or Extend that returned nil
// where a power loss may take its record (OpReturned): in its own process
// its effect holds (see returnedSettle), and every later delivery there
// is checked against it (see handedOut). Across the power loss it
// promises nothing: the next process may hand the message out again as
// the certain entries left it, and the intent its delivery was journaled
// with already allows for the call having happened or not. If it turns
// out certain, the entry of e.Settle follows and is checked as any
// result.
//
// What it returned, and that it returned nil at all, are checked at once,
// as for a certain result: a power loss may take the call's record, not
// the answer the index gave in memory. A Nack's DeadLettered and
// VisibleAt and an Extend's ExpiresAt are its answer (see
// checkNackResult, checkExtendResult); and the call succeeded only on the
// message's current lease in its process, so it settled the latest
// delivery handed out there before it started, and started before that
// lease's ExpiresAt (see settledInItsProcess).
func (c *Checker) returnedSettled(e Entry) {
	m := c.msgs[e.ID]
	if m == nil {
		c.violate(e.ID, "%s of a message never delivered (journaled as returned, maybe not durable)", e.Settle)
		return
	}
	c.Figures.SettlesReturned++
	const note = " (journaled as returned, maybe not durable)"
	r := returnedSettle{cycle: c.cycle, del: e.Del}
	switch e.Settle {
	case OpAcked:
		r.call, r.gone = "ack", true
	case OpRejected:
		r.call, r.gone = "reject", true
	case OpNacked:
		c.checkNackResult(e, note)
		r.call, r.gone, r.until = "nack", e.Dead, e.Exp
		if e.Dead {
			r.until = 0
		}
	case OpExtended:
		c.checkExtendResult(e, note)
		r.call, r.until = "extend", e.Exp
		if m.intentDel == e.Del && m.nackMeant&(1<<uint(e.Del)) != 0 {
			// A nack meant for the delivery may follow the Extend and be
			// in flight at the power loss; it ends the lease early.
			r.nackFloor = nackFloorOf(e.Queue, IntentNack, e.Del, m.intentExp)
		}
	default:
		c.violate(e.ID, "a returned entry of an unknown call %q: %s", e.Settle, e)
		return
	}
	c.settledInItsProcess(e, m, r.call)
	m.returned = r
	c.returnedCalls[returnedCallOf(e.Settle, e)] = true
}

// returnedCall names a settle by what its entries record: the certain
// entry of a settle journaled as returned repeats every field.
type returnedCall struct {
	settle  Op
	id, who string
	del     int
	t0, t1  int64
	exp, by int64
	dead    bool
}

func returnedCallOf(settle Op, e Entry) returnedCall {
	return returnedCall{settle: settle, id: e.ID, who: e.Who, del: e.Del, t0: e.T0, t1: e.T1, exp: e.Exp, by: e.By, dead: e.Dead}
}

// confirmsReturned reports whether e, the certain entry of an Ack, Nack,
// Reject or Extend, is that of a settle this cycle journaled as returned:
// the same call, whose answer and lease were checked then (see
// returnedSettled), in the process's own terms, which hold at least what
// the certain entries do. Its checks are not made again, so that one
// fault is reported once; what it makes certain is still applied.
func (c *Checker) confirmsReturned(e Entry) bool {
	k := returnedCallOf(e.Op, e)
	if !c.returnedCalls[k] {
		return false
	}
	delete(c.returnedCalls, k)
	return true
}

// settledInItsProcess checks that a settle journaled as returned (e, of
// the call named call) settled the latest delivery of m handed out in
// its process before it started, and started before that delivery's
// lease expired there. A settle succeeds only on the message's current
// lease in the index, and that process's index held every delivery and
// Extend it returned, the maybes too, until the power failed, after
// which no call returns: the latest delivery there is its maybe, if one
// counts above the certain ones (see maybeDelivered), else the last
// certain one; its lease is the one Receive returned, or the last Extend
// of it that returned nil (journaled as returned at once, before the
// consumer's next call). Deliveries of other processes do not count: the
// earlier ones the certain entries hold, and the later ones come after
// a power loss that may have taken this call.
func (c *Checker) settledInItsProcess(e Entry, m *msg, call string) {
	latest, exp := m.maxDel, m.lastExp
	if mb := m.maybe; mb.cycle == c.cycle {
		latest, exp = mb.del, mb.exp
	}
	if r := m.returned; r.cycle == c.cycle && r.call == "extend" && r.del == latest {
		exp = r.until
	}
	switch {
	case e.Del != latest:
		c.violate(e.ID, "%s of delivery %d returned nil (journaled as returned, maybe not durable), but delivery %d had been handed out in its process",
			call, e.Del, latest)
	case exp != 0 && e.T0 >= exp:
		c.violate(e.ID, "%s of delivery %d returned nil (journaled as returned, maybe not durable), though the call started (%s) at or after the lease's ExpiresAt (%s): a lapsed lease is refused",
			call, e.Del, ns(e.T0), ns(exp))
	}
}

// checkDelivery checks a delivery the store handed out: never of a message
// acked, deleted or dead, and always with a count above every earlier one
// and no more than the queue's MaxDeliveries.
func (c *Checker) checkDelivery(id string, m *msg, del int, where string) {
	switch {
	case m.gone != "":
		c.violate(id, "%s (delivery %d) after it was %s", where, del, m.gone)
	case m.dead:
		c.violate(id, "%s (delivery %d) after it was dead-lettered (%s on delivery %d)", where, del, m.deadWhy, m.deadDel)
	}
	if del <= m.maxDel {
		c.violate(id, "%s with delivery count %d; an earlier delivery already counted %d", where, del, m.maxDel)
	}
	if max := maxDeliveries(m.queue); del > max {
		c.violate(id, "%s with delivery count %d; the queue allows %d", where, del, max)
	}
}

// settled returns the message of an ack, nack, reject or extend that
// returned nil, checking that it settled the latest delivery, and did so
// while its lease held: a call that started at or after the lease's
// ExpiresAt (the broker's clock read no earlier) must be refused as
// LeaseExpired. checked: the call was checked as returned already (see
// confirmsReturned).
func (c *Checker) settled(e Entry, call string, checked bool) *msg {
	m := c.msgs[e.ID]
	if m == nil {
		c.violate(e.ID, "%s of a message never delivered", call)
		return nil
	}
	switch {
	case checked:
		// Checked in its process's terms when it returned.
	case e.Del != m.maxDel:
		c.violate(e.ID, "%s of delivery %d returned nil, but delivery %d had been handed out", call, e.Del, m.maxDel)
	case m.lastExp != 0 && e.T0 >= m.lastExp:
		c.violate(e.ID, "%s of delivery %d returned nil, though the call started (%s) at or after the lease's ExpiresAt (%s): a lapsed lease is refused",
			call, e.Del, ns(e.T0), ns(m.lastExp))
	}
	if call != "extend" {
		m.nackFloor = 0 // the settle meant for the delivery is done
	}
	return m
}

func (c *Checker) nacked(e Entry, checked bool) {
	m := c.settled(e, "nack", checked)
	if m == nil {
		return
	}
	if !checked {
		c.checkNackResult(e, "")
	}
	m.lastExp, m.mayBeGone, m.nackConfirmed = 0, false, true
	if e.Dead {
		m.dead, m.deadDel, m.deadWhy, m.deadT0, m.deadT1 = true, e.Del, Reason(e.Queue, IntentNack), e.T0, e.T1
		return
	}
	m.visibleAt = e.Exp
}

// checkNackResult checks what a Nack returned (e, its result's entry, of
// either kind): DeadLettered on the last delivery the queue allows and
// only there, and otherwise a VisibleAt that is the clock during the call
// plus the retry delay. These are the call's own answer, read from the
// index in memory: a power loss that later takes the nack's record does
// not change them. note ends a report.
func (c *Checker) checkNackResult(e Entry, note string) {
	max := maxDeliveries(e.Queue)
	if e.Dead != (e.Del >= max) {
		c.violate(e.ID, "Nack of delivery %d of %d reported DeadLettered %v%s", e.Del, max, e.Dead, note)
	}
	if e.Dead {
		return
	}
	d := int64(retryDelay(e.Queue, e.Del))
	if e.Exp < e.T0+d || e.Exp > e.T1+d {
		c.violate(e.ID, "Nack of delivery %d: VisibleAt %s is not the clock during the call (%s to %s) plus the retry delay %v%s",
			e.Del, ns(e.Exp), ns(e.T0), ns(e.T1), time.Duration(d), note)
	}
}

// checkExtendResult checks the ExpiresAt an Extend returned (e, its
// result's entry, of either kind): the clock during the call plus the
// Extend asked for. note ends a report.
func (c *Checker) checkExtendResult(e Entry, note string) {
	if e.Exp < e.T0+e.By || e.Exp > e.T1+e.By {
		c.violate(e.ID, "Extend by %v returned a lease expiring at %s, not the clock during the call (%s to %s) plus %v%s",
			time.Duration(e.By), ns(e.Exp), ns(e.T0), ns(e.T1), time.Duration(e.By), note)
	}
}

func (c *Checker) settleFailed(e Entry) {
	c.Figures.SettlesRefused++
	if e.Expired {
		c.Figures.SettlesLapsed++
	}
	m := c.msgs[e.ID]
	if !e.Expired {
		c.violate(e.ID, "%s", e.Err)
	} else if e.T1 < e.Exp {
		c.violate(e.ID, "%s: refused as lapsed, but the call ended (%s) before the lease's ExpiresAt (%s)", e.Err, ns(e.T1), ns(e.Exp))
	}
	if m == nil || e.Del != m.intentDel || e.Exp != m.intentExp && e.Exp != m.lastExp {
		// A refusal of an earlier delivery (its consumer too slow, the
		// message handed out again since) says nothing of the latest
		// delivery, whose ack, nack or reject may still be in flight.
		return
	}
	// Nothing moved: the message is where the lapsed lease left it. The
	// consumer gives the delivery up after a refusal (a refused Extend
	// is followed by nothing), so whatever its intent meant to do never
	// happens: no ack removes the message, no nack or reject ends its
	// lease, and none reports a failure a dead letter could record. Only
	// what this intent noted is undone: a nack meant for an earlier
	// delivery of the epoch may still have happened.
	m.mayBeGone, m.nackFloor = false, 0
	if m.maybe.del == e.Del && m.maybe.exp == e.Exp {
		m.maybe.nackFloor = 0
	}
	m.nackMeant &^= 1 << uint(e.Del)
	if m.nackDel == e.Del {
		m.nackDel = 0
	}
	if m.rejectDel == e.Del {
		m.rejectDel = 0
	}
}

// deadLetterSeen checks a dead letter a store showed.
func (c *Checker) deadLetterSeen(queue, id, ref string, enq int64, del int, reason string, code uint32, cause string, failedAt int64, where string) *msg {
	m := c.lookup(id, queue, ref, enq, where)
	if m == nil {
		return nil
	}
	if wantCode, wantCause, ok := recordedCause(queue, reason); ok && (code != wantCode || cause != wantCause) {
		c.violate(id, "%s: dead letter %s with Code %#x and Cause %q; the failure it records gives Code %#x and Cause %q",
			where, reason, code, cause, wantCode, wantCause)
	}
	if m.gone != "" {
		c.violate(id, "%s: a dead letter after it was %s", where, m.gone)
	}
	if i := m.pendingReplayOf(deadLetter{reason: reason, del: del, failedAt: failedAt}); i >= 0 && (i == len(m.preReplays)-1 || where != "DeadLetters") {
		// The replay in flight at a kill did not happen; nor, when a
		// store after a power loss shows the dead letter of an earlier
		// replay, did that one and every later one. (The process that
		// read a later dead letter saw the earlier replays done: in it,
		// only the last can still show its dead letter.)
		return m
	}
	if m.replayedAt != 0 && failedAt < m.replayedAt {
		// FailedAt is the broker's clock (the real one, as the journal's)
		// when the message died, after the replay started.
		c.violate(id, "%s: dead letter %s with %d deliveries, failed at %s, before a replay of it known to have happened started (%s): the replay was lost",
			where, reason, del, ns(failedAt), ns(m.replayedAt))
	}
	if del < m.maxDel {
		c.violate(id, "%s: dead letter with %d deliveries; delivery %d was handed out", where, del, m.maxDel)
	}
	max := maxDeliveries(queue)
	switch reason {
	case broker.ReasonLeaseExpired:
		if del != max {
			c.violate(id, "%s: dead letter %s with %d deliveries; the queue allows %d", where, reason, del, max)
		}
		if exp := m.leaseFloor(); m.maxDel == max && exp != 0 && failedAt < exp {
			c.violate(id, "%s: lapsed at %s, before its last lease's ExpiresAt %s", where, ns(failedAt), ns(exp))
		}
		if mb := m.maybe; mb.del == max && failedAt < mb.leaseFloor {
			// The last delivery the queue allows was a maybe. If its lease
			// record survived, the lease lapsed no earlier than its floor;
			// if a power loss took it, the message was handed out again
			// as delivery max by a later process, whose lease lapsed later
			// still. (Every intent but an Extend leaves the lease as
			// Receive returned it, or ends the life with another reason.)
			c.violate(id, "%s: lapsed at %s, before its last lease's ExpiresAt %s (delivery %d, journaled as a maybe; had a power loss taken it, a later delivery %d would lapse later still)",
				where, ns(failedAt), ns(mb.leaseFloor), max, max)
		}
		if m.nackConfirmed {
			// The dead letter of a lapse records the last nack of the
			// message's life; LEASE_EXPIRED says nobody reported on it,
			// yet a nack of this life returned nil (and no replay since
			// may have started another life): the nack's record was lost.
			c.violate(id, "%s: dead letter %s, though a nack of it returned nil in this life (its last lease's lapse records that nack's reason)", where, reason)
		}
	case Reason(queue, IntentNack):
		// The nack of the last delivery, or the lapse of the last
		// delivery's lease after a nack of an earlier one in this epoch
		// (or in an earlier epoch a power loss may have brought back, see
		// nackMeantBefore): the dead letter records the last failure a
		// consumer reported. A lapse fails at the lease's expiry, no
		// earlier.
		lapse := m.nackMeant|m.nackMeantBefore != 0 && !m.failedBeforeExpiry(failedAt)
		if del != max || (m.nackDel != del && !lapse) {
			c.violate(id, "%s: dead letter %s with %d deliveries (queue allows %d); the journal has a nack meant for delivery %d", where, reason, del, max, m.nackDel)
		}
	case Reason(queue, IntentReject):
		if m.rejectDel != del {
			c.violate(id, "%s: dead letter %s with %d deliveries; the journal has a reject meant for delivery %d", where, reason, del, m.rejectDel)
		}
	default:
		c.violate(id, "%s: dead letter with reason %q, which nothing in the workload gives", where, reason)
	}
	if m.dead {
		if reason != m.deadWhy || del != m.deadDel {
			c.violate(id, "%s: dead letter %s with %d deliveries; it was dead-lettered %s on delivery %d", where, reason, del, m.deadWhy, m.deadDel)
		}
		if failedAt < m.deadT0 || failedAt > m.deadT1 {
			c.violate(id, "%s: FailedAt %s is not the clock during the call that dead-lettered it (%s to %s)", where, ns(failedAt), ns(m.deadT0), ns(m.deadT1))
		}
	}
	return m
}

// recordedCause returns the Code and Cause a dead letter of queue with
// reason must carry, and false for a reason nothing in the workload gives.
// A nack's or a reject's reason is the workload's cause (causeFor), whose
// code and public text the dead letter records, never its private detail;
// a lapse records LEASE_EXPIRED only when nobody reported anything, so no
// code and no cause. They are found as the broker finds them, by the
// small interfaces along the cause's chain.
func recordedCause(queue, reason string) (uint32, string, bool) {
	var intent Intent
	switch reason {
	case broker.ReasonLeaseExpired:
		return 0, "", true
	case Reason(queue, IntentNack):
		intent = IntentNack
	case Reason(queue, IntentReject):
		intent = IntentReject
	default:
		return 0, "", false
	}
	err := causeFor(queue, intent)
	var code uint32
	var public string
	var c interface{ Code() uint32 }
	if errors.As(err, &c) {
		code = c.Code()
	}
	var p interface{ Public() string }
	if errors.As(err, &p) {
		public = p.Public()
	}
	return code, public, true
}

// PoisonOutstanding reports whether a poison message is still on its way
// to the dead-letter store.
func (c *Checker) PoisonOutstanding() bool {
	for _, m := range c.live[QueuePoison] {
		if !m.dead && m.maxDel < PoisonDeliveries {
			return true
		}
	}
	return false
}

// LastPoisonCycle returns the cycle that published the latest poison
// message known, or 0.
func (c *Checker) LastPoisonCycle() int {
	last := 0
	for _, m := range c.msgs {
		if m.queue == QueuePoison {
			last = max(last, m.cycle)
		}
	}
	return last
}

// drainClock is the clock of a drain: an hour ahead, so that every lease
// has lapsed and every retry delay ended, and frozen, so that no lease the
// drain itself takes lapses.
func drainClock() func() time.Time {
	at := time.Now().Add(time.Hour)
	return func() time.Time { return at }
}

// CheckDrain opens the store in dir (a copy, or the store at the end of a
// run) with a clock an hour ahead, receives every message of every queue
// and reads every dead letter, and checks them against the journals: every
// message whose publish returned is there or was acked or deleted (or an
// ack or delete of it was in flight), none that was acked or deleted is, each is
// the message published (ID, payload, EnqueuedAt), delivery counts only
// grow, dead letters are where the journal put them, and Receive hands
// messages out oldest EnqueuedAt first. It returns the violations with
// Err, or an error of its own.
func (c *Checker) CheckDrain(dir string) error {
	ctx := context.Background()
	s, err := broker.Open(dir, broker.Options{Now: drainClock(), Sync: broker.SyncNone, SegmentBytes: SegmentBytes})
	if err != nil {
		c.violate("", "the store does not open after the kill: %v", err)
		return c.Err()
	}
	defer func() { _ = s.Close() }()
	c.Figures.Drains++
	c.checkRecovery(s)
	present := map[string]bool{}
	dead := map[string]deadLetter{} // the dead letters shown, by ID
	for _, name := range s.Queues() {
		policy, ok := Policy(name)
		if !ok {
			c.violate("", "the store holds a queue %q nobody declared", name)
			continue
		}
		q, err := s.Queue(name, policy)
		if err != nil {
			return fmt.Errorf("recovery: drain: queue %s: %w", name, err)
		}
		var drained []broker.DeliveryValue
		for {
			ds, err := q.Receive(ctx, 256)
			if err != nil {
				c.violate("", "drain: Receive on %s: %v", name, err)
				return c.Err()
			}
			if len(ds) == 0 {
				break
			}
			drained = append(drained, ds...)
		}
		dls, err := q.DeadLetters(ctx, 1<<30)
		if err != nil {
			c.violate("", "drain: DeadLetters on %s: %v", name, err)
			return c.Err()
		}
		c.Figures.Drained += len(drained)
		c.Figures.DeadLetters += len(dls)
		for i, d := range drained {
			if i > 0 {
				prev := drained[i-1].Message
				if cmpEnqueued(prev, d.Message) > 0 {
					c.violate(d.Message.ID, "drain: received after %s although enqueued earlier (%s < %s): Receive must hand out the oldest first",
						prev.ID, ns(d.Message.EnqueuedAt.UnixNano()), ns(prev.EnqueuedAt.UnixNano()))
				}
			}
			c.seeOnce(present, d.Message.ID, "drain")
			ref, perr := CheckPayload(d.Message.Payload)
			if perr != nil {
				c.violate(d.Message.ID, "drain: payload: %v", perr)
				ref = "" // see lookup
			}
			m := c.lookup(d.Message.ID, name, ref, d.Message.EnqueuedAt.UnixNano(), "drain")
			if m != nil {
				c.checkDelivery(d.Message.ID, m, d.Deliveries, "drain")
			}
		}
		for i, dl := range dls {
			if i > 0 && (dls[i-1].FailedAt.After(dl.FailedAt)) {
				c.violate(dl.Message.ID, "drain: dead letters out of order: FailedAt %s after %s", ns(dl.FailedAt.UnixNano()), ns(dls[i-1].FailedAt.UnixNano()))
			}
			c.seeOnce(present, dl.Message.ID, "drain")
			ref, perr := CheckPayload(dl.Message.Payload)
			if perr != nil {
				c.violate(dl.Message.ID, "drain: dead letter payload: %v", perr)
				ref = "" // see lookup
			}
			m := c.deadLetterSeen(name, dl.Message.ID, ref, dl.Message.EnqueuedAt.UnixNano(), dl.Deliveries, dl.Reason, dl.Code, dl.Cause, dl.FailedAt.UnixNano(), "drain")
			if m != nil && name == QueuePoison && dl.Reason == broker.ReasonLeaseExpired && m.maxDel == PoisonDeliveries && !c.poisonDone[dl.Message.ID] {
				c.poisonDone[dl.Message.ID] = true
				c.Figures.PoisonRounds++
			}
		}
		deadIDs := map[string]bool{}
		for _, dl := range dls {
			deadIDs[dl.Message.ID] = true
			dead[dl.Message.ID] = deadLetter{reason: dl.Reason, del: dl.Deliveries, failedAt: dl.FailedAt.UnixNano()}
		}
		for id, m := range c.live[name] {
			if m.mayBeGone {
				continue
			}
			switch {
			case !present[id]:
				c.violate(id, "lost: %s; not in the store (%s)", m.describe(), name)
			case m.dead && !deadIDs[id]:
				c.violate(id, "dead-lettered (%s), but receivable again", m.deadWhy)
			}
		}
	}
	c.lostWithTheirQueue(s, "lost")
	c.heldAfterAll(present)
	c.goneAfterAll(present)
	c.deadAfterAll(dead)
	c.checkBatchesWhole()
	return c.Err()
}

// checkBatchesWhole checks, once the store after a kill has been drained,
// that each PublishBatch in flight at the kill of which it or the journal
// showed a message is there whole: a batch is one commit, so after a crash
// either all its messages exist or none does. Every message of it that
// the drain did not receive must be one the journal accounts for (a
// consumer received it, journaling the delivery before it acked it; the
// janitor journaled its delete before making it), and all such are known
// by their references. A batch checked is not checked again: nothing
// publishes its messages later.
func (c *Checker) checkBatchesWhole() {
	for _, first := range slices.Sorted(maps.Keys(c.batches)) {
		r := c.batches[first]
		delete(c.batches, first)
		var missing []int
		var some string
		for i := range r.Of {
			r.Index = i
			if id, ok := c.refs[MakeRef(r)]; ok {
				some = id
			} else {
				missing = append(missing, i)
			}
		}
		c.Figures.InFlightBatches++
		if len(missing) > 0 {
			c.violate(some, "torn batch: %s's PublishBatch of %d messages to %s (cycle %d, attempt %d) was in flight at the kill; the store shows some of them, but not those at indices %v",
				r.Who, r.Of, r.Queue, r.Cycle, r.N, missing)
		}
	}
}

// heldAfterAll notes that a store opened after a kill holds the messages
// in present: an ack or delete of one that was in flight at the kill did
// not happen, and its process, gone, never makes it happen, so the message
// must stay from now on.
func (c *Checker) heldAfterAll(present map[string]bool) {
	for id := range present {
		if m := c.msgs[id]; m != nil && m.gone == "" {
			m.mayBeGone = false
		}
	}
}

// goneAfterAll notes that a store opened after a kill and drained whole
// does not hold the messages missing from present: an ack or delete of
// one that was in flight at the kill happened (nothing else removes a
// message), and, its process gone, nothing brings it back, so a later
// store that shows it has resurrected it. A drain sees every message a
// store holds (its clock is past every lease and retry delay); the next
// child opens the very bytes drained (CheckCopy drains a copy of them).
func (c *Checker) goneAfterAll(present map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(c.live)) {
		for _, id := range slices.Sorted(maps.Keys(c.live[name])) {
			if m := c.live[name][id]; m.mayBeGone && !present[id] {
				c.setGone(id, m, "acked or deleted (in flight at a kill; the store after it no longer held it)")
			}
		}
	}
}

// deadAfterAll settles, once a store opened after a kill has been drained
// whole, the calls in flight at the kill that move a message into or out
// of the dead-letter store, by the dead letters the store holds (dead, by
// ID). Their processes are gone, so a call that did not happen never will;
// and the next child opens the very bytes drained (see goneAfterAll).
//
//   - A replay whose dead letter the store still shows as the janitor read
//     it did not happen, nor did anything of the message after it: the
//     message is dead, as it was, until a replay or a delete (that replay
//     stays pending, so that this dead letter is still taken for the one
//     read). The replays before it, whose dead letters the store no
//     longer shows, happened. A replay whose dead letter the store no
//     longer shows happened (or, after a power loss, the death it undid
//     was lost with it): no store shows that dead letter again, and every
//     dead letter of the message from now on failed after it was read.
//   - A reject or a nack whose dead letter (its reason, with the count of
//     the delivery it was meant for) the store shows happened: the message
//     is dead, as if the call had returned. One whose dead letter the
//     store does not show did not happen, and no later dead letter is
//     explained by it.
//
// A LEASE_EXPIRED dead letter settles nothing: the drain, an hour ahead,
// may have made it itself, and the next child makes it at its own lapse.
func (c *Checker) deadAfterAll(dead map[string]deadLetter) {
	for name, live := range c.live {
		for id, m := range live {
			dl, shown := dead[id] // the zero deadLetter if none
			if n := len(m.preReplays); n > 0 {
				if i := m.pendingReplayOf(dl); shown && i >= 0 {
					if i > 0 {
						m.replayedAt = max(m.replayedAt, m.preReplays[i-1].read)
					}
					p := m.preReplays[i]
					m.preReplays = []pendingReplay{p}
					m.dead, m.deadWhy, m.deadDel, m.deadT0, m.deadT1 = true, p.dl.reason, p.dl.del, p.dl.failedAt, p.dl.failedAt
					m.rejectDel, m.nackDel = 0, 0
					continue
				}
				m.replayedAt = max(m.replayedAt, m.preReplays[n-1].read)
				m.preReplays = nil
			}
			m.rejectDel = m.deadIfShown(m.rejectDel, Reason(name, IntentReject), dl)
			m.nackDel = m.deadIfShown(m.nackDel, Reason(name, IntentNack), dl)
		}
	}
}

// deadIfShown settles a reject or a nack meant for delivery del, which
// dead-letters with reason why, by the dead letter dl a store opened after
// a kill shows (the zero deadLetter if none): if dl is its dead letter, the
// message is dead, and del stays the delivery it explains; if not, it
// returns 0: no dead letter is explained by it any more.
//
// A dead letter of the nack's reason that failed at or after the earliest
// instant the lease may have lapsed may be that lapse (see below), made by
// the drain itself, an hour ahead, and so is not taken for the nack: the
// lapse of the last delivery explains it all the same (see
// deadLetterSeen). A lapse never records a reject's reason, so for a
// reject the lease only checks that the reject came while it held, and
// must then be the latest the lease may have reached: an Extend journaled
// only as returned (under SyncPublish) may have reached further than the
// certain entries say, a reject that returned nil had its lease, and
// Consume on the queue itself renews leases unjournaled until the kill.
func (m *msg) deadIfShown(del int, why string, dl deadLetter) int {
	if del == 0 || dl.reason != why || dl.del != del {
		return 0
	}
	exp := m.leaseFloor()
	if del == m.intentDel && del > m.maxDel && m.intentExp > exp {
		// The delivery the call was meant for was a maybe (see
		// maybeDelivered), whose lease, not the last certain one's,
		// is the one the call had: a reject or nack within it fails
		// after the earlier lease lapsed. (A certain delivery's lease
		// is the floor's: an Extend may have shortened it since
		// Receive, and its lapse then comes before intentExp.)
		exp = m.intentExp
	}
	if r := m.returned; del == m.intentDel && why == Reason(m.queue, IntentReject) {
		ofIt := r.cycle == m.intentCycle && r.del == del
		switch {
		case m.intentRenewed, ofIt && r.call == "reject":
			exp = 0
		case ofIt && r.call == "extend":
			exp = max(exp, r.until)
		}
	}
	if exp != 0 && dl.failedAt >= exp {
		// Failed at or after the lease's expiry: no reject or nack (they
		// need a live lease) but the lapse of a last delivery, which
		// records the reason of the last nack (DeadLetterValue.Reason).
		return 0
	}
	if !m.dead {
		m.dead, m.deadWhy, m.deadDel, m.deadT0, m.deadT1 = true, dl.reason, dl.del, dl.failedAt, dl.failedAt
	}
	return del
}

// lostWithTheirQueue reports every message that must be in the store
// although the store does not list its queue at all: the checks that walk
// the store's queues would never look for it.
func (c *Checker) lostWithTheirQueue(s *broker.Store, what string) {
	listed := map[string]bool{}
	for _, name := range s.Queues() {
		listed[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(c.live)) {
		if listed[name] {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(c.live[name])) {
			if m := c.live[name][id]; !m.mayBeGone {
				c.violate(id, "%s: %s; the store has no queue %s", what, m.describe(), name)
			}
		}
	}
}

// seeOnce notes that a store showed id, which it must show only once.
func (c *Checker) seeOnce(present map[string]bool, id, where string) {
	if present[id] {
		c.violate(id, "%s: the store holds the message twice", where)
	}
	present[id] = true
}

func (m *msg) describe() string {
	how := "its publish returned"
	if !m.journaled {
		how = "published by a call in flight at a kill, found later"
	}
	s := fmt.Sprintf("%s (cycle %d, %q)", how, m.cycle, m.ref)
	if m.maxDel > 0 {
		s += fmt.Sprintf(", last delivered as delivery %d", m.maxDel)
	}
	if m.dead {
		s += fmt.Sprintf(", dead-lettered %s", m.deadWhy)
	}
	return s
}

func cmpEnqueued(a, b broker.MessageValue) int {
	if c := a.EnqueuedAt.Compare(b.EnqueuedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

func (c *Checker) checkRecovery(s *broker.Store) {
	rec := s.Recovery()
	if rec.TornTail {
		c.Figures.TornTails++
	}
	if rec.IndexRebuilt {
		c.Figures.IndexRebuilt++
	}
	if rec.SalvagedSpans > 0 || len(rec.LostMessages) > 0 {
		c.violate("", "opening after a process kill reported damage: %+v", rec)
	}
}

// CheckInPlace opens the store in dir with the real clock, as the next
// child will, and checks what it can without consuming anything: the open
// itself, every dead letter, that every message the journal has dead is
// one, and that each queue holds at least the messages the journal says
// must be there. It closes the store cleanly.
func (c *Checker) CheckInPlace(dir string) error {
	ctx := context.Background()
	s, err := broker.Open(dir, broker.Options{SegmentBytes: SegmentBytes})
	if err != nil {
		c.violate("", "the store does not open after the kill: %v", err)
		return c.Err()
	}
	c.checkRecovery(s)
	for _, name := range s.Queues() {
		policy, ok := Policy(name)
		if !ok {
			c.violate("", "the store holds a queue %q nobody declared", name)
			continue
		}
		q, err := s.Queue(name, policy)
		if err != nil {
			return errors.Join(fmt.Errorf("recovery: queue %s: %w", name, err), s.Close())
		}
		dls, err := q.DeadLetters(ctx, 1<<30)
		if err != nil {
			c.violate("", "DeadLetters on %s: %v", name, err)
			continue
		}
		present := map[string]bool{}
		for _, dl := range dls {
			c.seeOnce(present, dl.Message.ID, "in place")
			ref, perr := CheckPayload(dl.Message.Payload)
			if perr != nil {
				c.violate(dl.Message.ID, "in place: dead letter payload: %v", perr)
				ref = "" // see lookup
			}
			c.deadLetterSeen(name, dl.Message.ID, ref, dl.Message.EnqueuedAt.UnixNano(), dl.Deliveries, dl.Reason, dl.Code, dl.Cause, dl.FailedAt.UnixNano(), "in place")
		}
		c.heldAfterAll(present)
		must := 0
		for id, m := range c.live[name] {
			if m.mayBeGone {
				continue
			}
			must++
			if m.dead && !present[id] {
				c.violate(id, "in place: dead-lettered (%s on delivery %d) but not a dead letter", m.deadWhy, m.deadDel)
			}
		}
		st := q.Stats()
		if held := st.Ready + st.Leased + st.Delayed + st.DeadLetters; held < must {
			c.violate("", "in place: queue %s holds %d messages (%+v); the journal says at least %d must be there", name, held, st, must)
		}
	}
	c.lostWithTheirQueue(s, "in place: lost")
	if err := s.Close(); err != nil {
		c.violate("", "closing the store: %v", err)
	}
	return c.Err()
}
