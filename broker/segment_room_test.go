package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestAReopenWithSegmentsTooSmallForTheDeclarationsIsRefused: each
// segment keeps 1/16 of itself for the queue declarations it starts with.
// A store whose declarations fit the room of 64 KiB segments and not that
// of 16 KiB ones, reopened at 16 KiB, is refused (QueueMisconfigured,
// naming Options.SegmentBytes), rather than opened to fail for good at its
// first rotation; reopened at its own size, it works.
func TestAReopenWithSegmentsTooSmallForTheDeclarationsIsRefused(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	name := func(i int) string { return fmt.Sprintf("%s%02d", strings.Repeat("q", 62), i) }
	big := broker.Options{Now: clock.Now, SegmentBytes: 4 * broker.MinSegmentBytes}
	s, err := broker.Open(dir, big)
	require.NoError(t, err)
	for i := range 20 { // about 2 KiB of declarations: within 64 KiB segments' 4 KiB
		_, err := s.Queue(name(i), pol)
		require.NoError(t, err, "queue %d", i)
	}
	require.NoError(t, s.Close())

	small := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes} // 1 KiB for declarations
	_, err = broker.Open(dir, small)
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, "Options.SegmentBytes 16384 is too small for the store's 20 queue declarations")

	s, err = broker.Open(dir, big)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	q, err := s.Queue(name(0), pol)
	require.NoError(t, err)
	for i := range 200 { // several rotations
		_, err := q.Publish(ctx(t), []byte(strings.Repeat("m", 500)))
		require.NoError(t, err, "publish %d", i)
	}
	require.Greater(t, s.Stats().Segments, 1)
	require.NoError(t, s.Err())
}
