package vfs

import (
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCrashFSAClosedHandleChangesNothing: a Sync through a closed handle
// fails (EBADF underneath) before it reaches the device; it used to be
// taken for a writeback failure, which loses the unsynced writes for good,
// so a later successful Sync through another handle did not make them
// durable. Writes, truncations and allocations through a closed handle are
// refused the same way, uncounted.
func TestCrashFSAClosedHandleChangesNothing(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	name := filepath.Join(dir, "f")
	f := durableFile(t, c, name, "AAAA")
	writeAt(t, f, "BBBB", 0)
	require.NoError(t, f.Close())

	ops := c.Ops()
	require.ErrorIs(t, f.Sync(), os.ErrClosed)
	_, err := f.WriteAt([]byte("CCCC"), 0)
	require.ErrorIs(t, err, os.ErrClosed)
	require.ErrorIs(t, f.Truncate(1), os.ErrClosed)
	require.ErrorIs(t, f.(Allocator).Allocate(0, 8192), os.ErrClosed)
	require.Equal(t, ops, c.Ops(), "refused calls are not counted")
	require.Equal(t, map[string]string{"f": "AAAA"}, cloneTree(t, c, keepNone))
	require.Equal(t, map[string]string{"f": "BBBB"}, cloneTree(t, c, keepAll))

	g, err := c.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Sync())
	require.Equal(t, map[string]string{"f": "BBBB"}, cloneTree(t, c, keepNone), "the fdatasync through the other handle made BBBB durable")
}

// TestCrashFSAllocateRefusesWhatFallocateRefuses: a negative offset, a
// length that is not positive, a range past the largest offset; and after
// a crash, any call, even one with nothing to write. Each used to return
// nil, through a FaultFS over the CrashFS too. Nothing is counted or
// changed.
func TestCrashFSAllocateRefusesWhatFallocateRefuses(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	ffs := NewFaultFS(c)
	f := durableFile(t, c, filepath.Join(dir, "f"), "12345678")
	defer f.Close()
	g, err := ffs.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer g.Close()
	ops := c.Ops()
	for name, a := range map[string]Allocator{"CrashFS": f.(Allocator), "FaultFS": g.(Allocator)} {
		for _, r := range []struct {
			off, n int64
			err    error
		}{
			{0, -5, syscall.EINVAL},
			{0, 0, syscall.EINVAL},
			{-1, 10, syscall.EINVAL},
			{math.MaxInt64 - 4, 10, syscall.EFBIG},
		} {
			require.ErrorIs(t, a.Allocate(r.off, r.n), r.err, "%s: Allocate(%d, %d)", name, r.off, r.n)
		}
	}
	require.Equal(t, ops, c.Ops())

	ro, err := c.OpenFile(filepath.Join(dir, "f"), os.O_RDONLY, 0)
	require.NoError(t, err)
	defer ro.Close()
	require.ErrorIs(t, ro.(Allocator).Allocate(0, 4), syscall.EBADF, "a read-only handle")

	c.Crash()
	for name, a := range map[string]Allocator{"CrashFS": f.(Allocator), "FaultFS": g.(Allocator)} {
		require.ErrorIs(t, a.Allocate(0, 4), ErrCrashed, "%s: within the file", name)
		require.ErrorIs(t, a.Allocate(0, 8192), ErrCrashed, "%s: past its end", name)
	}
	require.Equal(t, map[string]string{"f": "12345678"}, cloneTree(t, c, keepAll))
}

// TestCrashCloneRefusesANaNFraction: NaN passed the range check, then
// failed every comparison with 0 and 1, and the clone panicked on the Rand
// it had not been given.
func TestCrashCloneRefusesANaNFraction(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "f"), "synced")
	defer f.Close()
	writeAt(t, f, "lost", 0)
	dst := filepath.Join(t.TempDir(), "clone")
	err := c.CrashClone(dst, CrashOptions{Root: dir, KeepUnsyncedFraction: math.NaN()})
	require.ErrorContains(t, err, "KeepUnsyncedFraction")
	require.NoDirExists(t, dst)
}

// TestCrashCloneRefusesADestinationInsideTheTreeHoweverSpelt: a relative
// destination, or one through a symbolic link, that lies inside the
// cloned tree used to pass the check, which compared the names as spelt,
// and the clone was written into the tree it copied.
func TestCrashCloneRefusesADestinationInsideTheTreeHoweverSpelt(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	durableFile(t, c, filepath.Join(dir, "f"), "synced").Close()
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	t.Chdir(dir)
	for _, dst := range []string{"clone", "./sub/clone", ".", filepath.Join(link, "clone")} {
		err := c.CrashClone(dst, CrashOptions{Root: dir})
		require.ErrorContains(t, err, "inside the cloned tree", "destination %s", dst)
	}
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, names, 1, "only f: nothing was made in the tree")

	// Relative roots are resolved alike.
	t.Chdir(filepath.Dir(dir))
	err = c.CrashClone(filepath.Join(dir, "clone"), CrashOptions{Root: filepath.Base(dir)})
	require.ErrorContains(t, err, "inside the cloned tree")
	require.NoError(t, c.CrashClone(filepath.Join(t.TempDir(), "clone"), CrashOptions{Root: dir}), "a destination outside")
}

// TestNewCrashFSRefusesANilInnerFS: it used to panic at the first call,
// and did still for a nil pointer in an FS (see IsNil).
func TestNewCrashFSRefusesANilInnerFS(t *testing.T) {
	requirePanicsWith(t, "nil inner FS", func() { NewCrashFS(nil) })
	requirePanicsWith(t, "nil inner FS", func() { NewCrashFS((*FaultFS)(nil)) })
	requirePanicsWith(t, "nil inner FS", func() { NewCrashFS((*CrashFS)(nil)) })
}

// TestCrashCloneADestinationBesideTheRootIsNotInsideIt: a directory whose
// name begins with the root's name, as "db2" beside "db", is outside the
// tree.
func TestCrashCloneADestinationBesideTheRootIsNotInsideIt(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "db")
	c := NewCrashFS(Default)
	require.NoError(t, c.MkdirAll(root, 0o700))
	durableFile(t, c, filepath.Join(root, "f"), "synced").Close()
	dst := filepath.Join(parent, "db2")
	require.NoError(t, c.CrashClone(dst, CrashOptions{Root: root}))
	require.Equal(t, map[string]string{"f": "synced"}, readTree(t, dst))
}

// TestCrashFSANegativeOffsetOrSizeIsRefusedAsTheFileRefusesIt: a write at a
// negative offset and a truncation to a negative size are the inner file's
// to refuse (EINVAL for the truncation); they change nothing and are not
// counted.
func TestCrashFSANegativeOffsetOrSizeIsRefusedAsTheFileRefusesIt(t *testing.T) {
	dir := t.TempDir()
	c := NewCrashFS(Default)
	f := durableFile(t, c, filepath.Join(dir, "f"), "AAAA")
	ops := c.Ops()
	n, err := f.WriteAt([]byte("BB"), -1)
	require.Error(t, err)
	require.Zero(t, n)
	require.ErrorIs(t, f.Truncate(-1), syscall.EINVAL)
	require.Equal(t, ops, c.Ops(), "refused calls are not counted")
	require.Equal(t, map[string]string{"f": "AAAA"}, cloneTree(t, c, keepAll))
}
