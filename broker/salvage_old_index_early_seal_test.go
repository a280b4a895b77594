package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
)

// An index put back from before a salvage that sealed a segment early
// (its end, from its last intact record on, zeroed) gives the log hints
// that are no longer true: the checkpoint vouches that the segment ends
// where its seal was, past the early seal. Open refuses that checkpoint
// (a salvage repaired the log since) and rebuilds from the log, which it
// opens again without the hints. The rebuild walked the segment to the
// old end, past the early seal into what the salvage left behind, and
// the store, salvaged and whole, failed to open with Corrupt.
func TestAStoreWhoseSegmentASalvageSealedEarlyOpensWithAnIndexFromBefore(t *testing.T) {
	const published = 130
	e, pol, old := storeWithOldIndex(t, published)
	sealSecondSegmentEarly(t, e.dir)

	e.opts.Salvage = true
	s := e.open()
	left := e.queue("jobs", pol).Stats().Ready
	require.Less(t, left, published, "setup: the salvage lost the records past the early seal")
	require.Len(t, s.Recovery().LostMessages, published-left)
	e.close()

	e.opts.Salvage = false
	swapIndex(t, old, e.dir) // the index from before the salvage
	s, err := broker.Open(e.dir, e.opts)
	require.NoError(t, err, "the salvaged store opens without Salvage, whatever index it holds")
	e.s = s
	require.True(t, s.Recovery().IndexRebuilt, "the checkpoint from before the salvage is not used")
	require.Equal(t, left, e.queue("jobs", pol).Stats().Ready, "the messages the salvage left")
	ds, err := e.queue("jobs", pol).Receive(ctx(t), published)
	require.NoError(t, err, "every message the store holds reads")
	require.Len(t, ds, left)
	e.close()

	// Its own checkpoint now vouches for the log as it is.
	s = e.open()
	require.False(t, s.Recovery().IndexRebuilt)
	require.Equal(t, left, e.queue("jobs", pol).Stats().Leased, "each leased once")
}

// storeWithOldIndex returns a closed store of 16 KiB segments whose queue
// "jobs" (with pol) was given n messages of 300 bytes, three segments or
// more, and a directory holding a copy of its index as the Close left it:
// a checkpoint holding every segment but the last as sealed.
func storeWithOldIndex(t *testing.T, n int) (e *env, pol broker.PolicyValue, old string) {
	t.Helper()
	e = newEnv(t, func(o *broker.Options) { o.SegmentBytes = 16384; broker.ManualMaintenance(o) })
	pol = policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 500 })
	q := e.queue("jobs", pol)
	for range n {
		_, err := q.Publish(ctx(t), []byte(strings.Repeat("x", 300)))
		require.NoError(t, err)
	}
	e.close()
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.seg"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(segs), 3, "setup: three segments")
	old = t.TempDir()
	require.NoError(t, recovery.CopyTree(filepath.Join(e.dir, "index"), filepath.Join(old, "index")))
	return e, pol, old
}

// sealSecondSegmentEarly zeroes the second half of the second segment of
// the closed store in dir, its seal too: a salvage seals it early.
func sealSecondSegmentEarly(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(segs), 3, "setup: three segments")
	data, err := os.ReadFile(segs[1])
	require.NoError(t, err)
	clear(data[len(data)/2:])
	require.NoError(t, os.WriteFile(segs[1], data, 0o600))
}

// ackFirst opens the store of e, receives and acks up to n messages of
// queue "jobs", and closes it.
func ackFirst(t *testing.T, e *env, pol broker.PolicyValue, n int) {
	t.Helper()
	e.open()
	ds, err := e.queue("jobs", pol).Receive(ctx(t), n)
	require.NoError(t, err)
	for _, d := range ds {
		require.NoError(t, e.queue("jobs", pol).Ack(ctx(t), d.Lease.Receipt))
	}
	e.close()
}
