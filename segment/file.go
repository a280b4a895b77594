package segment

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"os"

	"github.com/edsrzf/mmap-go"
	"github.com/walbroker/walbroker/vfs"
)

// File is one open segment file: a read-only shared mapping for reads and
// positional writes for appends.
//
// File is not safe for concurrent use except in the way the log uses it:
// one goroutine calls WriteAt and Sync while others read Data within the
// bytes already written. The mapping stays valid until Close.
//
// A nil *File, what a caller holds that went on past the error of the call
// that made it, refuses every call with an error wrapping [io/fs.ErrClosed]
// that says so; Seq, Path, Size and Data answer as for a closed File.
type File struct {
	file vfs.File
	path string
	seq  uint32
	size int // fixed: segments never grow; readable after Close
	data mmap.MMap
	// salt is the header's, as Create, Recycle or Open saw it (a header
	// damaged since must not change what is appended); known is false
	// for OpenUnread, which reads nothing.
	salt  uint32
	known bool
}

// errSeqZero refuses sequence 0, which no segment has: zero-filled space
// would name it, and read as a torn frame of it.
var errSeqZero = fmt.Errorf("sequence 0 is reserved: %w", iofs.ErrInvalid)

// errNilFS refuses a nil file system, which every call would otherwise
// dereference (a panic) at its first file operation.
var errNilFS = fmt.Errorf("nil vfs.FS: %w", iofs.ErrInvalid)

// zeroChunk is the size of the writes that zero-fill a new segment, and of
// the ranges CreatePaced sends to the device one at a time.
const zeroChunk = 256 << 10

// Create makes a new segment file at path for segment seq, its frames
// salted with salt (see [NewSalt]), size bytes long:
// the header, then zeros written (not merely allocated) to the end, then an
// fdatasync. Writing the zeros is what lets every later fdatasync of the
// file commit data only: blocks that were merely fallocated are "unwritten
// extents" on ext4 and xfs, and converting them turns each fdatasync into a
// journal commit. The file is created 0600; the caller renames it into
// place and syncs the directory.
//
// Nothing may be at path: Create refuses, with an error wrapping
// [io/fs.ErrExist], rather than truncate what is there. A failed Create
// removes the file it made.
func Create(fs vfs.FS, path string, seq, salt uint32, size int64) (*File, error) {
	return CreatePaced(fs, path, seq, salt, size, nil)
}

// ErrAllocateRest is returned by CreatePaced's pace to ask it to allocate
// the rest of the file instead of writing zeros there: for a file someone is
// waiting for, when the time to write the zeros matters more than what the
// unwritten extents will cost the fdatasyncs that cover them.
var ErrAllocateRest = errors.New("segment: allocate the rest of the file")

