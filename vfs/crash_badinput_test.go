package vfs

import (
	"os"
	"path/filepath"
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
