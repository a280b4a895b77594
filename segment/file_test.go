package segment_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

const testFileSize = 3<<20 + 100 // more than one zeroing chunk, not a multiple of it

func createFile(t *testing.T, dir string, seq uint32, size int64) (*segment.File, string) {
	t.Helper()
	path := filepath.Join(dir, "seg")
	f, err := segment.Create(vfs.Default, path, seq, 0, size)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f, path
}

func TestCreate(t *testing.T) {
	f, path := createFile(t, t.TempDir(), 4, testFileSize)
	require.Equal(t, uint32(4), f.Seq())
	require.Equal(t, path, f.Path())
	require.Equal(t, testFileSize, f.Size())

	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(testFileSize), fi.Size())
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())

	for _, data := range [][]byte{f.Data(), mustRead(t, path)} {
		require.Len(t, data, testFileSize)
		seq, err := segment.DecodeHeader(data)
		require.NoError(t, err)
		require.Equal(t, uint32(4), seq)
		require.True(t, isZero(data[segment.HeaderSize:]), "bytes after the header are not all zeros")
	}

	r, err := f.Scan(false, func(segment.Frame) error { t.Fatal("record in a new segment"); return nil })
	require.NoError(t, err)
	require.Equal(t, segment.Report{End: segment.HeaderSize, Tail: segment.EndClean}, r)
}

// TestCreateRefusesAnExistingFileAndTinySizes: Create makes a new file. It
// used to truncate whatever was at path (a live segment, say), and a later
// failure then removed it.
func TestCreateRefusesAnExistingFileAndTinySizes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "seg")
	old := bytes.Repeat([]byte{0xff}, 5000)
	require.NoError(t, os.WriteFile(path, old, 0o600))
	f, err := segment.Create(vfs.Default, path, 1, 0, 1000)
	require.ErrorIs(t, err, fs.ErrExist)
	require.Nil(t, f)
	require.Equal(t, old, mustRead(t, path), "the existing file changed")
	_, err = segment.Create(vfs.Default, dir, 1, 0, 1000)
	require.ErrorIs(t, err, fs.ErrExist, "a directory")

	for _, size := range []int64{0, segment.HeaderSize, segment.HeaderSize + segment.FrameHeaderSize - 1} {
		p := filepath.Join(dir, "tiny")
		_, err := segment.Create(vfs.Default, p, 1, 0, size)
		require.Error(t, err, "size %d", size)
		require.NoFileExists(t, p)
	}
	// The smallest segment holds one empty frame.
	f, err = segment.Create(vfs.Default, filepath.Join(dir, "min"), 1, 0, segment.HeaderSize+segment.FrameHeaderSize)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	f, path := createFile(t, dir, 9, 8192)
	frame := segment.AppendFrame(nil, 9, 0, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("persisted"))
	require.NoError(t, f.WriteAt(frame, segment.HeaderSize))
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	g, err := segment.Open(vfs.Default, path, 9)
	require.NoError(t, err)
	require.Equal(t, uint32(9), g.Seq())
	require.Equal(t, 8192, g.Size())
	var got []string
	r, err := g.Scan(false, func(fr segment.Frame) error { got = append(got, string(fr.Body)); return nil })
	require.NoError(t, err)
	require.Equal(t, []string{"persisted"}, got)
	require.Equal(t, segment.HeaderSize+len(frame), r.End)
	require.NoError(t, g.Close())

	_, err = segment.Open(vfs.Default, path, 10)
	require.ErrorIs(t, err, segment.ErrBadHeader, "sequence mismatch")

	_, err = segment.Open(vfs.Default, filepath.Join(dir, "missing"), 1)
	require.ErrorIs(t, err, fs.ErrNotExist)

	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short", mustRead(t, path)[:segment.HeaderSize-1]},
		{"zeros", make([]byte, 4096)},
		{"damaged header", func() []byte {
			b := mustRead(t, path)
			b[13] ^= 0x10
			return b
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "seg")
			require.NoError(t, os.WriteFile(p, tt.data, 0o600))
			_, err := segment.Open(vfs.Default, p, 9)
			require.ErrorIs(t, err, segment.ErrBadHeader)
			require.Contains(t, err.Error(), p, "the error names the file")
			if len(tt.data) < segment.HeaderSize {
				// Too short for a header even when nothing is read.
				_, err := segment.OpenUnread(vfs.Default, p, 9)
				require.ErrorIs(t, err, segment.ErrBadHeader, "OpenUnread")
			}
		})
	}
}

