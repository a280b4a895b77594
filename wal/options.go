package wal

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/walbroker/walbroker/internal/logguard"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// SyncMode says when Append returns relative to fdatasync.
type SyncMode uint8

const (
	// SyncAlways, the default: Append returns after an fdatasync covers its
	// records. Concurrent appends share each fdatasync (group commit).
	SyncAlways SyncMode = iota
	// SyncInterval: Append returns once its records are written to the
	// file (a process crash keeps them); a background fdatasync every
	// SyncInterval bounds what a power loss can take.
	SyncInterval
	// SyncNever: Append returns once written; fdatasync happens only at
	// rotation, Sync and Close, and for a request that asks for one
	// (Enqueue(true, ...), Barrier(true)).
	SyncNever
)

func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// Defaults and bounds of Options.
const (
	DefaultSegmentBytes = 64 << 20
	MinSegmentBytes     = 1 << 10
	MaxSegmentBytes     = 1 << 30
	DefaultSyncInterval = 100 * time.Millisecond
)

// Options configures a Log. The zero value is a safe default.
type Options struct {
	// FS is the file system; nil means vfs.Default. A nil pointer in it
	// (a nil *vfs.FaultFS, say) is ErrBadOptions.
	FS vfs.FS
	// SegmentBytes is the size of each new segment file, allocated in full
	// before use. Zero means DefaultSegmentBytes; otherwise it must lie in
	// [MinSegmentBytes, MaxSegmentBytes]. It also bounds one Append: the
	// records of one call must fit in one segment.
	SegmentBytes int64
	// Sync is when Append returns; see SyncMode. A value that is no
	// SyncMode is ErrBadOptions.
	Sync SyncMode
	// SyncInterval is how long written but unsynced records wait for a
	// background fdatasync (records of AppendWritten, and every record under
	// SyncInterval). Zero means DefaultSyncInterval; negative is
	// ErrBadOptions.
	SyncInterval time.Duration
	// Salvage makes Open skip mid-log corruption instead of refusing it: the
	// damaged file is copied aside first, the damaged spans are replaced by
	// padding frames, and Recovery reports what was skipped. An Open with
	// Salvage that fails part way leaves the list of the spans it began to
	// repair (salvage/unfinished.json): Opens without Salvage refuse the log
	// with a *CorruptionError until one with it finishes, and that one
	// reports the listed spans too. A segment file that is gone (one
	// between two that are there, or one after the last up to where the
	// log was known durable) is replaced by an empty segment and reported
	// as a span of MaxSegmentBytes from its offset 0; more than 64 of them
	// (a stray name far past the last segment, say) are refused as
	// without Salvage.
	Salvage bool
	// KeepSalvageList keeps that list after an Open with Salvage succeeds,
	// until Log.SalvageDone removes it: for a caller that builds its own
	// report of the salvage after Open (which records were lost, and
	// whose), and must not lose it to a failure of its own before it has
	// handed that report on. Without it, Open removes the list last (a
	// removal that fails is logged: Open still returns the report, and the
	// list that stays makes the next Open without Salvage refuse the log
	// until one with it reports the spans again); a power loss in that
	// last step, before Open returns, can take the report with the list.
	KeepSalvageList bool
	// Logger receives what recovery found, and the failures and repairs of
	// the writer and the preparer. Nil discards. A record its handler
	// panics on is dropped, and the log goes on (its level and message,
	// with the type of the panic's value, go to the standard log package;
	// its attributes and the panic's value do not). The writer and preparer
	// log from goroutines of their own, so that a handler that waits for
	// something a caller of the log holds while it waits for the log (a
	// lock of its own) does not stall them. Close waits for those
	// goroutines, so the handler must not call Close: it would wait for
	// itself. A program that closes the log when a record says it failed
	// does so from a goroutine of its own, signalled by the handler.
	Logger *slog.Logger
	// Preamble, if set, is called by the writer goroutine at each rotation,
	// and the records it returns are written first in the new segment,
	// each a group of its own (damage to one, skipped by salvage, takes no
	// other with it), before any other record. A log whose older segments
	// are removed (RemoveBelow) can so carry forward what every reader of
	// the remaining log must see first. Preamble must not block or call the
	// Log. Records of earlier segments are not repeated by it: it is the
	// caller's summary.
	Preamble func() [][]byte
	// Sealed, if set, names segments a previous open of this log found
	// sealed, with the offset just past their seal frame (see Log.Sealed).
	// Open reads nothing of such a segment (but the last), not even its
	// header: it checks only that the file is large enough to hold the
	// end the hint gives, and the segment's frames are verified when they
	// are read (each frame's checksum, and, by Iterate, that they end in
	// the seal where the hint says), as Kafka trusts segments below its
	// recovery point. A hint the file's size rules out is ignored and the
	// segment scanned; one naming a wrong end makes reads near it fail,
	// never succeed wrongly: Iterate through the segment fails with a
	// *CorruptionError, and Read or View of a record the end cuts off
	// with ErrNotFound. Salvage ignores it: every segment is read.
	Sealed map[uint32]int
	// Verified, if set, is a position before which an earlier open of this
	// log verified every record (a checkpoint's position). When it is in
	// the last segment, Open scans that segment from there, for a torn or
	// damaged tail, instead of from its start; if the scan from there does
	// not end cleanly, or finds nothing after it (it may lie past the last
	// frame, or inside it), Open scans the whole segment.
	// It must also have been durable: valid frames that end before it are
	// damage to synced records, refused with a *CorruptionError as damage
	// before a clean Close's end is. Salvage scans every segment whole,
	// but still takes Verified (like a clean Close's end) as durable: the
	// bytes from the end of the valid frames up to it are reported as a
	// salvaged span (the file copied aside first, and rewritten at full
	// size when it was cut before it), never zeroed as a torn tail. A
	// position fewer than segment.Size(0) bytes past the end of the valid
	// frames, which no frame can end at, makes that span run on to where
	// the smallest frame would end, so that it can be padded over.
	Verified Position
	// Durable, if set, is a position the log was known durable to, by a
	// caller that does not vouch for the records before it (a checkpoint
	// it no longer trusts): Open scans as without it (from the start of
	// the last segment), and takes it as durable as it takes Verified:
	// valid frames that end before it are damage to synced records,
	// refused with a *CorruptionError, or, with Salvage, a salvaged span,
	// never a torn tail. A Verified or Durable in segment 0, which no
	// segment has, but for the zero Position (none), or at an offset past
	// MaxSegmentBytes, is ErrBadOptions.
	Durable Position
	// PreambleBytes is the room every segment keeps for the preamble: one
	// Append may encode at most a segment less this much, and a rotation
	// whose preamble encodes to more fails (ErrTooLarge) without rotating.
	// A Preamble with PreambleBytes 0 is ErrBadOptions.
	PreambleBytes int
	// StopOnRotationFailure makes a failed rotation stop the log, as a
	// failed write does, instead of failing only the calls that needed the
	// new segment. By default a rotation that fails without writing
	// anything (the next segment could not be made or renamed into place,
	// a full disk say, or the preamble does not fit) fails the calls of
	// its batch from the first that needed the new segment on, and the
	// log goes on: the next rotation tries again, so a log whose disk
	// filled works again once space is freed, without a reopen. With
	// StopOnRotationFailure the writer stops the log before it releases
	// that batch: every call of the batch, and every later call, fails
	// with ErrPoisoned wrapping the cause, and Err returns it before any
	// waiter of the batch is released. A caller that changes its own
	// state before its records are in the log (and so must stop at the
	// first call the log does not take, before anyone else goes on) needs
	// it: otherwise, between the release and the moment the failed call
	// stops the caller, other calls and a Barrier succeed as if nothing
	// failed. Nothing written is lost by the stop: under SyncInterval the
	// background fdatasync still covers what the log acknowledged as
	// written, and Close still fdatasyncs what the log wrote, writes the
	// clean mark and returns nil (unless that fdatasync fails); Open the
	// log again to go on.
	StopOnRotationFailure bool
}

