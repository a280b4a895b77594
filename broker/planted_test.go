package broker_test

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/walbroker/walbroker/broker"
	"github.com/walbroker/walbroker/vfs"
)

// Open refuses a symbolic link inside the store's directory, where another
// user who can write the directory could have planted it: a linked LOCK
// was truncated, and a linked segment would be replayed. The error names
// the file and what to do, and the file the link names is left as it was.
func TestOpenRefusesALinkPlantedInTheStore(t *testing.T) {
	for _, victim := range []string{"LOCK", "CLEAN", "segment", "index/checkpoint"} {
		t.Run(victim, func(t *testing.T) {
			dir := t.TempDir()
			s, err := broker.Open(dir, broker.Options{})
			require.NoError(t, err)
			q, err := s.Queue("jobs", policy())
			require.NoError(t, err)
			_, err = q.Publish(ctx(t), []byte("one"))
			require.NoError(t, err)
			require.NoError(t, s.Close())

			name := filepath.Join(dir, victim)
			if victim == "segment" {
				name = firstSegment(t, dir)
			}
			outside := filepath.Join(t.TempDir(), "elsewhere")
			require.NoError(t, os.Rename(name, outside))
			before, err := os.ReadFile(outside)
			require.NoError(t, err)
			require.NoError(t, os.Symlink(outside, name))

			_, err = broker.Open(dir, broker.Options{})
			require.ErrorIs(t, err, vfs.ErrForeign)
			require.ErrorIs(t, err, fs.ErrPermission)
			require.ErrorContains(t, err, name)
			require.ErrorContains(t, err, "is a symbolic link")
			after, err := os.ReadFile(outside)
			require.NoError(t, err)
			require.Equal(t, before, after, "the file the link names is left as it was")

			// Once the link is gone and the file is back, the store opens
			// with its message.
			require.NoError(t, os.Remove(name))
			require.NoError(t, os.Rename(outside, name))
			s, err = broker.Open(dir, broker.Options{})
			require.NoError(t, err)
			defer s.Close()
			q, err = s.Queue("jobs", policy())
			require.NoError(t, err)
			require.Equal(t, 1, q.Stats().Ready)
		})
	}
}

// firstSegment returns the path of the store's first segment file.
func firstSegment(t *testing.T, dir string) string {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range names {
		if strings.HasSuffix(e.Name(), ".seg") || strings.HasSuffix(e.Name(), ".wal") {
			return filepath.Join(dir, e.Name())
		}
	}
	t.Fatalf("no segment in %s", dir)
	return ""
}

// Open warns, once, when the store's directory is writable by other users
// (who could remove or rename its files), and says what to do; it opens
// the store all the same, since a shared volume's root is a common place
// for one. A directory of its owner's alone gets no warning.
func TestOpenWarnsOfADirectoryOthersCanWrite(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o700, false}, {0o750, false}, {0o770, true}, {0o777, true}, {0o1777, true}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Chmod(dir, tc.mode))
			var logs strings.Builder
			s, err := broker.Open(dir, broker.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			const warning = "writable by other users"
			if !tc.warn {
				require.NotContains(t, logs.String(), warning)
				return
			}
			require.Equal(t, 1, strings.Count(logs.String(), warning), logs.String())
			require.Contains(t, logs.String(), "chmod 0700")
			require.Contains(t, logs.String(), "dir="+dir)
		})
	}
}

