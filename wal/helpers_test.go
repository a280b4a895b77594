package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// entry is a record the test appended (or read back) and where it went.
type entry struct {
	pos Position
	rec []byte
}

func mustOpen(t *testing.T, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	require.NoError(t, err)
	return l
}

// record returns the i-th test record: its index, then filler of a length
// that varies with i, so frames straddle blocks and segment ends.
func record(i int) []byte {
	b := fmt.Appendf(nil, "record-%05d:", i)
	for j := 0; j < i%37; j++ {
		b = append(b, byte('a'+j%26))
	}
	return b
}

// appendRecords appends records first..first+n-1 one call each.
func appendRecords(t *testing.T, l *Log, first, n int) []entry {
	t.Helper()
	var out []entry
	for i := first; i < first+n; i++ {
		rec := record(i)
		pos, err := l.Append(rec)
		require.NoError(t, err)
		require.Len(t, pos, 1)
		out = append(out, entry{pos[0], rec})
	}
	return out
}

// readAll returns every record of the log in order.
func readAll(t *testing.T, l *Log) []entry {
	t.Helper()
	var out []entry
	require.NoError(t, l.Iterate(0, func(pos Position, rec []byte) error {
		out = append(out, entry{pos, append([]byte(nil), rec...)})
		return nil
	}))
	return out
}

// requireEntries checks that got is exactly want, in order.
func requireEntries(t *testing.T, want, got []entry) {
	t.Helper()
	require.Equal(t, len(want), len(got), "record count")
	for i := range want {
		require.Equal(t, want[i].pos, got[i].pos, "position of record %d", i)
		require.Equal(t, string(want[i].rec), string(got[i].rec), "record %d", i)
	}
}

// copyDir copies the regular files of src, but the lock, into a new
// temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	return copyInto(t, t.TempDir(), src)
}

// seededRand returns a generator and logs its seed, so a failure can be
// replayed.
func seededRand(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// segFile returns the path of segment seq in dir.
func segFile(dir string, seq uint32) string { return filepath.Join(dir, segName(seq)) }

func isLocked(err error) bool { return errors.Is(err, ErrLocked) }

// saltOfFile returns the salt of the segment file at path, which a frame a
// test writes into that file must carry to verify there.
func saltOfFile(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := make([]byte, segment.HeaderSize)
	_, err = io.ReadFull(f, h)
	require.NoError(t, err)
	return segment.SaltOf(h)
}

// crashAtDirSyncFS is a CrashFS that, once armed, loses power at its nth
// directory sync from then on (n counts from 0), before the sync: the
// changes of names since the last one are still unsynced. arm arms it;
// with armedByRemove, a Remove arms it too, when it is not armed, for the
// next directory sync.
type crashAtDirSyncFS struct {
	*vfs.CrashFS
	armedByRemove bool // fixed when it is made

	mu   sync.Mutex
	left int // directory syncs to let through before the crash; <0: none armed
}

// newCrashAtDirSyncFS returns a crashAtDirSyncFS over the default file
// system, not armed.
func newCrashAtDirSyncFS(armedByRemove bool) *crashAtDirSyncFS {
	return &crashAtDirSyncFS{CrashFS: vfs.NewCrashFS(vfs.Default), armedByRemove: armedByRemove, left: -1}
}

func (fs *crashAtDirSyncFS) arm(n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.left = n
}

func (fs *crashAtDirSyncFS) Remove(name string) error {
	if fs.armedByRemove {
		fs.mu.Lock()
		if fs.left < 0 {
			fs.left = 0
		}
		fs.mu.Unlock()
	}
	return fs.CrashFS.Remove(name)
}

func (fs *crashAtDirSyncFS) SyncDir(dir string) error {
	fs.mu.Lock()
	crash := fs.left == 0
	if fs.left >= 0 {
		fs.left--
	}
	fs.mu.Unlock()
	if crash {
		fs.CrashFS.Crash()
		return fmt.Errorf("sync dir %s: %w", dir, vfs.ErrCrashed)
	}
	return fs.CrashFS.SyncDir(dir)
}

// subsetClone clones cfs, whose log is in dir, to a new directory as a
// power loss leaves it on a file system that may keep any subset of the
// unsynced changes of names, drawn from a seed that rng gives. It returns
// the clone's directory and the seed, which a failure names.
func subsetClone(t *testing.T, cfs *vfs.CrashFS, dir string, rng *rand.Rand) (clone string, seed uint64) {
	t.Helper()
	seed = rng.Uint64()
	clone = filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir,
		KeepUnsyncedNames: vfs.KeepSubset, Rand: rand.New(rand.NewPCG(seed, seed))}))
	return clone, seed
}

// requireTidyDir checks what a log of segments of size bytes left in dir:
// segments without a gap, at most maxSpares spares, each of full size,
// and (when noTmp) no other temporary file.
func requireTidyDir(t *testing.T, dir string, size int64, noTmp bool, what string) {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err, what)
	var seqs []uint32
	spares := 0
	for _, e := range names {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, sparePrefix):
			spares++
			fi, err := e.Info()
			require.NoError(t, err)
			require.Equal(t, size, fi.Size(), "%s: spare %s kept, not of full size", what, name)
		case strings.HasSuffix(name, tmpSuffix):
			require.False(t, noTmp, "%s: %s left", what, name)
		default:
			if seq, ok := parseSegName(name); ok {
				seqs = append(seqs, seq)
			}
		}
	}
	require.LessOrEqual(t, spares, maxSpares, "%s: spares", what)
	for i := 1; i < len(seqs); i++ {
		require.Equal(t, seqs[i-1]+1, seqs[i], "%s: a gap in the segments %v", what, seqs)
	}
}

// cloneLosingRecord clones cfs, on which l wrote its log in dir, as a
// power loss leaves it that kept every unsynced byte but the block of the
// record at lost (a payload of n bytes), which reverts to what the device
// held: zeros. It closes l and returns the clone's directory and the
// segment file that held the lost record.
func cloneLosingRecord(t *testing.T, cfs *vfs.CrashFS, l *Log, dir string, lost Position, n int) (clone, path string) {
	t.Helper()
	clone = filepath.Join(t.TempDir(), "first")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir, KeepUnsyncedFraction: 1})) // power lost
	_ = l.Close()
	path = segFile(clone, lost.Segment())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, segment.Size(n)), int64(lost.Offset()))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return clone, path
}

// requireLostPlaceRefilled appends to l, opened on cfs in dir after the
// record at lost (a payload of n bytes) was lost, a record of the same
// length; requires it to take the lost record's place; and requires the
// log, after a further power loss, to hold durable and that record, and
// nothing else (above all, no frame left after the lost one). It closes l.
func requireLostPlaceRefilled(t *testing.T, cfs *vfs.CrashFS, l *Log, dir string, lost Position, n int, segBytes int64, durable []entry) {
	t.Helper()
	again := bytes.Repeat([]byte("z"), n)
	pos, err := l.Append(again)
	require.NoError(t, err)
	require.Equal(t, lost, pos[0], "the new record takes the lost one's place")

	second := filepath.Join(t.TempDir(), "second")
	require.NoError(t, cfs.CrashClone(second, vfs.CrashOptions{Root: dir})) // power lost again
	_ = l.Close()
	l = mustOpen(t, second, Options{SegmentBytes: segBytes})
	defer l.Close()
	requireEntries(t, append(durable, entry{pos[0], again}), readAll(t, l))
}