// CreatePaced is Create with the zero-fill spread out: before each chunk of
// zeros it calls pace (when not nil) with the bytes written so far, and pace
// may block to hold the next chunk back. An error from pace abandons the
// file: CreatePaced removes it and returns the error; but ErrAllocateRest
// makes it allocate the rest of the file instead, where the file is a
// [vfs.Allocator] (and write the rest of the zeros at once, unpaced, where
// it is not, or where the allocation fails). Where the file is a
// [vfs.WriteBacker], each chunk is sent to the device, and waited for,
// before the next is written: at most one chunk of zeros is ever queued at
// the device ahead of another file's fdatasync, instead of the whole file
// at the final fdatasync. A write-back refused as unsupported
// ([errors.ErrUnsupported]: ENOSYS, EOPNOTSUPP) is not tried again: the
// file is made as where the file is no WriteBacker.
func CreatePaced(fs vfs.FS, path string, seq, salt uint32, size int64, pace func(written int64) error) (*File, error) {
	if err := vfs.CheckPath(path); err != nil {
		return nil, fmt.Errorf("segment: create: %w", err)
	}
	if fs == nil {
		return nil, fmt.Errorf("segment %s: create: %w", path, errNilFS)
	}
	if size < HeaderSize+FrameHeaderSize || size > maxFileSize {
		// Checked before the file is made: past maxFileSize it would be
		// written whole before mapped refused it.
		return nil, fmt.Errorf("segment %s: size %d outside [%d, %d]: %w", path, size, HeaderSize+FrameHeaderSize, maxFileSize, iofs.ErrInvalid)
	}
	if seq == 0 {
		return nil, fmt.Errorf("segment %s: create: %w", path, errSeqZero)
	}
	// O_EXCL: the file removed on failure is then always this one.
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("segment: create: %w", err)
	}
	fail := func(err error) (*File, error) {
		_ = f.Close()
		_ = fs.Remove(path)
		return nil, fmt.Errorf("segment %s: prepare: %w", path, err)
	}
	wb, _ := f.(vfs.WriteBacker)
	zeros := make([]byte, min(int64(zeroChunk), size))
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if pace != nil {
			err := pace(off)
			if errors.Is(err, ErrAllocateRest) {
				pace = nil
				if a, ok := f.(vfs.Allocator); ok && a.Allocate(off, size-off) == nil {
					break
				}
				// Not allocated: the zeros it is, unpaced.
			} else if err != nil {
				return fail(err)
			}
		}
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return fail(err)
		}
		if wb != nil {
			if err := wb.WriteBack(off, n); errors.Is(err, errors.ErrUnsupported) {
				// Refused before doing anything (ENOSYS from a kernel or
				// sandbox without it, EOPNOTSUPP), and so for every
				// chunk: the sync below writes the zeros back, as on a
				// file system without it.
				wb = nil
			} else if err != nil {
				// Anything else may be the device failing, which
				// sync_file_range may report in place of the sync
				// below (it consumes the file's writeback error).
				return fail(err)
			}
		}
	}
	h := EncodeHeader(seq, salt)
	if _, err := f.WriteAt(h[:], 0); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	s, err := mapped(f, path, seq, size)
	if err != nil {
		return fail(err)
	}
	s.salt, s.known = salt, true
	return s, nil
}

// Recycle turns the retired segment file at oldPath into segment seq at
// newPath, its frames salted with salt: it renames it, rewrites the header
// and syncs. The old frames stay in the file as stale bytes; they name
// another sequence, and their checksums were seeded with another salt, so
// no scan of the new segment ever returns them, nor any frame a record's
// body carried (which may name any sequence, but cannot know a salt drawn
// after it was written: pass a fresh [NewSalt]). The caller syncs the
// directory.
//
// Recycle refuses, before changing anything, a name holding a NUL byte
// (an error wrapping [io/fs.ErrInvalid], as Create and Open refuse one),
// sequence 0 and a newPath where something already is (an error wrapping
// [io/fs.ErrExist]): the rename would replace it. If a step after the rename fails (the file is
// too small or too large for a segment, or the header's write, the
// fdatasync or the mapping fails), it renames the file back to oldPath, so
// that the names are as they were (the header may already name seq: what
// a retired file holds is never read); if that rename fails too, its error
// says that the file is left at newPath.
func Recycle(fs vfs.FS, oldPath, newPath string, seq, salt uint32) (*File, error) {
	for _, p := range []string{oldPath, newPath} {
		if err := vfs.CheckPath(p); err != nil {
			return nil, fmt.Errorf("segment: recycle: %w", err)
		}
	}
	if fs == nil {
		return nil, fmt.Errorf("segment %s: recycle %s: %w", newPath, oldPath, errNilFS)
	}
	if seq == 0 {
		return nil, fmt.Errorf("segment %s: recycle: %w", newPath, errSeqZero)
	}
	if g, err := fs.OpenFile(newPath, os.O_RDONLY, 0); err == nil {
		_ = g.Close()
		return nil, fmt.Errorf("segment %s: recycle %s: %w", newPath, oldPath, iofs.ErrExist)
	} else if !errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("segment: recycle: %w", err)
	}
	if err := fs.Rename(oldPath, newPath); err != nil {
		return nil, fmt.Errorf("segment: recycle: %w", err)
	}
	f, err := fs.OpenFile(newPath, os.O_RDWR, 0o600)
	if err == nil {
		var s *File
		if s, err = recycled(f, newPath, seq, salt); err == nil {
			return s, nil
		}
		_ = f.Close()
	}
	err = fmt.Errorf("segment %s: recycle: %w", newPath, err)
	if rerr := fs.Rename(newPath, oldPath); rerr != nil {
		return nil, fmt.Errorf("%w; the file is left at %s: %w", err, newPath, rerr)
	}
	return nil, fmt.Errorf("%w (the file is back at %s)", err, oldPath)
}

