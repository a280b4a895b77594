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
type retry struct {
	failed   int64         // attempts failed in a row; 0 while the step works
	since    int64         // when the first of them failed
	last     int64         // when the step was last tried after a failure
	wait     time.Duration // from last to the next attempt (see next)
	reminded int64         // when the failure was last logged
}

// isDue reports whether the step is to be tried at now: always while it
// works, and after a failure once its wait is over, or at once when the
// clock went back before the last attempt (the wait would stretch by as
// much).
func (r *retry) isDue(now int64) bool {
	return r.failed == 0 || now >= r.next() || now < r.last
}

// next is when the step is to be tried again after a failure (but see
// isDue).
func (r *retry) next() int64 { return r.last + int64(r.wait) }

// retryNote is what one attempt at a step tells the log: nothing, its
// first failure, a reminder that it still fails, or that it works again.
type retryNote struct {
	kind   retryKind
	failed int64         // attempts failed in a row, this one included
	since  int64         // when the first of them failed
	wait   time.Duration // until the next attempt
}

type retryKind int

const (
	retryQuiet retryKind = iota
	retryFailed
	retryStillFails
	retryWorks
)

// record notes the outcome of the attempt made at now (err nil for
// success), schedules the next after a failure, and returns what to log.
func (r *retry) record(now int64, err error) retryNote {
	if err == nil {
		if r.failed == 0 {
			return retryNote{}
		}
		n := retryNote{kind: retryWorks, failed: r.failed, since: r.since}
		*r = retry{}
		return n
	}
	if r.failed == 0 {
		*r = retry{failed: 1, since: now, last: now, reminded: now, wait: retryFirst}
		return retryNote{kind: retryFailed, failed: 1, since: now, wait: r.wait}
	}
	r.failed++
	r.wait = min(2*r.wait, retryLongest)
	r.last = now
	n := retryNote{failed: r.failed, since: r.since, wait: r.wait}
	if now-r.reminded >= int64(retryRemindEvery) || now < r.reminded {
		r.reminded = now
		n.kind = retryStillFails
	}
	return n
}

// log writes n to l, for the step named by what ("reclaiming disk space")
// of the store in dir, whose attempt failed with err (nil for success).
func (n retryNote) log(l *slog.Logger, what, dir string, err error) {
	since := time.Unix(0, n.since)
	switch n.kind {
	case retryFailed:
		l.Warn("broker: "+what+" failed; the store goes on, and tries again later, less often while it keeps failing (at least every "+retryLongest.String()+"), with a reminder every "+retryRemindEvery.String()+" at most",
			"dir", dir, "err", err, "retry_in", n.wait)
	case retryStillFails:
		l.Warn("broker: "+what+" still fails",
			"dir", dir, "err", err, "failed_attempts", n.failed, "since", since, "retry_in", n.wait)
	case retryWorks:
		l.Info("broker: "+what+" works again",
			"dir", dir, "failed_attempts", n.failed, "since", since)
	}
}
