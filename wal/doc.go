// Package wal is walbroker's write-ahead log: an ordered sequence of segment
// files (package segment) in one directory, appended to by one writer
// goroutine with group commit, read through memory maps.
//
// # Directory layout
//
//	LOCK                      flock(2)ed while a Log has the directory open
//	CLEAN                     where the log ended at a clean Close (see clean.go;
//	                          removed by Open before anything is appended)
//	0000000001.seg            segment 1: header + frames (see package segment)
//	0000000002.seg            ...; sequences are contiguous, the last is active
//	0000000003.seg.tmp        the next segment, being prepared (removed by Open;
//	                          Close keeps a ready, unused, full-size one as a
//	                          spare if fewer than two are kept, and removes it
//	                          otherwise or while it is still being filled)
//	spare-0000000001.tmp      a retired segment kept for reuse (kept by Open when full-size)
//	salvage/                  copies of damaged files, made by Options.Salvage
//	salvage/unfinished.json   the spans a salvage in progress repairs (see
//	                          unfinished.go; removed by the Open that finishes,
//	                          or by Log.SalvageDone with Options.KeepSalvageList)
//
// Every segment file has its full size from the moment it is renamed into
// place: it was written full of zeros (or is a retired segment reused) and
// fdatasynced under its temporary name. Appends therefore overwrite blocks
// that are already allocated and written, and an fdatasync commits data
// alone, never the file's size or extents — on ext4 that is twice the
// fdatasync rate of appending to a growing file. When the writer catches up
// with a file still being zero-filled (a log writing faster than the
// machine writes zeros), the rest of it is allocated instead (fallocate),
// so that the writer waits milliseconds, not the rest of the zeros: its
// fdatasyncs into that part also commit the extents' conversion.
//
// # Positions
//
// A [Position] is the segment sequence (high 32 bits) and the byte offset
// of the record's frame (low 32 bits). Positions compare in log order.
//
// # Group commit
//
// Append queues its records and waits. The writer goroutine takes every
// request queued while it was busy, encodes them into one buffer, writes it
// with one pwrite (which also puts zeros where the next frame's header
// goes, so that the batch's fdatasync makes them durable: see Log.flush)
// and, if any request asked for durability, runs one
// fdatasync; then it releases every request of the batch with the batch's
// result. A request that asked only for the write is released right after
// the write. A new batch forms while the previous fdatasync is in flight.
// After an fdatasync the writer waits, before taking the next batch, for
// the callers it released to come back (as many new requests as it
// released, as long as that fdatasync took at most), so that callers
// appending in a loop, when they come back within that time, share one
// fdatasync rather than alternating between two; after a wait in vain it
// does not wait for a few fdatasyncs.
//
// Each frame records how many bytes of its segment were durable when it was
// written. Recovery uses it to tell damage to bytes that were never synced
// (a torn tail: discard it) from damage to bytes a completed fdatasync had
// covered (corruption: refuse).
//
// # Failure is final
//
// A failed write or fdatasync poisons the Log: the batch and every later
// call fail with [ErrPoisoned]. An fdatasync is never retried: after a
// failure the kernel may have dropped the dirty pages and marked them
// clean, so a retry that succeeds would report durable data that is not on
// the device. Close and Open again; Open recovers everything that was
// acknowledged. The poison is set before the writer releases the batch
// that met the failure: once any caller of the batch that waits for its
// fdatasync is released, every call, Barrier and [Log.Err] sees it. A
// caller that waits only for the write (Enqueue with durable false, and
// every call under SyncInterval and SyncNever) is released once the batch
// is written, before its fdatasync: it may go on before a failure of that
// fdatasync is known.
//
// A rotation that fails having written nothing (the next segment could
// not be made or renamed into place, a full disk say, or the preamble
// does not fit) is not a failure of the log by default: the calls of its
// batch from the first that needed the new segment on fail with the
// cause, the calls before it succeed, and the log goes on (the next
// rotation tries again, so a log whose disk filled works again once space
// is freed). With [Options.StopOnRotationFailure] it stops the log as a
// failed write does, before the batch is released (the whole batch and
// every later call fail with ErrPoisoned wrapping the cause), but loses
// nothing: Close fdatasyncs what was written and returns nil. A caller
// that changes state of its own before the log takes its records sets
// it, so that nobody goes on between the release and that caller's
// reaction to the failure (the broker does).
//
// # Rotation
//
// When a call does not fit in the rest of the active segment (the calls
// of a batch before it stay there), the writer renames the
// prepared next segment into place and fsyncs the directory, fdatasyncs
// the active segment if it holds records no fdatasync covered yet, then
// writes a seal frame to it, claiming every byte before it durable, and
// fdatasyncs it, and only then writes to the new one. So every segment but
// the last is sealed and durable, damage before a seal is corruption,
// never a torn tail, a segment without its seal followed by another is
// corruption, and an empty segment after an unsealed one is a rotation a
// crash interrupted (Open removes it, once its bytes past the header show
// that nothing was written to it: zeros, or a reused file's former
// frames). One Append never spans two segments.
//
// # Recovery
//
// Open scans every segment that nothing vouches for: not those that
// Options.Sealed names (their frames are verified when read, and a walk
// through one checks that it ends in its seal where the hint says), and the
// last one only from Options.Verified, or up to where a clean close said
// the log ended when the scan ends exactly there. A torn tail of the last
// segment is zeroed and the log continues before it; no append that waited
// for an fdatasync had them (under SyncInterval and SyncNever, and for
// Enqueue(false, ...), an append returns once written, and a power loss may
// take what it wrote). Any other damage is refused with a [*CorruptionError]
// naming the file and offset, unless Options.Salvage is set: then the
// damaged file is copied to salvage/, each damaged span is overwritten with
// a padding frame (a segment whose seal was lost is sealed after its last
// intact record), a segment file that is gone (between two that are there,
// or after the last up to where the log was known durable) is replaced by
// an empty segment, and [Log.Recovery] lists what was skipped. The spans are
// listed durably in salvage/unfinished.json before the first is repaired,
// and the list removed once the Open succeeds: a salvage that fails part
// way leaves spans that may read as repaired, and until an Open with
// Salvage finishes it (and reports them, with any it finds itself), an
// Open without refuses the log.
//
// # Concurrency
//
// Every method of Log is safe for concurrent use. Lock order: Log.removeMu,
// then Log.salvageMu or Log.listMu, then a segment's locks; Log.mu guards
// the request queue, the closed flag and the poison, and is never held
// across I/O or another lock. A segment's readers never wait for one
// another nor for its close: a read that finds it closing is refused, and
// the close waits for those already reading, so a callback of Iterate or
// View may read again while another goroutine closes the log.
package wal
