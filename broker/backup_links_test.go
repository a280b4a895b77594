package broker_test

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// A Backup into a directory others can write (a shared /tmp, say) meets
// whatever they left at dir+".partial". One holding the mark of a backup in
// progress and a symbolic link named "index" to a directory of the caller's
// is not removed through the link: the files there stay, the Backup is
// refused with an error that names the link, and nothing else is written.
// The same for a ".partial" that is itself a link to a marked directory.
func TestABackupNeverRemovesThroughALinkInAPlantedPartialCopy(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", keyedJobs), "one")
	shared, precious := t.TempDir(), t.TempDir()
	keep := filepath.Join(precious, "0000000001.seg")
	require.NoError(t, os.WriteFile(keep, []byte("mine"), 0o600))
	requireKept := func() {
		t.Helper()
		data, err := os.ReadFile(keep)
		require.NoError(t, err, "a file reached through a planted link was removed")
		require.Equal(t, "mine", string(data))
	}

	planted := filepath.Join(shared, "nightly")
	require.NoError(t, os.Mkdir(planted+".partial", 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(planted+".partial", "backup-in-progress.tmp"), nil, 0o666))
	require.NoError(t, os.Symlink(precious, filepath.Join(planted+".partial", "index")))
	err := e.s.Backup(ctx(t), planted)
	require.ErrorContains(t, err, "symbolic link")
	require.ErrorContains(t, err, filepath.Join(planted+".partial", "index"))
	requireKept()
	require.NoDirExists(t, planted)

	// The ".partial" itself a link to a marked directory whose index is
	// the caller's.
	marked := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(marked, "backup-in-progress.tmp"), nil, 0o666))
	require.NoError(t, os.Symlink(precious, filepath.Join(marked, "index")))
	linked := filepath.Join(shared, "weekly")
	require.NoError(t, os.Symlink(marked, linked+".partial"))
	err = e.s.Backup(ctx(t), linked)
	require.ErrorContains(t, err, "symbolic link")
	requireKept()
	require.FileExists(t, filepath.Join(marked, "backup-in-progress.tmp"), "nothing was removed through the link")
	require.NoDirExists(t, linked)

	// A Backup elsewhere goes on.
	require.NoError(t, e.s.Backup(ctx(t), filepath.Join(shared, "ok")))
}

// A dir whose path goes through a symbolic link and then ".." names, for
// the kernel, a place beside the link's target: here inside the store.
// Backup refuses it as inside the store, and does every step (the partial
// copy, the rename, the sync of the parent, the mark) at the place the
// kernel names. Before, its check looked at the path's cleaned text, the
// rename went through the link, and Backup wrote into the store and
// reported success.
func TestBackupThroughALinkAndDotDotIntoTheStoreIsRefused(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", policy()), "one")
	root := t.TempDir()
	// link -> <store>/index, so link/.. is the store's directory.
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(filepath.Join(e.dir, "index"), link))
	dir := link + string(filepath.Separator) + ".." + string(filepath.Separator) + "bk"

	err := e.s.Backup(ctx(t), dir)
	_, statErr := os.Stat(filepath.Join(e.dir, "bk"))
	require.ErrorIs(t, statErr, os.ErrNotExist,
		"Backup (err %v) wrote its copy inside the store's own directory %s, which it promises to refuse", err, e.dir)
	require.Error(t, err, "a dir inside the store is refused")
}

// A dir whose parent is a regular file does not exist, and cannot: the
// kernel refuses the path (ENOTDIR). Backup says so, not that dir "already
// exists", which would point the caller at the wrong name.
func TestABackupUnderAFileIsRefusedAsUnresolvableNotExisting(t *testing.T) {
	e := newEnv(t, broker.ManualMaintenance)
	mustPublish(t, e.queue("jobs", policy()), "one")
	root := t.TempDir()
	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	sep := string(filepath.Separator)
	for _, dir := range []string{
		file + sep + "bk",
		file + sep + ".." + sep + "bk",
	} {
		t.Run(dir[len(root):], func(t *testing.T) {
			_, statErr := os.Lstat(dir)
			require.False(t, errors.Is(statErr, iofs.ErrNotExist) || statErr == nil, "the kernel refuses the path: %v", statErr)
			err := e.s.Backup(ctx(t), dir)
			require.Error(t, err)
			require.NotErrorIs(t, err, iofs.ErrExist,
				"dir %s does not exist (a parent is a regular file), yet Backup says: %v", dir, err)
		})
	}
}
