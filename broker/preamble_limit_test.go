package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestTheRefusalOfOneQueueTooManySaysWhatWouldHelp: each segment keeps
// 1/16 of itself, at most 256 KiB, for the queue declarations it starts
// with. Below 4 MiB segments, the refusal of one queue too many says to
// raise SegmentBytes, which then lets it in; from 4 MiB on, where larger
// segments keep no more room, it says to declare fewer queues. It used to
// say to raise SegmentBytes whatever it could do.
func TestTheRefusalOfOneQueueTooManySaysWhatWouldHelp(t *testing.T) {
	dir := fastDir(t)
	name := func(i int) string { return fmt.Sprintf("q%05d-%s", i, strings.Repeat("x", 57)) }
	pol := broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 64 << 10}
	fill := func(s *broker.Store, from int) (n int, err error) {
		for n = from; ; n++ {
			if _, err = s.Queue(name(n), pol); err != nil {
				require.Len(t, s.Queues(), n, "the refused queue was not declared")
				return n, err
			}
		}
	}
	declared := map[int64]int{}
	from := 0
	for _, seg := range []int64{1 << 20, 4 << 20, 8 << 20} {
		s, err := broker.Open(dir, broker.Options{SegmentBytes: seg})
		require.NoError(t, err)
		n, err := fill(s, from)
		require.NoError(t, s.Close())
		require.ErrorIs(t, err, broker.QueueMisconfigured)
		room := min(seg/16, 256<<10)
		require.ErrorContains(t, err, fmt.Sprintf("more than the %d each segment keeps", room))
		if seg < 4<<20 {
			require.ErrorContains(t, err, "raise Options.SegmentBytes, up to 4 MiB")
		} else {
			require.NotContains(t, err.Error(), "SegmentBytes")
			require.ErrorContains(t, err, "declare fewer queues")
		}
		declared[seg], from = n, n
	}
	require.Greater(t, declared[4<<20], 3*declared[1<<20], "4 MiB segments keep four times the room of 1 MiB ones")
	require.Equal(t, declared[4<<20], declared[8<<20], "segments above 4 MiB keep no more room")
	require.Greater(t, declared[4<<20], 1800, "about 2,000 declarations of 64-character names")
}
