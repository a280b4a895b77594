package wal

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPacerSleepsItsLongestWhenTheWaitOverflowsADuration: the time until
// the active segment should have grown enough is the bytes it needs over
// its rate so far. At a rate slow enough (a byte over a long fill), that
// is more nanoseconds than a time.Duration holds, and the conversion of
// such a float is the platform's choice: on amd64 it gave the most
// negative Duration, so the pacer slept its shortest, 500 µs, where it
// should sleep its longest.
func TestPacerSleepsItsLongestWhenTheWaitOverflowsADuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var end atomic.Int64
		pc := newPacer(2, &end, MaxSegmentBytes, MaxSegmentBytes, nil, nil)
		// The fill began a century ago, and the active segment has grown
		// by one byte since.
		pc.start = pc.start.Add(-100 * 365 * 24 * time.Hour)
		end.Store(1)
		start := time.Now()
		require.NoError(t, pc.wait(paceLead+MaxSegmentBytes/2))
		// One sleep of paceLongest, after which the log reads as idle.
		require.Equal(t, 1, pc.sleeps, "slept %d times in %v", pc.sleeps, time.Since(start))
		require.True(t, pc.free)
	})
}
