package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestASalvageThatRaisesTheSequenceStillRestoresTheActiveSegmentsPreamble:
// a crash between a rotation's seal and the new segment's preamble leaves
// the active segment without one, and the next Open writes it
// (restorePreamble). When that Open is also a salvage that raised the next
// sequence (the damage took the publish of the last sequence a checkpoint
// knew handed out), it records the raised sequence as a mark in the same
// segment; that mark must not be taken for the preamble's own. Otherwise,
// once the segments before it are reclaimed, the log alone no longer
// declares the queue, and a replay of it loses every message of the queue.
func TestASalvageThatRaisesTheSequenceStillRestoresTheActiveSegmentsPreamble(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	failSegment2sFirstWrite(ffs) // leaves the files as a kill would
	s, q := openJobs(t, dir, preambleOptions(SyncAll, ffs))
	var err error
	// A backlog fills most of segment 1; its last publish is the one the
	// damage below takes.
	var last []byte
	var lastID string
	for i := 0; s.log.End().Offset() < MinSegmentBytes-1200; i++ {
		last = fmt.Appendf(nil, "message %04d %s", i, strings.Repeat("x", 80))
		m, err := q.Publish(ctx, last)
		require.NoError(t, err)
		lastID = m.ID
	}
	// The checkpoint knows the last publish's sequence handed out.
	require.NoError(t, s.Maintain())
	require.Equal(t, 1, s.log.Stats().Segments)
	// Consuming the start of the backlog fills the rest of segment 1; the
	// batch that rotates never reaches segment 2.
	for err == nil {
		var ds []DeliveryValue
		if ds, err = q.Receive(ctx, 1); err != nil {
			break
		}
		require.Len(t, ds, 1, "the backlog lasts until the rotation")
		require.NotEqual(t, lastID, ds[0].Message.ID, "the backlog lasts until the rotation")
		err = q.Ack(ctx, ds[0].Lease.Receipt)
	}
	t.Logf("the batch after the rotation failed: %v", err)
	_ = s.Close()

	// The last publish's record is damaged: a salvage takes the publish
	// of the highest sequence handed out.
	seg1 := filepath.Join(dir, "0000000001.seg")
	raw, err := os.ReadFile(seg1)
	require.NoError(t, err)
	i := bytes.Index(raw, last)
	require.GreaterOrEqual(t, i, 0, "the last publish is in segment 1")
	raw[i+len(last)/2] ^= 0x40
	require.NoError(t, os.WriteFile(seg1, raw, 0o600))

	sopts := preambleOptions(SyncAll, nil)
	sopts.Salvage = true
	s, err = Open(dir, sopts)
	require.NoError(t, err)
	require.Contains(t, s.Recovery().LostMessages, lastID, "setup: the salvage took the last publish")
	require.True(t, s.seqRaised, "setup: the salvage raised the next sequence")
	require.Equal(t, uint32(2), s.log.End().Segment(), "setup: segment 2, without its preamble, is the active one")
	var kinds []index.Kind
	require.NoError(t, s.log.Iterate(wal.MakePosition(2, 0), func(_ wal.Position, rec []byte) error {
		kinds = append(kinds, index.Kind(rec[0]))
		return nil
	}))
	require.Contains(t, kinds, index.KindDeclare, "segment 2 declares the queue (its records' kinds: %v)", kinds)
	// What is left of the backlog is consumed: segment 1 pins nothing.
	q, err = s.Queue("jobs", preamblePolicy)
	require.NoError(t, err)
	for {
		ds, err := q.Receive(ctx, 100)
		require.NoError(t, err)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			require.NoError(t, q.Ack(ctx, d.Lease.Receipt))
		}
	}
	require.NoError(t, s.Close())

	first := replaysAloneAfterReclaiming(t, dir)
	require.Equal(t, uint32(2), first, "segment 1 was reclaimed")
}
