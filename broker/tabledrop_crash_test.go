package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// firstTable is the table file of sequences 0 to 65535, which the test
// below fills and then empties.
const firstTable = "tbl-000000000000.idx"

// dropOptions are the options of the table-drop test.
func dropOptions(clock *fakeClock, fs vfs.FS, mode broker.SyncMode) broker.Options {
	o := reclaimOptions(clock, fs)
	o.Sync = mode
	return o
}

// buildTableDropTemplate makes, in template, a store whose checkpoint names
// the first table file, with every message of that file's range gone and
// no checkpoint since the last of them went: the next checkpoint drops the
// file. It returns the state the store holds.
func buildTableDropTemplate(t *testing.T, root, template string, clock *fakeClock) string {
	dir := filepath.Join(root, "build")
	s, err := broker.Open(dir, dropOptions(clock, nil, broker.SyncNone))
	require.NoError(t, err)
	keep, err := s.Queue("keep", stuckPolicy)
	require.NoError(t, err)
	mustPublish(t, keep, "the last live message of the first table file")
	jobs, err := s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	const n, left = 65_600, 64 // past the first table file's 65536 entries
	batch := make([][]byte, 400)
	for i := range batch {
		batch[i] = []byte("m")
	}
	for range n / len(batch) {
		_, err := jobs.PublishBatch(ctx(t), batch)
		require.NoError(t, err)
	}
	for acked := 0; acked < n-left; {
		ds, err := jobs.Receive(ctx(t), min(1000, n-left-acked))
		require.NoError(t, err)
		require.NotEmpty(t, ds)
		for _, d := range ds {
			require.NoError(t, jobs.Ack(ctx(t), d.Lease.Receipt))
		}
		acked += len(ds)
	}
	// The checkpoints keep the file (keep's message is in its range);
	// reclaiming leaves a short log, quick to rebuild the index from.
	require.NoError(t, s.Maintain())
	require.Less(t, s.Stats().Segments, 10)
	require.NoError(t, s.Close())

	// The last message of the range goes, durably, and the power is lost
	// before a checkpoint.
	cfs := vfs.NewCrashFS(vfs.Default)
	s, err = broker.Open(dir, dropOptions(clock, cfs, broker.SyncAll))
	require.NoError(t, err)
	keep, err = s.Queue("keep", stuckPolicy)
	require.NoError(t, err)
	d := mustReceiveOne(t, keep)
	require.NoError(t, keep.Ack(ctx(t), d.Lease.Receipt))
	want := unplaced(broker.Dump(s))
	require.NoError(t, cfs.CrashClone(template, vfs.CrashOptions{Root: dir}))
	cfs.Crash()
	_ = s.Close()
	require.NoError(t, os.RemoveAll(dir))
	_, err = os.Stat(filepath.Join(template, "index", firstTable))
	require.NoError(t, err, "the template still has the first table file")
	return want
}

// dropWorkload opens dir through fs, checkpoints and reclaims, and closes.
// It stops at the first error.
func dropWorkload(dir string, clock *fakeClock, fs vfs.FS) error {
	s, err := broker.Open(dir, dropOptions(clock, fs, broker.SyncAll))
	if err != nil {
		return err
	}
	return errors.Join(s.Maintain(), s.Close())
}

