package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInFlightBatchMustBeWhole: a PublishBatch is one commit, so after a
// crash either every message of the batch exists or none does. A batch in
// flight at a kill that the store holds only some messages of is torn,
// whichever ones are missing; one it holds whole, or not at all, is sound.
func TestInFlightBatchMustBeWhole(t *testing.T) {
	batchOf := func(size int, indices ...int) []string {
		var refs []string
		for _, i := range indices {
			refs = append(refs, MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1, Index: i, Of: size}))
		}
		return refs
	}
	for _, tc := range []struct {
		name  string
		refs  []string
		whole bool
	}{
		{"first missing", batchOf(3, 1, 2), false},
		{"last missing", batchOf(3, 0, 1), false},
		{"middle missing", batchOf(4, 0, 1, 3), false},
		{"one of five", batchOf(5, 3), false},
		{"whole", batchOf(3, 0, 1, 2), true},
		{"none", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := storeHolding(t, tc.refs...)
			c := checkerWithoutStores(t)
			c.AddCycle(1, []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}})
			err := c.CheckDrain(dir)
			if tc.whole {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "torn batch", "the in-flight batch pub0/n1 is in the store in part")
		})
	}
}

// TestInFlightBatchWithAMessageAckedIsWhole: a message of an in-flight
// batch that a consumer received and acked before the kill is missing from
// the store for a reason the journal gives: the batch is whole.
func TestInFlightBatchWithAMessageAckedIsWhole(t *testing.T) {
	var refs []string
	for i := range 3 {
		refs = append(refs, MakeRef(Ref{Queue: QueueWork, Cycle: 1, Who: "pub0", N: 1, Index: i, Of: 3}))
	}
	dir, _ := storeHolding(t, refs...)
	s, q := openQueueOf(t, dir, QueueWork)
	ctx := context.Background()
	t0 := time.Now().UnixNano()
	ds, err := q.Receive(ctx, 3)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	t1 := time.Now().UnixNano()
	entries := []Entry{{Op: OpStart, Cycle: 1, Sync: "all"}}
	for i, d := range ds {
		intent := IntentHold
		if i == 1 {
			intent = IntentAck
		}
		entries = append(entries, deliveredEntry("con0", QueueWork, d, intent, t0, t1))
	}
	t0 = time.Now().UnixNano()
	require.NoError(t, q.Ack(ctx, ds[1].Lease.Receipt))
	entries = append(entries, Entry{Op: OpAcked, Who: "con0", Queue: QueueWork, ID: ds[1].Message.ID, Del: 1, T0: t0, T1: time.Now().UnixNano()})
	require.NoError(t, s.Close())

	c := checkerWithoutStores(t)
	c.AddCycle(1, entries)
	require.NoError(t, c.CheckDrain(dir))
	require.Equal(t, 1, c.Figures.InFlightBatches)
}
