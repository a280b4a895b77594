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
