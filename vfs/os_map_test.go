package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A mapping the kernel refuses names the file and the call, as every
// other error of Default does: the bare errno of mmap(2) ("permission
// denied") said neither which file nor what was tried.
func TestDefaultMapFailureNamesTheFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(name, make([]byte, 4096), 0o600))
	f, err := Default.OpenFile(name, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()

	m, err := f.Map(4096)
	if err == nil {
		_ = m.Unmap()
		t.Fatal("a read-only mapping of a file opened write-only succeeded")
	}
	require.ErrorIs(t, err, syscall.EACCES, "mmap(2) of a write-only descriptor")
	var pe *os.PathError
	require.True(t, errors.As(err, &pe), "%v: want an *os.PathError", err)
	require.Equal(t, "mmap", pe.Op)
	require.Equal(t, name, pe.Path)
}
