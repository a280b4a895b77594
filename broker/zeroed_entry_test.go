package broker_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
)

// A table entry zeroed whole on disk reads as an absent one: the stream
// skips it (docs/DESIGN.md, "Who writes the table"). The damage is found
// when the queue's stream runs dry with a message still counted fresh: the
// store stops with Corrupt, and the rebuild the next open makes from the
// log has every message again.
func TestAZeroedTableEntryStopsTheStoreWhenItsStreamRunsDry(t *testing.T) {
	clock := newFakeClock()
	dir := fastDir(t)
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	q, err := s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	var want []string
	for _, p := range []string{"one", "two", "three"} {
		want = append(want, mustPublish(t, q, p).ID)
		clock.Advance(1)
	}
	require.NoError(t, s.Close()) // a checkpoint: the three in the table's stream

	f, err := os.OpenFile(filepath.Join(dir, "index", "tbl-000000000000.idx"), os.O_RDWR, 0)
	require.NoError(t, err)
	seq, ok := broker.MessageSeq(want[1])
	require.True(t, ok)
	_, err = f.WriteAt(make([]byte, index.EntrySize), int64(seq%index.ChunkEntries)*index.EntrySize)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s, err = broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	q, err = s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	ds, err := q.Receive(ctx(t), 2)
	require.NoError(t, err)
	require.Equal(t, []string{want[0], want[2]}, ids(ds), "the zeroed entry is skipped")
	_, _ = q.Receive(ctx(t), 2) // the stream runs dry
	require.ErrorIs(t, s.Err(), broker.Corrupt)
	_, err = q.Publish(ctx(t), []byte("four"))
	require.ErrorIs(t, err, broker.Corrupt, "the store stopped")
	require.NoError(t, s.Close())

	s, err = broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().IndexRebuilt)
	q, err = s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	clock.Advance(time.Hour) // the leases lapse
	ds, err = q.Receive(ctx(t), 10)
	require.NoError(t, err)
	require.Equal(t, want, ids(ds), "nothing is lost")
}
