package broker_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// A table entry that passed the checkpoint's checks at load can still be
// damaged; the replay of the events after the checkpoint is what reads it
// (an ack of a message the checkpoint left in the stream). Open then drops
// the checkpoint and rebuilds the index from the log, says so in the log
// at WARN, and the store holds exactly what the calls made: the acked
// messages stay acked, the others are there with their payloads.
func TestADamagedTableEntryMetInTheReplayRebuildsTheIndex(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err := s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	want := map[string]string{}
	for i := range 10 {
		m, err := q.Publish(ctx(t), fmt.Appendf(nil, "message %d", i))
		require.NoError(t, err)
		want[m.ID] = string(m.Payload)
	}
	require.NoError(t, s.Maintain()) // a checkpoint: the ten in the table's stream
	ds, err := q.Receive(ctx(t), 3)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	for _, d := range ds {
		require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
		delete(want, d.Message.ID)
	}

	// The process dies here (its files as the page cache holds them), and
	// the table entries of the three acked messages are damaged.
	crashed := filepath.Join(fastDir(t), "crashed")
	copyTree(t, dir, crashed)
	table := filepath.Join(crashed, "index", "tbl-000000000000.idx")
	f, err := os.OpenFile(table, os.O_RDWR, 0)
	require.NoError(t, err)
	for _, d := range ds {
		seq, err := strconv.ParseUint(d.Message.ID, 16, 64)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte{0xde, 0xad}, int64(seq%index.ChunkEntries)*index.EntrySize+8)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())

	var logs strings.Builder // read once the store is closed
	s2, err := broker.Open(crashed, broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.True(t, s2.Recovery().IndexRebuilt, "the index is rebuilt from the log")
	q2, err := s2.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	got := map[string]string{}
	all, err := q2.Receive(ctx(t), 20)
	require.NoError(t, err)
	for _, d := range all {
		got[d.Message.ID] = string(d.Message.Payload)
	}
	require.Equal(t, want, got, "the seven not acked, and only they")
	require.NoError(t, s2.Close())
	require.Contains(t, logs.String(), "level=WARN msg=\"broker: rebuilding the index from the log\"")
}