// A checkpoint that finds every message of a table file's range gone drops
// the file: it writes the checkpoint without it, then removes it. A power
// loss at every file operation from the checkpoint's first to past its
// end must leave a store that opens to the same state; that loads its
// checkpoint unless the checkpoint's marker says one was being written
// (the file must never be gone while the checkpoint in place still names
// it); and that drops the file at its next checkpoint if it is still
// there.
func TestAPowerLossWhileACheckpointDropsATableFileLosesNothing(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	want := buildTableDropTemplate(t, root, template, clock)

	// A dry run: how many file operations the checkpoint that drops the
	// file makes, from the first (its marker's creation, or the file's
	// removal if that came first) to its marker's removal.
	dry := vfs.NewCrashFS(vfs.Default)
	dropAt, begin, end := watchDrop(dry, -1)
	dryDir := filepath.Join(root, "dry")
	copyTree(t, template, dryDir)
	require.NoError(t, dropWorkload(dryDir, clock, dropAt.fs))
	require.GreaterOrEqual(t, dropAt.at, int64(0), "the workload drops the first table file")
	require.Greater(t, end.at, dropAt.at)
	_, err := os.Stat(filepath.Join(dryDir, "index", firstTable))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.RemoveAll(dryDir))
	// The segment preparer's operations come between the checkpoint's in
	// some runs: a few more crashes make sure the last comes after the
	// marker's removal is durable.
	span := end.at - begin.at + 4
	t.Logf("the checkpoint makes %d file operations; the table file's removal is operation %d", end.at-begin.at+2, dropAt.at-begin.at+1)

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	outcomes := map[string]int{}
	for k := int64(0); k <= span; k++ {
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		w, _, _ := watchDrop(cfs, k)
		_ = dropWorkload(dir, clock, w.fs)
		kinds, state := tableCrashKinds(k, dir, seed, rng, 8)
		for c, opts := range kinds {
			what := fmt.Sprintf("power lost after operation %d of the checkpoint that drops the table file, clone %d", k+1, c)
			if c == len(kinds)-1 {
				what += state
			}
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d", k, c))
			names, marked := crashCloneIndex(t, cfs, clone, opts)
			outcomes[fmt.Sprintf("table file kept %v, marker %v", slices.Contains(names, firstTable), marked)]++

			s, err := broker.Open(clone, dropOptions(clock, nil, broker.SyncAll))
			require.NoError(t, err, what)
			requireSameState(t, want, unplaced(broker.Dump(s)), what)
			require.False(t, s.Recovery().IndexRebuilt && !marked,
				"%s: the checkpoint in place (no marker; index holds %v) did not load", what, names)
			if !slices.Contains(names, firstTable) {
				require.NoError(t, s.Close(), what)
				require.NoError(t, os.RemoveAll(clone))
				continue
			}
			require.NoError(t, s.Maintain(), what)
			require.NoError(t, s.Close(), what)
			_, err = os.Stat(filepath.Join(clone, "index", firstTable))
			require.ErrorIs(t, err, os.ErrNotExist, "%s: the table file outlived a checkpoint after the power loss", what)
			requireReopensLoaded(t, clone, clock, want, what)
		}
		require.NoError(t, os.RemoveAll(dir))
	}
	t.Logf("clones: %v", outcomes)
	require.Positive(t, outcomes["table file kept true, marker true"], "a power loss left the file beside a checkpoint being written")
	require.Positive(t, outcomes["table file kept false, marker false"], "a power loss came after the whole drop")
}

// dropWatch is where, in the operations of a CrashFS, one operation came.
type dropWatch struct {
	fs vfs.FS
	at int64 // -1 until it comes
}

// watchDrop returns cfs seen through a FaultFS, and where in its
// operations the first table file's removal comes, the checkpoint's first
// operation (its marker's creation or that removal) and its marker's
// removal after that. With crash >= 0, cfs crashes after that many
// operations from the checkpoint's first.
func watchDrop(cfs *vfs.CrashFS, crash int64) (drop, begin, end *dropWatch) {
	obs := vfs.NewFaultFS(cfs)
	drop, begin, end = &dropWatch{fs: obs, at: -1}, &dropWatch{at: -1}, &dropWatch{at: -1}
	var mu sync.Mutex
	obs.Observe(func(ev vfs.Event) {
		mu.Lock()
		defer mu.Unlock()
		at := cfs.Ops() - 1 // the operation's index
		base := filepath.Base(ev.Name)
		removed := ev.Op == vfs.OpRemove && base == firstTable
		if removed && drop.at < 0 {
			drop.at = at
		}
		if begin.at < 0 && (removed || ev.Op == vfs.OpOpen && base == "CHECKPOINTING") {
			begin.at = at
			if crash >= 0 {
				cfs.CrashAfter(at + 1 + crash)
			}
		}
		if ev.Op == vfs.OpRemove && base == "CHECKPOINTING" && drop.at >= 0 && end.at < 0 {
			end.at = at
		}
	})
	return drop, begin, end
}

// dirNames lists dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// unplaced is a Dump without the records' positions, which reclaiming
// changes (it copies live records forward).
func unplaced(dump string) string { return posRE.ReplaceAllString(dump, "pos=*") }
