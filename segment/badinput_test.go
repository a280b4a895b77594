package segment_test

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// oneRecord returns a segment of seq holding one record frame, zeros after it.
func oneRecord(seq uint32) []byte {
	h := segment.EncodeHeader(seq, 0)
	data := segment.AppendFrame(h[:], seq, 0, 0, segment.KindRecord, segment.Full, []byte("hello"))
	return append(data, make([]byte, 200)...)
}

func noFrames(segment.Frame) error { return nil }

// countOpen returns a FaultFS over the OS and a function that reports how
// many files opened through it are still open.
func countOpen() (*vfs.FaultFS, func() int) {
	ffs := vfs.NewFaultFS(vfs.Default)
	var open atomic.Int64
	ffs.Observe(func(e vfs.Event) {
		switch e.Op {
		case vfs.OpOpen:
			open.Add(1)
		case vfs.OpClose:
			open.Add(-1)
		}
	})
	return ffs, func() int { return int(open.Load()) }
}

// TestScanFromRefusesAnOffsetOutsideTheFrames: an offset before the
// header's end or past the data names no place a frame can start. It used
// to index outside the data (a panic for negative offsets and those near
// MaxInt, whose sums overflow) or to report an End outside the data with
// no error.
func TestScanFromRefusesAnOffsetOutsideTheFrames(t *testing.T) {
	data := oneRecord(1)
	for _, from := range []int{math.MinInt, -100, -8, -1, 0, 1, segment.HeaderSize - 1, len(data) + 1, len(data) + 10, math.MaxInt - 5, math.MaxInt} {
		for _, salvage := range []bool{false, true} {
			called := false
			r, err := segment.ScanFrom(data, 1, from, salvage, func(segment.Frame) error { called = true; return nil })
			require.ErrorIs(t, err, fs.ErrInvalid, "from %d, salvage %v", from, salvage)
			require.ErrorContains(t, err, "offset")
			require.Equal(t, segment.Report{}, r, "from %d", from)
			require.False(t, called, "from %d: the function was called", from)
		}
	}
	// The bounds themselves are where frames start and where the data ends.
	r, err := segment.ScanFrom(data, 1, segment.HeaderSize, false, noFrames)
	require.NoError(t, err)
	require.Equal(t, 1, r.Records)
	r, err = segment.ScanFrom(data, 1, len(data), false, noFrames)
	require.NoError(t, err)
	require.Equal(t, segment.Report{End: len(data), Tail: segment.EndClean}, r)
}

// TestScanRefusesDataShorterThanTheHeader: such data is no segment; the
// scan used to report a clean end at HeaderSize, past the data.
func TestScanRefusesDataShorterThanTheHeader(t *testing.T) {
	h := segment.EncodeHeader(1, 0)
	for _, data := range [][]byte{nil, {}, h[:segment.HeaderSize-1]} {
		_, err := segment.Scan(data, 1, false, noFrames)
		require.ErrorIs(t, err, fs.ErrInvalid, "%d bytes", len(data))
		require.ErrorContains(t, err, "header")
	}
	r, err := segment.Scan(h[:], 1, false, noFrames)
	require.NoError(t, err, "a header alone is an empty segment")
	require.Equal(t, segment.Report{End: segment.HeaderSize, Tail: segment.EndClean}, r)
}

// TestScanRefusesANilFunction: it used to panic at the first record.
func TestScanRefusesANilFunction(t *testing.T) {
	for _, salvage := range []bool{false, true} {
		_, err := segment.Scan(oneRecord(1), 1, salvage, nil)
		require.ErrorIs(t, err, fs.ErrInvalid)
		require.ErrorContains(t, err, "nil function")
	}
}

// errors.go: "an argument a function cannot act on (an offset outside the
// data, ...) is refused, before anything is done, with an error that says
// which argument and wraps io/fs.ErrInvalid". Decode at an offset before
// the data's start or past its end used to say that a frame "runs past end
// of file" (ErrShortFrame), as if one started there and was cut: damage,
// not the argument. The offset just past the data is where the next frame
// would go: a frame there runs past the end.
func TestDecodeRefusesAnOffsetOutsideTheData(t *testing.T) {
	h := segment.EncodeHeader(5, 0x5555)
	data := segment.AppendFrame(h[:], 5, 0x5555, segment.HeaderSize, segment.KindRecord, segment.Full, []byte("real"))
	for _, off := range []int{-1, math.MinInt, len(data) + 1, math.MaxInt} {
		_, err := segment.Decode(data, off, 5)
		require.ErrorIs(t, err, fs.ErrInvalid, "Decode at offset %d of %d bytes: %v", off, len(data), err)
		require.ErrorContains(t, err, fmt.Sprintf("offset %d", off))
	}
	_, err := segment.Decode(data, len(data), 5)
	require.ErrorIs(t, err, segment.ErrShortFrame)
	require.NotErrorIs(t, err, fs.ErrInvalid)
}

