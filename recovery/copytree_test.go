package recovery

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCopyTreeLeavesOutAFileRemovedWhileItCopies: tests copy a store that
// is still open, whose maintenance removes spare and reclaimed segments at
// any moment. A file listed and then removed before it is read is left out
// of the copy rather than failing it; every file that stays is copied.
func TestCopyTreeLeavesOutAFileRemovedWhileItCopies(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "kept"), []byte("kept bytes"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(src, "index"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "index", "kept"), []byte("index bytes"), 0o600))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		spare := filepath.Join(src, "spare.tmp")
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.WriteFile(spare, []byte("spare"), 0o600)
			_ = os.Remove(spare)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	for i := range 500 {
		dst := filepath.Join(t.TempDir(), "copy")
		require.NoError(t, CopyTree(src, dst), "copy %d", i)
		b, err := os.ReadFile(filepath.Join(dst, "kept"))
		require.NoError(t, err, "copy %d", i)
		require.Equal(t, "kept bytes", string(b), "copy %d", i)
		b, err = os.ReadFile(filepath.Join(dst, "index", "kept"))
		require.NoError(t, err, "copy %d", i)
		require.Equal(t, "index bytes", string(b), "copy %d", i)
	}
}

// TestCopyTreeRefusesATargetInsideTheDirectoryItCopies: a copy into the
// directory copied (or into itself) would walk what it writes. It is
// refused naming both, and nothing is made.
func TestCopyTreeRefusesATargetInsideTheDirectoryItCopies(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "kept"), []byte("kept bytes"), 0o600))
	for _, dst := range []string{src, filepath.Join(src, "copy"), filepath.Join(src, "a", "b"), filepath.Join(src, "..dots")} {
		err := CopyTree(src, dst)
		require.ErrorContains(t, err, "the target is inside the directory copied", dst)
		require.ErrorContains(t, err, dst)
	}
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing was made in %s", src)

	// A sibling whose name begins with the source's is not inside.
	dst := src + "-copy"
	t.Cleanup(func() { os.RemoveAll(dst) })
	require.NoError(t, CopyTree(src, dst))
	b, err := os.ReadFile(filepath.Join(dst, "kept"))
	require.NoError(t, err)
	require.Equal(t, "kept bytes", string(b))
}
