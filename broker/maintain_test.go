package broker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
)

func TestWorthCopying(t *testing.T) {
	const seg = 1000
	uses := func(live ...int64) map[uint32]index.SegmentUse {
		m := map[uint32]index.SegmentUse{}
		for i, b := range live {
			if b > 0 {
				m[uint32(10+i)] = index.SegmentUse{Messages: 1, Bytes: b}
			}
		}
		return m
	}
	for _, c := range []struct {
		name  string
		live  []int64
		sizes []int // each segment's size up to its seal; seg if nil
		want  bool
	}{
		{"a quarter live", []int64{250}, nil, true},
		{"more than a quarter, alone", []int64{251}, nil, false},
		{"one large record before empty segments", []int64{900, 0, 0, 0}, nil, true},
		{"one large record before too few empty segments", []int64{900, 0, 0}, nil, false},
		{"a real backlog", []int64{900, 900, 900, 900, 900, 900}, nil, false},
		{"a backlog behind which much is free", []int64{900, 900, 0, 0, 0, 0, 0, 0}, nil, true},
		{"nothing sealed to judge", nil, nil, false},
		// Segments written before a reopen with another size keep theirs.
		{"wholly live segments smaller than the store's", []int64{250, 250, 250, 250}, []int{250, 250, 250, 250}, false},
		{"a fifth live in segments larger than the store's", []int64{800, 800}, []int{4000, 4000}, true},
		{"a small live segment before a large dead one", []int64{250, 0}, []int{250, 4000}, true},
	} {
		sealed := map[uint32]int{}
		for i := range c.live {
			sealed[uint32(10+i)] = seg
			if c.sizes != nil {
				sealed[uint32(10+i)] = c.sizes[i]
			}
		}
		got := worthCopying(uses(c.live...), sealed, 10, uint32(10+len(c.live)))
		if got != c.want {
			t.Errorf("%s: worthCopying(%v) = %v, want %v", c.name, c.live, got, c.want)
		}
	}
}

// A maintenance round checkpoints once the log has grown by half a segment
// since the last checkpoint, without waiting for a rotation, and not
// before.
func TestACheckpointIsDueAfterHalfASegmentOfLog(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentBytes: MinSegmentBytes, manualMaintenance: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, RetryDelay: time.Second, MaxMessageBytes: 2048})
	require.NoError(t, err)
	grown := func() int64 { return s.log.Stats().BytesWritten - s.maint.written }
	half := s.opts.segmentBytes() / 2
	payload := make([]byte, 1024)
	for grown() < half-4096 {
		_, err := q.Publish(t.Context(), payload)
		require.NoError(t, err)
	}
	before := s.Stats().Checkpoints
	require.NoError(t, s.maintain(false))
	require.Equal(t, before, s.Stats().Checkpoints, "%d bytes of log since the last checkpoint: none due", grown())
	for grown() < half {
		_, err := q.Publish(t.Context(), payload)
		require.NoError(t, err)
	}
	require.False(t, s.maint.rotated.Load(), "no rotation came meanwhile")
	require.NoError(t, s.maintain(false))
	require.Equal(t, before+1, s.Stats().Checkpoints, "half a segment of log since the last checkpoint")
	require.Less(t, grown(), half, "the checkpoint counts the log from its own position")
}

// A checkpoint that drops the table file of a range whose messages are all
// gone no longer names it: a process killed right after that checkpoint
// leaves a directory that opens from it, not one whose checkpoint names a
// file that is no longer there (which an open can only rebuild from the
// whole log).
func TestACheckpointNamesOnlyTheTableFilesItKeeps(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Sync: SyncNone, manualMaintenance: true}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, RetryDelay: time.Second})
	require.NoError(t, err)
	batch := make([][]byte, 300)
	for i := range batch {
		batch[i] = []byte("m")
	}
	const n = 70_200 // more than one table file's entries
	for range n / len(batch) {
		_, err := q.PublishBatch(t.Context(), batch)
		require.NoError(t, err)
	}
	require.NoError(t, s.checkpoint())
	tables := func(dir string) []string {
		names, err := filepath.Glob(filepath.Join(dir, "index", "tbl-*.idx"))
		require.NoError(t, err)
		for i, n := range names {
			names[i] = filepath.Base(n)
		}
		return names
	}
	require.Len(t, tables(dir), 2)
	for acked := 0; acked < index.ChunkEntries+100; {
		ds, err := q.Receive(t.Context(), 1000)
		require.NoError(t, err)
		for _, d := range ds {
			require.NoError(t, q.Ack(t.Context(), d.Lease.Receipt))
		}
		acked += len(ds)
	}
	require.NoError(t, s.checkpoint())
	require.Len(t, tables(dir), 1, "the first range's table file is dropped")

	clone := filepath.Join(t.TempDir(), "killed")
	require.NoError(t, os.CopyFS(clone, os.DirFS(dir)))
	c, err := Open(clone, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.False(t, c.Recovery().IndexRebuilt, "the checkpoint names a table file it dropped")
	require.Equal(t, Dump(s), Dump(c))
}

// A rotation asks for one checkpoint: a round that checkpoints because the
// log grew by half a segment also answers the rotation that came with
// that growth, and the next round, with nothing written since, writes
// none.
func TestARotationThatCameWithTheGrowthAsksForNoSecondCheckpoint(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentBytes: MinSegmentBytes, manualMaintenance: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	q, err := s.Queue("jobs", PolicyValue{VisibilityTimeout: time.Minute, MaxDeliveries: 3, RetryDelay: time.Second, MaxMessageBytes: 2048})
	require.NoError(t, err)
	payload := make([]byte, 1024)
	for !s.maint.rotated.Load() {
		_, err := q.Publish(t.Context(), payload)
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, s.log.Stats().BytesWritten-s.maint.written, s.opts.segmentBytes()/2, "the log grew by half a segment too")
	before := s.Stats().Checkpoints
	require.NoError(t, s.maintain(false))
	require.Equal(t, before+1, s.Stats().Checkpoints, "a rotation and half a segment of log: one checkpoint")
	require.NoError(t, s.maintain(false))
	require.Equal(t, before+1, s.Stats().Checkpoints, "nothing written since the last round's checkpoint")
}
