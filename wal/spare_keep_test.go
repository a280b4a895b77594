package wal

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
			appendRecords(t, l, 0, 1) // the first write asks for segment 2
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
		appendRecords(t, l, 0, 1) // the first write asks for segment 2
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

// gateRecycleFS holds the preparer, once armed, inside its reuse of a
// spare for the segment file named gated: after it has taken the spare
// from the list, before it renames it (Recycle first looks whether its
// new name is free).
type gateRecycleFS struct {
	vfs.FS
	gated   string
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateRecycleFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if filepath.Base(name) == g.gated && flag == os.O_RDONLY && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.FS.OpenFile(name, flag, perm)
}

// Spare names derive from segment sequences, and a rename replaces a file
// of the new name. A log numbers its segments anew from 1 when its
// directory holds spares but no segment (the segments deleted by hand):
// a segment RemoveBelow retires can then have the name of a spare the
// preparer is taking. Replaced, that spare was lost, and the preparer
// took the retired segment in its place before the directory sync made
// the retirement durable; the spare is kept, and the retired segment
// removed (with a warning), instead.
func TestARetiredSegmentDoesNotReplaceASpareOfItsName(t *testing.T) {
	dir := t.TempDir()
	const size = 1024
	spare := func(seq int) string {
		return filepath.Join(dir, fmt.Sprintf("%s%010d%s", sparePrefix, seq, tmpSuffix))
	}
	for _, seq := range []int{1, 3} {
		require.NoError(t, os.WriteFile(spare(seq), make([]byte, size), 0o600))
	}
	before, err := os.Stat(spare(1))
	require.NoError(t, err)

	g := &gateRecycleFS{FS: vfs.Default, gated: segName(3) + tmpSuffix, entered: make(chan struct{}), release: make(chan struct{})}
	var logs logBuffer
	l := mustOpen(t, dir, Options{FS: g, SegmentBytes: size, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.EqualValues(t, 1, l.Stats().FirstSegment, "a log numbered anew")
	es := appendRecords(t, l, 1000, 1) // the first write asks for segment 2
	waitPrepared(t, l)                 // segment 2, from spare 3

	// The rotation into segment 2 asks for segment 3: the preparer takes
	// spare 1 and waits at the gate.
	g.armed.Store(true)
	for i := 0; l.Stats().LastSegment < 2; i++ {
		es = append(es, appendRecords(t, l, i, 1)...)
	}
	<-g.entered
	n, err := l.RemoveBelow(MakePosition(2, 0))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	after, err := os.Stat(spare(1))
	require.NoError(t, err, "the spare the preparer is taking is gone")
	require.True(t, os.SameFile(before, after), "segment 1, retired, replaced the spare of its name that the preparer is taking")

	close(g.release)
	waitPrepared(t, l) // segment 3, from spare 1
	es = append(es, appendRecords(t, l, len(es), 40)...)
	require.Greater(t, l.Stats().LastSegment, uint32(3))
	require.NoError(t, l.Close())
	require.Contains(t, logs.String(), "could not keep a retired segment file for reuse")
	require.NotContains(t, logs.String(), "could not reuse a retired segment")

	l = mustOpen(t, dir, Options{SegmentBytes: size})
	defer l.Close()
	var kept []entry
	for _, e := range es {
		if e.pos.Segment() >= 2 {
			kept = append(kept, e)
		}
	}
	requireEntries(t, kept, readAll(t, l))
}
