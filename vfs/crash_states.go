package vfs

import "math/rand/v2"

// CrashState is a named way a power loss may treat what no Sync or SyncDir
// made durable: the fields of [CrashOptions] that say so.
type CrashState struct {
	Name                 string
	KeepUnsyncedFraction float64
	TearLastWrite        bool
	BlockSize            int
	KeepUnsyncedNames    KeepUnsynced
	KeepUnsyncedSizes    KeepUnsynced
}

// Options returns the options of a clone of root in state s, its choices
// drawn from rng.
func (s CrashState) Options(root string, rng *rand.Rand) CrashOptions {
	return CrashOptions{Root: root, KeepUnsyncedFraction: s.KeepUnsyncedFraction, TearLastWrite: s.TearLastWrite,
		BlockSize: s.BlockSize, KeepUnsyncedNames: s.KeepUnsyncedNames, KeepUnsyncedSizes: s.KeepUnsyncedSizes, Rand: rng}
}

// MetadataCrashStates returns, in a new slice, the states in which the
// unsynced changes of names and of sizes survive apart from the data, as
// file systems that commit metadata on their own may leave them: a file
// that grew may come back longer than its surviving data, the rest zeros,
// or shorter, its blocks past the end lost; and every journalled name may
// survive, with every written page (the tree as the page cache holds it)
// or with none. The crash suites check them beside the states that keep a
// share of the data only.
func MetadataCrashStates() []CrashState {
	return []CrashState{
		{Name: "every unsynced name and size, no unsynced block", KeepUnsyncedNames: KeepAll, KeepUnsyncedSizes: KeepAll},
		{Name: "every unsynced name and every written byte", KeepUnsyncedFraction: 1, KeepUnsyncedNames: KeepAll},
		{Name: "a prefix of the unsynced names and of each file's sizes, half the unsynced blocks, last write torn",
			KeepUnsyncedFraction: 0.5, TearLastWrite: true, KeepUnsyncedNames: KeepPrefix, KeepUnsyncedSizes: KeepPrefix},
		{Name: "a prefix of the unsynced names and of each file's sizes, every written byte",
			KeepUnsyncedFraction: 1, KeepUnsyncedNames: KeepPrefix, KeepUnsyncedSizes: KeepPrefix},
		{Name: "every unsynced size, no unsynced name or block", KeepUnsyncedSizes: KeepAll},
		{Name: "every unsynced name, a prefix of each file's sizes, half the unsynced blocks",
			KeepUnsyncedFraction: 0.5, KeepUnsyncedNames: KeepAll, KeepUnsyncedSizes: KeepPrefix},
	}
}
