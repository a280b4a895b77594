package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// TestANewSegmentWhosePreambleAPowerLossTookStillReplaysAlone: a rotation
// seals and fdatasyncs the old segment, then writes the new segment's
// preamble with the batch that needed it. Under SyncNone (and under
// SyncPublish when that batch held no publish) the batch is only written:
// a power loss keeps the seal and the new, empty segment, and loses the
// preamble. The reopened store appends to that segment as its active one.
// Once the segments before it are reclaimed, the log no longer declares
// the queue nor carries the secret or the next sequence, and a replay of
// the log alone (a checkpoint found suspect, or removed) loses every
// message of the queue. "A log that replays alone" (DESIGN.md, Reclaiming
// disk space) must hold after any power loss the mode allows.
func TestANewSegmentWhosePreambleAPowerLossTookStillReplaysAlone(t *testing.T) {
	for _, mode := range []SyncMode{SyncNone, SyncPublish} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			dir := filepath.Join(root, "store")
			cfs := vfs.NewCrashFS(vfs.Default)
			opts := preambleOptions(mode, cfs)
			opts.SyncInterval = time.Hour
			s, q := openJobs(t, dir, opts)
			// A backlog fills most of segment 1; consuming it fills the
			// rest, so that the batch that rotates is a lease or an ack
			// (under SyncPublish a publish would have synced it).
			for s.log.End().Offset() < MinSegmentBytes-1200 {
				_, err := q.Publish(ctx, make([]byte, 100))
				require.NoError(t, err)
			}
			require.Equal(t, 1, s.log.Stats().Segments)
			for s.log.Stats().Segments < 2 {
				ds, err := q.Receive(ctx, 1)
				require.NoError(t, err)
				require.Len(t, ds, 1, "the backlog lasts until the rotation")
				require.NoError(t, q.Ack(ctx, ds[0].Lease.Receipt))
			}
			// Power lost: the seal of segment 1 is durable, the
			// preamble of segment 2 and the event after it are not.
			cfs.Crash()
			clone := filepath.Join(root, "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
			_ = s.Close()

			first := replaysAloneAfterReclaiming(t, clone)
			require.Equal(t, uint32(2), first, "segment 1 was reclaimed: the log alone is the segment whose preamble the power loss took")
		})
	}
}

// TestANewSegmentWhosePreambleACrashTookStillReplaysAloneUnderSyncAll: the
// same under SyncAll, where the batch that rotates is synced: a process
// crash (here: the write of that batch fails, which leaves the files as a
// kill would) between the old segment's sealing fdatasync and the batch's
// write leaves the new segment empty.
func TestANewSegmentWhosePreambleACrashTookStillReplaysAloneUnderSyncAll(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ffs := vfs.NewFaultFS(vfs.Default)
	failSegment2sFirstWrite(ffs)
	s, q := openJobs(t, dir, preambleOptions(SyncAll, ffs))
	var err error
	for err == nil {
		var ds []DeliveryValue
		if _, err = q.Publish(ctx, make([]byte, 100)); err != nil {
			break
		}
		if ds, err = q.Receive(ctx, 1); err != nil {
			break
		}
		err = q.Ack(ctx, ds[0].Lease.Receipt)
	}
	t.Logf("the batch after the rotation failed: %v", err)
	_ = s.Close()

	first := replaysAloneAfterReclaiming(t, dir)
	require.Equal(t, uint32(2), first, "segment 1 was reclaimed")
}

// replaysAloneAfterReclaiming opens the store in dir (SyncAll, see
// preambleOptions), acks what is left in queue "jobs", publishes one message,
// runs maintenance (which reclaims the segments nothing pins any more) and
// closes; then it removes the index and requires the log alone to declare
// the queue and hold that message. It returns the first segment left after
// maintenance.
func replaysAloneAfterReclaiming(t *testing.T, dir string) uint32 {
	t.Helper()
	ctx := context.Background()
	opts := preambleOptions(SyncAll, nil)
	r, err := Open(dir, opts)
	require.NoError(t, err, "a power loss is not corruption")
	rq, err := r.Queue("jobs", preamblePolicy)
	require.NoError(t, err)
	// The rest of the backlog is consumed (the acks the crash took are
	// redone): segment 1 pins nothing any more.
	left, err := rq.Receive(ctx, 100)
	require.NoError(t, err)
	for _, d := range left {
		require.NoError(t, rq.Ack(ctx, d.Lease.Receipt))
	}
	m, err := rq.Publish(ctx, []byte("published after the restart, never consumed"))
	require.NoError(t, err)
	require.NoError(t, r.Maintain())
	first := r.log.Stats().FirstSegment
	require.NoError(t, r.Close())

	// The log alone must still say everything.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	r, err = Open(dir, opts)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, []string{"jobs"}, r.Queues(), "the queue's declaration is in the log")
	rq, err = r.Queue("jobs", preamblePolicy)
	require.NoError(t, err)
	ds, err := rq.Receive(ctx, 10)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the message published after the restart survives a replay of the log alone")
	require.Equal(t, m.ID, ds[0].Message.ID)
	return first
}

