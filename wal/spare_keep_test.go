package wal

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// logBuffer is a Logger's output, safe to read while the log writes it.
type logBuffer struct {
	mu sync.Mutex
	sb strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.String()
}

// A retired or unused segment file that cannot be renamed to a spare is
// removed instead, and the failure is logged as a warning naming the file
// and the cause: keeping no spare loses no record (the next rotation
// writes a new file), so Close and RemoveBelow succeed, but the rename's
// error was dropped without a word.
func TestASpareThatCannotBeKeptIsLogged(t *testing.T) {
	for _, c := range []struct {
		name string
		// retire retires a file while every rename to a spare fails,
		// closes the log, and returns the file's name.
		retire func(t *testing.T, l *Log) string
	}{
		{"Close keeps the prepared segment", func(t *testing.T, l *Log) string {
			waitPrepared(t, l)
			require.NoError(t, l.Close(), "a spare not kept loses nothing")
			return segName(2) + tmpSuffix
		}},
		{"RemoveBelow keeps a retired segment", func(t *testing.T, l *Log) string {
			appendRecords(t, l, 0, 100)
			require.Greater(t, l.Stats().LastSegment, uint32(2))
			n, err := l.RemoveBelow(MakePosition(2, 0))
			require.NoError(t, err, "a spare not kept loses nothing")
			require.Equal(t, 1, n)
			require.Empty(t, spareFiles(t, l.Dir()))
			_, err = os.Stat(segFile(l.Dir(), 1))
			require.ErrorIs(t, err, os.ErrNotExist, "the retired segment not kept is removed")
			require.NoError(t, l.Close())
			return segName(1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default)
			var logs logBuffer
			l := mustOpen(t, dir, Options{FS: ffs, SegmentBytes: 1024, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			ffs.Inject(vfs.Rule{Op: vfs.OpRename, Match: func(name string) bool {
				return strings.HasPrefix(filepath.Base(name), sparePrefix)
			}, Err: syscall.EROFS})

			file := c.retire(t, l)
			require.NotZero(t, ffs.Injected(vfs.OpRename), "a rename to a spare was tried, and failed")
			require.Empty(t, spareFiles(t, dir))
			names, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range names {
				require.False(t, strings.HasSuffix(e.Name(), tmpSuffix), "%s left on disk", e.Name())
			}
			var warned bool
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "could not keep a retired segment file for reuse") && strings.Contains(line, file) {
					warned = true
					require.Contains(t, line, "level=WARN")
					require.Contains(t, line, "read-only file system", "the warning names the cause")
				}
			}
			require.True(t, warned, "the failed rename of %s is not logged: %s", file, logs.String())
		})
	}
}

// When the file that could not be renamed to a spare cannot be removed
// either, it stays on disk, and the error the call returns says both why
// it was not kept and why it is still there.
func TestASpareNeitherKeptNorRemovedIsReportedWithBothCauses(t *testing.T) {
	spareRename := vfs.Rule{Op: vfs.OpRename, Match: func(name string) bool {
		return strings.HasPrefix(filepath.Base(name), sparePrefix)
	}, Err: syscall.EROFS}
	t.Run("Close", func(t *testing.T) {
		ffs := vfs.NewFaultFS(vfs.Default)
		l := mustOpen(t, t.TempDir(), Options{FS: ffs, SegmentBytes: 1024})
		waitPrepared(t, l)
		ffs.Inject(spareRename)
		ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: segName(2) + tmpSuffix, Err: syscall.EIO})
		err := l.Close()
		require.ErrorIs(t, err, syscall.EIO, "the file is left on disk")
		require.ErrorIs(t, err, syscall.EROFS, "why it was not kept as a spare")
	})
	t.Run("RemoveBelow", func(t *testing.T) {
		ffs := vfs.NewFaultFS(vfs.Default)
		l := mustOpen(t, t.TempDir(), Options{FS: ffs, SegmentBytes: 1024})
		defer l.Close()
		appendRecords(t, l, 0, 100)
		require.Greater(t, l.Stats().LastSegment, uint32(2))
		ffs.Inject(spareRename)
		ffs.Inject(vfs.Rule{Op: vfs.OpRemove, NameContains: segName(1), Err: syscall.EIO})
		n, err := l.RemoveBelow(MakePosition(2, 0))
		require.Equal(t, 1, n)
		require.ErrorIs(t, err, syscall.EIO, "the file is left on disk")
		require.ErrorIs(t, err, syscall.EROFS, "why it was not kept as a spare")
	})
}