// recycled rewrites the header of f, the file at path, for segment seq and
// salt, syncs it and maps it. It does not close f.
func recycled(f vfs.File, path string, seq, salt uint32) (*File, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size < HeaderSize+FrameHeaderSize || size > maxFileSize {
		return nil, fmt.Errorf("size %d outside [%d, %d]", size, HeaderSize+FrameHeaderSize, maxFileSize)
	}
	h := EncodeHeader(seq, salt)
	if _, err := f.WriteAt(h[:], 0); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	s, err := mapped(f, path, seq, size)
	if err != nil {
		return nil, err
	}
	s.salt, s.known = salt, true
	return s, nil
}

// Open opens the existing segment file at path and checks that its header
// verifies and names segment seq. Sequence 0 is refused: no segment has it.
func Open(fs vfs.FS, path string, seq uint32) (*File, error) {
	return open(fs, path, seq, true)
}

// OpenUnread opens the existing segment file at path without reading any
// of it: for a segment a previous open verified, whose frames are checked
// (checksum and segment number) as they are read. Sequence 0 is refused,
// as by Open.
func OpenUnread(fs vfs.FS, path string, seq uint32) (*File, error) {
	return open(fs, path, seq, false)
}

func open(fs vfs.FS, path string, seq uint32, check bool) (*File, error) {
	if err := vfs.CheckPath(path); err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	if fs == nil {
		return nil, fmt.Errorf("segment %s: open: %w", path, errNilFS)
	}
	if seq == 0 {
		return nil, fmt.Errorf("segment %s: open: %w", path, errSeqZero)
	}
	f, err := fs.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("segment %s: %w", path, err)
	}
	if size < HeaderSize {
		_ = f.Close()
		return nil, fmt.Errorf("segment %s: offset 0: %d bytes: %w", path, size, ErrBadHeader)
	}
	s, err := mapped(f, path, seq, size)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("segment %s: %w", path, err)
	}
	if !check {
		return s, nil
	}
	got, err := DecodeHeader(s.data)
	if err == nil && got != seq {
		err = fmt.Errorf("header names segment %d: %w", got, ErrBadHeader)
	}
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("segment %s: offset 0: %w", path, err)
	}
	s.salt, s.known = SaltOf(s.data), true
	return s, nil
}

// maxFileSize bounds a segment file: offsets in it are 32-bit (a frame's
// synced field), and its mapping's length is an int, which holds less on
// a 32-bit build.
const maxFileSize int64 = min(1<<32-1, math.MaxInt)

// mapped maps f, the file at path, which is size bytes long, as segment
// seq. It neither closes f nor names the file in its error: the caller
// does both.
func mapped(f vfs.File, path string, seq uint32, size int64) (*File, error) {
	if size > maxFileSize {
		return nil, fmt.Errorf("size %d exceeds the maximum %d", size, maxFileSize)
	}
	data, err := f.Map(int(size))
	if err != nil {
		return nil, err // names the call and the file
	}
	return &File{file: f, path: path, seq: seq, size: int(size), data: data}, nil
}

// Seq returns the segment's sequence number.
func (s *File) Seq() uint32 {
	if s == nil {
		return 0
	}
	return s.seq
}

// Salt returns the salt of the file's header, which the checksums of its
// frames are seeded with ([AppendFrame]); 0 for a version 1 file. It is
// the salt Create or Recycle wrote, or Open read when it checked the
// header: a header damaged since does not change it, so the frames a
// writer salts with it keep verifying once a salvage has recovered the
// salt. For a File from OpenUnread, which reads nothing at open, it reads
// the header from the mapping (0 once closed).
func (s *File) Salt() uint32 {
	switch {
	case s == nil:
		return 0
	case s.known:
		return s.salt
	}
	return SaltOf(s.data)
}

