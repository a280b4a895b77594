package broker_test

import (
	"bytes"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
)

// Every file and directory a store makes — segments (spare ones prepared
// ahead included), the index, the lock, the clean mark, a backup, the
// salvage copies, and the parents Open and Backup make — is 0600 or 0700,
// whatever the process's umask: the modes are asked for explicitly, and a
// umask only ever clears bits. Not parallel: the umask is the process's.
func TestEveryFileAndDirectoryIsPrivateUnderAnyUmask(t *testing.T) {
	for _, mask := range []int{0, 0o022, 0o077} {
		t.Run(fmt.Sprintf("umask %04o", mask), func(t *testing.T) {
			root := t.TempDir()
			old := syscall.Umask(mask)
			defer syscall.Umask(old)
			requirePrivateTree(t, root, storeLifeCycle(t, root))
		})
	}
}

// storeLifeCycle opens a store in root/a/b/store, publishes, consumes,
// checkpoints, reclaims, backs up to root/c/d/backup, closes, damages a
// record and opens it again with Salvage. It returns how many files of each
// kind the tree holds by then, for the caller to check they were seen.
func storeLifeCycle(t *testing.T, root string) []string {
	dir := filepath.Join(root, "a", "b", "store")
	e := &env{t: t, dir: dir, clock: newFakeClock()}
	e.opts = broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes}
	broker.ManualMaintenance(&e.opts)
	t.Cleanup(func() {
		if e.s != nil {
			_ = e.s.Close()
		}
	})
	e.open()
	q := e.queue("jobs", keyedJobs)
	keyed := e.queue("keyed", keyedJobs)
	for i := range 200 {
		mustPublish(t, q, fmt.Sprintf("m-%03d-%s", i, strings.Repeat("x", 300)))
		_, err := keyed.PublishKeyed(ctx(t), fmt.Sprint("k", i), []byte("v"))
		require.NoError(t, err)
	}
	for _, d := range mustReceive(t, q, 150) {
		require.NoError(t, q.Ack(ctx(t), d.Lease.Receipt))
	}
	for _, d := range mustReceive(t, keyed, 200) {
		require.NoError(t, keyed.Ack(ctx(t), d.Lease.Receipt))
	}
	require.NoError(t, q.Reject(ctx(t), mustReceiveOne(t, q).Lease.Receipt, nil))
	require.NoError(t, e.s.Maintain())
	require.Positive(t, e.s.Stats().BytesReclaimed, "reclaim removed segments")
	require.NoError(t, e.s.Backup(ctx(t), filepath.Join(root, "c", "d", "backup")))
	marker := strings.Repeat("S", 300)
	mustPublish(t, q, marker)
	mustPublish(t, q, "after the marker: the damage is not the log's tail")
	e.close()

	// Damage the marker's record, then open with Salvage: the damaged
	// segment is copied into salvage/.
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	require.NoError(t, err)
	damaged := false
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		require.NoError(t, err)
		if i := bytes.Index(raw, []byte(marker)); i >= 0 {
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte{raw[i+150] ^ 0x40}, int64(i+150))
			require.NoError(t, err)
			require.NoError(t, f.Close())
			damaged = true
		}
	}
	require.True(t, damaged)
	e.opts.Salvage = true
	e.open()
	require.NotEmpty(t, e.s.Recovery().SalvageCopies)
	e.close()
	return []string{
		"a", "a/b", "a/b/store", "a/b/store/LOCK", "a/b/store/CLEAN", "a/b/store/index",
		"a/b/store/index/checkpoint", "a/b/store/salvage",
		"c", "c/d", "c/d/backup", "c/d/backup/index", "c/d/backup/index/checkpoint",
	}
}

// requirePrivateTree walks root (not itself: t.TempDir makes it) and
// requires 0600 of every file and 0700 of every directory, and that every
// path of want was met.
func requirePrivateTree(t *testing.T, root string, want []string) {
	t.Helper()
	seen := map[string]bool{}
	segs := 0
	require.NoError(t, filepath.WalkDir(root, func(path string, d iofs.DirEntry, err error) error {
		require.NoError(t, err)
		if path == root {
			return nil
		}
		fi, err := os.Lstat(path)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, path)
		seen[filepath.ToSlash(rel)] = true
		if strings.HasSuffix(path, ".seg") {
			segs++
		}
		switch {
		case fi.IsDir():
			require.Equal(t, iofs.FileMode(0o700), fi.Mode().Perm(), rel)
		case fi.Mode().IsRegular():
			require.Equal(t, iofs.FileMode(0o600), fi.Mode().Perm(), rel)
		default:
			t.Errorf("%s is a %v, neither a file nor a directory", rel, fi.Mode().Type())
		}
		return nil
	}))
	for _, p := range want {
		require.True(t, seen[p], "%s was made; the tree holds %v", p, seen)
	}
	require.Greater(t, segs, 2, "segments in the store and its backup")
	var salvaged int
	for p := range seen {
		if strings.HasPrefix(p, "a/b/store/salvage/") {
			salvaged++
		}
	}
	require.Positive(t, salvaged, "a salvage copy")
}
