package broker

// What the tests of a segment's preamble (preamble_crash_test.go,
// preamble_after_raised_mark_test.go) share: a clock that stands still,
// the policy of their queue, and a store of the smallest segments with
// manual maintenance, opened with that queue.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// preamblePolicy is the policy of the queue "jobs" of the preamble tests.
var preamblePolicy = PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 4096}

// preambleClock is the preamble tests' clock; it stands still.
func preambleClock() time.Time { return time.Unix(1_700_000_000, 0) }

// preambleOptions are the options of a preamble test's store: the
// preamble clock, the smallest segments, manual maintenance and mode, on
// fs (nil: the default).
func preambleOptions(mode SyncMode, fs vfs.FS) Options {
	opts := Options{Now: preambleClock, SegmentBytes: MinSegmentBytes, Sync: mode, FS: fs}
	ManualMaintenance(&opts)
	return opts
}

// openJobs opens the store in dir with opts and returns it with its queue
// "jobs", declared with preamblePolicy.
func openJobs(t *testing.T, dir string, opts Options) (*Store, *Queue) {
	t.Helper()
	s, err := Open(dir, opts)
	require.NoError(t, err)
	q, err := s.Queue("jobs", preamblePolicy)
	require.NoError(t, err)
	return s, q
}
