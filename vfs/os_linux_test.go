//go:build linux

package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

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
