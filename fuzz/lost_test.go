package fuzz

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// What a power loss may take under SyncPublish, and how a run of
// FuzzBrokerDifferential finds what it took.
//
// Under SyncPublish a publish returns once an fdatasync covers it; every
// other event (a lease, an ack, a nack, a reject, an extend, a replay, a
// delete, a sweep's dead letters, a dedup clock reading) is written before
// its call returns and reaches the device with the next commit, or within
// SyncInterval, by the background commit that runs when nothing else asks
// for one (API.md, sync modes; broker.Options). A queue declaration is
// fdatasynced whatever the mode (docs/DESIGN.md, "Queue declarations").
// The log is written in the order the calls were decided and an fdatasync
// covers all that was written before it, so a power loss leaves the state
// after some call since the last publish or declaration that returned: no
// acknowledged publish lost, no policy change lost, nothing invented,
// nothing reordered, but the last few leases and settlements may be gone
// (a redelivery, which at-least-once permits). Which of those states it
// left, the model cannot know: it depends on timing, on whether the
// background commit (on the wall clock, not the run's fake one) ran since
// the last of those calls, and on the store's own commits (a rotation, a
// checkpoint, a copy forward), which may have covered more. The same input
// may leave one state in one run and another in the next.
//
// So the run assumes none of them. It keeps a trail of the model's states
// since the last commit it knows of, and after a power loss audits a copy
// of the clone once for each distinct state, oldest first, until one
// passes: the store must hold one of them exactly, whichever the timing
// made it. The run then goes on from that state. Where another state
// differs from it only in what no audit sees, going on could fail for
// nothing: the run ends there, with its audit. No audit sees the dedup
// clock (only a clock set back shows it) nor a lease's receipt (an Extend
// to the instant the lease already had changes nothing else). An audit
// settles no lease; trying each receipt would not do either, since once a
// lease has lapsed the store refuses each of its receipts alike, while a
// clock set back later makes the current one count again.

// trail is the model's states since the last call known to be on the
// device (oldest first), the current one not included.
type trail struct{ states []*model }

// mark records the model's state as one a power loss may leave.
func (s *twin) mark() {
	if s.trail != nil {
		s.trail.states = append(s.trail.states, s.m.clone())
	}
}

// durable says that everything up to now is on the device: a power loss
// leaves this state or a later one.
func (s *twin) durable() {
	if s.trail != nil {
		s.trail.states = s.trail.states[:0]
	}
}

// lostState finds which of the states the trail allows the power-loss
// clone in dir holds, by auditing a copy of it for each, and returns that
// state (restarted at now) and whether the run can go on from it. It
// fails the run if the clone holds none of them.
func (r *runner) lostState(dir string) (*model, bool) {
	now := r.now()
	var states []*model
	seen := map[string]bool{}
	for _, st := range append(slices.Clone(r.trail.states), r.m) {
		c := st.clone()
		c.restart(now)
		// Every receipt handed out stays the store's: one whose lease
		// the loss took is refused as a lapsed lease, not as unknown.
		c.owner, c.minted = maps.Clone(r.m.owner), slices.Clone(r.m.minted)
		for i := range c.qs {
			c.qs[i].receipts = slices.Clone(r.m.qs[i].receipts)
		}
		// (The counters too: a lowering a power loss cut short gives
		// up on its messages at the reopen, counted, and at this same
		// reading of the clock leaves a state that otherwise looks the
		// same as the whole lowering's.)
		if k := c.dumpState(now, true) + fmt.Sprint(c.qs[0].c, c.qs[1].c); !seen[k] {
			seen[k] = true
			states = append(states, c)
		}
	}
	var failures []string
	for i, c := range states {
		copyDir := filepath.Join(r.base, fmt.Sprintf("trial%d-%d", r.gen, i))
		if err := os.CopyFS(copyDir, os.DirFS(dir)); err != nil {
			r.fail("copy %s: %v", dir, err)
		}
		failure := r.trial(fmt.Sprintf("[state %d of %d] ", i+1, len(states)), c.clone(), copyDir)
		_ = os.RemoveAll(copyDir)
		if failure == "" {
			r.logf("  the power loss left state %d of %d since the last commit", i+1, len(states))
			return c, r.unambiguous(c, states, now)
		}
		failures = append(failures, fmt.Sprintf("state %d: %s\n%s", i+1, failure, c.dump(now)))
	}
	r.fail("after a power loss under SyncPublish the store holds none of the %d states the contract allows:\n\n%s",
		len(states), strings.Join(failures, "\n"))
	return nil, false
}

