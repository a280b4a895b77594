package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultLockIsExclusiveWithinTheProcess(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	first, err := Default.Lock(name)
	require.NoError(t, err)

	_, err = Default.Lock(name)
	require.ErrorIs(t, err, ErrLocked, "a second open file description conflicts")
	require.ErrorContains(t, err, fmt.Sprintf("held by this process, pid %d on ", os.Getpid()),
		"the error names the holder, and says it is the caller's own process")

	// Another holder's line is given as it is.
	require.NoError(t, os.WriteFile(name, []byte("pid 1 on elsewhere\n"), 0o600))
	_, err = Default.Lock(name)
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorContains(t, err, "(held by pid 1 on elsewhere)")
	require.NotContains(t, err.Error(), "this process")

	require.NoError(t, first.Close())
	second, err := Default.Lock(name)
	require.NoError(t, err, "closing releases the lock")
	require.NoError(t, second.Close())
}

// A ".." after a link climbs out of the link's target, as the kernel takes
// it, not out of the directory that holds the link: two names of one place
// resolve alike.
func TestResolveFollowsALinkBeforeDotDot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "elsewhere", "sub"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "elsewhere", "x"), 0o700))
	link := filepath.Join(root, "a", "link")
	require.NoError(t, os.Symlink(filepath.Join(root, "elsewhere", "sub"), link))
	viaLink := link + string(filepath.Separator) + ".." + string(filepath.Separator) + "x"

	fi1, err := os.Stat(viaLink)
	require.NoError(t, err)
	fi2, err := os.Stat(filepath.Join(root, "elsewhere", "x"))
	require.NoError(t, err)
	require.True(t, os.SameFile(fi1, fi2), "the kernel takes both names to one place")

	got, err := Resolve(viaLink)
	require.NoError(t, err)
	want, err := Resolve(filepath.Join(root, "elsewhere", "x"))
	require.NoError(t, err)
	require.Equal(t, want, got, "two names of one place resolve alike")
}

// No name goes below a file that is not a directory, ".." included: the
// kernel refuses such a path with ENOTDIR, and so does Resolve, where the
// name past it would otherwise be taken for one that does not exist yet.
func TestResolveRefusesANameBelowAFile(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	require.NoError(t, os.Symlink(file, filepath.Join(root, "link")))
	for _, p := range []string{"file/x", "file/../x", "file/.", "link/x", "file/x/y"} {
		_, err := Resolve(filepath.Join(root, "") + string(filepath.Separator) + p)
		require.ErrorIs(t, err, syscall.ENOTDIR, "%s", p)
	}
	got, err := Resolve(file)
	require.NoError(t, err, "the file itself resolves")
	dir, err := Resolve(root)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "file"), got)
}