func TestWriteAt(t *testing.T) {
	f, _ := createFile(t, t.TempDir(), 2, 4096)
	refused := []struct {
		off, n int
	}{
		{0, 1},                      // over the header
		{segment.HeaderSize - 1, 2}, // into the header
		{-1, 1},
		{4096, 1}, // past the end
		{4000, 97},
		{4096 - 10, 11},
	}
	for _, w := range refused {
		err := f.WriteAt(bytes.Repeat([]byte{0xab}, w.n), w.off)
		require.Error(t, err, "write of %d bytes at %d", w.n, w.off)
	}
	seq, err := segment.DecodeHeader(f.Data())
	require.NoError(t, err)
	require.Equal(t, uint32(2), seq)
	require.True(t, isZero(f.Data()[segment.HeaderSize:]), "a refused write changed the file")

	// Writes show in the mapping at once: the log reads what it just wrote.
	rng := newRand(t)
	want := make([]byte, 4096)
	copy(want, f.Data()[:segment.HeaderSize])
	for _, w := range []struct{ off, n int }{{segment.HeaderSize, 100}, {4096 - 7, 7}, {500, 1}, {1000, 0}, {segment.HeaderSize, 4096 - segment.HeaderSize}} {
		b := make([]byte, w.n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		require.NoError(t, f.WriteAt(b, w.off))
		copy(want[w.off:], b)
		require.Equal(t, want, f.Data(), "mapping after a write of %d bytes at %d", w.n, w.off)
	}
	require.NoError(t, f.Sync())
}

func TestWriteFramesThenScan(t *testing.T) {
	f, _ := createFile(t, t.TempDir(), 3, 64<<10)
	s := newSeg(3, newRand(t))
	s.batch([]int{10}, []int{0}, []int{3, 5, 7})
	s.batch([]int{20, 1}, []int{33 << 10})
	s.batch([]int{4}, []int{8, 9, 10, 11}, []int{1})
	// Write batch by batch, as the log does, scanning the mapping after
	// each fdatasync.
	for i, b := range s.batches {
		require.NoError(t, f.WriteAt(s.data[b.start:b.end], b.start))
		require.NoError(t, f.Sync())
		r, got := scanAll(t, f.Data(), 3, false)
		wantRecs, wantEnd := s.prefix(b.end)
		require.Equal(t, wantRecs, got, "after batch %d", i)
		require.Equal(t, segment.Report{End: wantEnd, Records: len(wantRecs), Tail: segment.EndClean}, r)
	}
}

func TestRecycle(t *testing.T) {
	dir := t.TempDir()
	oldPath := filepath.Join(dir, "old")
	f, err := segment.Create(vfs.Default, oldPath, 1, 0, 16<<10)
	require.NoError(t, err)
	s1 := newSeg(1, newRand(t))
	s1.batch([]int{10, 20}, []int{300})
	s1.batch([]int{0}, []int{1000})
	s1.seal()
	require.NoError(t, f.WriteAt(s1.data[segment.HeaderSize:], segment.HeaderSize))
	require.NoError(t, f.Sync())
	r, err := f.Scan(false, func(segment.Frame) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 5, r.Records)
	require.True(t, r.Sealed)
	require.NoError(t, f.Close())

	newPath := filepath.Join(dir, "new")
	g, err := segment.Recycle(vfs.Default, oldPath, newPath, 2, 0)
	require.NoError(t, err)
	defer g.Close()
	require.NoFileExists(t, oldPath)
	require.Equal(t, uint32(2), g.Seq())
	require.Equal(t, newPath, g.Path())
	require.Equal(t, 16<<10, g.Size())
	fi, err := os.Stat(newPath)
	require.NoError(t, err)
	require.Equal(t, int64(16<<10), fi.Size())

	seq, err := segment.DecodeHeader(g.Data())
	require.NoError(t, err)
	require.Equal(t, uint32(2), seq)
	// The old frames are still there, as stale bytes ...
	require.Equal(t, s1.data[segment.HeaderSize:], g.Data()[segment.HeaderSize:s1.end()])
	// ... and no scan of the new segment returns them.
	for _, salvage := range []bool{false, true} {
		r, err = g.Scan(salvage, func(segment.Frame) error { t.Fatal("stale frame returned"); return nil })
		require.NoError(t, err)
		require.Equal(t, segment.Report{End: segment.HeaderSize, Tail: segment.EndClean}, r)
	}

	// Frames of the new segment written over the stale ones read back, and
	// the stale bytes after them still end the log cleanly.
	frame := segment.AppendFrame(nil, 2, 0, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("new"))
	require.NoError(t, g.WriteAt(frame, segment.HeaderSize))
	r, err = g.Scan(false, func(fr segment.Frame) error {
		require.Equal(t, "new", string(fr.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, segment.Report{End: segment.HeaderSize + len(frame), Records: 1, Tail: segment.EndClean}, r)
	require.NoError(t, g.Sync())

	_, err = segment.Open(vfs.Default, newPath, 1)
	require.ErrorIs(t, err, segment.ErrBadHeader, "the old sequence no longer opens")
	h, err := segment.Open(vfs.Default, newPath, 2)
	require.NoError(t, err)
	require.NoError(t, h.Close())

	_, err = segment.Recycle(vfs.Default, filepath.Join(dir, "missing"), filepath.Join(dir, "x"), 3, 0)
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestClose(t *testing.T) {
	f, err := segment.Create(vfs.Default, filepath.Join(t.TempDir(), "seg"), 1, 0, 4096)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Nil(t, f.Data(), "the mapping is gone after Close")
	require.Error(t, f.Close(), "a second Close reports the closed file")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// writeBackFS records, in order, the zero-fill's writes and write-backs of
// the files it opens, and fails the write-back numbered failAt (from 1).
type writeBackFS struct {
	vfs.FS
	calls  *[]string
	failAt int
}

func (fs writeBackFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &writeBackFile{File: f, fs: fs}, nil
}

type writeBackFile struct {
	vfs.File
	fs         writeBackFS
	writeBacks int
}

func (f *writeBackFile) WriteAt(p []byte, off int64) (int, error) {
	*f.fs.calls = append(*f.fs.calls, fmt.Sprintf("write %d+%d", off, len(p)))
	return f.File.WriteAt(p, off)
}

func (f *writeBackFile) WriteBack(off, n int64) error {
	f.writeBacks++
	*f.fs.calls = append(*f.fs.calls, fmt.Sprintf("writeback %d+%d", off, n))
	if f.writeBacks == f.fs.failAt {
		return syscall.EIO
	}
	if wb, ok := f.File.(vfs.WriteBacker); ok { // Linux's sync_file_range
		return wb.WriteBack(off, n)
	}
	return nil // elsewhere the sync that ends the preparation writes it back
}

func TestCreatePacedAsksBeforeEachChunkAndSendsEachToTheDevice(t *testing.T) {
	var calls []string
	fs := writeBackFS{FS: vfs.Default, calls: &calls}
	path := filepath.Join(t.TempDir(), "seg")
	f, err := segment.CreatePaced(fs, path, 5, 0, testFileSize, func(written int64) error {
		calls = append(calls, fmt.Sprintf("pace %d", written))
		return nil
	})
	require.NoError(t, err)
	defer f.Close()

	// pace, write, write-back, chunk after chunk, each starting where the
	// last ended; then the header.
	require.Equal(t, 1, len(calls)%3, "calls: %q", calls)
	var off int64
	chunk := int64(-1)
	for i := 0; i+3 <= len(calls); i += 3 {
		var n int64
		_, err := fmt.Sscanf(calls[i+1], "write %d+%d", new(int64), &n)
		require.NoError(t, err)
		if chunk < 0 {
			chunk = n
		}
		if off+chunk < testFileSize {
			require.Equal(t, chunk, n, "only the last chunk is short")
		}
		require.Equal(t, []string{fmt.Sprintf("pace %d", off), fmt.Sprintf("write %d+%d", off, n), fmt.Sprintf("writeback %d+%d", off, n)}, calls[i:i+3])
		off += n
	}
	require.Equal(t, int64(testFileSize), off)
	require.Greater(t, len(calls)/3, 3, "chunks")
	require.Equal(t, fmt.Sprintf("write 0+%d", segment.HeaderSize), calls[len(calls)-1])

	// The file is what Create makes.
	seq, err := segment.DecodeHeader(mustRead(t, path))
	require.NoError(t, err)
	require.Equal(t, uint32(5), seq)
	require.True(t, isZero(mustRead(t, path)[segment.HeaderSize:]))
	require.Equal(t, testFileSize, f.Size())
}

func TestCreatePacedFailsOnAFailedWriteBack(t *testing.T) {
	var calls []string
	fs := writeBackFS{FS: vfs.Default, calls: &calls, failAt: 2}
	path := filepath.Join(t.TempDir(), "seg")
	_, err := segment.CreatePaced(fs, path, 5, 0, testFileSize, nil)
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorContains(t, err, path)
	require.NoFileExists(t, path, "a file whose zeros may not be on the device is removed")
	require.Equal(t, "writeback", strings.Fields(calls[len(calls)-1])[0], "went on after the failure: %q", calls)
}

func TestCreatePacedAbandonsTheFileWhenPaceFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	stop := errors.New("closing")
	paced := 0
	_, err := segment.CreatePaced(vfs.Default, path, 5, 0, testFileSize, func(written int64) error {
		if written > 0 {
			return stop
		}
		paced++
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.ErrorContains(t, err, path)
	require.Equal(t, 1, paced)
	require.NoFileExists(t, path)
}

// allocFile is a writeBackFile that records Allocate calls too, and fails
// them with err when err is set.
type allocFile struct {
	*writeBackFile
	err error
}

type allocFS struct {
	writeBackFS
	err error
}

func (fs allocFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.writeBackFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return allocFile{f.(*writeBackFile), fs.err}, nil
}

func (f allocFile) Allocate(off, n int64) error {
	*f.fs.calls = append(*f.fs.calls, fmt.Sprintf("allocate %d+%d", off, n))
	if f.err != nil {
		return f.err
	}
	if a, ok := f.File.(vfs.Allocator); ok { // Linux's fallocate
		return a.Allocate(off, n)
	}
	// Elsewhere a file grown by Truncate reads as zeros, as one allocated
	// does.
	if size, err := f.Size(); err != nil || size >= off+n {
		return err
	}
	return f.Truncate(off + n)
}

// TestCreatePacedAllocatesTheRestWhenAsked: pace's ErrAllocateRest ends
// the zeros; the rest is allocated where the file allows it, and written
// unpaced where it does not. Either way the file is whole and reads as
// zeros after its header.
func TestCreatePacedAllocatesTheRestWhenAsked(t *testing.T) {
	const chunk = 256 << 10 // the zero-fill's chunk
	for _, tc := range []struct {
		name string
		fs   func(calls *[]string) vfs.FS
		want func(calls []string) // after the first chunk's pace, write, write-back
	}{
		{"allocated", func(calls *[]string) vfs.FS { return allocFS{writeBackFS{FS: vfs.Default, calls: calls}, nil} },
			func(calls []string) {
				require.Equal(t, []string{"pace 262144", fmt.Sprintf("allocate %d+%d", chunk, testFileSize-chunk), "write 0+32"}, calls)
			}},
		{"allocation refused", func(calls *[]string) vfs.FS {
			return allocFS{writeBackFS{FS: vfs.Default, calls: calls}, syscall.EOPNOTSUPP}
		},
			func(calls []string) {
				require.Equal(t, fmt.Sprintf("allocate %d+%d", chunk, testFileSize-chunk), calls[1])
				require.Equal(t, fmt.Sprintf("write %d+%d", chunk, chunk), calls[2], "no zeros after a refused allocation")
				for _, c := range calls[3:] {
					require.NotContains(t, c, "pace", "paced after ErrAllocateRest")
				}
			}},
		{"no allocator", func(calls *[]string) vfs.FS { return writeBackFS{FS: vfs.Default, calls: calls} },
			func(calls []string) {
				require.Equal(t, fmt.Sprintf("write %d+%d", chunk, chunk), calls[1], "no zeros without an allocator")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			path := filepath.Join(t.TempDir(), "seg")
			f, err := segment.CreatePaced(tc.fs(&calls), path, 5, 0, testFileSize, func(written int64) error {
				calls = append(calls, fmt.Sprintf("pace %d", written))
				if written > 0 {
					return segment.ErrAllocateRest
				}
				return nil
			})
			require.NoError(t, err)
			defer f.Close()
			require.Equal(t, []string{"pace 0", fmt.Sprintf("write 0+%d", chunk), fmt.Sprintf("writeback 0+%d", chunk)}, calls[:3])
			tc.want(calls[3:])
			data := mustRead(t, path)
			require.Len(t, data, testFileSize)
			require.True(t, isZero(data[segment.HeaderSize:]), "not zeros after the header")
			require.Equal(t, testFileSize, f.Size())
		})
	}
}

// powerLoss returns a copy of the directory dir of cfs as a power loss now
// would leave it: only what completed fdatasyncs and directory syncs made
// durable.
func powerLoss(t *testing.T, cfs *vfs.CrashFS, dir string) string {
	t.Helper()
	clone := filepath.Join(t.TempDir(), "clone")
	require.NoError(t, cfs.CrashClone(clone, vfs.CrashOptions{Root: dir}))
	return clone
}

// TestACreatedSegmentIsDurableOnceItsNameIs: Create ends with an fdatasync,
// so once the caller has synced the directory a power loss leaves the whole
// file, its header and its zeros.
func TestACreatedSegmentIsDurableOnceItsNameIs(t *testing.T) {
	dir := t.TempDir()
	cfs := vfs.NewCrashFS(vfs.Default)
	f, err := segment.Create(cfs, filepath.Join(dir, "seg"), 6, 0, 8192)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, cfs.SyncDir(dir))

	clone := powerLoss(t, cfs, dir)
	g, err := segment.Open(vfs.Default, filepath.Join(clone, "seg"), 6)
	require.NoError(t, err, "the header did not survive a power loss")
	defer g.Close()
	require.Equal(t, 8192, g.Size())
	require.True(t, isZero(g.Data()[segment.HeaderSize:]))
}

// TestARecycledSegmentIsDurableOnceItsNameIs: Recycle syncs the rewritten
// header, so after the caller's directory sync a power loss leaves the file
// naming its new segment, not the retired one.
func TestARecycledSegmentIsDurableOnceItsNameIs(t *testing.T) {
	dir := t.TempDir()
	f, _ := createFile(t, dir, 1, 8192)
	require.NoError(t, f.Close())

	cfs := vfs.NewCrashFS(vfs.Default)
	newPath := filepath.Join(dir, "new")
	g, err := segment.Recycle(cfs, filepath.Join(dir, "seg"), newPath, 2, 0)
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, cfs.SyncDir(dir))

	clone := powerLoss(t, cfs, dir)
	h, err := segment.Open(vfs.Default, filepath.Join(clone, "new"), 2)
	require.NoError(t, err, "the new header did not survive a power loss")
	require.NoError(t, h.Close())
}

// TestSequenceZeroIsRefused: zero-filled space names segment 0, so a
// segment 0 would take its preallocated zeros for frames of its own. No
// file is made.
func TestSequenceZeroIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	_, err := segment.Create(vfs.Default, path, 0, 0, 4096)
	require.ErrorContains(t, err, "sequence 0")
	require.NoFileExists(t, path)
}

// TestOpenUnreadDoesNotReadTheHeader: OpenUnread reads nothing of the file,
// so even a header that no longer verifies opens; its frames are still
// checked as they are read.
func TestOpenUnreadDoesNotReadTheHeader(t *testing.T) {
	dir := t.TempDir()
	f, path := createFile(t, dir, 3, 4096)
	frame := segment.AppendFrame(nil, 3, 0, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("kept"))
	require.NoError(t, f.WriteAt(frame, segment.HeaderSize))
	require.NoError(t, f.Close())
	b := mustRead(t, path)
	b[2] ^= 0xff // the magic
	require.NoError(t, os.WriteFile(path, b, 0o600))

	_, err := segment.Open(vfs.Default, path, 3)
	require.ErrorIs(t, err, segment.ErrBadHeader)
	g, err := segment.OpenUnread(vfs.Default, path, 3)
	require.NoError(t, err)
	defer g.Close()
	require.Equal(t, uint32(3), g.Seq())
	var got []string
	r, err := g.Scan(false, func(fr segment.Frame) error { got = append(got, string(fr.Body)); return nil })
	require.NoError(t, err)
	require.Equal(t, []string{"kept"}, got)
	require.Equal(t, segment.HeaderSize+len(frame), r.End)
}
