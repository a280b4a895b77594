package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Close closes the index's table last, once closed is set; a Queue's
// Stats or Wake may still read it afterwards (they take no look at the
// store), and a message not yet leased is read from the table. That read
// fails, the table being closed, and the index recorded the failure as
// damage found in it. A call that had looked at closed before Close set
// it, and at the index's damage after (usable looks at both, in that
// order, without a lock), then stopped the store as damaged: it
// reported Corrupt instead of Closed, and marked the checkpoint suspect
// in a directory Close had already let go (so that the next Open rebuilt
// the whole index for nothing). A closed table is not a damaged one.
func TestAQueueReadAfterCloseRecordsNoDamage(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentBytes: 4 << 20})
	require.NoError(t, err)
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = q.Publish(context.Background(), []byte("x"))
	require.NoError(t, err)
	require.NoError(t, s.Close())

	q.Stats()
	q.Wake()
	require.NoError(t, s.idx.Damaged(), "a read of the closed table counted as damage")
	require.ErrorIs(t, s.Err(), Closed)
}