// failSegment2sFirstWrite makes the first write to segment 2 once it is
// renamed into place (the batch with its preamble) fail: the files are
// then as a kill between the old segment's sealing fdatasync and that
// batch's write leaves them.
func failSegment2sFirstWrite(ffs *vfs.FaultFS) {
	var installed atomic.Bool
	ffs.Observe(func(e vfs.Event) {
		if e.Op == vfs.OpRename && strings.HasSuffix(e.NewName, "0000000002.seg") {
			installed.Store(true)
		}
	})
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: func(name string) bool {
		return installed.Load() && strings.Contains(name, "0000000002.seg")
	}, Nth: 1})
}

// TestASalvageThatSkipsARecordOfTheActiveSegmentsPreambleWritesItAgain:
// damage to the declaration in the active segment's preamble is padded
// over by Salvage, which leaves the preamble's mark: the look for a
// preamble took the segment for one that holds it whole, and the
// declaration was written nowhere after the earlier segments. Once they
// were reclaimed, a replay of the log alone found no queue, and dropped
// the messages published since as orphans. A salvaging Open that skipped
// a span of the active segment now writes its preamble again.
func TestASalvageThatSkipsARecordOfTheActiveSegmentsPreambleWritesItAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := preambleOptions(SyncAll, nil)
	s, q := openJobs(t, dir, opts)
	for s.log.Stats().Segments < 2 {
		_, err := q.Publish(ctx, make([]byte, 100))
		require.NoError(t, err)
	}
	var declared wal.Position
	require.NoError(t, s.log.Iterate(wal.MakePosition(2, 0), func(pos wal.Position, rec []byte) error {
		if declared == 0 && index.Kind(rec[0]) == index.KindDeclare {
			declared = pos
		}
		return nil
	}))
	require.NotZero(t, declared, "segment 2's preamble declares the queue")
	// Fewer than the 100 replaysAloneAfterReclaiming consumes are left.
	ds, err := q.Receive(ctx, 50)
	require.NoError(t, err)
	for _, d := range ds {
		require.NoError(t, q.Ack(ctx, d.Lease.Receipt))
	}
	require.NoError(t, s.Close())
	path := filepath.Join(dir, "0000000002.seg")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[declared.Offset()+segment.FrameHeaderSize+1] ^= 0x01 // the declaration fails its checksum
	require.NoError(t, os.WriteFile(path, data, 0o600))

	salvage := opts
	salvage.Salvage = true
	s, err = Open(dir, salvage)
	require.NoError(t, err)
	require.Equal(t, 1, s.Recovery().SalvagedSpans)
	require.NoError(t, s.Close())

	first := replaysAloneAfterReclaiming(t, dir)
	require.Equal(t, uint32(2), first, "segment 1 was reclaimed: the log alone is the segment whose declaration salvage skipped")
}

// TestARotationOpenCausesBeforeItKnowsThePreambleLeavesNoSegmentWithoutOne:
// Open may append before it has set the preamble (the secret a consulted
// checkpoint gave back, a salvaged event), and when the active segment is
// too full for that record, the log rotates and asks for a preamble that
// is not set yet: the new segment starts with the record, without one.
// Open's look for the active segment's preamble, made once it is set,
// finds no mark there and writes it: the segment still declares the queue.
func TestARotationOpenCausesBeforeItKnowsThePreambleLeavesNoSegmentWithoutOne(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := preambleOptions(SyncAll, nil)
	s, q := openJobs(t, dir, opts)
	// Fill segment 2 until a meta record (its frame: 50 bytes) no longer
	// fits before the room kept for the seal.
	capacity := int(MinSegmentBytes) - segment.Size(0)
	meta := segment.Size(len((&index.Event{Kind: index.KindMeta, Secret: make([]byte, index.SecretSize)}).Append(nil)))
	for {
		end := s.log.End()
		room := capacity - end.Offset()
		if end.Segment() == 2 && room < meta {
			break
		}
		n := 100
		if end.Segment() == 2 {
			n = min(max(room-meta/2-segment.Size(40), 0), 1000)
		}
		_, err := q.Publish(ctx, make([]byte, n))
		require.NoError(t, err)
		require.LessOrEqual(t, s.log.End().Segment(), uint32(2), "setup: segment 2 filled without a rotation")
	}
	require.NoError(t, s.Close())
	// A suspect checkpoint is consulted, and its secret written again.
	require.NoError(t, index.MarkSuspect(opts.fs(), filepath.Join(dir, "index")))

	s, err := Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, uint32(3), s.log.End().Segment(), "setup: Open's own record rotated")
	var kinds []index.Kind
	require.NoError(t, s.log.Iterate(wal.MakePosition(3, 0), func(_ wal.Position, rec []byte) error {
		kinds = append(kinds, index.Kind(rec[0]))
		return nil
	}))
	require.Equal(t, index.KindMeta, kinds[0], "setup: the rotation came before the preamble was set")
	require.Contains(t, kinds, index.KindDeclare, "segment 3 declares the queue: %v", kinds)
	require.Contains(t, kinds, index.KindMark, "and ends its preamble: %v", kinds)
}
