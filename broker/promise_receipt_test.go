package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// settler is what both brokers' queues offer to end or renew a lease.
type settler interface {
	broker.Broker
	broker.Rejecter
	broker.LeaseExtender
}

// API.md §5.7 lets an implementation choose between LeaseExpired and
// UnknownReceipt for a receipt that no longer names a live lease, provided
// the choice is written down; docs/DESIGN.md writes down LeaseExpired, one
// rule for all (lapsed, replaced by Extend, ended by Ack, Nack or Reject),
// and UnknownReceipt only for a receipt that does not verify. The
// conformance suite accepts either, so this holds both brokers to the
// choice made.
func TestAReceiptThatNoLongerNamesALiveLeaseIsLeaseExpiredOnBothBrokers(t *testing.T) {
	endings := map[string]func(t *testing.T, q settler, clock *fakeClock, d broker.DeliveryValue){
		"Ack": func(t *testing.T, q settler, _ *fakeClock, d broker.DeliveryValue) {
			require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
		},
		"Nack": func(t *testing.T, q settler, _ *fakeClock, d broker.DeliveryValue) {
			_, err := q.Nack(ctx(t), d.Lease.Receipt, nil)
			require.NoError(t, err)
		},
		"Nack on the last delivery": func(t *testing.T, q settler, _ *fakeClock, d broker.DeliveryValue) {
			// The usual policy allows three deliveries; this is the
			// first, so nack it twice more through its redeliveries.
			r := d.Lease.Receipt
			for range 2 {
				nv, err := q.Nack(ctx(t), r, nil)
				require.NoError(t, err)
				require.False(t, nv.DeadLettered)
				ds, err := q.Receive(ctx(t), 1)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				r = ds[0].Lease.Receipt
			}
			nv, err := q.Nack(ctx(t), r, nil)
			require.NoError(t, err)
			require.True(t, nv.DeadLettered)
		},
		"Reject": func(t *testing.T, q settler, _ *fakeClock, d broker.DeliveryValue) {
			require.NoError(t, q.Reject(ctx(t), d.Lease.Receipt, nil))
		},
		"Extend": func(t *testing.T, q settler, _ *fakeClock, d broker.DeliveryValue) {
			_, err := q.Extend(ctx(t), d.Lease.Receipt, time.Minute)
			require.NoError(t, err)
		},
		"a lapse": func(t *testing.T, _ settler, clock *fakeClock, d broker.DeliveryValue) {
			clock.Set(d.Lease.ExpiresAt)
		},
	}
	calls := map[string]func(t *testing.T, q settler, r broker.ReceiptValue) error{
		"Ack": func(t *testing.T, q settler, r broker.ReceiptValue) error { return q.Ack(ctx(t), r) },
		"Nack": func(t *testing.T, q settler, r broker.ReceiptValue) error {
			_, err := q.Nack(ctx(t), r, nil)
			return err
		},
		"Reject": func(t *testing.T, q settler, r broker.ReceiptValue) error { return q.Reject(ctx(t), r, nil) },
		"Extend": func(t *testing.T, q settler, r broker.ReceiptValue) error {
			_, err := q.Extend(ctx(t), r, time.Minute)
			return err
		},
	}
	brokers := map[string]func(t *testing.T) (settler, *fakeClock){
		"store": func(t *testing.T) (settler, *fakeClock) {
			e := newEnv(t)
			return e.queue("jobs", policy(func(p *broker.PolicyValue) { p.RetryDelay = 0 })), e.clock
		},
		"memory": func(t *testing.T) (settler, *fakeClock) {
			clock := newFakeClock()
			return newMemory(t, clock, func(p *broker.PolicyValue) { p.RetryDelay = 0 }), clock
		},
	}
	for bname, open := range brokers {
		for ename, end := range endings {
			t.Run(bname+"/after "+ename, func(t *testing.T) {
				q, clock := open(t)
				_, err := q.Publish(ctx(t), []byte("a"))
				require.NoError(t, err)
				ds, err := q.Receive(ctx(t), 1)
				require.NoError(t, err)
				require.Len(t, ds, 1)
				end(t, q, clock, ds[0])
				for cname, call := range calls {
					err := call(t, q, ds[0].Lease.Receipt)
					require.Truef(t, errors.Is(err, broker.LeaseExpired), "%s after %s: %v, want LeaseExpired", cname, ename, err)
					require.Falsef(t, errors.Is(err, broker.UnknownReceipt), "%s after %s: %v wraps UnknownReceipt too", cname, ename, err)
				}
			})
		}
	}
}
