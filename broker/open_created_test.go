package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestRecoveryTellsANewStoreFromAnOldOne: Open makes a store where the
// directory holds none, so a mistyped path or an unmounted volume gives
// an empty store rather than an error; RecoveryReport.Created is how a
// program that expects its data finds out. It is set only for the Open
// that made the store: not for a reopen, nor for one that rebuilt the
// index of a store whose old segments were reclaimed. Its line said
// "replayed 0 records; index rebuilt from the whole log" before, which
// reads as a repair on every first start.
func TestRecoveryTellsANewStoreFromAnOldOne(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "not", "yet", "there")
	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	r := s.Recovery()
	require.True(t, r.Created, "Open made the store: %+v", r)
	require.Equal(t, "new store", r.String())

	q, err := s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 4096 }))
	require.NoError(t, err)
	payload := make([]byte, 1000)
	for range 3 {
		// Enough segments that a checkpoint lets the first ones go.
		for range 40 {
			_, err := q.Publish(ctx, payload)
			require.NoError(t, err)
		}
		for {
			ds, err := q.Receive(ctx, 64)
			require.NoError(t, err)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				require.NoError(t, q.Ack(ctx, d.Lease.Receipt))
			}
		}
		require.NoError(t, s.Maintain())
	}
	require.Positive(t, s.Stats().BytesReclaimed, "the test needs the segment of the store's first record gone")
	require.NoError(t, s.Close())

	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	r = s.Recovery()
	require.False(t, r.Created, "a reopen: %+v", r)
	require.NotContains(t, r.String(), "new store")
	require.NoError(t, s.Close())

	// Without its index, a store whose first segments are gone is
	// rebuilt from what the log holds: still the store it was.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err = broker.Open(dir, opts)
	require.NoError(t, err)
	r = s.Recovery()
	require.True(t, r.IndexRebuilt)
	require.Positive(t, r.Replayed)
	require.False(t, r.Created, "a rebuild of an old store: %+v", r)
	require.Contains(t, r.String(), "index rebuilt from the whole log")
	require.NoError(t, s.Close())
}
