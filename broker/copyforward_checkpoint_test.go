package broker_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// A checkpoint that follows a copy forward rewrites the copied message's
// table entry in a chunk file the previous checkpoint still names. When
// the new checkpoint never lands (its rename fails here; a crash between
// the table's fdatasync and the rename does the same), an open that loaded
// the previous checkpoint over the rewritten table kept the old segment
// counted for good: maintenance failed at every round and the store
// disagreed with its own log. It must agree with a rebuild.
func TestACheckpointLostAfterACopyForwardPinsNothing(t *testing.T) {
	dir := fastDir(t)
	clock := newFakeClock()

	// 1. A stream message in segment 1, churn behind it, clean close.
	m := pinnedBehindChurn(t, dir, clock)

	// 2. Reopen; the checkpoint that follows the copy forward fails at its
	// rename (as a crash just before the rename would leave things).
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, NameContains: "checkpoint", Nth: 2})
	s, err := broker.Open(dir, reclaimOptions(clock, ffs))
	require.NoError(t, err)
	err = s.Maintain()
	t.Logf("maintain with the failing rename: %v (copied forward %d)", err, s.Stats().CopiedForward)
	require.Positive(t, s.Stats().CopiedForward)
	_ = s.Close()

	// 3. Rebuilt copy of the same directory, for reference.
	rebuilt := dir + "-rebuilt"
	copyTree(t, dir, rebuilt)
	require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
	defer os.RemoveAll(rebuilt)

	s, err = broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	// s is opened again below: the deferred Close must take the last one.
	defer func() { _ = s.Close() }()
	r, err := broker.Open(rebuilt, reclaimOptions(clock, nil))
	require.NoError(t, err)
	defer r.Close()

	t.Logf("from checkpoint: LiveBytes=%d; rebuilt: LiveBytes=%d", s.Stats().LiveBytes, r.Stats().LiveBytes)
	errS, errR := s.Maintain(), r.Maintain()
	t.Logf("maintain from checkpoint: %v; rebuilt: %v", errS, errR)
	t.Logf("segments from checkpoint: %d; rebuilt: %d", s.Stats().Segments, r.Stats().Segments)

	q, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	d := mustReceiveOne(t, q)
	require.Equal(t, m.ID, d.Message.ID)
	// The rebuilt store leases it too: a leased message needs its lease
	// as well as its publish (LiveBytes counts both), so both hold the
	// same state when their live bytes are compared.
	qr, err := r.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	require.Equal(t, m.ID, mustReceiveOne(t, qr).Message.ID)

	require.NoError(t, s.Close())
	s, err = broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	t.Logf("after another close+reopen: LiveBytes=%d, Maintain: %v, segments %d", s.Stats().LiveBytes, s.Maintain(), s.Stats().Segments)
	require.Equal(t, r.Stats().LiveBytes, s.Stats().LiveBytes, "live bytes: checkpoint path vs rebuild")
	require.NoError(t, errS, "maintenance after reopening from the previous checkpoint")
}

// The same, by power loss: the reopen and a maintenance round that copies
// forward lose power at every file operation; each clone, opened from its
// checkpoint, must agree with the same clone rebuilt from its log, and
// maintain cleanly: with the synced data alone, with every written byte,
// and (at every third operation) with unsynced names and sizes kept apart
// from the data.
func TestACopyForwardLosingPowerAgreesWithItsLog(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	pinnedBehindChurn(t, template, clock)

	work := func(dir string, fs vfs.FS) (copied int64) {
		s, err := broker.Open(dir, reclaimOptions(clock, fs))
		if err != nil {
			return 0
		}
		_ = s.Maintain()
		copied = s.Stats().CopiedForward
		_ = s.Close()
		return copied
	}
	dry := vfs.NewCrashFS(vfs.Default)
	dryDir := filepath.Join(root, "dry")
	copyTree(t, template, dryDir)
	require.Positive(t, work(dryDir, dry), "the workload copies forward")
	total := dry.Ops()
	bad, clones := 0, 0
	check := func(clone, what string) {
		clones++
		rebuilt := clone + "-rebuilt"
		copyTree(t, clone, rebuilt)
		require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
		a, err := broker.Open(clone, reclaimOptions(clock, nil))
		require.NoError(t, err, what)
		b, err := broker.Open(rebuilt, reclaimOptions(clock, nil))
		require.NoError(t, err, what)
		la, lb := a.Stats().LiveBytes, b.Stats().LiveBytes
		ea := a.Maintain()
		if la != lb || ea != nil {
			bad++
			t.Errorf("%s: LiveBytes from checkpoint %d, rebuilt %d; Maintain: %v", what, la, lb, ea)
		}
		_ = a.Close()
		_ = b.Close()
		for _, d := range []string{clone, rebuilt} {
			require.NoError(t, os.RemoveAll(d))
		}
	}
	for k := int64(1); k <= total; k++ {
		for _, keep := range []float64{0, 1} {
			dir := filepath.Join(root, "run")
			copyTree(t, template, dir)
			cfs := vfs.NewCrashFS(vfs.Default)
			cfs.CrashAfter(k)
			work(dir, cfs)
			clone := filepath.Join(root, "clone")
			require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: keep}))
			check(clone, fmt.Sprintf("crash after op %d of %d (keep %.0f)", k, total, keep))
			if keep == 1 && k%3 == 0 {
				// The same power loss with unsynced names and sizes
				// kept apart from the data.
				mopts, state := metadataCrashOptions(k/3, dir, uint64(k))
				require.NoError(t, cfs.CrashClone(clone, mopts))
				check(clone, fmt.Sprintf("crash after op %d of %d (%s)", k, total, state))
			}
			require.NoError(t, os.RemoveAll(dir))
		}
	}
	t.Logf("%d of %d clones leave a store whose checkpoint disagrees with its log", bad, clones)
}

// pinnedBehindChurn makes a store in dir whose first segment holds one
// pending message of queue "stuck", followed by four segments of
// published and acknowledged churn, and closes it: the next maintenance
// round copies the message forward. It returns the message.
func pinnedBehindChurn(t *testing.T, dir string, clock *fakeClock) broker.MessageValue {
	t.Helper()
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err)
	stuck, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	m := mustPublish(t, stuck, "pinned")
	churnQ, err := s.Queue("churn", stuckPolicy)
	require.NoError(t, err)
	first := s.Stats().Segments
	for s.Stats().Segments < first+4 {
		_, err := churnQ.Publish(ctx(t), bytes.Repeat([]byte{'c'}, 1000))
		require.NoError(t, err)
		ds := mustReceive(t, churnQ, 1)
		require.NoError(t, churnQ.Ack(ctx(t), ds[0].Lease.Receipt))
	}
	require.NoError(t, s.Close())
	return m
}