// TestResumeOutsideTheFrames: no frame starts in the header, so an offset
// before its end finds the first frame after it; past the data there is
// none. Negative offsets and those near MaxInt used to panic.
func TestResumeOutsideTheFrames(t *testing.T) {
	data := oneRecord(1)
	for _, from := range []int{math.MinInt, -100, -1, 0, 5, segment.HeaderSize} {
		at, ok := segment.Resume(data, 1, from)
		require.True(t, ok, "from %d", from)
		require.Equal(t, segment.HeaderSize, at, "from %d", from)
	}
	for _, from := range []int{segment.HeaderSize + 1, len(data), len(data) + 1, math.MaxInt - 5, math.MaxInt} {
		_, ok := segment.Resume(data, 1, from)
		require.False(t, ok, "from %d", from)
	}
	_, ok := segment.Resume(nil, 1, 0)
	require.False(t, ok, "no data")
}

// TestClosedFileRefusesWork: a closed File, and the zero File, which was
// never open, do no work and say so. Scan used to report a clean, empty
// segment; WriteAt, a write "outside [32,0)"; Close and Sync of the zero
// File panicked.
func TestClosedFileRefusesWork(t *testing.T) {
	f, _ := createFile(t, t.TempDir(), 1, 4096)
	require.NoError(t, f.Close())
	for name, file := range map[string]*segment.File{"closed": f, "zero": new(segment.File)} {
		_, err := file.Scan(false, noFrames)
		require.ErrorIs(t, err, fs.ErrClosed, "%s: Scan", name)
		require.ErrorIs(t, file.WriteAt([]byte("x"), segment.HeaderSize), fs.ErrClosed, "%s: WriteAt", name)
		require.ErrorIs(t, file.Sync(), fs.ErrClosed, "%s: Sync", name)
		require.ErrorIs(t, file.Close(), fs.ErrClosed, "%s: Close", name)
	}
}

// TestWriteAtRefusesOffsetsOutsideTheFramesWithoutOverflow: offsets near
// MaxInt overflowed the bounds check and reached the OS, which refused
// them with a bare EINVAL; now every write outside [HeaderSize, Size) is
// refused by the check, and the file is unchanged.
func TestWriteAtRefusesOffsetsOutsideTheFramesWithoutOverflow(t *testing.T) {
	f, path := createFile(t, t.TempDir(), 1, 4096)
	for _, off := range []int{math.MinInt, -1, 0, segment.HeaderSize - 1, 4095, 4096, 4097, math.MaxInt - 1, math.MaxInt} {
		err := f.WriteAt([]byte("ab"), off)
		require.ErrorIs(t, err, fs.ErrInvalid, "offset %d", off)
		require.ErrorContains(t, err, "outside [", "offset %d", off)
	}
	require.NoError(t, f.WriteAt([]byte("ab"), 4094), "the last bytes")
	require.NoError(t, f.WriteAt(nil, 4096), "nothing, at the end")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, data, 4096)
	require.Equal(t, "ab", string(data[4094:]))
	require.Equal(t, make([]byte, 4094-segment.HeaderSize), data[segment.HeaderSize:4094])
}

// TestAppendFrameNeverAliasesAnotherFrame: whatever kind and place it is
// given, AppendFrame makes either a frame that decodes to that kind and
// place or one that Decode refuses as a bad type. A kind above 15 used to
// spill into the place bits: kind 17 decoded as a record that opens a
// group.
func TestAppendFrameNeverAliasesAnotherFrame(t *testing.T) {
	h := segment.EncodeHeader(1, 0)
	for k := range 256 {
		for p := range 256 {
			kind, place := segment.Kind(k), segment.Place(p)
			buf := segment.AppendFrame(h[:], 1, 0, 0, kind, place, []byte("b"))
			f, err := segment.Decode(buf, segment.HeaderSize, 1)
			if err != nil {
				require.ErrorIs(t, err, segment.ErrBadType, "kind %d, place %d", k, p)
				continue
			}
			require.Equal(t, kind, f.Kind, "kind %d, place %d", k, p)
			require.Equal(t, place, f.Place, "kind %d, place %d", k, p)
		}
	}
}

