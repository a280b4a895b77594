package wal

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// TestCloseDropsAPreparationThatFailedUnneeded: the next segment's
// preparation fails (its fdatasync) while the log is idle, and the log
// closes before any rotation needs the file. Close returns nil and writes
// the clean mark, as for a log whose preparation went well: nothing the
// log holds was touched, and the failed file is gone.
func TestCloseDropsAPreparationThatFailedUnneeded(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaultFS(vfs.Default)
	fs.Inject(vfs.Rule{Op: vfs.OpSync, NameContains: segName(2) + tmpSuffix})
	l := mustOpen(t, dir, Options{FS: fs, SegmentBytes: 64 << 10})
	acked := appendRecords(t, l, 0, 3) // the first write asks for segment 2
	for i := 0; len(l.prep.ready) == 0; i++ {
		require.Less(t, i, 100_000_000, "the preparation never ended")
		runtime.Gosched()
	}
	require.EqualValues(t, 1, fs.Injected(vfs.OpSync))
	require.NoError(t, l.Close())
	require.FileExists(t, filepath.Join(dir, cleanName))
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, n := range names {
		require.False(t, strings.Contains(n.Name(), segName(2)), "left %s", n.Name())
	}

	l = mustOpen(t, dir, Options{SegmentBytes: 64 << 10})
	defer l.Close()
	requireEntries(t, acked, readAll(t, l))
}
