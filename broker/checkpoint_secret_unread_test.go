package broker_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/recovery"
	"github.com/walbroker/walbroker/segment"
)

// lastSegment returns the path of the last segment file of the log in dir.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	return segs[len(segs)-1]
}

// tearFirstFrame zeroes the segment file at path from a few bytes into its
// first frame on, and removes the clean mark of its log: a power loss
// before the segment's first fdatasync, which kept the header and the
// start of the preamble's first record, and nothing after.
func tearFirstFrame(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	clear(data[segment.HeaderSize+8:])
	require.NoError(t, os.WriteFile(path, data, 0o600))
	err = os.Remove(filepath.Join(filepath.Dir(path), "CLEAN"))
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}
}

// An index directory copied in from another store is told by the secret
// its checkpoint holds, read from the first record of the segment its
// position is in (or of the last segment, when the log has no such
// segment). When that record cannot be read (here this log's last
// segment, a rotation's first, lost its preamble to a power loss before
// it was synced, under SyncNone), the secret is read from another
// segment's first record: every one holds the same. The other store's
// checkpoint, far ahead of this log, once gave the log its position as
// verified, and this store, which lost nothing it had made durable, was
// refused as having lost synced records, or, with Salvage, given empty
// segments up to that position, each reported as a span of lost records.
func TestAnIndexFromAnotherStoreIsToldWhenTheLogsLastSegmentLostItsPreamble(t *testing.T) {
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	small := func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes }
	var long []string
	for i := range 150 {
		long = append(long, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("a"), 600)))
	}
	var short []string
	for i := range 100 {
		short = append(short, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("b"), 500)))
	}
	a, _ := storeWith(t, "alpha", pol, long, small)
	b, bravo := storeWith(t, "bravo", pol, short, small, func(o *broker.Options) { o.Sync = broker.SyncNone })
	segsA, _ := filepath.Glob(filepath.Join(a.dir, "*.seg"))
	segsB, _ := filepath.Glob(filepath.Join(b.dir, "*.seg"))
	require.Greater(t, len(segsB), 2, "setup: sealed segments in this log")
	require.Greater(t, len(segsA), len(segsB)+1, "setup: the other log is longer by segments")
	swapIndex(t, a.dir, b.dir)
	tearFirstFrame(t, lastSegment(t, b.dir))

	for _, salvage := range []bool{false, true} {
		t.Run(fmt.Sprintf("salvage=%v", salvage), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			require.NoError(t, recovery.CopyTree(b.dir, dir))
			var buf bytes.Buffer // written only by Open, on this goroutine
			opts := b.opts
			opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			opts.Salvage = salvage
			s, err := broker.Open(dir, opts)
			require.NoError(t, err, "another store's index is no damage to this store's log")
			defer s.Close()
			require.Zero(t, s.Recovery().SalvagedSpans, "nothing this store made durable is damaged")
			require.True(t, s.Recovery().IndexRebuilt)
			require.Contains(t, buf.String(), "another store's log")
			require.Equal(t, []string{"bravo"}, s.Queues())
			q, err := s.Queue("bravo", pol)
			require.NoError(t, err)
			var got []string
			for _, d := range receiveAll(t, q) {
				got = append(got, d.Message.ID)
			}
			require.Less(t, len(got), len(bravo), "setup: the power loss took the last segment's publishes")
			require.Equal(t, bravo[:len(got)], got, "the sealed segments' publishes are all there")
		})
	}
}

// ownStoreWithCheckpointIn returns a closed store of 1 KiB segments with
// segs segments and its last checkpoint (Close's) in the last one, past
// its preamble.
func ownStoreWithCheckpointIn(t *testing.T, segs int) *env {
	t.Helper()
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.SegmentBytes = broker.MinSegmentBytes })
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	for i := 0; e.s.Stats().Segments < segs; i++ {
		mustPublish(t, q, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("x"), 300)))
	}
	mustPublish(t, q, "in the last segment")
	e.close()
	return e
}

// The store's own checkpoint, in a segment whose first record no longer
// reads (damaged, and nothing valid after it in the segment, so that it
// looks like a tail a power loss tore): the records the checkpoint
// recorded as durable are gone, and Open refuses the log naming the
// segment rather than zero them as a torn tail, whether or not another
// segment still tells the store's secret.
func TestAnOwnCheckpointStillRefusesDamageToTheSegmentItIsIn(t *testing.T) {
	for _, segs := range []int{1, 3} {
		t.Run(fmt.Sprintf("segments=%d", segs), func(t *testing.T) {
			e := ownStoreWithCheckpointIn(t, segs)
			last := lastSegment(t, e.dir)
			tearFirstFrame(t, last)
			_, err := broker.Open(e.dir, e.opts)
			requireErrorIs(t, err, broker.Corrupt, filepath.Base(last))
		})
	}
}

// And the store's own checkpoint in a segment whose first record a
// salvage padded over (its meta event), the log whole since: Open cannot
// read the secret there, reads it from another segment or, when none
// tells (the log's one segment), takes the checkpoint's position as
// durable only; either way it opens from its checkpoint with every
// message.
func TestAnOwnCheckpointInASegmentWhoseMetaEventWasSalvagedIsUsed(t *testing.T) {
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	for _, segs := range []int{1, 3} {
		t.Run(fmt.Sprintf("segments=%d", segs), func(t *testing.T) {
			e := ownStoreWithCheckpointIn(t, segs)
			last := lastSegment(t, e.dir)
			data, err := os.ReadFile(last)
			require.NoError(t, err)
			data[segment.HeaderSize+segment.FrameHeaderSize+2] ^= 0xff // in the meta event's secret
			require.NoError(t, os.WriteFile(last, data, 0o600))

			e.opts.Salvage = true
			s := e.open()
			require.Positive(t, s.Recovery().SalvagedSpans, "setup: the salvage padded over the meta event")
			want := s.Stats().Segments
			ready := e.queue("jobs", pol).Stats().Ready
			require.Positive(t, ready)
			e.close()

			e.opts.Salvage = false
			s = e.open()
			require.Equal(t, want, s.Stats().Segments, "setup: the checkpoint is in the segment salvaged")
			require.False(t, s.Recovery().IndexRebuilt, "the store's own checkpoint is used")
			require.Len(t, receiveAll(t, e.queue("jobs", pol)), ready)
		})
	}
}