func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	} else if vfs.IsNil(o.FS) {
		return o, fmt.Errorf("%w: FS is a nil %T (a nil FS means the real one; a nil pointer is none)", ErrBadOptions, o.FS)
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentBytes < MinSegmentBytes || o.SegmentBytes > MaxSegmentBytes {
		return o, fmt.Errorf("%w: SegmentBytes %d outside [%d, %d]", ErrBadOptions, o.SegmentBytes, MinSegmentBytes, MaxSegmentBytes)
	}
	if o.Sync > SyncNever {
		return o, fmt.Errorf("%w: unknown Sync mode %d", ErrBadOptions, o.Sync)
	}
	if o.SyncInterval < 0 {
		return o, fmt.Errorf("%w: negative SyncInterval %v", ErrBadOptions, o.SyncInterval)
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	// The handler is the caller's code, run on the writer's and the
	// preparer's goroutines too: one that panics loses its record.
	o.Logger = logguard.Wrap(o.Logger)
	if o.PreambleBytes < 0 || int64(o.PreambleBytes) > o.SegmentBytes/2 {
		return o, fmt.Errorf("%w: PreambleBytes %d outside [0, SegmentBytes/2 = %d]", ErrBadOptions, o.PreambleBytes, o.SegmentBytes/2)
	}
	// A preamble with no room kept for it fails every rotation that
	// writes one (ErrTooLarge), long after the Open that took it.
	if o.Preamble != nil && o.PreambleBytes == 0 {
		return o, fmt.Errorf("%w: Preamble is set and PreambleBytes is 0: no segment keeps room for its records", ErrBadOptions)
	}
	// No segment is numbered 0: a position there but the zero one (none)
	// is no place of any log. Taken for one the log was durable to, it
	// had Open refuse an empty directory as a log that lost segment 0,
	// and Salvage begin to make that segment, which it cannot.
	for _, p := range []struct {
		name string
		pos  Position
	}{{"Verified", o.Verified}, {"Durable", o.Durable}} {
		if p.pos != 0 && p.pos.Segment() == 0 {
			return o, fmt.Errorf("%w: %s %v is in segment 0, which no segment has (the zero Position means none)", ErrBadOptions, p.name, p.pos)
		}
		// Nor does any segment reach past MaxSegmentBytes: Salvage would
		// take the bytes up to such a position for synced records that
		// were cut off, and rewrite the segment at that size, up to 4 GiB.
		if p.pos.Offset() > MaxSegmentBytes {
			return o, fmt.Errorf("%w: %s %v is at offset %d, past the end of any segment (MaxSegmentBytes %d)", ErrBadOptions, p.name, p.pos, p.pos.Offset(), MaxSegmentBytes)
		}
	}
	return o, nil
}

// maxGroupBytes is the most one Append may encode: a whole new segment less
// its header, the room kept for the seal frame and that kept for the
// preamble.
func (o Options) maxGroupBytes() int {
	return int(o.SegmentBytes) - segment.HeaderSize - segment.Size(0) - o.PreambleBytes
}
