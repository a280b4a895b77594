package vfs

import (
	"bytes"
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

func TestDefaultWriteBackSendsARangeAndNamesTheFileOnError(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := Default.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	wb, ok := f.(WriteBacker)
	require.True(t, ok, "the real file system's files write back")
	data := bytes.Repeat([]byte{7}, 1<<16)
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, wb.WriteBack(0, 1<<16))
	got, err := os.ReadFile(name)
	require.NoError(t, err)
	require.Equal(t, data, got)

	require.NoError(t, f.Close())
	err = wb.WriteBack(0, 1<<16)
	require.Error(t, err)
	require.ErrorContains(t, err, "sync_file_range")
	require.ErrorContains(t, err, name)
}
