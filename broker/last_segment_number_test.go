package broker_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// A store whose log holds the highest segment number there is stops at
// the rotation that would need the next one, and a reopened store stops
// at the same point: its error says to move the messages to a new store,
// not to reopen it, which is the advice for every other failure.
func TestAStoreAtTheLastSegmentNumberDoesNotSayToReopen(t *testing.T) {
	const top = math.MaxUint32
	dir := t.TempDir()
	f, err := segment.Create(vfs.Default, filepath.Join(dir, fmt.Sprintf("%010d.seg", uint32(top))), top, segment.NewSalt(), broker.MinSegmentBytes)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s, err := broker.Open(dir, broker.Options{SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("q", broker.PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1000})
	require.NoError(t, err)
	payload := make([]byte, 1000)
	for i := 0; ; i++ {
		require.Less(t, i, 100, "a 16 KiB segment takes fewer than 100 messages of 1,000 bytes")
		_, err = q.Publish(context.Background(), payload)
		if err != nil {
			break
		}
	}
	// The failed call, a later one, and Err, which a health check reads.
	_, later := q.Publish(context.Background(), payload)
	for _, err := range []error{err, later, s.Err()} {
		require.ErrorIs(t, err, wal.ErrNoNextSegment)
		require.ErrorIs(t, err, wal.ErrPoisoned)
		require.NotContains(t, err.Error(), "must be reopened")
		require.NotContains(t, err.Error(), "close and reopen")
		require.ErrorContains(t, err, "move its messages to a new store")
	}
}
