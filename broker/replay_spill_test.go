package broker_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// buildSpillTemplate makes a store in dir whose last checkpoint lies
// before a copy forward: the pinned message of pinnedBehindChurn was
// copied into a later segment, and the checkpoint that was to follow
// failed before it wrote anything, so the log after the checkpoint holds
// the copy, then more messages (kept) and acknowledged churn. It returns
// the payloads of the messages queue "stuck" must hold.
func buildSpillTemplate(t *testing.T, dir string, clock *fakeClock) []string {
	want := []string{string(pinnedBehindChurn(t, dir, clock).Payload)}
	ffs := vfs.NewFaultFS(vfs.Default)
	s, err := broker.Open(dir, reclaimOptions(clock, ffs))
	require.NoError(t, err)
	// Maintain's first checkpoint goes through; the one after its copy
	// forward fails at its marker, before the table is touched.
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: "CHECKPOINTING", Nth: 2})
	require.ErrorContains(t, s.Maintain(), "CHECKPOINTING")
	require.Positive(t, s.Stats().CopiedForward)
	stuck, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	churnQ, err := s.Queue("churn", stuckPolicy)
	require.NoError(t, err)
	for i := range 100 {
		p := fmt.Sprintf("after-%03d", i)
		mustPublish(t, stuck, p)
		want = append(want, p)
		_, err := churnQ.Publish(ctx(t), bytes.Repeat([]byte{'c'}, 100))
		require.NoError(t, err)
		require.NoError(t, churnQ.Ack(ctx(t), mustReceiveOne(t, churnQ).Lease.Receipt))
	}
	require.NoError(t, s.Close()) // no checkpoint: they stopped at the failure
	return want
}

// checkSpillClone opens dir from its checkpoint and a copy of it rebuilt
// from its log, requires the same state and live bytes of both, a
// maintenance round that succeeds, and then every message of want (and no
// churn) in the store.
func checkSpillClone(t *testing.T, dir string, clock *fakeClock, want []string, what string) {
	t.Helper()
	rebuilt := dir + "-rebuilt"
	copyTree(t, dir, rebuilt)
	require.NoError(t, os.RemoveAll(filepath.Join(rebuilt, "index")))
	defer os.RemoveAll(rebuilt)
	s, err := broker.Open(dir, reclaimOptions(clock, nil))
	require.NoError(t, err, what)
	defer s.Close()
	r, err := broker.Open(rebuilt, reclaimOptions(clock, nil))
	require.NoError(t, err, what)
	requireSameState(t, broker.Dump(r), broker.Dump(s), what+": checkpoint and rebuild differ")
	require.Equal(t, r.Stats().LiveBytes, s.Stats().LiveBytes, "%s: live bytes from the checkpoint and from a rebuild", what)
	require.NoError(t, r.Close())
	require.NoError(t, s.Maintain(), "%s: maintenance", what)
	stuck, err := s.Queue("stuck", stuckPolicy)
	require.NoError(t, err)
	var got []string
	for _, d := range receiveAll(t, stuck) {
		got = append(got, string(d.Message.Payload))
	}
	slices.Sort(got)
	require.Equal(t, want, got, what)
	churnQ, err := s.Queue("churn", stuckPolicy)
	require.NoError(t, err)
	require.Zero(t, churnQ.Stats().Ready, "%s: acknowledged churn came back", what)
}

// TestASpillingReplaySurvivesACrashAtEveryStep: an open that replays many
// records writes table entries out before its own checkpoint (so that a
// long log does not fill the heap), and so may rewrite an entry that the
// checkpoint it loaded still describes: here a copied message's entry
// takes its new position. A crash at any file operation of such an open,
// however much of its unsynced writes the device kept, leaves a store whose
// checkpoint agrees with its log (the open marked the index as being
// rewritten until its own checkpoint), that maintains, and that holds
// every live message and no acknowledged one.
func TestASpillingReplaySurvivesACrashAtEveryStep(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	want := buildSpillTemplate(t, template, clock)
	slices.Sort(want)

	spilling := func(fs vfs.FS) broker.Options {
		o := reclaimOptions(clock, fs)
		broker.ReplaySpill(16)(&o)
		return o
	}
	// How many operations an open of the template takes, spilling or not.
	opsOfOpen := func(opts func(vfs.FS) broker.Options, name string) (int64, broker.RecoveryReport) {
		dir := filepath.Join(root, name)
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		s, err := broker.Open(dir, opts(cfs))
		require.NoError(t, err)
		rec, n := s.Recovery(), cfs.Ops()
		require.NoError(t, s.Close())
		checkSpillClone(t, dir, clock, want, name)
		return n, rec
	}
	plain, rec := opsOfOpen(func(fs vfs.FS) broker.Options { return reclaimOptions(clock, fs) }, "plain")
	require.False(t, rec.IndexRebuilt, "the template's open loads its checkpoint")
	require.Greater(t, rec.Replayed, 10*16, "the open replays records enough to spill many times")
	total, _ := opsOfOpen(spilling, "spilling")
	require.Greater(t, total, plain, "a spilling replay writes table files before its checkpoint")
	t.Logf("open of the template: %d mutating operations spilling, %d not; %d records replayed", total, plain, rec.Replayed)

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for k := int64(1); k <= total; k++ {
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		if s, err := broker.Open(dir, spilling(cfs)); err == nil {
			_ = s.Close()
		}
		opts := crashOptionsFor(k, dir, rand.New(rand.NewPCG(rng.Uint64(), 8)))
		clone := filepath.Join(root, fmt.Sprintf("clone-%d", k))
		require.NoError(t, cfs.CrashClone(clone, opts))
		checkSpillClone(t, clone, clock, want, fmt.Sprintf("crash after op %d of %d of a spilling open (keep %.1f)", k, total, opts.KeepUnsyncedFraction))
		if k%4 == 3 {
			// The same power loss with unsynced names and sizes kept
			// apart from the data.
			mopts, state := metadataCrashOptions(k/4, dir, opts.Rand.Uint64())
			mclone := filepath.Join(root, fmt.Sprintf("metadata-clone-%d", k))
			require.NoError(t, cfs.CrashClone(mclone, mopts))
			checkSpillClone(t, mclone, clock, want, fmt.Sprintf("crash after op %d of %d of a spilling open (%s)", k, total, state))
			require.NoError(t, os.RemoveAll(mclone))
		}
		for _, d := range []string{dir, clone} {
			require.NoError(t, os.RemoveAll(d))
		}
	}
}