// The store's index/ directory is checked as its files are: replaced by a
// symbolic link (or by a file), it is refused at Open, which names it and
// says what to do, and nothing is written or removed where the link
// points; replaced while the store is open, the next checkpoint refuses
// it, maintenance stops and says why, and the store goes on serving.
func TestAReplacedIndexDirectoryIsRefused(t *testing.T) {
	setup := func(t *testing.T) (dir, idx string) {
		dir = t.TempDir()
		s, err := broker.Open(dir, broker.Options{})
		require.NoError(t, err)
		q, err := s.Queue("jobs", policy())
		require.NoError(t, err)
		_, err = q.Publish(ctx(t), []byte("one"))
		require.NoError(t, err)
		require.NoError(t, s.Close())
		return dir, filepath.Join(dir, "index")
	}
	listing := func(t *testing.T, dir string) map[string]string {
		t.Helper()
		got := map[string]string{}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			got[e.Name()] = string(b)
		}
		return got
	}

	t.Run("link at open", func(t *testing.T) {
		dir, idx := setup(t)
		outside := filepath.Join(t.TempDir(), "elsewhere")
		require.NoError(t, os.Rename(idx, outside))
		require.NoError(t, os.WriteFile(filepath.Join(outside, "notes.txt"), []byte("keep"), 0o600))
		before := listing(t, outside)
		require.NoError(t, os.Symlink(outside, idx))

		_, err := broker.Open(dir, broker.Options{})
		require.ErrorIs(t, err, vfs.ErrForeign)
		require.ErrorContains(t, err, idx)
		require.ErrorContains(t, err, "is a symbolic link")
		require.Equal(t, before, listing(t, outside), "nothing written or removed where the link points")

		require.NoError(t, os.Remove(idx))
		require.NoError(t, os.Rename(outside, idx))
		s, err := broker.Open(dir, broker.Options{})
		require.NoError(t, err)
		defer s.Close()
		q, err := s.Queue("jobs", policy())
		require.NoError(t, err)
		require.Equal(t, 1, q.Stats().Ready)
	})

	t.Run("file at open", func(t *testing.T) {
		dir, idx := setup(t)
		require.NoError(t, os.RemoveAll(idx))
		require.NoError(t, os.WriteFile(idx, []byte("planted"), 0o600))
		_, err := broker.Open(dir, broker.Options{})
		require.ErrorIs(t, err, vfs.ErrForeign)
		require.ErrorContains(t, err, idx)
		require.ErrorContains(t, err, "not a directory")
	})

	t.Run("link while open", func(t *testing.T) {
		dir, idx := setup(t)
		var opts broker.Options
		broker.ManualMaintenance(&opts)
		s, err := broker.Open(dir, opts)
		require.NoError(t, err)
		defer s.Close()
		q, err := s.Queue("jobs", policy())
		require.NoError(t, err)

		outside := filepath.Join(t.TempDir(), "elsewhere")
		require.NoError(t, os.Mkdir(outside, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(outside, "notes.txt"), []byte("keep"), 0o600))
		before := listing(t, outside)
		require.NoError(t, os.Rename(idx, filepath.Join(dir, "index.moved")))
		require.NoError(t, os.Symlink(outside, idx))

		err = s.Maintain()
		require.ErrorIs(t, err, vfs.ErrForeign)
		require.ErrorContains(t, err, "checkpoints and the reclaiming of disk space stopped")
		require.Equal(t, before, listing(t, outside), "nothing written or removed where the link points")
		require.Contains(t, s.Stats().MaintenanceStopped, "is a symbolic link")
		_, err = q.Publish(ctx(t), []byte("two"))
		require.NoError(t, err, "the store goes on serving")
		require.Equal(t, 2, q.Stats().Ready)
	})
}

// A link planted in place of salvage/ is refused as index/'s is (Open: a
// symbolic link where the store's own files belong): a salvage writes
// there the copies of damaged segments, payloads and all, and would write
// them wherever the link points.
func TestOpenRefusesAPlantedSalvageLink(t *testing.T) {
	e, _, _, _ := corruptLog(t)
	outside := t.TempDir()
	link := filepath.Join(e.dir, "salvage")
	require.NoError(t, os.Symlink(outside, link))

	opts := e.opts
	opts.Salvage = true
	s, err := broker.Open(e.dir, opts)
	if s != nil {
		defer s.Close()
	}
	written, rerr := os.ReadDir(outside)
	require.NoError(t, rerr)
	var names []string
	for _, w := range written {
		names = append(names, w.Name())
	}
	require.Empty(t, names, "Open wrote the store's files through the planted link %s into %s", link, outside)
	require.ErrorIs(t, err, vfs.ErrForeign)
	require.ErrorIs(t, err, fs.ErrPermission)
	require.ErrorContains(t, err, link)
}
