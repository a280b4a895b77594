package broker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A checkpoint whose snapshot the index refuses (what a checkpoint cannot
// hold: here a secret of the wrong length, which no store makes) is
// refused again at every round that owes one: it was returned alone, not
// as a checkpoint's failure, so every round synced the log for the
// snapshot and logged a WARN, for as long as the store ran. It now stops
// the checkpoints, as any other failure of one does: logged once, and
// StoreStats.MaintenanceStopped says why.
func TestASnapshotTheIndexRefusesStopsTheCheckpointsOnce(t *testing.T) {
	ctx := context.Background()
	logs := &logRecords{}
	opts := Options{SegmentBytes: MinSegmentBytes, Sync: SyncPublish, SyncInterval: time.Hour, Logger: slog.New(logs)}
	ManualMaintenance(&opts)
	s, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	q := mustQueue(t, s, "jobs", PolicyValue{VisibilityTimeout: time.Hour, MaxDeliveries: 3, MaxMessageBytes: 1024})
	_, err = q.PublishBatch(ctx, make([][]byte, 50))
	require.NoError(t, err)
	s.idx.Secret = s.idx.Secret[:3]
	for s.log.Stats().BytesWritten-s.maint.written < s.opts.segmentBytes()/2 {
		_, err := q.Publish(ctx, make([]byte, 500))
		require.NoError(t, err)
	}
	const rounds = 20
	syncs := s.log.Stats().Syncs
	for range rounds {
		_, err := q.Receive(ctx, 1) // a lease, written and not synced
		require.NoError(t, err)
		s.maintenanceRound()
	}
	require.NoError(t, s.Err(), "the store goes on")
	t.Logf("%d rounds: %d syncs, %d WARN and %d ERROR records", rounds, s.log.Stats().Syncs-syncs, len(logs.at(slog.LevelWarn, "")), len(logs.at(slog.LevelError, "")))
	require.Zero(t, len(logs.at(slog.LevelWarn, "")), "no WARN at each round")
	require.Len(t, logs.at(slog.LevelError, "checkpoint failed"), 1, "the checkpoints' stop, logged once")
	require.LessOrEqual(t, s.log.Stats().Syncs-syncs, int64(1), "syncs in %d rounds", rounds)
	require.Contains(t, s.Stats().MaintenanceStopped, "secret of 3 bytes")
}
