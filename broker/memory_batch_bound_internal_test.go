package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/segment"
)

// TestMemoryTakesABatchThatFillsOneSegmentToTheByte: a Memory refuses a
// PublishBatch "whose payloads' frames take more than one segment holds"
// (see Memory), the first bound a store with the default SegmentBytes
// applies. A batch whose frames take exactly that room is taken, and one
// byte more is InvalidBatchSize naming a size one past the room, as the
// store's own bound is tested in TestABatchThatFillsASegmentToTheByteIsAccepted.
func TestMemoryTakesABatchThatFillsOneSegmentToTheByte(t *testing.T) {
	const each = 512 << 10
	q, err := NewMemory(PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, MaxMessageBytes: 1 << 20}, MemoryOptions{})
	require.NoError(t, err)
	defer q.Close()
	room := memoryMaxGroup
	n := room / segment.Size(each)
	rest := room - n*segment.Size(each)
	if rest < segment.Size(0) {
		n--
		rest += segment.Size(each)
	}
	full := make([]byte, each) // shared by every full entry: the Memory copies each
	batch := make([][]byte, n, n+1)
	for i := range batch {
		batch[i] = full
	}
	batch = append(batch, make([]byte, rest-segment.Size(0)))
	frames := 0
	for _, p := range batch {
		frames += segment.Size(len(p))
	}
	require.Equal(t, room, frames, "test setup: the batch's frames fill the room")

	over := append(batch[:n:n], make([]byte, rest-segment.Size(0)+1))
	_, err = q.PublishBatch(t.Context(), over)
	require.ErrorIs(t, err, InvalidBatchSize)
	require.ErrorContains(t, err, fmt.Sprintf("at least %d bytes", room+1))
	require.Zero(t, q.Stats().Ready, "a refused batch enqueues nothing")

	ms, err := q.PublishBatch(t.Context(), batch)
	require.NoError(t, err, "a batch whose frames fill one segment's room to the byte")
	require.Len(t, ms, len(batch))
	require.Equal(t, len(batch), q.Stats().Ready)
}
