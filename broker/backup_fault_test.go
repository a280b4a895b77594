package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/vfs"
)

// Backup "refuses to touch a directory of that name [dir+".partial"] that
// holds anything else" than a leftover of its own. Whether it holds
// anything else is known only once it is listed: startPartial used to
// take any error listing it for its absence, so that one transient EIO had
// the Backup write its copy into someone else's directory and rename it,
// their files and all, to dir, or, when the copy then failed, remove their
// files with its own. Now the Backup fails, naming the directory and the
// cause, and makes nothing: no mark in it, no dir.
func TestAListingErrorOnAForeignPartialCopyFailsTheBackupAndTouchesNothing(t *testing.T) {
	for _, failCopy := range []bool{false, true} {
		e, ffs, _ := faultyBackupEnv(t)
		root := t.TempDir()
		dst := filepath.Join(root, "backup")
		foreign := filepath.Join(dst+".partial", "notes.txt")
		require.NoError(t, os.MkdirAll(dst+".partial", 0o700))
		require.NoError(t, os.WriteFile(foreign, []byte("someone's notes"), 0o600))
		require.ErrorContains(t, e.s.Backup(ctx(t), dst), "is not a backup in progress", "fault-free, the foreign directory is refused")

		ffs.Inject(vfs.Rule{Op: vfs.OpReadDir, Nth: 1, Match: func(n string) bool { return filepath.Clean(n) == dst+".partial" }})
		if failCopy {
			ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Nth: 1, Match: func(n string) bool { return strings.HasSuffix(n, ".seg") && strings.HasPrefix(n, dst) }})
		}
		err := e.s.Backup(ctx(t), dst)
		require.Equal(t, int64(1), ffs.Injected(vfs.OpReadDir), "the fault was met")
		ffs.Clear()
		require.ErrorIs(t, err, syscall.EIO, "failCopy=%v", failCopy)
		require.ErrorContains(t, err, dst+".partial", "the error names the directory it could not list")
		data, rerr := os.ReadFile(foreign)
		require.NoError(t, rerr, "failCopy=%v: the foreign file is left where it was", failCopy)
		require.Equal(t, "someone's notes", string(data))
		names, rerr := os.ReadDir(dst + ".partial")
		require.NoError(t, rerr)
		require.Len(t, names, 1, "failCopy=%v: nothing is made in the foreign directory", failCopy)
		require.NoFileExists(t, dst)
		require.NoDirExists(t, dst)
	}
}
