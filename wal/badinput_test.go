package wal

import (
	"fmt"
	iofs "io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/vfs"
)

// requireAllReadable asserts that every record of es reads back as written.
func requireAllReadable(t *testing.T, l *Log, es []entry) {
	t.Helper()
	for _, e := range es {
		got, err := l.Read(e.pos)
		require.NoError(t, err, "position %v", e.pos)
		require.Equal(t, e.rec, got, "position %v", e.pos)
	}
}

// TestAnAppendTooLargeStoresNothing: a group that does not fit in one
// segment is refused whole, whichever record makes it too large, and the
// log is as it was: the same end, the same records, and the next Append
// works.
func TestAnAppendTooLargeStoresNothing(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: MinSegmentBytes})
	defer l.Close()
	es := appendRecords(t, l, 0, 3)
	end, records := l.End(), l.Stats().Records
	for name, recs := range map[string][][]byte{
		"one huge record":        {make([]byte, MinSegmentBytes)},
		"small then huge":        {[]byte("a"), make([]byte, MinSegmentBytes)},
		"many small records":     make([][]byte, MinSegmentBytes),
		"many under one segment": {make([]byte, MinSegmentBytes/2), make([]byte, MinSegmentBytes/2)},
	} {
		for _, appendFn := range []func(...[]byte) ([]Position, error){l.Append, l.AppendWritten} {
			pos, err := appendFn(recs...)
			require.ErrorIs(t, err, ErrTooLarge, name)
			require.ErrorContains(t, err, "Options.SegmentBytes", name)
			require.Nil(t, pos, name)
			require.Equal(t, end, l.End(), "%s moved the end", name)
			require.Equal(t, records, l.Stats().Records, name)
		}
	}
	requireAllReadable(t, l, es)
	more := appendRecords(t, l, 3, 1)
	requireAllReadable(t, l, append(es, more...))
}

// TestOpenOfAFileOrBelowOneNamesItAndChangesNothing: a log directory path
// that is a regular file, or lies below one, is refused with an error that
// names the path, and the file is left as it was.
func TestOpenOfAFileOrBelowOneNamesItAndChangesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("keep"), 0o600))
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		l, err := Open(dir, Options{})
		require.Nil(t, l)
		require.ErrorContains(t, err, dir)
		require.ErrorContains(t, err, "not a directory")
		got, rerr := os.ReadFile(file)
		require.NoError(t, rerr)
		require.Equal(t, "keep", string(got))
	}
}

// TestSealedHintsThatNameNoEndAreHarmless: Options.Sealed is a hint; one
// whose offsets no file can have (negative, inside the header, past the
// file, huge) or that names segments the log does not hold opens the log
// with every record readable, and appends go on.
func TestSealedHintsThatNameNoEndAreHarmless(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes})
	es := appendRecords(t, l, 0, 200)
	last := l.Stats().LastSegment
	require.NoError(t, l.Close())
	for _, hint := range []map[uint32]int{
		{0: 100, 1: -5, 2: 0, 3: 1},
		{1: math.MaxInt, 2: math.MinInt, 3: MinSegmentBytes + 1},
		{last: -1, last + 1: 64, math.MaxUint32: 64},
	} {
		l := mustOpen(t, dir, Options{SegmentBytes: MinSegmentBytes, Sealed: hint})
		requireAllReadable(t, l, es)
		n := 0
		require.NoError(t, l.Iterate(0, func(Position, []byte) error { n++; return nil }))
		require.Equal(t, len(es), n, "hint %v", hint)
		require.NoError(t, l.Close())
	}
}

// TestReadInsideARecordSaysNoFrameStartsThere: a position inside a record
// is a bad argument. Read and View said only what decoding the bytes
// there found ("frame belongs to another segment"), which reads as damage;
// they say, as Iterate does, that no frame starts there, and the log is
// not taken for corrupt.
func TestReadInsideARecordSaysNoFrameStartsThere(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	es := appendRecords(t, l, 0, 3)
	inside := es[1].pos + 1
	_, err := l.Read(inside)
	require.ErrorIs(t, err, ErrNotFound)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, inside.String()+": no frame starts there")
	err = l.View(inside, func([]byte) error { t.Fatal("called"); return nil })
	require.ErrorContains(t, err, "no frame starts there")
	requireAllReadable(t, l, es)
}

// TestCopyToAnEndPastTheLogsEndIsErrNotFound: an end past the log's end
// names no place a frame starts, and is refused as one inside a record
// is, with ErrNotFound, so that a caller tells both apart from a failure
// of the copy. It was an error that matched no sentinel. Nothing is
// written.
func TestCopyToAnEndPastTheLogsEndIsErrNotFound(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 4096})
	defer l.Close()
	es := appendRecords(t, l, 0, 3)
	for _, end := range []Position{l.End() + 1, MakePosition(l.End().Segment()+1, 0), Position(math.MaxUint64)} {
		dst := t.TempDir()
		err := l.CopyTo(t.Context(), dst, end)
		require.ErrorIs(t, err, ErrNotFound, "end %v", end)
		require.ErrorContains(t, err, end.String()+": past the log's end "+l.End().String())
		names, rerr := os.ReadDir(dst)
		require.NoError(t, rerr)
		require.Empty(t, names, "end %v: nothing written", end)
	}
	requireAllReadable(t, l, es)
}

// A nil pointer of an FS type in Options.FS is refused, not taken for the
// nil FS that means the real one: its first call would panic.
func TestOpenWithANilPointerAsItsFSRefuses(t *testing.T) {
	for _, fsys := range []vfs.FS{(*vfs.FaultFS)(nil), (*vfs.CrashFS)(nil)} {
		var l *Log
		var err error
		require.NotPanics(t, func() { l, err = Open(t.TempDir(), Options{FS: fsys}) }, "%T", fsys)
		require.Nil(t, l)
		require.ErrorIs(t, err, ErrBadOptions)
		require.ErrorContains(t, err, fmt.Sprintf("FS is a nil %T", fsys))
	}
}

// The empty path is refused by Open and CopyTo with an error wrapping
// fs.ErrInvalid, as a path holding a NUL byte is (and as vfs.Resolve
// refuses both): it wrapped nothing, and a caller could not tell this bad
// argument from a failure of the file system with errors.Is.
func TestAnEmptyPathIsRefusedAsInvalid(t *testing.T) {
	l, err := Open("", Options{})
	require.Nil(t, l)
	require.ErrorIs(t, err, iofs.ErrInvalid)
	require.EqualError(t, err, "wal: open: the directory path is empty: invalid argument")

	l = mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	err = l.CopyTo(t.Context(), "", l.End())
	require.ErrorIs(t, err, iofs.ErrInvalid)
	require.EqualError(t, err, "wal: copy: the directory path is empty: invalid argument")
}
