package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestTheQueuesAStoreDeclaresGrowWithItsSegments: each segment keeps 1/16
// of itself for the queue declarations it starts with, and the refusal of
// one queue too many says to raise SegmentBytes, which then lets it in.
// That room was capped at 256 KiB: every store, whatever its segments,
// took about 2,000 queues of 64-character names, and the advice did
// nothing.
func TestTheQueuesAStoreDeclaresGrowWithItsSegments(t *testing.T) {
	dir := fastDir(t)
	opts := broker.Options{SegmentBytes: 8 << 20}
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	name := func(i int) string { return fmt.Sprintf("q%05d-%s", i, strings.Repeat("x", 57)) }
	pol := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3}
	n := 0
	for ; ; n++ {
		if _, err = s.Queue(name(n), pol); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, broker.QueueMisconfigured)
	require.ErrorContains(t, err, "raise Options.SegmentBytes")
	require.ErrorContains(t, err, fmt.Sprintf("more than the %d each segment keeps", 512<<10))
	require.Greater(t, n, 3500, "8 MiB segments keep 512 KiB for about 3,900 declarations")
	require.Len(t, s.Queues(), n, "the refused queue was not declared")

	require.NoError(t, s.Close())
	opts.SegmentBytes = 16 << 20
	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	require.Len(t, s.Queues(), n)
	_, err = s.Queue(name(n), pol)
	require.NoError(t, err, "larger segments take more queues")
}
