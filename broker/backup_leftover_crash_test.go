package broker_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// crashAtRename is a CrashFS that loses power just before a Rename to to.
type crashAtRename struct {
	*vfs.CrashFS
	to string
}

func (c crashAtRename) Rename(oldname, newname string) error {
	if newname == c.to {
		c.Crash()
	}
	return c.CrashFS.Rename(oldname, newname)
}

// A Backup that finds the partial copy a crashed one left removes it
// first — its files, its index directory's, the mark, the directories —
// with no directory sync until it makes the new partial copy's directory.
// A crash at every file operation of that Backup, the removal's included,
// leaves the store as it was and either the whole copy under the Backup's
// name or none, which the next Backup makes: whatever survives of the
// unsynced data, and (at every eighth operation) of the unsynced names and
// sizes apart from the data.
func TestACrashWhileABackupRemovesALeftoverCopyHarmsNothing(t *testing.T) {
	root := fastDir(t)
	clock := newFakeClock()
	opts := func(fs vfs.FS) broker.Options {
		o := broker.Options{Now: clock.Now, SegmentBytes: broker.MinSegmentBytes, FS: fs}
		broker.ManualMaintenance(&o)
		return o
	}
	built := filepath.Join(root, "built", "store")
	e := &env{t: t, dir: built, clock: clock, opts: opts(nil)}
	e.open()
	fillForBackup(t, e)
	want := broker.Dump(e.s)
	e.close()

	// A Backup that loses power just before its rename leaves the whole
	// copy, durable, as a partial one.
	template := filepath.Join(root, "template")
	cfs := vfs.NewCrashFS(vfs.Default)
	dst := filepath.Join(root, "built", "backup")
	s, err := broker.Open(built, opts(crashAtRename{cfs, dst}))
	require.NoError(t, err)
	require.Error(t, s.Backup(ctx(t), dst))
	require.NoError(t, cfs.CrashClone(template, vfs.CrashOptions{Root: filepath.Dir(built)}))
	_ = s.Close()
	leftover, err := os.ReadDir(filepath.Join(template, "backup.partial"))
	require.NoError(t, err)
	require.Greater(t, len(leftover), 3, "the leftover copy holds the log and the index")

	run := func(k int64) (cfs *vfs.CrashFS, dir string, total int64, err error) {
		dir = filepath.Join(root, fmt.Sprintf("run-%d", k))
		copyTree(t, filepath.Join(template, "store"), filepath.Join(dir, "store"))
		copyTree(t, filepath.Join(template, "backup.partial"), filepath.Join(dir, "backup.partial"))
		copyTree(t, filepath.Join(template, "backup.partial", "index"), filepath.Join(dir, "backup.partial", "index"))
		cfs = vfs.NewCrashFS(vfs.Default)
		s, err := broker.Open(filepath.Join(dir, "store"), opts(cfs))
		require.NoError(t, err)
		opened := cfs.Ops()
		if k >= 0 {
			cfs.CrashAfter(opened + k)
		}
		err = s.Backup(ctx(t), filepath.Join(dir, "backup"))
		total = cfs.Ops() - opened
		_ = s.Close()
		return cfs, dir, total, err
	}
	_, dir, total, err := run(-1)
	require.NoError(t, err, "a Backup over the leftover copy")
	require.NoError(t, os.RemoveAll(dir))
	t.Logf("a backup that removes a leftover copy: %d file operations", total)

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	outcomes := map[string]int{}
	backupErr := errors.New("not run")
	for k := int64(0); k <= total || backupErr != nil; k++ {
		require.Less(t, k, 2*total, "no Backup returned within twice the operations of the first")
		var cfs *vfs.CrashFS
		cfs, dir, _, backupErr = run(k)
		keeps := []float64{0, 0.5}
		if k%8 == 7 {
			keeps = append(keeps, -1) // unsynced names and sizes kept apart from the data
		}
		for c, keep := range keeps {
			what := fmt.Sprintf("crash after operation %d of %d of a backup over a leftover copy, clone %d", k, total, c)
			clone := filepath.Join(root, fmt.Sprintf("clone-%d-%d", k, c))
			var co vfs.CrashOptions
			if keep < 0 {
				var state string
				co, state = metadataCrashOptions(k/8, dir, seed^uint64(k))
				what += " (" + state + ")"
			} else {
				co = vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: keep, TearLastWrite: keep > 0, Rand: rand.New(rand.NewPCG(rng.Uint64(), 10))}
			}
			require.NoError(t, cfs.CrashClone(clone, co))
			s, err := broker.Open(filepath.Join(clone, "store"), opts(nil))
			require.NoError(t, err, what)
			requireSameState(t, want, broker.Dump(s), what)
			backup := filepath.Join(clone, "backup")
			if _, err := os.Stat(backup); err == nil {
				outcomes["the backup, whole"]++
				requireBackupHolds(t, backup, opts(nil), want, what+": the copy that took its name")
			} else {
				require.False(t, backupErr == nil && c == 0, "%s: a Backup that returned nil is durable", what)
				if _, err := os.Stat(filepath.Join(clone, "backup.partial", "backup-in-progress.tmp")); err == nil {
					outcomes["no backup, the leftover marked"]++
				} else {
					outcomes["no backup, the leftover unmarked or gone"]++
				}
				require.NoError(t, s.Backup(ctx(t), backup), "%s: the next backup", what)
			}
			require.NoError(t, s.Close())
			_, err = os.Stat(filepath.Join(clone, "backup.partial"))
			require.ErrorIs(t, err, os.ErrNotExist, "%s: no partial copy is left (or the next backup removed it)", what)
			require.NoError(t, os.RemoveAll(clone))
		}
		require.NoError(t, os.RemoveAll(dir))
	}
	t.Logf("after a crash: %v", outcomes)
	require.Positive(t, outcomes["the backup, whole"])
	require.Positive(t, outcomes["no backup, the leftover marked"])
	require.Positive(t, outcomes["no backup, the leftover unmarked or gone"])
}
