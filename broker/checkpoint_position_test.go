package broker_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// crashClone returns a copy of e's directory as a power loss now would
// leave it: no Close, no clean mark, only what was synced.
func crashClone(t *testing.T, e *env, cfs *vfs.CrashFS) string {
	t.Helper()
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: e.dir}))
	return clone
}

// TestALogEndingBeforeItsCheckpointIsRefused: a checkpoint's position was
// durable when it was written (its barrier synced it), so a log that ends
// before it after a crash has lost synced records — here its last segment
// is gone, which the log alone cannot tell from a log that never reached
// it (it starts that segment afresh after the sealed one before). Open
// refuses it with Corrupt, naming where the log now ends, rather than
// rebuilding without those records; Salvage opens what is left.
func TestALogEndingBeforeItsCheckpointIsRefused(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
		o.FS, o.SegmentBytes = cfs, broker.MinSegmentBytes
	})
	pol := policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 })
	q := e.queue("jobs", pol)
	for i := 0; e.s.Stats().Segments < 3; i++ {
		mustPublish(t, q, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("x"), 500)))
	}
	mustPublish(t, q, "in the last segment")
	require.NoError(t, e.s.Maintain()) // a checkpoint at the log's end, in segment 3
	dir := crashClone(t, e, cfs)
	require.NoError(t, os.Remove(filepath.Join(dir, "0000000003.seg")))

	opts := broker.Options{SegmentBytes: broker.MinSegmentBytes}
	_, err := broker.Open(dir, opts)
	requireErrorIs(t, err, broker.Corrupt, "0000000003.seg", "synced records are gone")

	opts.Salvage = true
	s, err := broker.Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().IndexRebuilt, "the checkpoint describes records that are gone")
	q2, err := s.Queue("jobs", pol)
	require.NoError(t, err)
	for _, d := range receiveAll(t, q2) {
		require.NotEqual(t, "in the last segment", string(d.Message.Payload))
	}
}

// TestACheckpointBeforeTheLogsFirstSegmentIsNotUsed: a checkpoint whose
// position lies in a segment no longer in the directory (removed by hand:
// the store removes segments only below its last checkpoint) describes
// records that are gone. Open does not load it; it rebuilds from the log
// it finds, and every message it then holds can be read.
func TestACheckpointBeforeTheLogsFirstSegmentIsNotUsed(t *testing.T) {
	cfs := vfs.NewCrashFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) {
		o.FS, o.SegmentBytes = cfs, broker.MinSegmentBytes
	})
	q := e.queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	mustPublish(t, q, "first")
	require.NoError(t, e.s.Maintain()) // a checkpoint in segment 1
	for i := 0; e.s.Stats().Segments < 4; i++ {
		mustPublish(t, q, fmt.Sprintf("%04d%s", i, bytes.Repeat([]byte("y"), 500)))
	}
	dir := crashClone(t, e, cfs)
	require.NoError(t, os.Remove(filepath.Join(dir, "0000000001.seg")))

	s, err := broker.Open(dir, broker.Options{SegmentBytes: broker.MinSegmentBytes})
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Recovery().IndexRebuilt, "the checkpoint names a segment that is gone")
	q2, err := s.Queue("jobs", policy(func(p *broker.PolicyValue) { p.MaxMessageBytes = 1024 }))
	require.NoError(t, err)
	receiveAll(t, q2)
}

// receiveAll receives every message q holds, requiring each to be
// readable and as many as its Stats count ready (at least one).
func receiveAll(t *testing.T, q *broker.Queue) []broker.DeliveryValue {
	t.Helper()
	ready := q.Stats().Ready
	require.Positive(t, ready)
	var all []broker.DeliveryValue
	for {
		ds, err := q.Receive(ctx(t), 100)
		require.NoError(t, err, "every message the store holds can be read")
		if len(ds) == 0 {
			break
		}
		all = append(all, ds...)
	}
	require.Len(t, all, ready)
	return all
}

// TestACheckpointWhoseMarkerCannotBeReadIsNotTrusted: when the index
// directory's SUSPECT marker cannot be looked for (an I/O error, not its
// absence), the store cannot tell whether it found damage after its last
// checkpoint. It used to trust the checkpoint, and skip verifying the log
// it covered; it now rebuilds the index from the log, which is always
// safe, and every message is still there.
func TestACheckpointWhoseMarkerCannotBeReadIsNotTrusted(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	e := newEnv(t, broker.ManualMaintenance, func(o *broker.Options) { o.FS = ffs })
	q := e.queue("jobs", policy())
	mustPublish(t, q, "one")
	mustPublish(t, q, "two")
	e.close() // with a checkpoint

	e.open()
	require.False(t, e.s.Recovery().IndexRebuilt, "the store starts from its checkpoint")
	e.close()

	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "SUSPECT", Err: syscall.EIO})
	e.open()
	require.NotZero(t, ffs.Injected(vfs.OpOpen))
	require.True(t, e.s.Recovery().IndexRebuilt, "a checkpoint that may be suspect was trusted")
	var got []string
	for _, d := range receiveAll(t, e.queue("jobs", policy())) {
		got = append(got, string(d.Message.Payload))
	}
	require.ElementsMatch(t, []string{"one", "two"}, got)
}
