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
	require.ErrorContains(t, err, fmt.Sprintf("held by pid %d on ", os.Getpid()), "the error names the holder")

	require.NoError(t, first.Close())
	second, err := Default.Lock(name)
	require.NoError(t, err, "closing releases the lock")
	require.NoError(t, second.Close())
}
