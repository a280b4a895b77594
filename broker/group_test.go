package broker

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A batch is refused only when its records do not fit in one segment: a
// batch whose records fill the room a segment has for one group to the
// byte is accepted, and one byte more is refused with InvalidBatchSize,
// naming a size one past that room.
func TestABatchThatFillsASegmentToTheByteIsAccepted(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentBytes: MinSegmentBytes, manualMaintenance: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 8 << 10})
	require.NoError(t, err)
	first := make([]byte, 8<<10)
	publish := func(n int) error {
		_, err := q.PublishBatch(t.Context(), [][]byte{first, make([]byte, n)})
		return err
	}
	// The largest second message that fits, between one that does (none)
	// and one that cannot (as large as the first: two of them are a whole
	// segment of payload).
	fits, fails := 0, len(first)
	require.Error(t, publish(fails))
	for fails-fits > 1 {
		mid := (fits + fails) / 2
		if err := publish(mid); err == nil {
			fits = mid
		} else {
			require.ErrorIs(t, err, InvalidBatchSize)
			fails = mid
		}
	}
	err = publish(fails)
	require.ErrorIs(t, err, InvalidBatchSize)
	m := regexp.MustCompile(`batch of 2 messages and (\d+) bytes`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "the refusal names the batch's size: %v", err)
	total, _ := strconv.Atoi(m[1])
	require.Equal(t, s.maxGroup()+1, total, "the batch one byte too large is one byte past the room")
}
