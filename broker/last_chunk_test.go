package broker_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// A checkpoint drops the table files of chunks whose messages are all
// gone and that no later message can land in. Whether a later one could
// was decided by (chunk+1)*ChunkEntries <= next sequence, which wraps to 0
// for the last chunk: its file was removed while publishes were still
// headed for it, and made again (a 2 MiB file, synced) by the next one.
func TestACheckpointKeepsTheLastChunkWhilePublishesMayStillLandInIt(t *testing.T) {
	dir := t.TempDir()
	writeRawLog(t, dir, rawDeclare(1, "jobs"),
		index.Event{Kind: index.KindMark, Seq: math.MaxUint64 - 100})
	opts := broker.Options{Now: newFakeClock().Now, SegmentBytes: testSegmentBytes}
	broker.ManualMaintenance(&opts)
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	q, err := s.Queue("jobs", policy())
	require.NoError(t, err)
	m := mustPublish(t, q, "one")
	last := index.ChunkOf(seqOf(t, m.ID))
	require.Equal(t, uint64(math.MaxUint64/index.ChunkEntries), last, "the message is in the last chunk")
	require.NoError(t, s.Maintain()) // its entry is in the chunk's file now
	ds := mustReceive(t, q, 1)
	require.NoError(t, q.Ack(ctx(t), ds[0].Lease.Receipt))
	require.NoError(t, s.Maintain())

	require.FileExists(t, filepath.Join(dir, "index", "tbl-281474976710655.idx"),
		"the last chunk's file was dropped while its later sequences are still to be handed out")
	mustPublish(t, q, "two")
	require.NoError(t, s.Maintain())
	require.NoError(t, broker.VerifyIndex(s))
}
