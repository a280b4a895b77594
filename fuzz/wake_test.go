package fuzz

import (
	"time"
)

// The Wake operation of FuzzBrokerDifferential (inputs that set
// inputMore), and the run's watch on every signal it hands out.
//
// Wake looks at the queue (it observes the deadlines passed by now, as
// Stats does) and says when a message the queue holds becomes receivable
// with no further event: at once (Scheduled, In zero) when one is
// receivable now; else at the earliest end of a retry delay or lapse of a
// lease with deliveries left (a last delivery that lapses becomes a dead
// letter, never receivable: docs/DESIGN.md, "Time"); else never (not
// Scheduled). Its Signal is open when handed out, and is closed by exactly
// these events on its queue (DESIGN.md, "What closes the wake signal";
// API.md §5.3: a publish on another queue does not): a publish that
// enqueues (not a refused one, nor a duplicate key), a Nack that hands the
// message back (not one that dead-letters it), a replay, a change of
// policy, an Extend that brings the lapse closer; and by the store's
// Close, for good. After every operation the run checks each signal it
// holds against that: closed if and only if the model says so.

// wakeWatch is a Wake signal the run holds, and whether an event the model
// knows has closed it since it was handed out.
type wakeWatch struct {
	signal <-chan struct{}
	fired  bool
}

// fireWake records an event that closes queue qi's wake signal.
func (s *twin) fireWake(qi int) {
	if w := s.wakes[qi]; w != nil {
		w.fired = true
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (s *twin) wake(qi int) {
	mq := s.m.qs[qi]
	now := s.now()
	w := s.qs[qi].Wake()
	mq.observe(now)
	var want string
	switch at, ok := mq.nextDue(now); {
	case len(mq.receivable()) > 0:
		want = "scheduled in 0s"
	case ok:
		want = "scheduled in " + time.Duration(at-now).String()
	default:
		want = "not scheduled"
	}
	got := "not scheduled"
	if w.Scheduled {
		got = "scheduled in " + w.In.String()
	}
	s.logf("  %s.Wake -> %s", mq.name, got)
	s.check(got == want, "%s.Wake: %s, the model says %s", mq.name, got, want)
	s.check(w.Signal != nil && !closed(w.Signal), "%s.Wake handed out a signal that is nil or closed already", mq.name)
	s.wakes[qi] = &wakeWatch{signal: w.Signal}
}

// nextDue returns the earliest instant after now at which a message of q
// becomes receivable with no further event, or false; the caller observed
// at now.
func (q *mQueue) nextDue(now int64) (int64, bool) {
	best, ok := int64(0), false
	for _, m := range q.msgs {
		due := !m.seen && (m.state == mLeased && !q.final(m) || m.state == mReady && m.at != atOnce)
		if due && m.at > now && (!ok || m.at < best) {
			best, ok = m.at, true
		}
	}
	return best, ok
}

// checkWakes checks every signal the run holds: closed exactly when an
// event the model knows closed it. One seen closed is let go.
func (s *twin) checkWakes() {
	s.t.Helper()
	for qi, w := range s.wakes {
		if w == nil {
			continue
		}
		c := closed(w.signal)
		switch {
		case c && !w.fired:
			s.fail("%s: the wake signal is closed, and nothing that may make a message receivable happened on the queue", s.m.qs[qi].name)
		case !c && w.fired:
			s.fail("%s: the wake signal is still open after an event that makes a message receivable", s.m.qs[qi].name)
		}
		if c {
			s.wakes[qi] = nil
		}
	}
}

// closedWakes checks, once the store is closed, that every signal the run
// holds is closed, and lets them go.
func (s *twin) closedWakes() {
	s.t.Helper()
	for qi, w := range s.wakes {
		if w != nil {
			s.check(closed(w.signal), "%s: the wake signal is still open after Close", s.m.qs[qi].name)
		}
		s.wakes[qi] = nil
	}
}
