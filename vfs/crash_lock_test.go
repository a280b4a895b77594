package vfs

import (
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestALockAfterTheCrashIsRefusedAndMakesNoFile: "after a crash it [Lock]
// fails with ErrCrashed too, and takes no lock". Nothing is written after
// the crash: a Lock that went on would create its file, which a power
// loss must not keep.
func TestALockAfterTheCrashIsRefusedAndMakesNoFile(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir, "seg"), "x").Close()
	c.Crash()
	lock := filepath.Join(dir, "LOCK")
	_, err := c.Lock(lock)
	require.ErrorIs(t, err, ErrCrashed)
	_, err = os.Lstat(lock)
	require.ErrorIs(t, err, iofs.ErrNotExist, "the refused Lock made its file")
	require.Equal(t, map[string]string{"seg": "x"}, cloneTree(t, c, keepNone))
}

// TestAFileALockCreatesIsDurableOnlyAfterSyncDir: "A name (a creation, a
// Rename, a Remove) is durable only after a successful SyncDir of its
// directory", a file Lock creates among them, and what the Lock writes in
// it is unsynced.
func TestAFileALockCreatesIsDurableOnlyAfterSyncDir(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir, "seg"), "x").Close()
	lock := filepath.Join(dir, "LOCK")
	l, err := c.Lock(lock)
	require.NoError(t, err)
	defer l.Close()
	holder, err := os.ReadFile(lock)
	require.NoError(t, err)
	require.Contains(t, string(holder), "pid ", "the lock names its holder")
	require.Equal(t, map[string]string{"seg": "x"}, cloneTree(t, c, keepNone),
		"a file the Lock created, its directory not synced since, survives the power loss")

	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, map[string]string{"seg": "x", "LOCK": ""}, cloneTree(t, c, keepNone),
		"the name is durable, the holder's line is not")
	require.Equal(t, map[string]string{"seg": "x", "LOCK": string(holder)}, cloneTree(t, c, keepAll))
}

// TestAFileALockMakesAgainAfterARemovalIsAFileOfTheCrashFS: a Lock that
// makes a file again at a name the CrashFS saw removed records it as a
// creation, so that a File opened there after the crash refuses its
// writes with ErrCrashed, as every WriteAt after a crash does.
func TestAFileALockMakesAgainAfterARemovalIsAFileOfTheCrashFS(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	lock := filepath.Join(dir, "LOCK")
	durableFile(t, c, lock, "").Close()
	require.NoError(t, c.Remove(lock))
	l, err := c.Lock(lock)
	require.NoError(t, err)
	defer l.Close()
	c.Crash()
	f, err := c.OpenFile(lock, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("after the crash"), 0)
	require.ErrorIs(t, err, ErrCrashed, "a write after the crash through a %T", f)
	require.Equal(t, map[string]string{"LOCK": ""}, cloneTree(t, c, keepNone),
		"the removal and the Lock's creation were never made durable")
}

// emptyingLockFS is an FS whose Lock leaves the file empty, as Default's
// does when its write of the holder fails after its Truncate(0) (ENOSPC).
type emptyingLockFS struct{ FS }

func (e emptyingLockFS) Lock(name string) (io.Closer, error) {
	l, err := e.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Truncate(name, 0); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

// TestTearingALockFileTheLockEmptiedKeepsItOrEmptiesIt: TearLastWrite
// "cuts the last unsynced write of each file after a random number of
// bytes (possibly none, never all)"; a Lock that left its file empty wrote
// nothing to cut, and the clone keeps the file's synced content or, the
// truncation surviving, an empty file (CrashClone used to draw a random
// number below 0, and panic).
func TestTearingALockFileTheLockEmptiedKeepsItOrEmptiesIt(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(emptyingLockFS{Default})
	name := filepath.Join(dir, "mark")
	durableFile(t, c, name, "holder").Close()
	l, err := c.Lock(name)
	require.NoError(t, err)
	defer l.Close()
	for seed := range uint64(8) {
		got := cloneTree(t, c, CrashOptions{KeepUnsyncedFraction: 0.5, TearLastWrite: true, Rand: newRand(seed)})
		require.Contains(t, []string{"holder", ""}, got["mark"], "seed %d", seed)
	}
}
