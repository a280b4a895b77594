package vfs

import (
	"fmt"
	"os"
	"path/filepath"
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
