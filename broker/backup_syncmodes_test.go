package broker_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Under SyncNone and SyncPublish, a Backup holds every call that returned
// before it began, synced or not: an Extend, publishes after the last
// checkpoint, a Nack and an Ack. The copy opens to the state the store
// showed (its Dump), and the leases it holds, one received before the
// checkpoint and one after, settle on it with the original's receipts.
// A guard for the modes under which what a call wrote may not be synced
// yet when Backup begins.
func TestABackupUnderLighterSyncModesHoldsEveryCallBeforeIt(t *testing.T) {
	for _, mode := range []broker.SyncMode{broker.SyncNone, broker.SyncPublish} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
				o.SegmentBytes = broker.MinSegmentBytes
				o.Sync = mode
				o.SyncInterval = time.Hour
			})
			held := fillForBackup(t, e)
			jobs := e.queue("jobs", keyedJobs)
			_, err := jobs.Extend(ctx(t), held[0], 10*time.Minute)
			require.NoError(t, err)
			// unsynced events after the last checkpoint
			for i := range 10 {
				mustPublish(t, jobs, fmt.Sprintf("late-%d", i))
			}
			ds := mustReceive(t, jobs, 3)
			_, err = jobs.Nack(ctx(t), ds[0].Lease.Receipt, errors.New("x"))
			require.NoError(t, err)
			require.NoError(t, jobs.Ack(ctx(t), ds[1].Lease.Receipt))
			e.clock.Advance(time.Second)
			want := broker.Dump(e.s)
			dst := filepath.Join(t.TempDir(), "b")
			require.NoError(t, e.s.Backup(ctx(t), dst))
			requireBackupHolds(t, dst, e.opts, want, "backup")
			b, err := broker.Open(dst, e.opts)
			require.NoError(t, err)
			defer b.Close()
			bq, err := b.Queue("jobs", keyedJobs)
			require.NoError(t, err)
			require.NoError(t, bq.Ack(ctx(t), ds[2].Lease.Receipt))
			require.NoError(t, bq.Ack(ctx(t), held[1]))
		})
	}
}
