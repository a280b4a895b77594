package broker_test

import (
	iofs "io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// "dir must not exist" holds to the end of the copy, not only at the check
// before it: the copy takes its name by os.Rename, which refuses an
// existing directory, empty or not, with EEXIST (rename(2) alone would
// replace an empty one). A directory someone makes at dir while the copy
// is written fails the Backup with an error wrapping fs.ErrExist, is left
// as it was, and the copy is removed (see docs/DESIGN.md, "Backups").
func TestADirMadeAtTheBackupsNameDuringTheCopy(t *testing.T) {
	for _, withFile := range []bool{false, true} {
		e, ffs, _ := faultyBackupEnv(t)
		want := broker.Dump(e.s)
		dst := filepath.Join(t.TempDir(), "backup")
		made := false
		ffs.Inject(vfs.Rule{Op: vfs.OpRename, Match: func(n string) bool {
			if n == dst && !made {
				made = true
				require.NoError(t, os.Mkdir(dst, 0o700))
				if withFile {
					require.NoError(t, os.WriteFile(filepath.Join(dst, "notes.txt"), []byte("theirs"), 0o600))
				}
			}
			return false // the rename itself goes through
		}})
		err := e.s.Backup(ctx(t), dst)
		ffs.Clear()
		require.True(t, made, "withFile=%v: the copy was renamed to %s", withFile, dst)
		require.NoDirExists(t, dst+".partial", "withFile=%v", withFile)
		require.ErrorIs(t, err, iofs.ErrExist, "withFile=%v: a directory made meanwhile fails the rename", withFile)
		require.ErrorContains(t, err, dst)
		names, rerr := os.ReadDir(dst)
		require.NoError(t, rerr)
		if withFile {
			require.Len(t, names, 1, "nothing of the copy is in their directory")
			data, rerr := os.ReadFile(filepath.Join(dst, "notes.txt"))
			require.NoError(t, rerr, "their file is left")
			require.Equal(t, "theirs", string(data))
		} else {
			require.Empty(t, names, "their empty directory is left empty, not replaced by the copy")
		}

		// Once their directory is gone, the same Backup succeeds.
		require.NoError(t, os.RemoveAll(dst))
		require.NoError(t, e.s.Backup(ctx(t), dst))
		requireBackupHolds(t, dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes}, want, "the retry")
	}
}
