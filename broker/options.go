package broker

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// SyncMode says which calls wait for the device. Every mode is group
// committed: concurrent calls share each fdatasync.
type SyncMode uint8

const (
	// SyncAll, the default: every call that changes state (Publish*, the
	// lease a Receive takes, Ack, Nack, Reject, Extend, replay, delete)
	// returns only after an fdatasync covers its event. "It returned, so it
	// is on the device."
	SyncAll SyncMode = iota
	// SyncPublish: publishes as under SyncAll; every other event is written
	// to the log file before its call returns (a process crash keeps it)
	// and reaches the device with the next commit, or within SyncInterval
	// (a power loss may lose the last few: at-least-once permits a
	// redelivery, never a lost publish). A lease so lost was never taken,
	// as far as the store knows: the message is delivered again with the
	// same [DeliveryValue.Deliveries], and MaxDeliveries counts only the
	// deliveries the device kept.
	SyncPublish
	// SyncNone: no publish, lease or settlement waits for the device,
	// but for the cases below; a background commit every SyncInterval
	// bounds what a power loss can take (delivery counts with it, as under
	// SyncPublish); a process crash loses nothing that a call returned
	// for. The IDs of messages a power loss took are never handed out
	// again: they are reserved ahead by durable marks, so a publish waits
	// for the device when its IDs go past the reservation already on it,
	// which a steady stream of single publishes meets only when a
	// reservation's background commit falls 2,048 publishes behind (a
	// batch of thousands right after Open meets it at once). Queue
	// declarations and policy changes wait for the device in every mode,
	// and so does a call that arrives while a checkpoint makes the log
	// durable under every queue's lock.
	SyncNone
)