// TestOpenRefusesSequenceZero: no segment has sequence 0 (Create refuses
// it: zero-filled space would name it). Open and OpenUnread accepted it as
// an argument, and Open accepted a header that names it.
func TestOpenRefusesSequenceZero(t *testing.T) {
	dir := t.TempDir()
	_, path := createFile(t, dir, 1, 4096)
	for name, open := range map[string]func(vfs.FS, string, uint32) (*segment.File, error){"Open": segment.Open, "OpenUnread": segment.OpenUnread} {
		f, err := open(vfs.Default, path, 0)
		require.ErrorIs(t, err, fs.ErrInvalid, name)
		require.ErrorContains(t, err, "sequence 0", name)
		require.Nil(t, f, name)
	}

	zero := filepath.Join(dir, "zero")
	h := segment.EncodeHeader(0, 0)
	require.NoError(t, os.WriteFile(zero, append(h[:], make([]byte, 4096)...), 0o600))
	_, err := segment.Open(vfs.Default, zero, 1)
	require.ErrorIs(t, err, segment.ErrBadHeader, "a header naming segment 0")
	require.ErrorContains(t, err, "sequence 0")
}

// TestCreatePacedRefusesASizePast4GiBUpFront: a segment's offsets are
// 32-bit. Such a size used to pass the check, and the whole file was
// written (or allocated) before the mapping refused it, leaving it on disk.
func TestCreatePacedRefusesASizePast4GiBUpFront(t *testing.T) {
	ffs := vfs.NewFaultFS(vfs.Default)
	path := filepath.Join(t.TempDir(), "seg")
	for _, size := range []int64{1 << 32, 5 << 30, math.MaxInt64} {
		_, err := segment.CreatePaced(ffs, path, 1, 0, size, func(int64) error {
			return errors.New("pace called: the file was made")
		})
		require.ErrorIs(t, err, fs.ErrInvalid, "size %d", size)
		require.ErrorContains(t, err, fmt.Sprint(size))
		require.NoFileExists(t, path)
	}
	require.Zero(t, ffs.Count(vfs.OpOpen), "a file was opened")
}

// TestCreatePacedRemovesTheFileOnEveryFailure: whatever step fails once
// the file exists, the file is closed and removed. A failed mmap, the last
// step, used to leave it.
func TestCreatePacedRemovesTheFileOnEveryFailure(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpWriteBack, vfs.OpSync, vfs.OpMap} {
		t.Run(op.String(), func(t *testing.T) {
			ffs, open := countOpen()
			ffs.Inject(vfs.Rule{Op: op})
			path := filepath.Join(t.TempDir(), "seg")
			f, err := segment.CreatePaced(ffs, path, 1, 0, 1<<20, nil)
			require.ErrorIs(t, err, syscall.EIO)
			require.ErrorContains(t, err, path)
			require.Nil(t, f)
			require.NoFileExists(t, path)
			require.Zero(t, open(), "a file is left open")
		})
	}
}

// retired makes a sealed-size segment file at path to recycle, and returns
// its bytes.
func retired(t *testing.T, path string, seq uint32) []byte {
	t.Helper()
	f, err := segment.Create(vfs.Default, path, seq, 0, 4096)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return mustRead(t, path)
}

// TestRecycleRefusesBeforeChangingAnything: sequence 0, which no segment
// has, and a newPath that exists, which the rename would have replaced
// (a live segment, say), are refused with both files as they were.
func TestRecycleRefusesBeforeChangingAnything(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	old := retired(t, oldPath, 1)

	_, err := segment.Recycle(vfs.Default, oldPath, newPath, 0, 0)
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.ErrorContains(t, err, "sequence 0")
	require.Equal(t, old, mustRead(t, oldPath))
	require.NoFileExists(t, newPath)

	live := retired(t, newPath, 2)
	_, err = segment.Recycle(vfs.Default, oldPath, newPath, 3, 0)
	require.ErrorIs(t, err, fs.ErrExist)
	require.ErrorContains(t, err, newPath)
	require.Equal(t, old, mustRead(t, oldPath))
	require.Equal(t, live, mustRead(t, newPath))

	_, err = segment.Recycle(vfs.Default, oldPath, oldPath, 3, 0)
	require.ErrorIs(t, err, fs.ErrExist, "onto itself")
	require.Equal(t, old, mustRead(t, oldPath))
}

