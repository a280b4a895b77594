package broker_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestMemoryPublishWithinMaxMessageBytesIsNeverInvalidBatchSize holds
// Memory to the seed's MaxMessageBytes ("bounds one payload. A larger
// payload is refused at Publish with MessageTooLarge") and to its own doc
// (the file-backed Queue's semantics, the same errors). A store refuses a
// queue declared with a MaxMessageBytes above Options.MaxMessageBytes
// (QueueMisconfigured); NewMemory used to take such a policy and then
// refuse a single Publish within it as a "batch of 1 messages" too large
// for one segment (InvalidBatchSize). It shows NewMemory refuses the
// policy as the store does, so no Publish within the policy is ever
// InvalidBatchSize; the branch that publishes stays as a guard should
// NewMemory ever take such a policy again.
func TestMemoryPublishWithinMaxMessageBytesIsNeverInvalidBatchSize(t *testing.T) {
	storeMax := broker.Options{}.MaxMessageBytes()
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = storeMax + 1<<20 })
	mem, err := broker.NewMemory(pol, broker.MemoryOptions{})
	if err != nil {
		require.ErrorIs(t, err, broker.QueueMisconfigured)
		return // refused as the store refuses it
	}
	defer mem.Close()
	payload := make([]byte, storeMax+1<<19) // within MaxMessageBytes
	_, err = mem.Publish(ctx(t), payload)
	if errors.Is(err, broker.InvalidBatchSize) {
		t.Fatalf("NewMemory took MaxMessageBytes %d, which a store refuses (it takes at most %d), and then a single Publish of %d bytes, within it, fails: %v",
			pol.MaxMessageBytes, storeMax, len(payload), err)
	}
}

// TestMemoryTakesTheLargestMaxMessageBytesAStoreTakes shows the refusal
// above stops exactly where a store's with the default options does: a
// policy at Options.MaxMessageBytes is taken, one byte more is not.
func TestMemoryTakesTheLargestMaxMessageBytesAStoreTakes(t *testing.T) {
	limit := broker.Options{}.MaxMessageBytes()
	mem, err := broker.NewMemory(policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = limit }), broker.MemoryOptions{})
	require.NoError(t, err)
	require.NoError(t, mem.Close())
	_, err = broker.NewMemory(policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = limit + 1 }), broker.MemoryOptions{})
	require.ErrorIs(t, err, broker.QueueMisconfigured)
}