// String returns the mode's name as walbench's -sync flag spells it:
// "all", "publish" or "none" (another value is "SyncMode(n)").
func (m SyncMode) String() string {
	switch m {
	case SyncAll:
		return "all"
	case SyncPublish:
		return "publish"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// Options configures a Store. The zero value is a safe default.
type Options struct {
	// Now is the broker's clock: enqueue instants, lease deadlines, retry
	// delays and dedup windows are measured on it. Nil means time.Now.
	// Instants are recorded in Unix nanoseconds: a reading outside what an
	// int64 of them holds, 1677-09-21T00:12:43.145224192Z to
	// 2262-04-11T23:47:16.854775807Z (a zero time.Time among them), is
	// refused, by Open and by every call that reads it, with
	// QueueMisconfigured.
	//
	// Now is called with a queue's lock held (so that enqueue instants
	// grow in the order publishes enter the queue): it must return
	// promptly and must not call the store or its queues. A Now that
	// panics fails the call that read it in the same way, with an error
	// naming Options.Now and the panic value; the call changes nothing and
	// the queue stays usable. Queue.Stats and Queue.Wake, which return no
	// error, then answer as for a reading no store can record: Stats
	// counts without applying the deadlines that came due, and Wake says
	// to look now, so that the Receive that follows reports the failure.
	Now func() time.Time
	// Sync is which calls wait for the device; see SyncMode. A value that
	// is none of the three is refused (QueueMisconfigured).
	Sync SyncMode
	// SyncInterval bounds how long a written event waits for an fdatasync
	// when nothing else asks for one. Zero means 100 ms; negative is
	// refused (QueueMisconfigured).
	SyncInterval time.Duration
	// SegmentBytes is the size of each log segment file: zero means 64 MiB,
	// otherwise at least 16 KiB and at most 1 GiB. One publish (a whole batch) must fit in one
	// segment, and each segment keeps 1/16 of itself (at least 1 KiB, at
	// most 256 KiB) for the queue declarations it starts with, which
	// bounds how many queues a store declares: about 1,850 with names of
	// 64 characters (more with shorter ones) for segments of 4 MiB or
	// more, proportionally fewer below. A store may be reopened with
	// another size, which new segments take; a smaller one is refused
	// (QueueMisconfigured) while a live message is too large to be copied
	// into a segment of that size (the error names it), or while the
	// store's queue declarations do not fit the room such a segment keeps
	// for them.
	//
	// A queue's MaxMessageBytes (1 MiB unless its policy says otherwise)
	// must fit in a segment too: with small segments, lower it in the
	// policy (Store.Queue refuses one that does not fit, naming both
	// sizes). The directory holds two segments from the start, the active
	// one and the next, made ready ahead of need (128 MiB by default): a
	// store for a few small messages can take a much smaller size.
	SegmentBytes int64
	// Logger receives what the store must not write to disk (the text of
	// unclassified handler failures, keyed by message ID, at WARN) and what
	// an operator must hear of with no call to return it to: what Open
	// found and repaired (a torn tail cut, an index rebuilt because its
	// checkpoint could not be used: WARN; each span a salvage skipped:
	// ERROR), a directory
	// others can write (WARN, at Open), the failure that stopped the store
	// for good (ERROR, once, saying what to do), a background checkpoint
	// that failed and stopped maintenance (ERROR, once; one at Open or
	// Close: WARN), reclaiming that fails (WARN, then a reminder every ten
	// minutes at most, and INFO when it works again), and the log's own
	// failures and repairs (see wal.Options.Logger). Nil discards. A
	// failure that Consume settles is logged by Consume
	// (ConsumeOptions.Logger), not again here, unless that Consume has no
	// Logger: then here.
	//
	// Its handler is called with none of the store's locks held, from the
	// calling goroutine or from the store's own (a goroutine the log starts
	// for each record of its writer and preparer, so that neither waits on
	// the handler; the maintenance goroutine; the one that reports a
	// failure that stopped the store): it may read Store.Stats,
	// Store.Queues and Queue.Stats, and should return promptly (Close waits
	// for the logging of its goroutines, but for the failure of a call
	// still under way as Close ends, which is logged after). It must not
	// call Close: Close waits for the goroutine the handler runs on, and
	// would never return. A program that closes the store when a record
	// says it failed ("close and reopen it") does so from a goroutine of
	// its own, signalled by the handler. A record its handler panics on is
	// dropped (its level and message, with the type of the panic's value,
	// go to the standard log package; its attributes, which may hold a
	// cause's text, and the panic's value, which may quote them, do not), and the store goes on as if it had been logged: the call that logged it
	// returns what it would have returned, and no goroutine of the store
	// ends. Left to unwind, the panic would end the process from a
	// goroutine of the store, or fail a call whose change was already
	// made.
	Logger *slog.Logger
	// Salvage opens a log with mid-log corruption by skipping the damaged
	// spans (the damaged files are copied aside first) and reporting what
	// was skipped, instead of refusing with Corrupt. A segment file that
	// is gone (one between two that are there, or the last ones, up to
	// where the log was known durable) is replaced by an empty segment
	// and reported as a skipped span, with the messages the checkpoint
	// placed in it among the lost.
	//
	// A skipped span loses every record in it, not only publishes: what
	// settled a message there (its ack, a nack, a lease, a dead letter's
	// deletion or replay) is gone too, and the message is as the records
	// left say. An acknowledged message whose ack was skipped is then live
	// again and delivered again, once the lease the log kept lapses (at
	// least once allows that duplicate), and a deleted dead letter whose
	// deletion was skipped is back among the dead letters. LostMessages
	// names neither: nothing of them was lost.
	//
	// It repairs the log in place: each damaged span is overwritten, so
	// that later Opens, with Salvage or without, read past it. Each
	// damaged file is first copied whole into the directory's salvage
	// subdirectory, which the store never removes, counts in StoreStats
	// or copies in a Backup. Store.Recovery (and the Logger) names
	// the copies and the IDs of the messages known lost, by queue (see
	// RecoveryReport.LostMessages and LostByQueue). Set it for the Open
	// that follows a Corrupt, not for good: an Open with it refuses no
	// damage, and says what it skipped only there. An Open with it that
	// fails (an I/O error while it repairs) may have repaired some spans
	// already; it leaves the list of those spans, and of the messages
	// they held, in the salvage subdirectory, so that Opens without
	// Salvage refuse the store with Corrupt until one with it finishes
	// the repair and reports them with the rest. The Open that succeeds
	// keeps those lists until it has returned its report: the store
	// removes them in its first maintenance round, or at Close, so that a
	// crash before the report reached its caller leaves them too.
	Salvage bool
	// FS is the file system; nil means the real one. Tests inject faults
	// through it. A nil pointer in it (a nil *vfs.FaultFS, say) is not
	// the real one: it is refused (QueueMisconfigured).
	FS vfs.FS

	manualMaintenance bool // tests: no background checkpoints or reclamation
	replaySpill       int  // tests: table entries a replay holds before it writes them out; 0 means replaySpill
	// answerWaited, for tests, runs in a duplicate or shed publish once
	// its waits for the log are over, before it is counted.
	answerWaited func()
}

func (o Options) withDefaults() (Options, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sync > SyncNone {
		return o, fmt.Errorf("broker: unknown Options.Sync %d: %w", o.Sync, QueueMisconfigured)
	}
	if o.SyncInterval < 0 {
		return o, fmt.Errorf("broker: negative Options.SyncInterval %v: %w", o.SyncInterval, QueueMisconfigured)
	}
	if o.FS != nil && vfs.IsNil(o.FS) {
		return o, fmt.Errorf("broker: Options.FS is a nil %T (a nil FS means the real one; a nil pointer is none): %w", o.FS, QueueMisconfigured)
	}
	o.Logger = guardLogger(o.Logger)
	if o.SegmentBytes != 0 && (o.SegmentBytes < MinSegmentBytes || o.SegmentBytes > wal.MaxSegmentBytes) {
		return o, fmt.Errorf("broker: Options.SegmentBytes %d outside [%d, %d]: %w", o.SegmentBytes, MinSegmentBytes, wal.MaxSegmentBytes, QueueMisconfigured)
	}
	return o, nil
}

// MinSegmentBytes is the smallest Options.SegmentBytes a store accepts.
const MinSegmentBytes = 16 << 10

func (o Options) segmentBytes() int64 {
	if o.SegmentBytes == 0 {
		return wal.DefaultSegmentBytes
	}
	return o.SegmentBytes
}

// maxPreambleBytes caps preambleBytes. Raising it would lower
// MaxMessageBytes and the largest batch of every store of more than 4 MiB
// segments, and refuse, at its next Open, a queue declared up to the old
// bound.
const maxPreambleBytes = 256 << 10

// preambleBytes is the room each segment keeps for its preamble: a
// sixteenth of the segment, at least 1 KiB and at most maxPreambleBytes.
func (o Options) preambleBytes() int {
	return int(min(max(o.segmentBytes()/16, 1<<10), maxPreambleBytes))
}

func (o Options) fs() vfs.FS {
	if o.FS == nil {
		return vfs.Default
	}
	return o.FS
}

func (o Options) walOptions() wal.Options {
	w := wal.Options{
		FS:           o.FS,
		SegmentBytes: o.SegmentBytes,
		SyncInterval: o.SyncInterval,
		Salvage:      o.Salvage,
		// The report of a salvage is built after the log opens (which
		// messages were lost): the log's list of the spans it repaired
		// stays until Open has returned the report (the first
		// maintenance round or Close then removes the list: see
		// Store.finishSalvage).
		KeepSalvageList: o.Salvage,
		Logger:          o.Logger,
		Sync:            wal.SyncAlways,
		// The index applies a change before its record is in the log:
		// a rotation that fails must stop the log before the writer
		// releases the batch that needed it, so that every call and
		// checkpoint that looks at the log after that sees the failure
		// (see Store.working), not only the call that met it, once it
		// gets to Store.failure.
		StopOnRotationFailure: true,
	}
	if o.Sync == SyncNone {
		w.Sync = wal.SyncInterval
	}
	return w
}

// durable reports whether an event must be fdatasynced before its call
// returns.
func (o Options) durable(publish bool) bool {
	switch o.Sync {
	case SyncAll:
		return true
	case SyncPublish:
		return publish
	}
	return false
}
