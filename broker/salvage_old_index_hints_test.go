package broker_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/segment"
)

// A salvage takes the last checkpoint's position as durable (Verified),
// even with an index put back from before an earlier salvage: what it
// vouches for stays true of the log, since no salvage cuts the log short
// of a position known durable (it pads over damage, and seals a segment
// early only before a later one). Such a salvage reports what one with
// the store's current index reports: nothing when the log took no new
// damage, and the same span and lost messages when it did (here the last
// segment, from its first records on, cut by a power loss that also took
// the clean mark), none of them the messages the earlier salvage lost.
func TestASalvageWithAnIndexFromBeforeAnEarlierSalvageReportsWhatTheCurrentIndexDoes(t *testing.T) {
	const published = 130
	e, pol, old := storeWithOldIndex(t, published)
	sealSecondSegmentEarly(t, e.dir)
	e.opts.Salvage = true
	s := e.open()
	left := e.queue("jobs", pol).Stats().Ready
	lostBefore := s.Recovery().LostMessages
	require.Len(t, lostBefore, published-left, "setup: the earlier salvage lost messages")
	e.close()

	t.Run("no new damage", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "store")
		require.NoError(t, recovery.CopyTree(e.dir, dir))
		swapIndex(t, old, dir)
		s, err := broker.Open(dir, e.opts)
		require.NoError(t, err)
		defer s.Close()
		require.Zero(t, s.Recovery().SalvagedSpans, "nothing to salvage")
		require.Empty(t, s.Recovery().LostMessages)
		q, err := s.Queue("jobs", pol)
		require.NoError(t, err)
		require.Len(t, receiveAll(t, q), left)
	})

	t.Run("the last segment cut", func(t *testing.T) {
		type outcome struct {
			spans int
			lost  []string
			ready int
		}
		salvage := func(index string) outcome {
			dir := filepath.Join(t.TempDir(), "store")
			require.NoError(t, recovery.CopyTree(e.dir, dir))
			if index != "" {
				swapIndex(t, index, dir)
			}
			last := lastSegment(t, dir)
			data, err := os.ReadFile(last)
			require.NoError(t, err)
			clear(data[segment.HeaderSize+600:])
			require.NoError(t, os.WriteFile(last, data, 0o600))
			require.NoError(t, os.Remove(filepath.Join(dir, "CLEAN")))
			s, err := broker.Open(dir, e.opts)
			require.NoError(t, err)
			defer s.Close()
			q, err := s.Queue("jobs", pol)
			require.NoError(t, err)
			return outcome{s.Recovery().SalvagedSpans, s.Recovery().LostMessages, q.Stats().Ready}
		}
		current, fromOld := salvage(""), salvage(old)
		require.Positive(t, current.spans, "setup: the cut is damage to synced records")
		require.NotEmpty(t, current.lost, "setup: the cut took messages")
		require.Equal(t, current, fromOld)
		for _, id := range lostBefore {
			require.NotContains(t, fromOld.lost, id, "lost in the earlier salvage, and reported then")
		}
	})
}
