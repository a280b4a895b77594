package broker_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// A Backup that fails "removes what it wrote and leaves no dir": each of
// the first 40 calls of each kind a Backup makes is failed in turn (EIO).
// A Backup that fails must name the file it failed on and leave neither
// dir nor dir+".partial", and a retry to the same dir must succeed with a
// copy that holds the store's state; one that succeeds despite the fault
// must hold it too. Skipped under -short.
func TestEachFaultDuringABackupFailsNamingTheFileAndLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a sweep of every call takes minutes under -race; go test without -short runs it")
	}
	for _, op := range everyCallOps {
		// A fault-free Backup counts the calls of this kind.
		e, ffs, _ := faultyBackupEnv(t)
		root := t.TempDir()
		before := ffs.Count(op)
		require.NoError(t, e.s.Backup(ctx(t), filepath.Join(root, "dry")))
		n := ffs.Count(op) - before
		want := broker.Dump(e.s)
		for nth := int64(1); nth <= min(n, 40); nth++ {
			dst := filepath.Join(root, fmt.Sprintf("b-%v-%d", op, nth), "backup")
			var failed string
			var seen int64
			ffs.Inject(vfs.Rule{Op: op, Nth: nth, Match: func(name string) bool {
				seen++
				if seen == nth {
					failed = name
				}
				return true
			}})
			err := e.s.Backup(ctx(t), dst)
			ffs.Clear()
			what := fmt.Sprintf("%v #%d of %d", op, nth, n)
			if err == nil {
				requireBackupHolds(t, dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes}, want, what)
				continue
			}
			if !strings.Contains(err.Error(), failed) {
				t.Errorf("%s: error does not name %s: %v", what, failed, err)
			}
			for _, d := range []string{dst, dst + ".partial"} {
				if _, serr := os.Stat(d); serr == nil {
					t.Errorf("%s: failed Backup (%v) left %s", what, err, d)
				}
			}
			if e.s.Stats().MaintenanceStopped != "" {
				e.reopen()
				want = broker.Dump(e.s)
			}
			if err := e.s.Backup(ctx(t), dst); err != nil {
				t.Errorf("%s: retry: %v", what, err)
				continue
			}
			requireBackupHolds(t, dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes}, want, what+" retry")
		}
	}
}

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

// A Backup that fails while it makes its partial copy — syncing the
// directories it makes, making or locking the mark, syncing the directory
// that holds it — removes what it made, as one that fails later does:
// startPartial used to return at once and leave dir+".partial", with its
// mark when one was made. A failure that says another Backup is at work
// there is not one of these: that directory is the other's, and is left
// (TestABackupToADirAnotherBackupIsWritingIsRefused).
func TestABackupFailingAtItsMarkRemovesWhatItMade(t *testing.T) {
	for _, r := range []struct {
		op   vfs.Op
		name func(dst string) string
	}{
		{vfs.OpSyncDir, func(dst string) string { return filepath.Dir(dst) }}, // the new .partial's name
		{vfs.OpSyncDir, func(dst string) string { return dst + ".partial" }},
		{vfs.OpLock, func(dst string) string { return filepath.Join(dst+".partial", "backup-in-progress.tmp") }},
		{vfs.OpOpen, func(dst string) string { return filepath.Join(dst+".partial", "backup-in-progress.tmp") }},
	} {
		for _, leftover := range []bool{false, true} {
			e, ffs, _ := faultyBackupEnv(t)
			root := t.TempDir()
			dst := filepath.Join(root, "nightly", "backup")
			if leftover {
				// A crashed Backup's, which this one removes first.
				require.NoError(t, os.MkdirAll(filepath.Join(dst+".partial", "index"), 0o700))
				for _, f := range []string{"backup-in-progress.tmp", "0000000001.seg", "index/checkpoint"} {
					require.NoError(t, os.WriteFile(filepath.Join(dst+".partial", f), []byte("stale"), 0o600))
				}
			}
			want := r.name(dst)
			nth := int64(1)
			if leftover && r.op == vfs.OpLock {
				nth = 2 // the first locks the leftover's mark, to remove it
			}
			ffs.Inject(vfs.Rule{Op: r.op, Nth: nth, Match: func(n string) bool { return filepath.Clean(n) == want }})
			err := e.s.Backup(ctx(t), dst)
			what := fmt.Sprintf("%v of %s (leftover %v)", r.op, want, leftover)
			require.Equal(t, int64(1), ffs.Injected(r.op), "%s: the fault was met", what)
			ffs.Clear()
			require.ErrorIs(t, err, syscall.EIO, what)
			var left []string
			_ = filepath.WalkDir(dst+".partial", func(p string, d fs.DirEntry, err error) error {
				if err == nil {
					left = append(left, p)
				}
				return nil
			})
			require.Empty(t, left, "%s: Backup returned %v and left a partial copy", what, err)
			require.NoDirExists(t, dst)

			require.NoError(t, e.s.Backup(ctx(t), dst), "%s: the retry", what)
			b, err := broker.Open(dst, broker.Options{Now: e.clock.Now, SegmentBytes: broker.MinSegmentBytes})
			require.NoError(t, err)
			require.Equal(t, 100, mustStats(t, b, "jobs").Ready)
			require.NoError(t, b.Close())
		}
	}
}
