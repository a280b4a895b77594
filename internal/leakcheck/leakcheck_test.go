package leakcheck

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

func TestCheckFindsWhatIsLeftAndOnlyThat(t *testing.T) {
	// A Check that finds nothing left returns as soon as that is so, and
	// keeps the default grace: a goroutine on its way out may wait for a
	// core longer than a short one on a loaded machine. Only the Check
	// that must find a goroutine that never ends, and waits out its whole
	// grace, is given a short one.
	defaultGrace := grace
	defer func() { grace = defaultGrace }()
	dir := t.TempDir()
	before := Running()
	require.NoError(t, Check(before, dir), "nothing started, nothing open")

	// A descriptor of a file below dir, and one of a file elsewhere
	// (where /proc lists them).
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	f, err := os.Create(filepath.Join(dir, "sub", "held"))
	require.NoError(t, err)
	other, err := os.Create(filepath.Join(t.TempDir(), "elsewhere"))
	require.NoError(t, err)
	defer other.Close()
	if runtime.GOOS == "linux" {
		err = Check(before, dir)
		require.ErrorContains(t, err, "1 descriptors")
		require.ErrorContains(t, err, filepath.Join("sub", "held"))
		require.NotContains(t, err.Error(), "elsewhere")
	}
	require.NoError(t, f.Close())
	require.NoError(t, Check(before, dir))

	// A goroutine of this module that ends within the grace, and one that
	// does not.
	stop := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond) }()
	require.NoError(t, Check(before, dir), "a goroutine on its way out is waited for")
	go func() { <-stop }()
	grace = 100 * time.Millisecond
	err = Check(before, dir)
	grace = defaultGrace
	require.ErrorContains(t, err, "1 goroutines")
	require.ErrorContains(t, err, "leakcheck.TestCheckFindsWhatIsLeftAndOnlyThat")
	close(stop)
	require.NoError(t, Check(before, dir))

	// A directory that does not exist holds nothing.
	require.NoError(t, Check(before, filepath.Join(dir, "never made")))

	// A goroutine running before is not counted.
	running := make(chan struct{})
	defer close(running)
	go func() { <-running }()
	require.NoError(t, Check(Running(), dir))
}

// TestFailedNamesTheCallsTheRuleFailed: a report of the rule that fails
// every call from the nth on said "#n failed (and the n-1 after it)".
func TestFailedNamesTheCallsTheRuleFailed(t *testing.T) {
	require.Equal(t, "write #3 failed", failed(vfs.Rule{Op: vfs.OpWrite, Nth: 3}))
	require.Equal(t, "write #3 and every one after it failed", failed(vfs.Rule{Op: vfs.OpWrite, After: 2}))
	require.Equal(t, "write #1 and every one after it failed", failed(vfs.Rule{Op: vfs.OpWrite}))
}
