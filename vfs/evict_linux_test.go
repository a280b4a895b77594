//go:build linux

package vfs_test

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/walbroker/walbroker/vfs"
)

// resident counts the pages of path that are in the page cache.
func resident(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno, "mincore: %v", errno)
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestEvictPageCacheDropsTheCleanPagesOfEveryFileBelow(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	if m := uint32(st.Type); m == unix.TMPFS_MAGIC || m == unix.RAMFS_MAGIC { // Type is 32 bits wide on some builds
		t.Skip("tmpfs and ramfs keep their files in the page cache: there is nothing to drop")
	}
	paths := []string{filepath.Join(dir, "a"), filepath.Join(dir, "sub", "b")}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	for _, p := range paths {
		f, err := os.Create(p)
		require.NoError(t, err)
		_, err = f.Write(make([]byte, 64<<10))
		require.NoError(t, err)
		require.NoError(t, f.Sync()) // clean pages, which the kernel may drop
		require.NoError(t, f.Close())
	}
	before := resident(t, paths[0]) + resident(t, paths[1])
	if before == 0 {
		t.Skip("this file system keeps no written pages in the page cache")
	}
	require.NoError(t, vfs.EvictPageCache(dir))
	require.Zero(t, resident(t, paths[0]), "pages of %s still cached", paths[0])
	require.Zero(t, resident(t, paths[1]), "pages of %s still cached", paths[1])
}

func TestEvictPageCacheOfAMissingDirectoryNamesIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	err := vfs.EvictPageCache(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, dir)
}

// TestEvictPageCacheLeavesWhatIsNoRegularFile: a symbolic link, even one to
// nothing, has no pages of its own to drop, and is passed over.
func TestEvictPageCacheLeavesWhatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "dangling")))
	require.NoError(t, vfs.EvictPageCache(dir))
}