// Path returns the file's path.
func (s *File) Path() string {
	if s == nil {
		return ""
	}
	return s.path
}

// Size returns the file's size, which is its capacity: segments never grow.
// It may be called concurrently with anything, Close included.
func (s *File) Size() int {
	if s == nil {
		return 0
	}
	return s.size
}

// Data returns the read-only mapping of the whole file. Writing to it
// faults. It is valid until Close.
func (s *File) Data() []byte {
	if s == nil {
		return nil
	}
	return s.data
}

// WriteAt writes b at off. It refuses writes past the file's size, so a
// segment never grows (growth would make fdatasync commit metadata).
func (s *File) WriteAt(b []byte, off int) error {
	if s == nil {
		return errNilFile
	}
	if s.data == nil {
		return s.closed("write")
	}
	// len(b) > len-off, not off+len(b) > len, which overflows for offsets
	// near MaxInt.
	if off < HeaderSize || off > len(s.data) || len(b) > len(s.data)-off {
		return fmt.Errorf("segment %s: write of %d bytes at offset %d: outside [%d,%d): %w",
			s.path, len(b), off, HeaderSize, len(s.data), iofs.ErrInvalid)
	}
	n, err := s.file.WriteAt(b, int64(off))
	if err == nil && n < len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	if err != nil {
		_, cause := unpath(err)
		return fmt.Errorf("segment %s: write at offset %d: %w", s.path, off, cause)
	}
	return nil
}

// Sync is fdatasync. A failure leaves the file's durable content unknown:
// never retry it.
func (s *File) Sync() error {
	if s == nil {
		return errNilFile
	}
	if s.data == nil {
		return s.closed("fdatasync")
	}
	if err := s.file.Sync(); err != nil {
		op, cause := unpath(err)
		if op == "" {
			op = "sync"
		}
		return fmt.Errorf("segment %s: %s: %w", s.path, op, cause)
	}
	return nil
}

// unpath returns the operation and cause of an *os.PathError, which names
// the file as it was opened: a prepared segment has been renamed since
// (from its ".tmp" name), and its errors name it by the path it has now.
// Any other error is its own cause, with no operation.
func unpath(err error) (op string, cause error) {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Op, pe.Err
	}
	return "", err
}

// Scan scans the file; see the package-level Scan.
func (s *File) Scan(salvage bool, fn func(Frame) error) (Report, error) {
	if s == nil {
		return Report{}, errNilFile
	}
	if s.data == nil {
		return Report{}, s.closed("scan")
	}
	return Scan(s.data, s.seq, salvage, fn)
}

// Close unmaps and closes the file. WriteAt, Sync, Scan and Close of a
// closed File, or of the zero File, which was never open, fail with an
// error wrapping [io/fs.ErrClosed].
func (s *File) Close() error {
	if s == nil {
		return errNilFile
	}
	if s.data == nil {
		return s.closed("close")
	}
	err := s.data.Unmap()
	s.data = nil
	if err != nil {
		err = fmt.Errorf("segment %s: munmap: %w", s.path, err)
	}
	// Named by its path now, as WriteAt and Sync name it (see unpath).
	if cerr := s.file.Close(); cerr != nil {
		op, cause := unpath(cerr)
		if op == "" {
			op = "close"
		}
		err = errors.Join(err, fmt.Errorf("segment %s: %s: %w", s.path, op, cause))
	}
	return err
}

// closed is the error of op on a closed File. Data is nil exactly when the
// File is closed: a mapping is never empty (a file holds at least its
// header).
func (s *File) closed(op string) error {
	return fmt.Errorf("segment %s: %s: %w", s.path, op, iofs.ErrClosed)
}

// Rename renames the file to newPath. The caller syncs the directory.
func (s *File) Rename(fs vfs.FS, newPath string) error {
	if s == nil {
		return errNilFile
	}
	if err := vfs.CheckPath(newPath); err != nil {
		return fmt.Errorf("segment %s: rename: %w", s.path, err)
	}
	if fs == nil {
		return fmt.Errorf("segment %s: rename to %s: %w", s.path, newPath, errNilFS)
	}
	if err := fs.Rename(s.path, newPath); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	s.path = newPath
	return nil
}
