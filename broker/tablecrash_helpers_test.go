package broker_test

// What the power-loss tests of table files (tabledrop_crash_test.go,
// tableplant_crash_test.go) share: the clones they take after each crash,
// what a clone's index directory shows, and the reopen that must load the
// checkpoint.

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// tableCrashKinds returns the clones to take of dir after the crash
// numbered k: what the device held (synced data only), and half the
// unsynced data with the last write torn (its randomness drawn from rng,
// on stream); under -short one of the two, by turns. Every fourth crash
// adds one with unsynced names and sizes kept apart from the data (drawn
// from seed), and state names it, in brackets, for the description of
// the last clone; otherwise state is empty.
func tableCrashKinds(k int64, dir string, seed uint64, rng *rand.Rand, stream uint64) (kinds []vfs.CrashOptions, state string) {
	kinds = []vfs.CrashOptions{
		{Root: dir},
		{Root: dir, KeepUnsyncedFraction: 0.5, TearLastWrite: true, Rand: rand.New(rand.NewPCG(rng.Uint64(), stream))},
	}
	if testing.Short() {
		kinds = kinds[k%2 : k%2+1]
	}
	if k%4 == 3 {
		opts, name := metadataCrashOptions(k/4, dir, seed^uint64(k))
		kinds = append(kinds, opts)
		state = " (" + name + ")"
	}
	return kinds, state
}

// crashCloneIndex clones cfs to clone as opts says, and returns the names
// in the clone's index directory and whether a marker among them says a
// checkpoint was being written or is suspect.
func crashCloneIndex(t *testing.T, cfs *vfs.CrashFS, clone string, opts vfs.CrashOptions) (names []string, marked bool) {
	t.Helper()
	require.NoError(t, cfs.CrashClone(clone, opts))
	names = dirNames(t, filepath.Join(clone, "index"))
	return names, slices.Contains(names, "CHECKPOINTING") || slices.Contains(names, "SUSPECT")
}

// requireReopensLoaded opens the store in clone again, requires it to
// load its checkpoint (no rebuild of the index) and to hold the state
// want, and removes the clone. what names the clone.
func requireReopensLoaded(t *testing.T, clone string, clock *fakeClock, want, what string) {
	t.Helper()
	s, err := broker.Open(clone, dropOptions(clock, nil, broker.SyncAll))
	require.NoError(t, err, what)
	require.False(t, s.Recovery().IndexRebuilt, "%s: reopened", what)
	requireSameState(t, want, unplaced(broker.Dump(s)), what+", reopened")
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(clone))
}
