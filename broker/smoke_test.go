package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSmokeStore(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	s, err := Open(dir, Options{Now: clock, SegmentBytes: 4 << 20})
	require.NoError(t, err)
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, RetryDelay: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	m, err := q.Publish(ctx, []byte("hello"))
	require.NoError(t, err)
	ds, err := q.Receive(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, m.ID, ds[0].Message.ID)
	require.Equal(t, "hello", string(ds[0].Message.Payload))
	nv, err := q.Nack(ctx, ds[0].Lease.Receipt, nil)
	require.NoError(t, err)
	require.Equal(t, 1, nv.Deliveries)
	ds, err = q.Receive(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, ds)
	now = now.Add(time.Second)
	ds, err = q.Receive(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, 2, ds[0].Deliveries)
	require.NoError(t, s.Close())

	s, err = Open(dir, Options{Now: clock, SegmentBytes: 4 << 20})
	require.NoError(t, err)
	q, err = s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 2, RetryDelay: time.Second})
	require.NoError(t, err)
	require.Equal(t, 1, q.Stats().Leased)
	require.NoError(t, q.Ack(ctx, ds[0].Lease.Receipt), "receipts survive a restart")
	require.Equal(t, 0, q.Stats().Leased)
	require.NoError(t, s.Close())
}
