package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// TestOpenOfAFileSaysThePathIsNotADirectory: Open of a path that names a
// regular file says that this path is not a directory, not that
// "<path>/index" is not one (the first thing Open looks up), which would
// read as a store whose index is damaged.
func TestOpenOfAFileSaysThePathIsNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "queue")
	require.NoError(t, os.WriteFile(f, []byte("not a store"), 0o600))

	s, err := broker.Open(f, broker.Options{})
	if err == nil {
		_ = s.Close()
	}
	require.Error(t, err)
	require.True(t, errors.Is(err, syscall.ENOTDIR), "error %q should wrap ENOTDIR", err)
	require.Contains(t, err.Error(), f, "the error names the path given")
	require.NotContains(t, err.Error(), filepath.Join(f, "index"),
		"the error blames the path given, not a subdirectory under it that the caller never named")
	require.True(t, strings.Contains(err.Error(), "not a directory"), "error %q", err)
	// It said "broker: open <path>: open <path>: not a directory": the
	// path once is enough.
	require.Equal(t, "broker: open "+f+": not a directory", err.Error())
}
