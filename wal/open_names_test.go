package wal

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// crashAfterRemoveFS is a CrashFS that loses power at the first directory
// sync after a Remove, before the sync.
type crashAfterRemoveFS struct {
	*vfs.CrashFS
	mu      sync.Mutex
	removed bool
}

func (fs *crashAfterRemoveFS) Remove(name string) error {
	fs.mu.Lock()
	fs.removed = true
	fs.mu.Unlock()
	return fs.CrashFS.Remove(name)
}

func (fs *crashAfterRemoveFS) SyncDir(dir string) error {
	fs.mu.Lock()
	crash := fs.removed
	fs.mu.Unlock()
	if crash {
		fs.CrashFS.Crash()
		return fmt.Errorf("sync dir %s: %w", dir, vfs.ErrCrashed)
	}
	return fs.CrashFS.SyncDir(dir)
}

// Open removes the empty segments that rotations a crash interrupted left
// after the last written one, newest first. A power loss before the
// directory sync that makes those removals durable, on a file system that
// may keep a later change of names without an earlier one, must not leave
// a gap (an older empty segment removed, a newer one kept), which the
// next Open would refuse as a missing segment.
func TestTheEmptySegmentsOpenRemovesLeaveNoGapWhateverSubsetSurvives(t *testing.T) {
	rng := seededRand(t)
	dir, acked, _ := buildLog(t)
	last, _ := lastWritten(acked)
	for seq := last + 1; seq <= last+3; seq++ {
		f, err := segment.Create(vfs.Default, segFile(dir, seq), seq, segment.NewSalt(), smallSeg)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	{
		plain := copyDir(t, dir)
		l := mustOpen(t, plain, Options{SegmentBytes: smallSeg})
		require.Len(t, l.Recovery().RemovedEmpty, 3, "the three empty segments are removed")
		require.NoError(t, l.Close())
	}

	fs := &crashAfterRemoveFS{CrashFS: vfs.NewCrashFS(vfs.Default)}
	_, err := Open(dir, Options{FS: fs, SegmentBytes: smallSeg})
	require.ErrorIs(t, err, vfs.ErrCrashed)
	for range 40 {
		seed := rng.Uint64()
		clone := filepath.Join(t.TempDir(), "clone")
		require.NoError(t, fs.CrashFS.CrashClone(clone, vfs.CrashOptions{Root: dir,
			KeepUnsyncedNames: vfs.KeepSubset, Rand: rand.New(rand.NewPCG(seed, seed))}))
		l, err := Open(clone, Options{SegmentBytes: smallSeg})
		require.NoError(t, err, "clone seed %d: a subset of Open's removals of empty segments kept", seed)
		requireEntries(t, acked, readAll(t, l))
		require.NoError(t, l.Close())
	}
}
