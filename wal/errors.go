package wal

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/walbroker/walbroker/vfs"
)

// Errors returned by this package, each wrapped with context; check with
// errors.Is.
var (
	// ErrClosed is returned by every call on a closed Log, and, wrapped,
	// by every call on a nil *Log (see errNilLog).
	ErrClosed = errors.New("wal: log closed")
	// ErrPoisoned is returned, by every call from then on, once the log
	// was poisoned by one of these:
	//   - a failed write of the active segment (a record, or a seal);
	//   - a failed fdatasync of the active segment (a batch's, the
	//     background one, Close's, or the one before a seal);
	//   - a failed fsync of the directory, after a rotation made the next
	//     segment, or after RemoveBelow removed segments;
	//   - a rotation that failed without writing anything, when
	//     Options.StopOnRotationFailure is set (the ENOSPC of a segment
	//     that could not be made, say), ErrNoNextSegment included.
	// The failure is permanent for this Log: after a failed fdatasync the
	// kernel may have dropped the dirty pages, so retrying could report as
	// durable data that is not on the device (fail-stop). Close the Log and
	// Open it again; Open recovers everything acknowledged before the
	// failure. The error also wraps the cause, and its text says which of
	// these it was and what to do. A rotation that found no
	// segment number left (ErrNoNextSegment) is the exception: a reopened
	// log stops at the same rotation, and the error says so instead, with
	// neither "must be reopened" nor "close and reopen" (unless a failed
	// fdatasync after the stop lost data, which a reopen recovers: then it
	// says both).
	ErrPoisoned = errors.New("wal: log failed and must be reopened")
	// ErrLocked is returned by Open when another Log, in this process or
	// another, has the directory open.
	ErrLocked = vfs.ErrLocked
	// ErrCorrupt is returned by Open when bytes that were durable no longer
	// verify: mid-log corruption, a damaged header, a missing segment. The
	// error is a *CorruptionError naming the file and byte offset. Open with
	// Options.Salvage to skip the damage.
	ErrCorrupt = errors.New("wal: log is corrupt")
	// ErrUnfinishedSalvage is returned by Open without Options.Salvage, in
	// a *CorruptionError, for a log that an Open with Salvage began
	// repairing and did not finish (see unfinished.go): an Open with
	// Salvage finishes the repair and reports every span it made. Its
	// text is not in the error's: a caller that cannot follow that advice
	// (its Salvage refuses the log for another reason) can tell this
	// refusal from another and say what it can do instead.
	ErrUnfinishedSalvage = errors.New("wal: a salvage of the log did not finish")
	// ErrTooLarge is returned by Append when the records of one call cannot
	// fit in one segment.
	ErrTooLarge = errors.New("wal: records too large for one segment")
	// ErrNotFound is returned by Read and View for a position that names
	// no record of the log: removed, not yet written, or not a record
	// start; by Iterate for a starting position where no frame starts or
	// past the log's end; and by CopyTo for an end where no frame starts,
	// at a record of an Append after its first, or past the log's end.
	ErrNotFound = errors.New("wal: no record at position")
	// ErrBadOptions is returned by Open for an invalid Options field.
	ErrBadOptions = errors.New("wal: invalid options")
	// ErrNoNextSegment is returned, as the cause of a failed rotation, by
	// the calls that need a segment after the one numbered
	// math.MaxUint32, the highest a segment can have; and by Open when
	// that segment is sealed, so that the log would start the next. A
	// segment number never wraps: the log's order is theirs. The log keeps
	// its records; read them into a new log, numbered from 1, to go on
	// (CopyTo keeps the numbers).
	ErrNoNextSegment = fmt.Errorf("wal: no segment can follow segment %d, the highest number a segment can have", uint32(math.MaxUint32))
)

// nextSeq returns the number of the segment after seq, or an error
// wrapping ErrNoNextSegment that names seq's file.
func (l *Log) nextSeq(seq uint32) (uint32, error) {
	if seq == math.MaxUint32 {
		return 0, fmt.Errorf("%s: %w", l.segPath(seq), ErrNoNextSegment)
	}
	return seq + 1, nil
}

// stoppedError is the error of a log stopped by a failed rotation whose
// remedy is not a reopen (ErrNoNextSegment): it matches ErrPoisoned and
// its cause with errors.Is, but its text, unlike ErrPoisoned's, does not
// say to reopen.
type stoppedError struct {
	text  string
	cause error
}

func (e *stoppedError) Error() string { return e.text }

// Unwrap returns ErrPoisoned and the cause.
func (e *stoppedError) Unwrap() []error { return []error{ErrPoisoned, e.cause} }

// CorruptionError reports damage found in a segment file. It matches
// ErrCorrupt and its Cause with errors.Is.
type CorruptionError struct {
	File   string // the segment file
	Offset int    // byte offset of the first damaged byte
	Cause  error  // what failed there
}

func (e *CorruptionError) Error() string {
	cause := fmt.Sprint(e.Cause)
	// The segment package's errors begin with the offset they are about,
	// which is this one's more often than not: said once, not twice.
	cause = strings.TrimPrefix(cause, fmt.Sprintf("offset %d: ", e.Offset))
	return fmt.Sprintf("wal: log is corrupt: %s at offset %d: %s", e.File, e.Offset, cause)
}

// Unwrap returns ErrCorrupt and the cause.
func (e *CorruptionError) Unwrap() []error { return []error{ErrCorrupt, e.Cause} }

// errNilLog is the error of a method called on a nil *Log: what a caller
// holds that went on past Open's error. It wraps ErrClosed, since such a
// log takes no call, and the methods that return no error answer as for
// an empty log (Stats, Sealed, Dir, Recovery and End return zero values):
// a panic would end the process from a call given nothing to act on.
var errNilLog = fmt.Errorf("wal: a method of a nil *wal.Log was called (was Open's error ignored?): %w", ErrClosed)
