package broker

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
)

// A message of a queue whose MaxDeliveries is the most a store counts
// (math.MaxUint32) reaches that count and goes to the dead-letter store
// there, its count intact: the 32 bits the log keeps it in never wrap.
// The count is planted (as math.MaxUint32-1 deliveries would leave it):
// making them would take hours.
func TestADeliveryCountAtTheBoundIsTheLast(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("an int cannot hold a MaxDeliveries of math.MaxUint32")
	}
	var wide int64 = math.MaxUint32
	most := int(wide)
	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: most})
	require.NoError(t, err)
	m, err := q.Publish(t.Context(), []byte("x"))
	require.NoError(t, err)
	seq, ok := parseMessageID(m.ID)
	require.True(t, ok)

	q.mu.Lock()
	e := index.Event{Kind: index.KindNack, Queue: q.id, Seq: seq, Deliveries: math.MaxUint32 - 1, Time: index.AtOnce}
	_, err = q.iq.Apply(0, &e)
	q.mu.Unlock()
	require.NoError(t, err)

	ds, err := q.Receive(t.Context(), 1)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, most, ds[0].Deliveries)
	nv, err := q.Nack(t.Context(), ds[0].Lease.Receipt, nil)
	require.NoError(t, err)
	require.True(t, nv.DeadLettered, "the delivery at the bound is the last")
	require.Equal(t, most, nv.Deliveries)
	dls, err := q.DeadLetters(t.Context(), 1)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, most, dls[0].Deliveries)
}