// TestRecycleRefusesWhenItCannotTellWhetherTheNewPathIsFree: a look at
// newPath that fails otherwise than with "does not exist" (a permission
// or I/O error) cannot rule out a file there, so Recycle renames nothing.
func TestRecycleRefusesWhenItCannotTellWhetherTheNewPathIsFree(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	old := retired(t, oldPath, 1)
	live := retired(t, newPath, 2)
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpOpen, NameContains: newPath, Times: 1, Err: syscall.EACCES})
	_, err := segment.Recycle(ffs, oldPath, newPath, 3, 0)
	require.ErrorIs(t, err, syscall.EACCES)
	require.Equal(t, int64(0), ffs.Count(vfs.OpRename), "renamed")
	require.Equal(t, old, mustRead(t, oldPath))
	require.Equal(t, live, mustRead(t, newPath))
}

// TestRecycleMovesTheFileBackWhenItFails: once renamed, a file that cannot
// become the new segment is renamed back, and the error says so. It used to
// stay at newPath, its old name gone, with an error that did not say where
// it was.
func TestRecycleMovesTheFileBackWhenItFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   vfs.Op // failed once, or 0
		size int    // of the retired file, when op is 0
	}{
		{name: "too small", size: segment.HeaderSize + segment.FrameHeaderSize - 1},
		{name: "header write", op: vfs.OpWrite},
		{name: "fdatasync", op: vfs.OpSync},
		{name: "mmap", op: vfs.OpMap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			oldPath, newPath := filepath.Join(dir, "old"), filepath.Join(dir, "new")
			if tc.op == 0 {
				require.NoError(t, os.WriteFile(oldPath, make([]byte, tc.size), 0o600))
			} else {
				retired(t, oldPath, 1)
			}
			ffs, open := countOpen()
			if tc.op != 0 {
				ffs.Inject(vfs.Rule{Op: tc.op})
			}
			f, err := segment.Recycle(ffs, oldPath, newPath, 2, 0)
			require.Error(t, err)
			require.Nil(t, f)
			require.ErrorContains(t, err, "back at "+oldPath)
			require.FileExists(t, oldPath)
			require.NoFileExists(t, newPath)
			require.Zero(t, open(), "a file is left open")
		})
	}
}

// TestRecycleSaysWhereTheFileIsWhenItCannotMoveItBack: if the rename back
// fails too, the file is at newPath, and the error says so.
func TestRecycleSaysWhereTheFileIsWhenItCannotMoveItBack(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	retired(t, oldPath, 1)
	ffs := vfs.NewFaultFS(vfs.Default)
	ffs.Inject(vfs.Rule{Op: vfs.OpSync})
	ffs.Inject(vfs.Rule{Op: vfs.OpRename, Nth: 2, Err: syscall.EROFS})
	_, err := segment.Recycle(ffs, oldPath, newPath, 2, 0)
	require.ErrorIs(t, err, syscall.EIO, "the failure")
	require.ErrorIs(t, err, syscall.EROFS, "the failed rename back")
	require.ErrorContains(t, err, "left at "+newPath)
	require.NoFileExists(t, oldPath)
	require.FileExists(t, newPath)
}

// TestANilFileSystemIsRefused: every function that takes a vfs.FS used to
// panic on a nil one at its first file operation. Each refuses it with
// fs.ErrInvalid, naming the argument and the path, before anything is
// made, moved or opened.
func TestANilFileSystemIsRefused(t *testing.T) {
	dir := t.TempDir()
	f, path := createFile(t, dir, 1, 4096)
	defer f.Close()
	newPath := filepath.Join(dir, "new")
	calls := map[string]func() (*segment.File, error){
		"Create":      func() (*segment.File, error) { return segment.Create(nil, newPath, 2, 0, 4096) },
		"CreatePaced": func() (*segment.File, error) { return segment.CreatePaced(nil, newPath, 2, 0, 4096, nil) },
		"Open":        func() (*segment.File, error) { return segment.Open(nil, path, 1) },
		"OpenUnread":  func() (*segment.File, error) { return segment.OpenUnread(nil, path, 1) },
		"Recycle":     func() (*segment.File, error) { return segment.Recycle(nil, path, newPath, 2, 0) },
		"Rename":      func() (*segment.File, error) { return nil, f.Rename(nil, newPath) },
	}
	for name, call := range calls {
		got, err := call()
		require.ErrorIs(t, err, fs.ErrInvalid, name)
		require.ErrorContains(t, err, "nil vfs.FS", name)
		require.Nil(t, got, name)
		require.NoFileExists(t, newPath, name)
		require.FileExists(t, path, name)
	}
	require.Equal(t, path, f.Path(), "a refused Rename keeps the name")
}
