package recovery

import (
	"testing"
	"time"
)

// deadlineReserve is how much of the test binary's time a sweep leaves to
// the tests after it: go test gives each package's binary 10 minutes by
// default (-timeout), and the package's tests take about 3 on an idle
// 2-core machine.
const deadlineReserve = 5 * time.Minute

// NearDeadline reports whether a sweep should start no more iterations:
// the test binary's deadline is less than deadlineReserve away. On a
// machine slow enough for that (a loaded one, with -race), a sweep that
// went on would fail the whole package for time, every test after it
// unrun; cut short, it has checked fewer cases, and says how many in its
// log. A binary with no deadline (-timeout 0, the soaks) never is.
func NearDeadline(t *testing.T) bool {
	d, ok := t.Deadline()
	return ok && time.Until(d) < deadlineReserve
}
