package broker_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// TestAPowerLossUnderSyncPublishMayRepeatADeliveryCount: under SyncAll a
// Receive returns once its lease is on the device, so after a power loss
// the message comes back, once the lease lapses, as delivery 2. Under
// SyncPublish and SyncNone the lease had only been written: a power loss
// before the next commit takes it, and the message is delivered again as
// delivery 1. Deliveries and MaxDeliveries count what the device
// kept (SyncMode says so).
func TestAPowerLossUnderSyncPublishMayRepeatADeliveryCount(t *testing.T) {
	for _, tc := range []struct {
		mode broker.SyncMode
		want int
	}{{broker.SyncAll, 2}, {broker.SyncPublish, 1}, {broker.SyncNone, 1}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { return now }
			cfs := vfs.NewCrashFS(vfs.Default)
			opts := broker.Options{Now: clock, Sync: tc.mode, SyncInterval: time.Hour, SegmentBytes: broker.MinSegmentBytes << 4, FS: cfs}
			broker.ManualMaintenance(&opts)
			s, err := broker.Open(dir, opts)
			require.NoError(t, err)
			pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1 << 10 })
			q, err := s.Queue("jobs", pol)
			require.NoError(t, err)
			m := mustPublish(t, q, "a")
			require.NoError(t, s.Close()) // under SyncNone too, the publish is on the device
			s, err = broker.Open(dir, opts)
			require.NoError(t, err)
			q, err = s.Queue("jobs", pol)
			require.NoError(t, err)
			d := mustReceiveOne(t, q)
			require.Equal(t, 1, d.Deliveries)

			clone := filepath.Join(t.TempDir(), "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
			cfs.Crash()
			_ = s.Close()
			now = d.Lease.ExpiresAt

			opts.FS = nil
			s, err = broker.Open(clone, opts)
			require.NoError(t, err)
			defer s.Close()
			q, err = s.Queue("jobs", pol)
			require.NoError(t, err)
			d = mustReceiveOne(t, q)
			require.Equal(t, m.ID, d.Message.ID)
			require.Equal(t, tc.want, d.Deliveries)
		})
	}
}
