package broker

import (
	"fmt"
	"math"
	"time"
)

// The instants a broker records: Unix nanoseconds in an int64, from
// September 1677 to April 2262.
var (
	firstInstant = time.Unix(0, math.MinInt64)
	lastInstant  = time.Unix(0, math.MaxInt64)
)

// unixNanos returns the clock reading t in Unix nanoseconds, or an error
// naming it when it lies outside the instants a broker records: there
// UnixNano wraps around, and an enqueue instant, a lease deadline or a
// dedup key's age would be recorded as some other instant (a zero
// time.Time, a clock nobody set, reads as 1754). A call that reads such a
// clock fails and changes nothing. The caller names the broker in the
// error.
func unixNanos(t time.Time) (int64, error) {
	if t.Before(firstInstant) || t.After(lastInstant) {
		return 0, fmt.Errorf("the clock reads %s, outside the instants a broker records (%s to %s, Unix nanoseconds): %w",
			t.UTC().Format(time.RFC3339Nano), firstInstant.UTC().Format(time.RFC3339), lastInstant.UTC().Format(time.RFC3339), QueueMisconfigured)
	}
	return t.UnixNano(), nil
}

// until returns how long from now until at, two instants in Unix
// nanoseconds, clamped to the longest Duration (or the most negative) when
// the difference does not fit in one: it does not for instants more than
// about 292 years apart, and wrapped round it turned an instant far ahead
// of a clock stepped back into one long past ("now", to Wake).
func until(now, at int64) time.Duration {
	d := at - now // wraps when the true difference does not fit
	switch {
	case at > now && d < 0:
		return math.MaxInt64
	case at < now && d > 0:
		return math.MinInt64
	}
	return time.Duration(d)
}

// readClock reads now, the caller's clock (named by name: Options.Now or
// MemoryOptions.Now), in Unix nanoseconds; see unixNanos. The broker
// reads it with a queue's lock held, and the clock is the caller's code:
// a panic in it is recovered here and returned as an error naming the
// clock and the panic (QueueMisconfigured, as for a reading no broker can
// record), so that the call that read it fails and releases its locks
// like any other failed call, and the next call works. Left to unwind,
// the panic would leave the lock held, and every later call on the queue
// would wait for ever, in a program that recovered it (as net/http does).
func readClock(name string, now func() time.Time) (ns int64, err error) {
	// recover is called only when now did not return (see consumer.call).
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			ns, err = 0, fmt.Errorf("%s panicked: %s: %w", name, panicText(v), QueueMisconfigured)
		}
	}()
	t := now()
	returned = true
	if ns, err = unixNanos(t); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return ns, nil
}

// panicText renders a recovered panic value (the caller's code's) as
// fmt.Sprint does, or by its type alone when rendering it panics too: fmt
// recovers a String or Error method that panics, but not one whose panic
// value panics in turn when it is printed.
func panicText(v any) (text string) {
	defer func() {
		if recover() != nil {
			text = fmt.Sprintf("a value of type %T, which panicked when printed", v)
		}
	}()
	return fmt.Sprint(v)
}
