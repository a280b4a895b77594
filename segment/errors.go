package segment

import (
	"errors"
	"fmt"
	iofs "io/fs"
)

// Errors returned by this package. Each is wrapped with the file name and
// byte offset where that makes sense; check with errors.Is.
//
// Beside them, an argument a function cannot act on (an offset outside the
// data, a nil function, a nil vfs.FS) is refused, before anything is done,
// with an error that says which argument and wraps [io/fs.ErrInvalid].
var (
	// ErrBadHeader is returned by Open and DecodeHeader when the file
	// header's magic or checksum does not verify, it names version 0 or
	// sequence 0, which no segment has; and by Open when it names another
	// segment than the one asked for.
	ErrBadHeader = errors.New("segment: bad file header")
	// ErrVersion is returned by Open and DecodeHeader when the header
	// verifies but names a format version above [Version], or sets a
	// flag or a reserved byte (see the package documentation): a later
	// build wrote the file. It is not damage, and nothing may repair it (a
	// rewritten header would hand frames of another layout to this
	// build): the file is for a build that reads its version. It wraps
	// [errors.ErrUnsupported], and not [ErrBadHeader].
	ErrVersion = fmt.Errorf("segment: format version this build does not read: %w", errors.ErrUnsupported)
	// ErrChecksum is returned when a frame's CRC-32C does not match.
	ErrChecksum = errors.New("segment: frame checksum mismatch")
	// ErrShortFrame is returned when a frame runs past the end of the data.
	ErrShortFrame = errors.New("segment: frame runs past end of file")
	// ErrZeroFrame is returned when the bytes at the offset are zeros, as in
	// preallocated space: there is no frame there.
	ErrZeroFrame = errors.New("segment: no frame (zero-filled space)")
	// ErrForeignFrame is returned when the frame header names another
	// segment: stale bytes of a recycled file, or garbage.
	ErrForeignFrame = errors.New("segment: frame belongs to another segment")
	// ErrBadType is returned when a checksummed frame has an unknown type.
	ErrBadType = errors.New("segment: unknown frame type")
	// ErrTooLarge is returned when a body does not fit in a frame.
	ErrTooLarge = errors.New("segment: body too large")
	// ErrTooManyCandidates is wrapped, beside what failed there, in the
	// Cause of a scan's Report whose frame at DamageAt failed and whose
	// bytes after it hold more would-be frames of the segment (headers
	// that name it, with lengths that fit) that fail their checksums than
	// a scan verifies: the end was then classified by the headers of
	// those left, erring towards corruption, or the damage was reported
	// rather than stepped over. Alone, it is the Cause of a salvage that
	// stepped over damage and then had too little of that work left to
	// verify the frame at DamageAt. See the package documentation.
	ErrTooManyCandidates = errors.New("segment: too many would-be frames after the damage to verify")
)

// errNilFile is the error of a method called on a nil *File: what a caller
// holds that went on past the error of Create, CreatePaced, Open,
// OpenUnread or Recycle. It wraps [io/fs.ErrClosed], the error of a closed
// File, since such a file takes no call, and the methods that return no
// error answer as for a closed File (Seq, Path, Size and Data return zero
// values): a panic would end the process from a call given nothing to act
// on.
var errNilFile = fmt.Errorf("segment: a method of a nil *segment.File was called (was the error of the call that made it ignored?): %w", iofs.ErrClosed)
