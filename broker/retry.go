package broker

import (
	"log/slog"
	"time"
)

// A maintenance step that fails and leaves the store working (reclaiming
// disk space, whose removal of a segment file fails for as long as the
// file system refuses it: EACCES or EPERM on the file or its directory, a
// file system remounted read-only) is tried again on a schedule, not at
// every round: each round that tried it again synced the log first and
// logged a WARN, every second for as long as the file stayed. The schedule
// runs on the broker's clock (Options.Now), and a round before the next
// attempt is due does nothing for the step. See docs/DESIGN.md, "Reclaiming
// disk space".
const (
	// retryFirst is how long after a first failure the step is tried
	// again; each failure after it doubles the wait, up to retryLongest.
	retryFirst   = 2 * time.Second
	retryLongest = time.Minute
	// retryRemindEvery is the least time between two WARN records of a
	// failure that goes on.
	retryRemindEvery = 10 * time.Minute
)

// retry is the schedule of a maintenance step after it failed, on the
// broker's clock, in Unix nanoseconds. The zero value is a step that has
// not failed. The lock of the step it schedules guards it.
//
// An attempt may be made while the clock cannot be read (Options.Now
// panics, or reads outside the instants a broker records): its instant is
// unknown, and nothing is made up for it. A first failure met so has no
// since, and its schedule starts at the first attempt that reads the
// clock; a later one leaves the schedule where it is.
type retry struct {
	failed   int64         // attempts failed in a row; 0 while the step works
	since    int64         // when the first of them failed (see sinceKnown)
	last     int64         // when the step was last tried after a failure
	wait     time.Duration // from last to the next attempt (see next)
	reminded int64         // when the failure was last logged
	// sinceKnown: the clock was read at the first failure, and since
	// holds its reading.
	sinceKnown bool
	// unclocked: no attempt of this failure has read the clock yet, so
	// last and reminded are no readings: the next attempt that reads it
	// is due at once, and sets them.
	unclocked bool
}

// isDue reports whether the step is to be tried at now (known false: the
// clock could not be read): always while it works; after a failure, once
// its wait is over, or at once when the clock went back before the last
// attempt (the wait would stretch by as much), or when no attempt of the
// failure has read the clock yet; never, after a failure, without a
// reading.
func (r *retry) isDue(now int64, known bool) bool {
	if r.failed == 0 {
		return true
	}
	return known && (r.unclocked || now >= r.next() || now < r.last)
}

// next is when the step is to be tried again after a failure (but see
// isDue).
func (r *retry) next() int64 { return r.last + int64(r.wait) }

// retryNote is what one attempt at a step tells the log: nothing, its
// first failure, a reminder that it still fails, or that it works again.
type retryNote struct {
	kind       retryKind
	failed     int64         // attempts failed in a row, this one included
	since      int64         // when the first of them failed, if sinceKnown
	sinceKnown bool          // the clock was read at the first failure
	wait       time.Duration // until the next attempt
}

type retryKind int

const (
	retryQuiet retryKind = iota
	retryFailed
	retryStillFails
	retryWorks
)

// record notes the outcome of the attempt made at now (known false: the
// clock could not be read, and now means nothing), err nil for success,
// schedules the next after a failure, and returns what to log.
func (r *retry) record(now int64, known bool, err error) retryNote {
	if err == nil {
		if r.failed == 0 {
			return retryNote{}
		}
		n := retryNote{kind: retryWorks, failed: r.failed, since: r.since, sinceKnown: r.sinceKnown}
		*r = retry{}
		return n
	}
	if r.failed == 0 {
		if !known {
			*r = retry{failed: 1, wait: retryFirst, unclocked: true}
		} else {
			*r = retry{failed: 1, since: now, sinceKnown: true, last: now, reminded: now, wait: retryFirst}
		}
		return retryNote{kind: retryFailed, failed: 1, since: r.since, sinceKnown: r.sinceKnown, wait: r.wait}
	}
	r.failed++
	r.wait = min(2*r.wait, retryLongest)
	n := retryNote{failed: r.failed, since: r.since, sinceKnown: r.sinceKnown, wait: r.wait}
	switch {
	case !known:
		// No instant to schedule from, nor to remind at: the schedule
		// stays where it is.
	case r.unclocked:
		// The first reading of this failure: its first WARN was the
		// last record, at an instant unknown, and the schedule starts
		// here.
		r.unclocked = false
		r.last, r.reminded = now, now
	default:
		r.last = now
		if now-r.reminded >= int64(retryRemindEvery) || now < r.reminded {
			r.reminded = now
			n.kind = retryStillFails
		}
	}
	return n
}

// log writes n to l, for the step named by what ("reclaiming disk space")
// of the store in dir, whose attempt failed with err (nil for success).
// The instant of the first failure is left out when the clock could not be
// read then.
func (n retryNote) log(l *slog.Logger, what, dir string, err error) {
	var since []any
	if n.sinceKnown {
		since = []any{"since", time.Unix(0, n.since)}
	}
	switch n.kind {
	case retryFailed:
		l.Warn("broker: "+what+" failed; the store goes on, and tries again later, less often while it keeps failing (at least every "+retryLongest.String()+"), with a reminder every "+retryRemindEvery.String()+" at most",
			"dir", dir, "err", err, "retry_in", n.wait)
	case retryStillFails:
		l.Warn("broker: "+what+" still fails",
			append(append([]any{"dir", dir, "err", err, "failed_attempts", n.failed}, since...), "retry_in", n.wait)...)
	case retryWorks:
		l.Info("broker: "+what+" works again",
			append([]any{"dir", dir, "failed_attempts", n.failed}, since...)...)
	}
}
