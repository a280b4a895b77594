package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// API.md §2, SyncAll: "every call that changes state (Publish*, the lease a
// Receive takes, Ack, Nack, Reject, Extend, replay, delete) returns only
// after an fdatasync covers its event." The power-loss tests elsewhere
// check Publish, the lease and Ack; this checks each other call, made LAST
// before a power loss that keeps no byte the store did not sync (a later
// call's fdatasync would cover an earlier call that did not wait for one).
func TestUnderSyncAllEveryStateChangeThatReturnedIsOnTheDevice(t *testing.T) {
	pol := policy(func(p *broker.PolicyValue) { p.RetryDelay = time.Hour }) // 30 s leases
	type check func(t *testing.T, c *env, q *broker.Queue)
	// Each call is made on a queue holding one message m, leased by d; it
	// returns the check of the store reopened after the power loss.
	calls := map[string]func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check{
		"Nack": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			nv := mustNack(t, q, d.Lease.Receipt, nil)
			return func(t *testing.T, c *env, q *broker.Queue) {
				c.clock.Set(d.Lease.ExpiresAt)
				requireNoneReceivable(t, q, "the nacked message waits out its retry delay, not its lapsed lease")
				c.clock.Set(nv.VisibleAt)
				got := mustReceiveOne(t, q)
				require.Equal(t, m.ID, got.Message.ID)
				require.Equal(t, 2, got.Deliveries)
			}
		},
		"Reject": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, broker.NewError("BAD_INPUT", 0x07020001, "the input was refused", "private")))
			return func(t *testing.T, c *env, q *broker.Queue) {
				dls := mustDeadLetters(t, q)
				require.Len(t, dls, 1)
				require.Equal(t, m.ID, dls[0].Message.ID)
				require.Equal(t, "BAD_INPUT", dls[0].Reason)
			}
		},
		"Extend": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			l, err := q.Extend(ctx(t), d.Lease.Receipt, 2*time.Hour)
			require.NoError(t, err)
			return func(t *testing.T, c *env, q *broker.Queue) {
				c.clock.Set(d.Lease.ExpiresAt)
				requireNoneReceivable(t, q, "the extended lease holds past the old deadline")
				c.clock.Set(l.ExpiresAt.Add(-time.Nanosecond))
				require.NoError(t, q.Ack(ctx(t), l.Receipt), "the new receipt names the lease")
			}
		},
		"ReplayDeadLetter": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
			require.NoError(t, q.ReplayDeadLetter(ctx(t), m.ID))
			return func(t *testing.T, c *env, q *broker.Queue) {
				require.Empty(t, mustDeadLetters(t, q))
				got := mustReceiveOne(t, q)
				require.Equal(t, m.ID, got.Message.ID)
				require.Equal(t, 1, got.Deliveries)
			}
		},
		"DeleteDeadLetter": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
			require.NoError(t, q.DeleteDeadLetter(ctx(t), m.ID))
			return func(t *testing.T, c *env, q *broker.Queue) {
				require.Empty(t, mustDeadLetters(t, q))
				requireNoneReceivable(t, q)
			}
		},
		"PublishKeyed": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
			k, err := q.PublishKeyed(ctx(t), "k", []byte("keyed"))
			require.NoError(t, err)
			return func(t *testing.T, c *env, q *broker.Queue) {
				dup, err := q.PublishKeyed(ctx(t), "k", []byte("again"))
				require.NoError(t, err)
				require.Equal(t, k.ID, dup.ID)
				require.Equal(t, k.ID, mustReceiveOne(t, q).Message.ID)
			}
		},
		"PublishBatch": func(t *testing.T, q *broker.Queue, m broker.MessageValue, d broker.DeliveryValue) check {
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
			ms, err := q.PublishBatch(ctx(t), [][]byte{[]byte("b1"), []byte("b2")})
			require.NoError(t, err)
			return func(t *testing.T, c *env, q *broker.Queue) {
				require.Equal(t, []string{ms[0].ID, ms[1].ID}, ids(mustReceive(t, q, 10)))
			}
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			cfs := vfs.NewCrashFS(vfs.Default)
			e := newEnv(t, func(o *broker.Options) { o.FS = cfs; o.Sync = broker.SyncAll; o.SyncInterval = time.Hour })
			q := e.queue("jobs", pol)
			m := mustPublish(t, q, "a")
			verify := call(t, q, m, mustReceiveOne(t, q))

			c := powerLoss(t, e, cfs, vfs.CrashOptions{}) // every unsynced byte is lost
			c.clock.Set(e.clock.Now())
			verify(t, c, c.queue("jobs", pol))
		})
	}
}
