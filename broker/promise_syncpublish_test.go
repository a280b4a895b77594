package broker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// API.md §2, SyncPublish: "publishes as above" — every Publish* returns
// only after an fdatasync covers its event. TestReturnedCallIsOnDevice-
// AfterPowerLoss checks Publish; this checks PublishKeyed and PublishBatch,
// each made LAST before a power loss that keeps no byte the store did not
// sync, and after an Ack (an event SyncPublish does not wait for), so that
// no later call's fdatasync covers them.
func TestUnderSyncPublishEveryPublishThatReturnedIsOnTheDevice(t *testing.T) {
	pol := policy()
	// Each call returns the IDs it enqueued and a check of the reopened
	// queue, made before anything is received from it.
	calls := map[string]func(t *testing.T, q *broker.Queue) ([]string, func(t *testing.T, q *broker.Queue)){
		"PublishKeyed": func(t *testing.T, q *broker.Queue) ([]string, func(t *testing.T, q *broker.Queue)) {
			k, err := q.PublishKeyed(ctx(t), "k", []byte("keyed"))
			require.NoError(t, err)
			return []string{k.ID}, func(t *testing.T, q *broker.Queue) {
				dup, err := q.PublishKeyed(ctx(t), "k", []byte("again"))
				require.NoError(t, err)
				require.Equal(t, k.ID, dup.ID, "the key answers with its original")
				requireSameInstant(t, k.EnqueuedAt, dup.EnqueuedAt)
			}
		},
		"PublishBatch": func(t *testing.T, q *broker.Queue) ([]string, func(t *testing.T, q *broker.Queue)) {
			ms, err := q.PublishBatch(ctx(t), [][]byte{[]byte("b1"), []byte("b2"), []byte("b3")})
			require.NoError(t, err)
			return []string{ms[0].ID, ms[1].ID, ms[2].ID}, func(*testing.T, *broker.Queue) {}
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			cfs := vfs.NewCrashFS(vfs.Default)
			e := newEnv(t, func(o *broker.Options) { o.FS = cfs; o.Sync = broker.SyncPublish; o.SyncInterval = time.Hour })
			q := e.queue("jobs", pol)
			acked := mustPublish(t, q, "acked")
			require.NoError(t, q.Ack(ctx(t), mustReceiveOne(t, q).Lease.Receipt))
			want, verify := call(t, q)

			c := powerLoss(t, e, cfs, vfs.CrashOptions{}) // every unsynced byte is lost
			c.clock.Set(e.clock.Now())
			cq := c.queue("jobs", pol)
			verify(t, cq)
			// The Ack may be lost, and its message come back: at-least-once
			// permits a redelivery, never a lost publish.
			got := slices.DeleteFunc(ids(mustReceive(t, cq, 10)), func(id string) bool { return id == acked.ID })
			require.Equal(t, want, got, "every message the last publish enqueued is on the device")
		})
	}
}
