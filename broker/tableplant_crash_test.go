package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/vfs"
)

// secondTable is the table file of sequences 65536 to 131071.
const secondTable = "tbl-000000000001.idx"

// buildPlantedTableTemplate makes, in template, a store whose checkpoint
// names the first table file only (one live message), with no marker, and
// whose next message takes a sequence of the second table file's range;
// then it plants a second table file no checkpoint names (a copy of the
// first: a table file of another store, or of an older one). Open removes
// it; the store's next checkpoint makes the second table file anew. It
// returns the planted bytes.
func buildPlantedTableTemplate(t *testing.T, template string, clock *fakeClock) []byte {
	s, err := broker.Open(template, dropOptions(clock, nil, broker.SyncNone))
	require.NoError(t, err)
	keep, err := s.Queue("keep", stuckPolicy)
	require.NoError(t, err)
	mustPublish(t, keep, "the message that keeps the first table file")
	_, err = s.Queue("jobs", jobsPolicy)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// Each open under SyncNone reserves sequences ahead, and the next
	// open continues after the reservation: a cheap way past the first
	// table file's range, which holds index.ChunkEntries sequences.
	for range index.ChunkEntries/4096 + 1 {
		s, err = broker.Open(template, dropOptions(clock, nil, broker.SyncNone))
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	require.Equal(t, []string{"checkpoint", firstTable}, dirNames(t, filepath.Join(template, "index")),
		"the template's index: its checkpoint and the first table file, no marker")
	stale, err := os.ReadFile(filepath.Join(template, "index", firstTable))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(template, "index", secondTable), stale, 0o600))
	return stale
}

// plantWorkload opens dir through fs (the Open removes the planted table
// file), publishes three messages to jobs, each acknowledged under
// SyncAll, checkpoints (making the second table file) and closes. It stops
// at the first error and returns the store's state, unplaced, after the
// open and after each publish acknowledged.
func plantWorkload(dir string, clock *fakeClock, fs vfs.FS) (states []string, ids []string, err error) {
	s, err := broker.Open(dir, dropOptions(clock, fs, broker.SyncAll))
	if err != nil {
		return nil, nil, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	states = append(states, unplaced(broker.Dump(s)))
	jobs, err := s.Queue("jobs", jobsPolicy)
	if err != nil {
		return states, ids, err
	}
	for i := range 3 {
		m, err := jobs.Publish(context.Background(), fmt.Appendf(nil, "job %d", i))
		if err != nil {
			return states, ids, err
		}
		states = append(states, unplaced(broker.Dump(s)))
		ids = append(ids, m.ID)
	}
	return states, ids, s.Maintain()
}

// watchPlanted returns cfs seen through a FaultFS, and the index in cfs's
// operations of the removal of the planted table file, once it comes.
func watchPlanted(cfs *vfs.CrashFS) (vfs.FS, func() int64) {
	obs := vfs.NewFaultFS(cfs)
	var mu sync.Mutex
	at := int64(-1)
	obs.Observe(func(ev vfs.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Op == vfs.OpRemove && filepath.Base(ev.Name) == secondTable && at < 0 {
			at = cfs.Ops() - 1
		}
	})
	return obs, func() int64 { mu.Lock(); defer mu.Unlock(); return at }
}

// Open removes a table file its checkpoint does not name (index.OpenTable)
// without syncing the directory: the next checkpoint's marker does, before
// any table file is made. No sequence of the store's own leaves such a
// file without that marker, so the file is planted. The power fails after
// every file operation of an Open that removes it, of three publishes, a
// checkpoint that makes the table file of that number anew, and the Close.
// Each clone must open to the state of the publishes acknowledged (or of
// one more, in flight), load the checkpoint in place unless a marker says
// one was being written, and never show the planted file again: a publish,
// a checkpoint (whose new table file would collide with the planted one)
// and a reopen must work and keep the state.
func TestAPowerLossWhileOpenRemovesATableFileNoCheckpointNamesLosesNothing(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	template := filepath.Join(root, "template")
	stale := buildPlantedTableTemplate(t, template, clock)

	dryDir := filepath.Join(root, "dry")
	copyTree(t, template, dryDir)
	dry := vfs.NewCrashFS(vfs.Default)
	fs, removedAt := watchPlanted(dry)
	want, ids, err := plantWorkload(dryDir, clock, fs)
	require.NoError(t, err)
	require.Len(t, ids, 3)
	seq, ok := broker.MessageSeq(ids[0])
	require.True(t, ok)
	require.Equal(t, uint64(1), index.ChunkOf(seq), "the jobs' messages are in the planted file's range")
	require.GreaterOrEqual(t, removedAt(), int64(0), "the open removes the planted table file")
	b, err := os.ReadFile(filepath.Join(dryDir, "index", secondTable))
	require.NoError(t, err, "the checkpoint made the second table file")
	require.NotEqual(t, stale, b)
	total := dry.Ops()
	t.Logf("the workload makes %d file operations; the planted file's removal is operation %d", total, removedAt()+1)
	require.NoError(t, os.RemoveAll(dryDir))

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	outcomes := map[string]int{}
	for k := int64(0); k <= total; k++ {
		dir := filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, template, dir)
		cfs := vfs.NewCrashFS(vfs.Default)
		cfs.CrashAfter(k)
		_, acked, _ := plantWorkload(dir, clock, cfs)
		kinds, state := tableCrashKinds(k, dir, seed, rng, 10)
		for c, opts := range kinds {
			what := fmt.Sprintf("power lost after operation %d of %d, clone %d", k, total, c)
			if c == len(kinds)-1 {
				what += state
			}
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d", k, c))
			names, marked := crashCloneIndex(t, cfs, clone, opts)
			planted := false
			if b, err := os.ReadFile(filepath.Join(clone, "index", secondTable)); err == nil {
				planted = bytes.Equal(b, stale)
			}
			outcomes[fmt.Sprintf("planted file kept %v, marker %v", planted, marked)]++

			s, err := broker.Open(clone, dropOptions(clock, nil, broker.SyncAll))
			require.NoError(t, err, what)
			got := unplaced(broker.Dump(s))
			n := len(acked)
			require.Contains(t, want[n:min(n+2, len(want))], got,
				"%s: %d publishes acknowledged; the state is none the workload went through from there", what, n)
			require.False(t, s.Recovery().IndexRebuilt && !marked,
				"%s: the checkpoint in place (no marker; index holds %v) did not load", what, names)
			if b, err := os.ReadFile(filepath.Join(clone, "index", secondTable)); err == nil {
				require.NotEqual(t, stale, b, "%s: the planted table file outlived the open", what)
			}
			// The store works: a publish, and a checkpoint that makes the
			// second table file (an O_EXCL create).
			jobs, err := s.Queue("jobs", jobsPolicy)
			require.NoError(t, err, what)
			mustPublish(t, jobs, "after the power loss")
			require.NoError(t, s.Maintain(), what)
			after := unplaced(broker.Dump(s))
			require.NoError(t, s.Close(), what)
			requireReopensLoaded(t, clone, clock, after, what)
		}
		require.NoError(t, os.RemoveAll(dir))
	}
	t.Logf("clones: %v", outcomes)
	require.Positive(t, outcomes["planted file kept true, marker false"], "no power loss brought the planted file back")
	require.Positive(t, outcomes["planted file kept false, marker false"], "no power loss came after its removal was durable")
}
