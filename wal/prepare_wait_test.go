package wal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/internal/leakcheck"
	"github.com/walbroker/walbroker/vfs"
)

// chunkGateFS stops the write of zeros at offset off of the file whose
// name ends in name (a segment being prepared) until release is closed;
// reached is closed when that write has begun.
type chunkGateFS struct {
	vfs.FS
	name    string
	off     int64
	reached chan struct{}
	release chan struct{}
}

func newChunkGateFS(name string, off int64) *chunkGateFS {
	return &chunkGateFS{FS: vfs.Default, name: name, off: off, reached: make(chan struct{}), release: make(chan struct{})}
}

type chunkGateFile struct {
	vfs.File
	fs *chunkGateFS
}

func (fs *chunkGateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, fs.name) {
		return f, err
	}
	return chunkGateFile{f, fs}, nil
}

func (f chunkGateFile) WriteAt(p []byte, off int64) (int, error) {
	if off == f.fs.off {
		close(f.fs.reached)
		<-f.fs.release
	}
	return f.File.WriteAt(p, off)
}

// The gated file is an Allocator and a WriteBacker as the inner one is.
func (f chunkGateFile) Allocate(off, n int64) error { return f.File.(vfs.Allocator).Allocate(off, n) }
func (f chunkGateFile) WriteBack(off, n int64) error {
	return f.File.(vfs.WriteBacker).WriteBack(off, n)
}

// appendUntilWaiting appends records from first on until one needs the
// segment whose preparer the gate holds in the middle of the file: it
// returns that append's result channel once the writer waits for the file
// (its rush is sent, which the held preparer cannot take), and the
// earlier appends, acknowledged. The poll is bounded by a hang guard, not
// a timing assumption.
func appendUntilWaiting(t *testing.T, l *Log, first int, gate *chunkGateFS) (acked []entry, last chan []Position) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := first; ; i++ {
		rec := prepFaultRecord(i)
		p := l.Enqueue(true, rec)
		done := make(chan []Position, 1)
		go func() {
			pos, err := p.Wait()
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			done <- pos
		}()
		for {
			select {
			case pos := <-done:
				acked = append(acked, entry{pos[0], rec})
			default:
				if !isClosed(gate.reached) || len(l.prep.rush) == 0 {
					require.True(t, time.Now().Before(deadline), "the writer never waited for the segment")
					time.Sleep(50 * time.Microsecond)
					continue
				}
				return acked, done
			}
			break
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCloseWhileTheWriterWaitsForItsSegment: the writer waits for
// segment 2, whose preparer is held in the middle of its zeros, when
// Close is called. Close completes the waiting append (it was queued
// before), leaves no temporary file, and releases everything.
func TestCloseWhileTheWriterWaitsForItsSegment(t *testing.T) {
	before := leakcheck.Running()
	dir := t.TempDir()
	gate := newChunkGateFS(segName(2)+tmpSuffix, 256<<10)
	l := mustOpen(t, dir, Options{FS: gate, SegmentBytes: prepFaultSeg})
	acked, last := appendUntilWaiting(t, l, 0, gate)

	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	close(gate.release)
	require.NoError(t, <-closed)
	pos := <-last
	require.Len(t, pos, 1, "the append queued before Close failed")
	require.Equal(t, uint32(2), pos[0].Segment())
	acked = append(acked, entry{pos[0], prepFaultRecord(len(acked))})
	require.NoError(t, leakcheck.Check(before, dir))
	tmps, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix+tmpSuffix))
	require.NoError(t, err)
	require.Empty(t, tmps)

	l = mustOpen(t, dir, Options{SegmentBytes: prepFaultSeg})
	defer l.Close()
	requireEntries(t, acked, readAll(t, l))
}

// TestARemovalWhileTheWriterWaitsGivesItTheSpare: the writer waits
// for segment 3, whose zeros are held part way, when RemoveBelow retires
// segment 1: the preparer drops its zeros for the retired file, the
// rotation takes it, and Stats says so; no temporary file is left.
func TestARemovalWhileTheWriterWaitsGivesItTheSpare(t *testing.T) {
	dir := t.TempDir()
	gate := newChunkGateFS(segName(3)+tmpSuffix, 256<<10)
	l := mustOpen(t, dir, Options{FS: gate, SegmentBytes: prepFaultSeg})
	defer l.Close()
	acked, last := appendUntilWaiting(t, l, 0, gate)
	require.Equal(t, int64(1), l.Stats().Rotations)

	n, err := l.RemoveBelow(MakePosition(2, 0))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, l.spareCount())
	close(gate.release)
	pos := <-last
	require.Len(t, pos, 1)
	require.Equal(t, uint32(3), pos[0].Segment())
	acked = append(acked, entry{pos[0], prepFaultRecord(len(acked))})

	st := l.Stats()
	require.Equal(t, int64(2), st.Rotations)
	require.Equal(t, int64(1), st.ZeroFillsDropped, "the zeros were not dropped for the spare")
	require.Equal(t, int64(1), st.RecycledSegments, "the rotation did not take the spare")
	require.Zero(t, st.ZeroFillsRushed, "a dropped fill counted as rushed")
	require.Zero(t, l.spareCount())
	_, err = os.Stat(segFile(dir, 3) + tmpSuffix)
	require.ErrorIs(t, err, os.ErrNotExist, "the dropped zeros are left")
	requireEntries(t, entriesFrom(acked, 2), readAll(t, l))
}
