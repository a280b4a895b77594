package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// "If the clock goes backwards, nothing is evicted" (API.md §4), and the
// log rebuilt alone must say so too: each segment's preamble carries the
// queue's latest clock reading as an eviction of nothing. A key enqueued
// in 1700 and a reading in 2200 are further apart than any int64 window,
// so that record must evict nothing by what it is, not by a window: else
// the rebuilt store forgets a key the live store (rightly) still knows
// after the clock stepped back into its window, and a retry enqueues a
// second message.
func TestARebuildKeepsAKeyThePreamblesClockReadingMustNotEvict(t *testing.T) {
	small := func(p *broker.PolicyValue) { p.MaxMessageBytes = 4 << 10 }
	p := policy(small, func(p *broker.PolicyValue) { p.DedupWindow = 100 * 365 * 24 * time.Hour })
	e := newEnv(t, func(o *broker.Options) {
		o.SegmentBytes = broker.MinSegmentBytes
		broker.ManualMaintenance(o)
	})
	q := e.queue("jobs", p)

	e.clock.Set(time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC))
	orig, err := q.PublishKeyed(ctx(t), "k", []byte("a"))
	require.NoError(t, err)

	// A reading 500 years later, then a rotation: the new segment's
	// preamble carries it.
	e.clock.Set(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
	mustPublish(t, q, "late") // the queue's latest reading: 2200
	first := e.s.Stats().Segments
	churn := e.queue("churn", policy(small))
	for e.s.Stats().Segments == first {
		mustPublish(t, churn, strings.Repeat("c", 2000))
	}

	// The clock steps back into the key's window: live, nothing is
	// evicted, the key is a duplicate.
	e.clock.Set(time.Date(1750, 1, 1, 0, 0, 0, 0, time.UTC))
	live, err := q.PublishKeyed(ctx(t), "k", []byte("b"))
	require.NoError(t, err)
	require.Equal(t, orig.ID, live.ID, "live: the clock went backwards, nothing is evicted")

	// The same log, replayed alone.
	e.close()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dir, "index")))
	e.open()
	q = e.queue("jobs", p)
	again, err := q.PublishKeyed(ctx(t), "k", []byte("c"))
	require.NoError(t, err)
	require.Equal(t, orig.ID, again.ID, "rebuilt from the log: the key must still be a duplicate (the preamble's reading is an eviction of nothing)")
	require.Nil(t, again.Payload, "a duplicate enqueues nothing")
}