// unambiguous reports whether no other state differs from found only in
// what no audit sees: the dedup clock and the leases' receipts.
func (r *runner) unambiguous(found *model, states []*model, now int64) bool {
	k := found.dumpState(now, false)
	for _, c := range states {
		if c != found && c.dumpState(now, false) == k {
			r.logf("  another state differs from it only in what no audit sees (the dedup clock, a lease's receipt)")
			return false
		}
	}
	return true
}

// trial opens the store in dir beside the run's and audits it against m.
// It returns the audit's failure, or "" if it passed; a failure ends the
// trial only.
func (r *runner) trial(where string, m *model, dir string) string {
	var failure string
	tb := &softTB{TB: r.t, failure: &failure}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a := twin{t: tb, m: m, clock: &fakeClock{}, history: new([]string), serial: r.serial, where: where}
		a.clock.ns.Store(r.now())
		a.openStore(dir, nil, r.sync, true)
		defer func() { _ = a.store.Close() }()
		a.audit()
	}()
	<-done
	if i := strings.Index(failure, "\n\noperations"); i >= 0 {
		failure = failure[:i]
	}
	return failure
}

// softTB is a testing.TB whose Fatalf ends only the goroutine that calls
// it, keeping the message: a trial's failure is an answer, not the run's.
type softTB struct {
	testing.TB
	failure *string
}

func (t *softTB) Helper() {}

func (t *softTB) Logf(string, ...any) {}

func (t *softTB) Fatalf(format string, args ...any) {
	*t.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// commitBeforeRestart is a beforeRestart hook that puts everything written
// on the device, as SyncInterval's background commit does a moment later:
// a queue declaration is fdatasynced whatever the sync mode, and with it
// all that came before (docs/DESIGN.md, "Queue declarations").
func commitBeforeRestart(t *testing.T) func(*runner) {
	return func(r *runner) {
		_, err := r.store.Queue("commit", queuePolicies[0])
		require.NoError(t, err)
	}
}

// TestPowerLossStatesDifferingOnlyInADeadLetterCodeAreBothTried: after a
// power loss under SyncPublish the store may hold any of the model's states
// since the last commit, the latest one too, and the run tries each of them
// that differs from the others in anything. A dead letter's code and cause
// are part of the state (an audit compares them): here a message is
// rejected, replayed, received and rejected again at the same instant, for
// the same reason with another code, and the device holds the latest state,
// which must not be set aside as a copy of the first.
func TestPowerLossStatesDifferingOnlyInADeadLetterCodeAreBothTried(t *testing.T) {
	o := func(k opKind, q int, a, b byte) op { return op{kind: k, q: q, a: a, b: b} }
	require.Equal(t, broker.ReasonUnclassified, causes[1].reason)
	require.Equal(t, broker.ReasonUnclassified, causes[5].reason)
	require.NotEqual(t, causes[1].code, causes[5].code)
	data := encodeInput(broker.SyncPublish,
		o(opPublish, 0, 5, 0),
		o(opReceive, 0, 1, 0),
		o(opReject, 0, 0, 1), // UNCLASSIFIED, code 0
		o(opReplay, 0, 0, 0),
		o(opReceive, 0, 1, 0),
		o(opReject, 0, 0, 5), // UNCLASSIFIED, code 0x03000001, same instant
		o(opCrash, 0, 0, 0),
	)
	runInputWith(t, data, commitBeforeRestart(t))
}

// TestPowerLossStatesDifferingOnlyInAReceiptEndTheRun: after a power loss
// under SyncPublish the run goes on from the state the store holds, and
// ends instead when another state differs from it only in what no audit
// sees, so that going on cannot fail for nothing. A lease's receipt is
// such a thing: an Extend to the instant the lease already had gives a
// new receipt and nothing else. With the device holding the Extend, the
// run must not go on with the receipt it replaced, which the store rightly
// refuses (API.md §5, reading 7).
func TestPowerLossStatesDifferingOnlyInAReceiptEndTheRun(t *testing.T) {
	o := func(k opKind, q int, a, b byte) op { return op{kind: k, q: q, a: a, b: b} }
	require.Equal(t, queuePolicies[0].VisibilityTimeout, extendBys[2], "the Extend keeps the lease's instant")
	data := encodeInput(broker.SyncPublish,
		o(opPublish, 0, 5, 0),
		o(opReceive, 0, 1, 0),
		o(opExtend, 0, 0, 2), // the live lease, by 10 s at the same instant: same ExpiresAt, new receipt
		o(opCrash, 0, 0, 0),
		o(opAck, 0, 0, 0), // the live lease, by the receipt the model holds
	)
	r := runInputWith(t, data, commitBeforeRestart(t))
	require.True(t, r.over, "the run went on from a state whose receipt no audit checked")
}
