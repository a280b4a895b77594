package broker

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// maxEventFields bounds the bytes a publish event adds to its payload and
// key: kind, queue, sequence, instant, key length.
const maxEventFields = 64

// Store is one directory holding one write-ahead log shared by all its
// queues: one implementation for every queue, which differ only by name,
// policy and counters. The directory's "index" subdirectory holds the
// queues' state as of the last checkpoint.
//
// A Store is safe for concurrent use. It retains its directory's lock until
// Close. The methods of a nil *Store, like those of a nil *Queue or
// *Memory, refuse with QueueMisconfigured, saying so, or answer as for a
// store that holds nothing; none panics.
type Store struct {
	dir  string
	opts Options
	log  *wal.Log
	idx  *index.Index
	keys receiptKeys
	// logSecret is the store secret the log carries, as Open read it
	// before opening the log (see openHints); nil when it could not tell.
	// A checkpoint holding another was taken of another log.
	logSecret []byte
	// secretConsulted: Open took the secret from a checkpoint it
	// consulted but did not trust (salvage, a suspect index), and writes
	// it to the log again.
	secretConsulted bool
	// seqRaised: Open raised the next message sequence above what the
	// log holds, after a salvage or in a backup's copy (see
	// markRaisedSeq).
	seqRaised bool
	// hinted: Open opened the log with the last checkpoint's hints
	// (Options.Sealed and Verified: see openHints), which are true only of
	// the log that checkpoint was taken of.
	hinted bool
	// salvagePending: Open salvaged (or could have), and the lists of what
	// it repaired and lost stay until its report has been returned: the
	// first maintenance round or Close removes them (finishSalvage).
	salvagePending atomic.Bool

	// mu guards queues and the index's queue table (idx.Queue, Queues,
	// Declare, NextQueueID), serialises declarations, and is held by
	// whoever replaces pre.
	mu     sync.Mutex
	queues map[string]*Queue
	// pre is what every new segment starts with (see preamble): replaced
	// whole (copy on write) under mu, loaded without a lock by the log's
	// writer goroutine at each rotation.
	pre atomic.Pointer[preambleSet]

	// closeMu serialises Close: held for the whole of one, so that a
	// second waits for the first and then finds the store closed.
	closeMu sync.Mutex
	closed  atomic.Bool
	// closing is set when Close begins: a call that begins after it fails
	// with Closed, while Close's own checkpoint goes on (see working).
	// Without it a call begun while Close wrote its checkpoint was
	// appended after it, and the next Open replayed it.
	closing atomic.Bool
	// closedStats is what Stats returns once Close has let the files go:
	// the figures as Close left them.
	closedStats atomic.Pointer[StoreStats]
	// failed holds the error that stopped the store: a failed append leaves
	// the in-memory state ahead of the log, so nothing may go on until the
	// store is reopened (fail-stop).
	failed atomic.Pointer[error]
	// stopOnce starts, at most once, the goroutine that closes every
	// queue's wake signal when the store fails (see stop); stopDone, set
	// under it, is closed when that goroutine ends. Close runs stopOnce
	// too (so that none starts after it) and waits for stopDone.
	stopOnce sync.Once
	stopDone chan struct{}
	// watchDone is closed when the goroutine that watches the log for a
	// failure no call waited for ends (see watchLog).
	watchDone chan struct{}
	// over is closed, once (overOnce), when the store closes or stops for
	// good: Consume, its every handler slot busy, learns of it without a
	// call (see ender).
	over     chan struct{}
	overOnce sync.Once

	// nonceMu guards nonces, the generator of lease nonces. A leaf: taken
	// under a queue's lock, and nothing is taken under it.
	nonceMu sync.Mutex
	nonces  *mrand.ChaCha8

	maint    maintenance
	recovery RecoveryReport
	seqs     seqReservation
}

// seqReservation keeps, under SyncNone, every message sequence handed out
// below the next sequence a durable mark names: a power loss may take
// publishes that returned, and without it the reopened store, drawing its
// next sequence from the log it kept, handed their IDs out again for
// other messages ("unique in the store, never reused"). Publishes are
// synced under the other modes, and so are their sequences.
type seqReservation struct {
	// mu serialises the queueing of marks: taken under a queue's lock,
	// before the log's (Enqueue); nothing of the broker is taken under it.
	mu      sync.Mutex
	pend    *wal.Pending  // the last mark queued, guarded by mu
	queued  atomic.Uint64 // the sequence it reserves up to: written under mu, read by anyone
	durable atomic.Uint64 // a durable mark reserves every sequence below it
}

// seqReserve is how far ahead of the sequences handed out a mark reserves
// them under SyncNone: Open makes the first reservation durable, and a new
// mark is queued (its append forces an fdatasync, which nobody waits for)
// when half of the last one is used, so that a publish waits for one only
// when that fdatasync has not completed after seqReserve/2 publishes.
// A reopen continues after the last reservation, skipping what it left.
const seqReserve = 4096

// reserveSeqs makes sure a mark reserves every sequence up to hi (the
// caller holds its queue's lock and is about to queue its publish, or
// answers a duplicate of one still in flight). It returns the mark to
// wait for before the publish (or the duplicate) returns, and the bound
// that mark reserves, or nil when a durable one covers hi already.
func (s *Store) reserveSeqs(hi uint64) (*wal.Pending, uint64) {
	r := &s.seqs
	if s.opts.durable(true) || hi+seqReserve/2 < r.durable.Load() {
		return nil, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, prevBound := r.pend, r.queued.Load()
	if hi+seqReserve/2 >= prevBound {
		bound := hi + seqReserve
		mark := index.Event{Kind: index.KindMark, Seq: bound}
		r.pend = s.log.Enqueue(true, mark.Append(nil))
		r.queued.Store(bound)
		s.maint.reserveRecords.Add(1)
	}
	if hi < r.durable.Load() {
		return nil, 0 // the new mark goes on ahead; nobody needs to wait for it yet
	}
	if prev != nil && hi < prevBound {
		// The mark before covers hi: it was queued seqReserve/2
		// publishes ago, and its fdatasync has most likely completed,
		// though nobody has waited for it to record so. Waiting for the
		// one just queued would cost every such publish an fdatasync.
		return prev, prevBound
	}
	return r.pend, r.queued.Load()
}

// markRaisedSeq makes durable, as a mark in the log, the next message
// sequence Open raised above what the log holds (openIndex: a salvage
// took the publishes of the last sequences handed out, which a checkpoint
// or the list of lost messages knew; raiseCopySeq: the store is a
// backup's copy, opened for the first time). Without it, an Open after a
// crash would draw the next sequence from the log again and hand out the
// IDs the salvage reported lost, or those the original of the copy handed
// out after the backup. It is written under every sync mode: the
// first reservation Open makes (reserveSeqs) is made under SyncNone only.
// Open writes it after restorePreamble, never before: restorePreamble
// takes any mark in the active segment for its preamble's last record, so
// this one, written into a segment a crash left without its preamble,
// would keep the preamble from being restored (and the log alone, once
// the segments before it were reclaimed, from declaring the queues). A
// preamble restored first carries the raised sequence in its own mark.
func (s *Store) markRaisedSeq() error {
	if !s.seqRaised {
		return nil
	}
	mark := index.Event{Kind: index.KindMark, Seq: s.idx.PeekNextSeq()}
	if _, err := s.log.Enqueue(true, mark.Append(nil)).Wait(); err != nil {
		return fmt.Errorf("record the next message sequence %d: %w", mark.Seq, err)
	}
	s.maint.repairRecords.Add(1)
	return nil
}

// markSalvaged makes durable, when the log's Open salvaged it (this Open's
// repairs, or an unfinished earlier salvage's), a salvaged event: the
// log's own word that it changed under every checkpoint taken before
// (see replay). A checkpoint carries the store's secret and a position
// inside the log, so an older copy of the index put back after the
// repair passes every other check, and the replay forward from it kept
// the messages whose records the salvage padded over: counted ready, and
// failing the store with Corrupt when read. It is written before Open's
// checkpoint (which is then past it) and before the log forgets its list
// of the repaired spans (finishSalvage): a crash before it is durable
// leaves that list, the next Open salvages again, refuses every
// checkpoint (as every salvaging Open does) and writes it then.
func (s *Store) markSalvaged() error {
	if len(s.log.Recovery().Salvaged) == 0 {
		return nil
	}
	marker := index.Event{Kind: index.KindSalvaged}
	if _, err := s.log.Enqueue(true, marker.Append(nil)).Wait(); err != nil {
		return fmt.Errorf("record that a salvage repaired the log: %w", err)
	}
	s.maint.repairRecords.Add(1)
	return nil
}

// reservedSeqs records that a mark reserving every sequence below bound
// is durable.
func (s *Store) reservedSeqs(bound uint64) {
	for {
		d := s.seqs.durable.Load()
		if bound <= d || s.seqs.durable.CompareAndSwap(d, bound) {
			return
		}
	}
}

// Open opens the store in dir, creating the directory (0700), and those
// of its parents that are missing (0700 too), if it is missing, and a new
// store where it holds none (RecoveryReport.Created tells a program that
// expected its data there). It loads the queues' state from the last checkpoint and replays
// the log after it; without a usable checkpoint (none, one that fails its
// checks, one taken of another store's log, or one taken before a salvage
// repaired the log) it rebuilds the state from the whole log, which is the
// source of truth. An error reading the store's files (an I/O error: the
// checkpoint, its markers, the log's clean mark, a salvage's lists) is
// not taken for their absence or for damage: Open fails, naming the file
// and the cause, and removes nothing a later Open needs. A second Open of
// the same directory, in this process or another, fails with Locked. A
// log that fails verification fails with Corrupt, naming the file and
// byte offset (see Options.Salvage). A store a later build wrote in a
// format this one does not read (a segment format version, an event kind,
// a checkpoint version) is not damage: Open refuses it with an error
// wrapping errors.ErrUnsupported that names the file, Salvage or not. A
// segment or checkpoint version is refused before any file is changed; an
// event kind is met only in the replay, once the log's Open has done what
// every build's does first (a torn tail zeroed, the clean mark written
// again at Close) and, with Salvage, repaired any damage it found (see
// docs/DESIGN.md, "Recovery"). A symbolic link, named pipe or
// device where the store's own files belong, or a file of another user
// than the process's (root's are accepted), or an index or salvage
// subdirectory that is a link, a file or another user's, is refused with an error
// wrapping fs.ErrPermission (and vfs.ErrForeign) that names it: in a
// directory others can write, it was planted, and a planted segment would
// deliver messages, and accept receipts, that someone else made up. The
// directory itself may be a symbolic link, and dir may pass through links
// and "..": it is resolved once, names in order as the kernel takes them
// (a ".." after a link climbs out of the link's target), and the store is
// the directory that names, whichever way it is named. An empty
// dir, one holding a NUL byte (which no file name can), or Options
// outside their documented bounds, fail with QueueMisconfigured before
// anything is made. An Open that fails on a full disk says so (its error
// wraps syscall.ENOSPC): free space, then open the store again.
func Open(dir string, opts Options) (*Store, error) {
	s, err := openStore(dir, opts)
	if err != nil && errors.Is(err, syscall.ENOSPC) {
		// The log's own words ("close and reopen") speak to a caller
		// holding a store; this one holds none.
		return nil, fmt.Errorf("%w (the disk is full: free space, then open the store again)", err)
	}
	return s, err
}

// openStore is Open.
func openStore(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("broker: open: the directory path is empty: %w", QueueMisconfigured)
	}
	if i := strings.IndexByte(dir, 0); i >= 0 {
		return nil, fmt.Errorf("broker: open %q: the directory path holds a NUL byte at %d, which no file name can: %w", dir, i, QueueMisconfigured)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// A clock no store can record (or one that panics) is refused before
	// anything is touched (every call reads it again, and checks it again).
	if _, err := readClock("Options.Now", opts.Now); err != nil {
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	// The path is resolved once, names in order as the kernel takes them
	// ("link/.." climbs out of the link's target), and every file is
	// found from there: the directory made, its lock, its segments and
	// index/ are in one place, whatever links and ".." the path holds.
	where, err := vfs.Resolve(dir)
	if err != nil {
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	s := &Store{dir: where, opts: opts, queues: map[string]*Queue{}, over: make(chan struct{})}
	s.maint.reclaimMu = newCtxMutex()
	wo := opts.walOptions()
	wo.Preamble, wo.PreambleBytes = s.preamble, opts.preambleBytes()
	if err := vfs.CheckDir(opts.fs(), s.indexDir()); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			// index/ cannot be looked up because the store's own path
			// does not lead to a directory (it names a file): say so of
			// the path the caller gave, once, not of index/ under it.
			err = syscall.ENOTDIR
		}
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	// What the last checkpoint covers needs no scan: sealed segments are
	// verified as they are read, and the last one is scanned from the
	// checkpoint's position on (unless the checkpoint is suspect: see
	// openHints).
	if err := s.openHints(&wo); err != nil {
		return nil, openError(dir, opts.Salvage, err)
	}
	l, err := wal.Open(where, wo)
	if err != nil {
		if later := laterBuildNoted(opts, where, dir, err); later != nil {
			return nil, later
		}
		return nil, openError(dir, opts.Salvage, err)
	}
	s.log = l
	torn := l.Recovery().TornTail // cut by this Open, if it opens the log again
	replayed, err := s.openIndex()
	if errors.Is(err, errStaleHints) {
		if err = s.reopenLog(where, wo); err == nil {
			replayed, err = s.openIndex()
		}
	}
	if err != nil {
		if s.log != nil {
			if opts.Salvage && errors.Is(err, index.ErrLaterKind) && len(s.log.Recovery().Salvaged) > 0 {
				// The log keeps its list of what it repaired, and an Open
				// without Salvage refuses the store until an Open with it
				// finishes, which this build's cannot (notedLaterBuild).
				err = errors.Join(err, s.noteLaterBuild(openError(dir, true, err)))
			}
			_ = s.log.Close()
		}
		return nil, openError(dir, opts.Salvage, err)
	}
	l = s.log
	copied, err := s.raiseCopySeq()
	if err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	if err := s.markSalvaged(); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	if s.idx.Secret == nil || s.secretConsulted {
		// A store draws a secret only when neither its log nor a
		// checkpoint it consulted holds one; one a consulted checkpoint
		// gave back is written again, since the log may have lost it.
		secret := s.idx.Secret
		if secret == nil {
			secret = make([]byte, index.SecretSize)
			_, _ = rand.Read(secret)
		}
		meta := index.Event{Kind: index.KindMeta, Secret: secret}
		if _, err := l.Append(meta.Append(nil)); err != nil {
			s.closeFiles()
			return nil, fmt.Errorf("broker: open %s: %w", dir, err)
		}
		s.maint.secretRecords.Add(1)
		s.idx.Secret = secret
	}
	if s.keys, err = newReceiptKeys(s.idx.Secret); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	s.nonces = mrand.NewChaCha8(seed)
	if err := s.checkSegmentBytes(l.Stats().LargestSegment); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	now, err := s.now()
	if err != nil {
		s.closeFiles()
		return nil, err
	}
	for _, name := range s.idx.Queues() {
		iq := s.idx.Queue(name)
		q := newQueue(s, iq, policyValue(iq.Policy))
		if due := iq.FinalsDue(now); len(due) > 0 {
			q.diedBeforeOpen = map[uint64]uint64{}
			for _, m := range due {
				q.diedBeforeOpen[m.Seq] = m.Nonce
			}
		}
		// The open looks at the queue at now, as any call does: the leases
		// lapsed on their last delivery are exhausted from then on, even
		// if the clock then goes back, and leave that list only by the
		// sweep, so Stats counts the deaths since open without walking
		// them (see exhaustedSinceOpenLocked).
		iq.Promote(now)
		s.queues[name] = q
	}
	s.setPreamble()
	if queues, size := s.pre.Load().room(); size > s.opts.preambleBytes() {
		// A smaller SegmentBytes than the log was written with keeps less
		// room for the declarations: the first rotation would fail.
		s.closeFiles()
		return nil, fmt.Errorf("broker: open %s: Options.SegmentBytes %d is too small for the store's %d queue declarations, which take up to %d bytes, more than the %d each segment of that size keeps for them: open with the %d bytes the log was written with: %w",
			dir, s.opts.segmentBytes(), queues, size, s.opts.preambleBytes(), l.Stats().LargestSegment, QueueMisconfigured)
	}
	if err := s.restorePreamble(); err != nil {
		s.closeFiles()
		return nil, openError(dir, opts.Salvage, err)
	}
	// After restorePreamble, which takes a mark in the active segment
	// for its preamble's last record.
	if err := s.markRaisedSeq(); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("broker: open %s: %w", dir, err)
	}
	// Only once the raised sequence is durable: a crash before leaves the
	// mark, and the next Open jumps again (see raiseCopySeq).
	if copied {
		if err := s.forgetCopyMark(); err != nil {
			s.closeFiles()
			return nil, fmt.Errorf("broker: open %s: %w", dir, err)
		}
	}
	if p, bound := s.reserveSeqs(s.idx.PeekNextSeq()); p != nil {
		// The first reservation, before any publish: so that none
		// waits for the device for it.
		if _, err := p.Wait(); err != nil {
			s.closeFiles()
			return nil, fmt.Errorf("broker: open %s: reserve message sequences: %w", dir, err)
		}
		s.reservedSeqs(bound)
	}
	if rec := l.Recovery(); torn != nil || len(rec.Salvaged) > 0 {
		s.recovery.TornTail = torn != nil
		s.recovery.SalvagedSpans = len(rec.Salvaged)
		for _, d := range rec.Salvaged {
			if d.CopiedTo != "" && !slices.Contains(s.recovery.SalvageCopies, d.CopiedTo) {
				s.recovery.SalvageCopies = append(s.recovery.SalvageCopies, d.CopiedTo)
			}
		}
		opts.Logger.Warn("broker: recovered", "dir", dir, "torn_tail", torn != nil, "salvaged_spans", len(rec.Salvaged),
			"lost_messages", s.recovery.LostMessages, "lost_by_queue", s.recovery.LostByQueue)
	}
	// Every store's log holds a record from its first Open on (the meta
	// event that carries its secret, repeated by every segment's
	// preamble), and a salvage that skipped them all says so.
	s.recovery.Created = s.recovery.IndexRebuilt && s.recovery.Replayed == 0 && s.recovery.SalvagedSpans == 0
	// The report is built, but not yet in the caller's hands: the lists of
	// what a salvage repaired and lost stay until Open has returned (the
	// first maintenance round, or Close, removes them: finishSalvage). A
	// crash or a failure before then leaves them, and the next Open without
	// Salvage refuses the store until one with it reports them again.
	s.salvagePending.Store(opts.Salvage)
	if replayed > 0 {
		// So that the next open does not replay the same records again.
		if err := s.checkpoint(); err != nil {
			opts.Logger.Warn("broker: checkpoint after open failed; the next open recovers the index from the log (replaying it from the last whole checkpoint, or all of it)", "dir", dir, "err", err)
		} else if err := index.ClearSuspect(opts.fs(), s.indexDir()); err != nil {
			opts.Logger.Warn("broker: the next open rebuilds the index again", "dir", dir, "err", err)
		}
	}
	warnSharedDir(opts.Logger, dir)
	s.startMaintenance()
	s.watchLog()
	return s, nil
}

// watchLog stops the store as soon as its log is poisoned by a failure no
// call waited for (the background fdatasync of SyncPublish and SyncNone),
// not when a call or Err first sees it: until then nothing closes over,
// and a Consume idle on an empty queue waits on a store that can take
// nothing more. The goroutine ends once the store closes or stops (over
// is closed), and Close waits for it.
func (s *Store) watchLog() {
	s.watchDone = make(chan struct{})
	poisoned := s.log.Poisoned()
	go func() {
		defer close(s.watchDone)
		select {
		case <-poisoned:
			_ = s.usable() // stops the store (see working); nothing once Close began
		case <-s.over:
		}
	}()
}

// warnSharedDir logs a warning when dir is writable by its group or by
// others. Open refuses the files another user could plant there (see
// vfs.Default), but such a user can still remove or rename the store's
// own: the directory belongs to the store's user alone. It is not refused,
// since a shared volume's root (a Kubernetes emptyDir is 0777) is a
// common, and otherwise safe, place to open a store.
func warnSharedDir(log *slog.Logger, dir string) {
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm()&0o022 == 0 {
		return
	}
	log.Warn("broker: the store's directory is writable by other users, who could remove or replace its files; make it writable by its owner alone (chmod 0700), or open a directory inside it",
		"dir", dir, "mode", fi.Mode().Perm().String())
}

// checkSegmentBytes refuses a SegmentBytes below what the log was written
// with (largest, its largest segment's size) when a live message could
// not be copied forward into a segment of the new size: reclamation would
// stop at the segment that message holds, and every later segment would
// stay on disk for as long as it lives. Only a store opened with smaller
// segments than before pays for the look at every live message.
func (s *Store) checkSegmentBytes(largest int64) error {
	if largest <= s.opts.segmentBytes() {
		return nil
	}
	seq, size := s.idx.LargestLive()
	if size == 0 {
		return nil
	}
	if need := int(size) + segment.Size(maxStateEvent); need > s.maxGroup() {
		return fmt.Errorf("Options.SegmentBytes %d is too small for message %s, whose publish record and state take up to %d bytes, more than a new segment holds (%d): "+
			"a message that cannot be copied forward keeps every later segment on disk; open with the %d bytes the log was written with until it is consumed: %w",
			s.opts.segmentBytes(), messageID(seq), need, s.maxGroup(), largest, QueueMisconfigured)
	}
	return nil
}

// indexDir is where the checkpoint and the table live.
func (s *Store) indexDir() string { return filepath.Join(s.dir, "index") }

// RecoveryReport is what Open found and did.
type RecoveryReport struct {
	// TornTail: the log ended, past every point Open knew durable (the
	// last checkpoint's position, and where a clean Close left the log),
	// in bytes that do not read as records: a write a crash cut short,
	// which no fdatasync had covered; it was cut off. No call that waited
	// for the device had it (under SyncAll, no call that returned); under
	// SyncPublish and SyncNone it may have held what SyncMode says a
	// power loss can take. Damage before that point is never taken for a
	// torn tail: Open refuses it (Corrupt), and Options.Salvage reports
	// it in SalvagedSpans and LostMessages. (Damage on the device to the
	// last records synced after that point reads as a torn tail too: no
	// format can tell the two apart.) The cut is logged (Options.Logger,
	// at WARN) as Open makes it: an Open that fails after it has still
	// cut the tail, and the next Open, which finds the log ending there
	// cleanly, does not report it again.
	TornTail bool
	// SalvagedSpans is the number of damaged spans Options.Salvage skipped,
	// and SalvageCopies where it copied the damaged files first. They
	// include the spans an earlier Open with Salvage repaired before it
	// failed, which this one finished.
	SalvagedSpans int
	SalvageCopies []string
	// LostMessages lists the IDs of messages whose records salvage skipped,
	// as far as the checkpoint and the rest of the log tell: those still
	// live by the last checkpoint, and those that later events name. A
	// message published and never touched again after the last checkpoint
	// leaves no other trace, and is not listed. Nor is one whose
	// acknowledgement (or deletion as a dead letter) the log kept: it was
	// processed, or given up, and is not to be sent again. No ID listed
	// here, nor any the consulted checkpoint had handed out, is given to a
	// message published after the salvage (Open writes the next sequence
	// past them to the log). The ID of a message left out of the list for
	// want of a trace may be.
	LostMessages []string
	// LostByQueue is LostMessages by the name of the queue each message
	// was in (each queue's IDs sorted; nil when none was lost): whose
	// producers must send again. Every ID in LostMessages is under exactly
	// one queue. A queue whose declaration salvage skipped as well is
	// named "queue #<number>", by the number its other records carry; no
	// queue can have such a name (it holds a space and a '#'), and a queue
	// declared after the Open gets a new number, not that one.
	LostByQueue map[string][]string
	// IndexRebuilt: there was no usable checkpoint, and the queues' state
	// was rebuilt from the whole log.
	IndexRebuilt bool
	// Created: the directory held no store (or the empty log of one whose
	// first Open died before writing a record), and Open made a new one.
	// A program that expects its data there, as after a restart, may
	// refuse to go on when it is set: a mistyped path or a volume that was
	// not mounted gives a new, empty store, not an error.
	Created bool
	// Replayed is the number of log records replayed.
	Replayed int
}

// String says what Open found and did in one line, for a log: "new store"
// when it made one; otherwise the records replayed, then each repair, if
// any ("clean" when there was none). Lost
// messages are counted by queue, then listed: "12 messages lost (10 in
// jobs, 2 in mail): m0, m1, …".
func (r RecoveryReport) String() string {
	parts := []string{"replayed " + count(r.Replayed, "record")}
	switch {
	case r.Created:
		parts[0] = "new store" // (its first Open's record may have been torn)
	case r.IndexRebuilt:
		parts = append(parts, "index rebuilt from the whole log")
	}
	if r.TornTail {
		parts = append(parts, "torn tail cut off (never fdatasynced: no call that waited for the device had it)")
	}
	if r.SalvagedSpans > 0 {
		parts = append(parts, fmt.Sprintf("salvage skipped %s, copies in %s", count(r.SalvagedSpans, "damaged span"), strings.Join(r.SalvageCopies, ", ")))
	}
	if n := len(r.LostMessages); n > 0 {
		const shown = 10 // the rest are in LostMessages
		ids := strings.Join(r.LostMessages[:min(n, shown)], ", ")
		if n > shown {
			ids += fmt.Sprintf(" and %d more", n-shown)
		}
		perQueue := ""
		if len(r.LostByQueue) > 0 {
			names := slices.Sorted(maps.Keys(r.LostByQueue))
			for i, name := range names {
				names[i] = fmt.Sprintf("%d in %s", len(r.LostByQueue[name]), name)
			}
			perQueue = " (" + strings.Join(names, ", ") + ")"
		}
		parts = append(parts, fmt.Sprintf("%s lost%s: %s", count(n, "message"), perQueue, ids))
	}
	if len(parts) == 1 && !r.Created {
		parts = append(parts, "clean")
	}
	return strings.Join(parts, "; ")
}

// count is n and noun, plural unless n is 1: "1 message", "2 messages".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Recovery returns what Open found and did, after Close too. Each call
// returns a report of its own: a caller may change its slices and map
// without changing what a later call returns.
func (s *Store) Recovery() RecoveryReport {
	if s.unmade() {
		return RecoveryReport{}
	}
	return s.recovery.clone()
}

// clone is r with slices and a map of its own: a caller that changes the
// report Recovery returned (crossing off the queues whose producers sent
// again, say) changes no later one.
func (r RecoveryReport) clone() RecoveryReport {
	r.SalvageCopies = slices.Clone(r.SalvageCopies)
	r.LostMessages = slices.Clone(r.LostMessages)
	if r.LostByQueue != nil {
		byQueue := make(map[string][]string, len(r.LostByQueue))
		for q, ids := range r.LostByQueue {
			byQueue[q] = slices.Clone(ids)
		}
		r.LostByQueue = byQueue
	}
	return r
}

// closeFiles closes the log and the table, for a failed Open.
func (s *Store) closeFiles() {
	_ = s.log.Close()
	_ = s.idx.Table.Close()
}

// preambleSet is what the preamble is made of. It is replaced whole,
// never changed, so the log's writer goroutine reads it without a lock.
type preambleSet struct {
	recs [][]byte // the secret, then every queue's declaration
	// ids[i] is the queue recs[i] declares (recs[0], the secret, none),
	// and size the framed size of recs: a declaration finds its place,
	// and the room the preamble takes, without decoding every record.
	ids    []uint32
	size   int
	queues []*index.Queue // every declared queue, for its dedup clock
}

// preamble returns what every new segment starts with: the store's secret,
// every queue's declaration, each queue's latest dedup clock reading, and
// the next message sequence. The log's writer calls it at each rotation;
// once older segments are removed, a replay of the remaining log meets
// these before any event that needs them.
//
// The reading is an eviction of nothing (index.NoEviction): the records
// in removed segments held readings (enqueue instants, evictions) that
// "if the clock goes backwards, nothing is evicted" measures from, and the
// reading at the rotation is at least as late as every one of them.
func (s *Store) preamble() [][]byte {
	p := s.pre.Load()
	if p == nil {
		return nil
	}
	out := append(make([][]byte, 0, len(p.recs)+len(p.queues)+1), p.recs...)
	for _, iq := range p.queues {
		if t := iq.LastEvicts(); t != math.MinInt64 {
			e := index.Event{Kind: index.KindEvict, Queue: iq.ID, Time: t, Window: index.NoEviction}
			out = append(out, e.Append(nil))
		}
	}
	mark := index.Event{Kind: index.KindMark, Seq: max(s.idx.PeekNextSeq(), s.seqs.queued.Load())}
	out = append(out, mark.Append(nil))
	s.maint.kickRotation()
	return out
}

// errPreambleFound stops restorePreamble's look at the active segment.
var errPreambleFound = errors.New("preamble found")

// restorePreamble writes the preamble, durably, at the start of the active
// segment when that segment (not the first: the first has none) does not
// hold a whole one. A rotation writes the new segment's preamble with the
// batch that needed the room, after the old segment's seal is durable: a
// crash before that batch is (under SyncNone, or SyncPublish without a
// publish in it, or SyncAll between the seal and the commit) leaves the
// new segment empty, or with only the first preamble records, and the
// reopened store appends to it. Without this, once the earlier segments
// were reclaimed, the log alone would no longer declare the queues nor
// carry the secret and the next sequence. The mark is the preamble's last
// record, so a segment holding it holds all of it: this relies on no mark
// but a preamble's reaching the active segment before this runs (the
// reservations, and the mark of a sequence a salvage raised, are written
// after it; see markRaisedSeq).
//
// A rotation Open causes before it sets the preamble (the records it
// appends first: a salvaged event, the secret a consulted checkpoint gave
// back) starts a segment with no preamble, the broker having none to give
// yet: this look finds no mark there, and writes it.
//
// A salvage that skipped a span of the active segment may have padded over
// any record of its preamble (a declaration, the secret) and left the mark:
// the preamble is then written again whatever the segment holds. Written
// twice, its records change nothing: each says again what the log says.
func (s *Store) restorePreamble() error {
	end := s.log.End()
	if !s.salvagedIn(end.Segment()) {
		if end.Segment() <= 1 {
			return nil
		}
		err := s.log.Iterate(wal.MakePosition(end.Segment(), 0), func(_ wal.Position, rec []byte) error {
			if len(rec) > 0 && index.Kind(rec[0]) == index.KindMark {
				return errPreambleFound
			}
			return nil
		})
		if errors.Is(err, errPreambleFound) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	// Each a group of its own, as a rotation writes them.
	var pends []*wal.Pending
	for _, rec := range s.preamble() {
		pends = append(pends, s.log.Enqueue(true, rec))
	}
	for _, p := range pends {
		if _, err := p.Wait(); err != nil {
			return fmt.Errorf("broker: restore the preamble of segment %d: %w", end.Segment(), err)
		}
		s.maint.restoredPreamble.Add(1)
	}
	return nil
}

// salvagedIn reports whether the log's Open (or an unfinished salvage it
// finished) skipped a span of segment seq.
func (s *Store) salvagedIn(seq uint32) bool {
	return slices.ContainsFunc(s.log.Recovery().Salvaged, func(d wal.Damage) bool { return d.Segment == seq })
}

// maxClockRecord bounds the encoding of a preamble's dedup clock reading.
const maxClockRecord = 1 + binary.MaxVarintLen32 + 2*binary.MaxVarintLen64

// setPreamble records the secret and every declaration for the preamble.
// The caller holds s.mu, or is Open.
func (s *Store) setPreamble() {
	meta := index.Event{Kind: index.KindMeta, Secret: s.idx.Secret}
	p := &preambleSet{recs: [][]byte{meta.Append(nil)}, ids: []uint32{0}}
	for _, name := range s.idx.Queues() {
		iq := s.idx.Queue(name)
		p.recs = append(p.recs, declareRecord(iq.ID, name, iq.Policy))
		p.ids = append(p.ids, iq.ID)
		p.queues = append(p.queues, iq)
	}
	for _, r := range p.recs {
		p.size += segment.Size(len(r))
	}
	s.pre.Store(p)
}

// room returns how many queues p declares, and the most its preamble
// takes: the declarations, each queue's dedup clock, and the mark.
func (p *preambleSet) room() (queues, size int) {
	queues = len(p.recs) - 1
	return queues, p.size + segment.Size(16) + queues*segment.Size(maxClockRecord)
}

func declareRecord(id uint32, name string, p index.Policy) []byte {
	e := index.Event{Kind: index.KindDeclare, Queue: id, Name: name, Policy: p}
	return e.Append(nil)
}

func openError(dir string, salvage bool, err error) error {
	switch {
	case errors.Is(err, wal.ErrLocked):
		return fmt.Errorf("broker: open %s: %w: %w", dir, Locked, err)
	case errors.Is(err, index.ErrBadEvent):
		// A record whose frame verified but that holds no event a store
		// writes: salvage skips damaged frames, not such records, so it
		// is not offered.
		return fmt.Errorf("broker: open %s: %w: %w", dir, Corrupt, err)
	case errors.Is(err, wal.ErrCorrupt) && !salvage:
		return fmt.Errorf("broker: open %s: %w: %w (Options.Salvage may open the store past damaged records, copying the damaged file aside)", dir, Corrupt, err)
	case errors.Is(err, wal.ErrCorrupt):
		return fmt.Errorf("broker: open %s: %w: %w", dir, Corrupt, err)
	}
	return fmt.Errorf("broker: open %s: %w", dir, err)
}

// Queue returns the queue named name, declaring it with policy the first
// time. Calling it again with a different policy applies the new policy
// from then on (the change is written to the log). The same *Queue is
// returned for a name every time. After Open, a queue the store already
// holds is reached the same way, with its policy again (Queues lists the
// names): its messages, dead letters and dedup keys are as they were.
//
// A MaxDeliveries lowered to or below the count of a message not leased
// (ready, or waiting out a retry delay) leaves it no delivery: the
// declaration moves it to the dead-letter store, failed at the
// declaration's reading of the clock, with its last failure's reason,
// code and cause, or LEASE_EXPIRED when no consumer ever reported one. A
// leased message keeps its lease; the delivery it is on is its last, and
// it dies at its lapse or nack. Either dead letter counts the deliveries
// the message had, which may be more than the new MaxDeliveries. A
// declaration that is refused changes nothing; one a crash cuts short
// either did not happen or is finished by the next process's first
// successful call of Queue for that name (its dead letters then failed at
// that call's reading of the clock).
//
// A name is 1 to 64 characters of [A-Za-z0-9._-] not starting with '.';
// anything else is refused (QueueMisconfigured), as is a policy that fails
// Validate, whose MaxMessageBytes could not fit in one log segment, or
// whose MaxDeliveries is above the most deliveries the log counts for a
// message (math.MaxUint32).
func (s *Store) Queue(name string, policy PolicyValue) (*Queue, error) {
	if s.unmade() {
		return nil, nilReceiver("Store")
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := validQueueName(name); err != nil {
		return nil, err
	}
	if err := policy.validate(fmt.Sprintf("broker: queue %q: policy: ", name)); err != nil {
		return nil, err
	}
	if limit := s.maxPayload(); policy.maxMessageBytes() > limit {
		return nil, fmt.Errorf("broker: queue %q: MaxMessageBytes %d exceeds what one log segment holds (%d; see Options.SegmentBytes): %w",
			name, policy.maxMessageBytes(), limit, QueueMisconfigured)
	}
	if err := deliveriesCounted(policy); err != nil {
		return nil, fmt.Errorf("broker: queue %q: policy: %w", name, err)
	}
	rec := policyRecord(policy)

	s.mu.Lock()
	defer s.mu.Unlock()
	// Again, under s.mu: a store that closes or fails sets closed or
	// failed, then shuts every queue's wake signal under s.mu
	// (shutQueues). A queue made after that, by a call that looked
	// before, would have a signal nothing ever closes.
	if err := s.usable(); err != nil {
		return nil, err
	}
	q := s.queues[name]
	if q == nil {
		iq := s.idx.Queue(name)
		if iq == nil {
			id, ok := s.idx.NextQueueID()
			if !ok {
				return nil, fmt.Errorf("broker: queue %q: every queue number is taken: %w", name, QueueMisconfigured)
			}
			if err := s.declareLocked(id, name, rec); err != nil {
				return nil, err
			}
			var err error
			if iq, err = s.idx.Declare(id, name, rec); err != nil {
				return nil, fmt.Errorf("broker: queue %q: policy: %w", name, err)
			}
			old := s.pre.Load()
			s.pre.Store(&preambleSet{recs: old.recs, ids: old.ids, size: old.size, queues: append(slices.Clip(old.queues), iq)})
		}
		q = newQueue(s, iq, policyValue(iq.Policy))
		s.queues[name] = q
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	redeclared := q.iq.Policy != rec
	var (
		next *preambleSet
		drec []byte
	)
	if redeclared {
		// A re-declaration that cannot be made (its record does not fit
		// the room each segment keeps for declarations) is refused before
		// anything changes.
		var err error
		if next, drec, err = s.preambleWith(q.iq.ID, name, rec); err != nil {
			return nil, err
		}
	}
	if !q.handed {
		// The first handle of this process finishes a lowering a crash
		// cut short, under the policy that lowering declared, before any
		// new declaration: one that raised MaxDeliveries would otherwise
		// leave its messages with no delivery left a delivery more.
		if err := q.giveUpSpentLocked(); err != nil {
			return nil, err
		}
	}
	if redeclared {
		// A lease that lapsed on its last delivery is a dead letter from
		// the instant it lapsed, whatever the policy says later: record
		// those the queue holds before the new policy changes what a last
		// delivery is (a replay of the log would not know which it was).
		// And a MaxDeliveries lowered to or below the count of a message
		// not leased (ready, waiting out a retry delay, or back from a
		// lease that lapsed) leaves it no delivery: the broker gives up
		// on it now, as part of the declaration, rather than hand it a
		// delivery beyond the maximum (PolicyValue.MaxDeliveries,
		// DeliveryValue.Deliveries). It dies failed at this reading of
		// the clock, counting the deliveries it had, with its last
		// failure (LEASE_EXPIRED when no consumer ever reported one:
		// every attempt it had lapsed). A leased one keeps its lease and
		// dies at its lapse or nack.
		now, err := s.now()
		if err != nil {
			return nil, err
		}
		pends := q.enqueueLocked(q.sweepLocked(now, nil))
		// A lease that lapsed with deliveries left is still a lease in
		// the log (a lapse is read off the clock, not written): replayed
		// under the lowered policy alone, it would pass for a last
		// delivery that lapsed, dead at its expiry, before the lowering.
		// Those the new policy gives up on are first restated as ready
		// again since their lapse, which is what they are (and still
		// spent: the restatement keeps their deliveries).
		spent := q.iq.Spent(rec.MaxDeliveries)
		pends = append(pends, q.enqueueLocked(q.restateLapsedLocked(spent))...)
		// The declaration is the change's commit point: its dead letters
		// follow it in the log, so that no power loss leaves one without
		// it. One that leaves the declaration without (some of) them is
		// finished by the next process's first handle on the queue (see
		// giveUpSpentLocked).
		s.pre.Store(next)
		pends = append(pends, s.log.Enqueue(true, drec))
		pends = append(pends, q.enqueueLocked(q.giveUpLocked(spent, now))...)
		if err := q.waitAll(pends); err != nil {
			return nil, err
		}
		q.stats.deadLettered.Add(int64(len(spent)))
		if _, err := s.idx.Declare(q.iq.ID, name, rec); err != nil {
			return nil, fmt.Errorf("broker: queue %q: policy: %w", name, err)
		}
		q.policy = policy
		// A lease on its last delivery may now lapse back into the
		// queue (MaxDeliveries raised): a waiting consumer looks again.
		q.wakeLocked()
	}
	// Only now: a first call that failed before its end left a lowering a
	// crash cut short to the next call to finish.
	q.handed = true
	return q, nil
}

// giveUpLocked moves msgs, delivered as many times as the queue's
// MaxDeliveries allows or more, to the dead-letter store, failed at now,
// and returns their events for the log (see Store.Queue: a lowered
// MaxDeliveries). The caller holds q.mu and queues them.
func (q *Queue) giveUpLocked(msgs []*index.Message, now int64) [][]byte {
	recs := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		e := lapseDeadLetter(q.id, m, now)
		q.iq.Apply(0, &e)
		recs = append(recs, e.Append(nil))
	}
	return recs
}

// restateLapsedLocked applies, for each of msgs whose lease lapsed, the
// event that makes it ready again since the lapse (a nack at its expiry,
// its deliveries and last failure kept), and returns those events for the
// log. The caller holds q.mu and queues them.
func (q *Queue) restateLapsedLocked(msgs []*index.Message) [][]byte {
	var recs [][]byte
	for _, m := range msgs {
		if m.State != index.Leased {
			continue
		}
		e := index.Event{Kind: index.KindNack, Queue: q.id, Seq: m.Seq, Deliveries: m.Deliveries,
			Time: m.At, Code: m.Code, Reason: m.Reason, Cause: m.Cause}
		q.iq.Apply(0, &e)
		recs = append(recs, e.Append(nil))
	}
	return recs
}

// giveUpSpentLocked finishes, for the first handle of this process on a
// queue, a lowering of its MaxDeliveries that a crash cut short: the log
// held the declaration and not every dead letter that follows it. Such a
// message is ready with no delivery left, which nothing else leaves: a
// Receive would hand it a delivery beyond the maximum. (A lease that
// lapsed on its last delivery is the sweep's, as always.) The caller
// holds q.mu.
func (q *Queue) giveUpSpentLocked() error {
	var ready []*index.Message
	for _, m := range q.iq.Spent(q.iq.Policy.MaxDeliveries) {
		if m.State == index.Ready {
			ready = append(ready, m)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	now, err := q.s.now()
	if err != nil {
		return err
	}
	spent := q.giveUpLocked(ready, now)
	if err := q.waitAll(q.enqueueLocked(spent)); err != nil {
		return err
	}
	q.stats.deadLettered.Add(int64(len(spent)))
	return nil
}

// declareLocked writes a queue's declaration and waits until it is
// durable. The preamble of later segments carries it from before it is
// queued, so no segment can hold an event of the queue without its
// declaration before it. The caller holds s.mu.
func (s *Store) declareLocked(id uint32, name string, p index.Policy) error {
	next, rec, err := s.preambleWith(id, name, p)
	if err != nil {
		return err
	}
	s.pre.Store(next)
	_, err = s.wait(s.log.Enqueue(true, rec))
	return err
}

// preambleWith returns the preamble with queue id declared with policy p,
// and the declaration's record, or why it cannot be made: the store's
// declarations would not fit in the room each segment keeps for them. It
// changes nothing; the caller holds s.mu, stores the set before it queues
// the record, and queues it.
func (s *Store) preambleWith(id uint32, name string, p index.Policy) (*preambleSet, []byte, error) {
	rec := declareRecord(id, name, p)
	old := s.pre.Load()
	next := &preambleSet{recs: old.recs, ids: old.ids, size: old.size, queues: old.queues}
	if i := slices.Index(old.ids[1:], id) + 1; i > 0 {
		// A new policy: a copy, since a rotation may be reading old.
		next.recs = slices.Clone(old.recs)
		next.recs[i] = rec
		next.size += segment.Size(len(rec)) - segment.Size(len(old.recs[i]))
	} else {
		// Appended past what old holds, which a reader of old never
		// reads (only the caller, holding s.mu, appends).
		next.recs, next.ids = append(old.recs, rec), append(old.ids, id)
		next.size += segment.Size(len(rec))
	}
	queues, size := next.room()
	if room := s.opts.preambleBytes(); size > room {
		help := "declare fewer queues, or give them shorter names"
		if room < maxPreambleBytes {
			help = fmt.Sprintf("raise Options.SegmentBytes, up to %d MiB, or declare fewer queues", 16*maxPreambleBytes>>20)
		}
		return nil, nil, fmt.Errorf("broker: queue %q: the store's %d queue declarations would take %d bytes, more than the %d each segment keeps for them (%s): %w",
			name, queues, size, room, help, QueueMisconfigured)
	}
	return next, rec, nil
}

// maxPayload is the largest payload one publish record can carry.
func (s *Store) maxPayload() int { return s.opts.MaxMessageBytes() }

// MaxMessageBytes is the largest [PolicyValue.MaxMessageBytes] a store
// opened with o accepts: a message, its events and the frames around them
// must fit in one log segment (SegmentBytes), so a queue declared with
// more is refused ([QueueMisconfigured]). With the default 64 MiB
// segments it is far above [DefaultMaxMessageBytes]; a store made small
// with a low SegmentBytes takes smaller messages (13,677 bytes with
// [MinSegmentBytes]). It is computed, not checked: for a SegmentBytes
// Open refuses (below MinSegmentBytes, or negative), no store is opened
// with o, and the figure means nothing (it is negative).
func (o Options) MaxMessageBytes() int {
	seg := o.SegmentBytes
	if seg == 0 {
		seg = wal.DefaultSegmentBytes
	}
	// Less the segment header, the record's frame header, room for the
	// seal frame and the preamble, the publish event's own fields (a key
	// at most), and room for the largest state event (a dead letter's):
	// copying a message forward writes its publish and its state in one
	// group, which must fit in a segment however large the message.
	return int(seg) - segment.HeaderSize - 2*segment.Size(0) - o.preambleBytes() - 2*maxEventFields - maxKeyBytes -
		segment.Size(maxStateEvent)
}

// maxStateEvent bounds the encoding of an event that restates a message's
// state (index.Event.Append): its fields, a dead letter's reason and public
// cause.
const maxStateEvent = maxEventFields + MaxReasonBytes + MaxPublicBytes

// maxGroup is the most one publish may encode, frames included: a segment
// less its header, the seal, the preamble, and room for the dedup eviction
// record a publish may carry.
func (s *Store) maxGroup() int { return s.opts.maxGroup() }

// maxGroup is the most bytes of frames one append may take in a segment of
// a store opened with o: what a segment holds past its header, its seal
// and the preamble a rotation writes, less maxEventFields for the dedup
// eviction record a publish may carry.
func (o Options) maxGroup() int {
	return int(o.segmentBytes()) - segment.HeaderSize - segment.Size(0) - o.preambleBytes() - maxEventFields
}

func validQueueName(name string) error {
	if err := CheckQueueName(name); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}

// Queues returns the names of every queue the store holds, sorted.
func (s *Store) Queues() []string {
	if s.unmade() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.idx.Queues()
	slices.Sort(names)
	return names
}

// StoreStats describes the store's files. The directory also holds files
// outside the log that Segments and DiskBytes do not count: the next
// segment, prepared ahead of need, and up to two retired segments kept
// for reuse, each of Options.SegmentBytes when complete. Plan for
// DiskBytes + IndexBytes + 3 × SegmentBytes. Two kinds of file, made
// only on failure paths, can take more: segments and table files whose
// removal failed (they stay, out of the log or the index, until a later
// removal takes them; UnremovedBytes counts them) and the copies of
// damaged files a salvage keeps aside.
//
// LiveBytes counts, for each live message, its publish record and the
// event that gives it its state when a publish alone would not (a lease
// with its nonce, a nack, a dead letter with its reason, code and public
// cause), frames included, at the length they were written: a dead
// letter's event may be over a thousand bytes longer than its publish. A
// copy forward writes them at that length, or shorter by a dedup key the
// queue has forgotten since (a key is up to 256 bytes): LiveBytes may
// then fall at the copy with nothing consumed.
type StoreStats struct {
	Segments             int     // log segment files
	DiskBytes            int64   // their total size
	LiveBytes            int64   // of records live messages (dead letters included) still need (see above)
	IndexBytes           int64   // table and checkpoint files
	LastCheckpoint       string  // the log position ("segment:offset") the last checkpoint reflects; "" if none
	Checkpoints          int64   // written since open
	BytesReclaimed       int64   // of segment files removed since open
	CopiedForward        int64   // records a copy forward appended since open, so old segments could go: each message's publish and the event restating its state, and each dedup key's publish and ack
	Commits              int64   // commits since open: fdatasyncs of the active segment that made appended records durable (not those of segments prepared ahead, the index's, or directory syncs)
	Records              int64   // events appended since open, OwnRecords included
	OwnRecords           int64   // of Records, those the store wrote for itself: its secret (Open), what an Open that met damage records (a salvaged event, a raised sequence mark, which the first Open of a backup's copy records too), segment preambles, copies forward and (SyncNone) sequence reservations
	MeanRecordsPerCommit float64 // Records / Commits
	MaxRecordsPerCommit  int64
	// MaintenanceStopped is why checkpoints, and with them the removal of
	// old segments, stopped: a checkpoint failed (a full disk, a failed
	// fdatasync of the index), and none is retried. The store goes on,
	// the log being the source of truth, but its directory grows with
	// every segment; reopening it (after freeing space) recovers the index
	// from the log (the whole log when the failed checkpoint had marked
	// its start, index/CHECKPOINTING, else from the last checkpoint
	// written whole)
	// and resumes them. "" while they run.
	MaintenanceStopped string
	// ReclaimFailing is why reclaiming disk space failed, while it
	// fails: a segment file the file system will not remove (EACCES or
	// EPERM on it or on its directory, say) stays on disk with every
	// later one; a table file of the index that a checkpoint no longer
	// needs, and could not remove, stays on disk (the checkpoint is
	// written all the same). The store goes on, and maintenance tries
	// again, less often while it keeps failing (at least every minute),
	// until it works; the Logger hears of the first failure, of a
	// failure that goes on every ten minutes at most, and of the end of
	// it. Both failures, when both fail, one a line. "" while it works.
	ReclaimFailing string
	// UnremovedBytes is the size of the segment files a removal took out
	// of the log and could not remove, and of the table files a
	// checkpoint dropped and could not remove: on disk still, counted
	// neither in Segments, DiskBytes and IndexBytes nor in BytesReclaimed,
	// until a removal that works removes them (or the next Open takes
	// the segments back into the log, and removes the table files).
	UnremovedBytes int64
}

// Stats returns the store's figures. Each is read on its own, not in one
// snapshot: while appends and a rotation run, Records and OwnRecords may be
// read a few records apart (a preamble counted in one and not yet in the
// other), so a rate taken from their difference is exact only to a few
// records. After Close it returns the figures as Close left them: the
// files it describes are on disk as counted, their sizes included, and the
// counters since open include Close's own checkpoint.
func (s *Store) Stats() StoreStats {
	if s.unmade() {
		return StoreStats{}
	}
	if st := s.closedStats.Load(); st != nil {
		return *st
	}
	st := s.statsNow()
	// A call that raced Close may have read the table after it closed
	// (IndexBytes is then 0): Close set the figures first.
	if closed := s.closedStats.Load(); closed != nil {
		return *closed
	}
	return st
}

// statsNow is Stats, read from the log and the index now.
func (s *Store) statsNow() StoreStats {
	w := s.log.Stats()
	st := StoreStats{
		Segments:            w.Segments,
		DiskBytes:           w.DiskBytes,
		IndexBytes:          s.idx.Table.Bytes() + s.maint.checkpointBytes.Load(),
		Checkpoints:         s.maint.checkpoints.Load(),
		BytesReclaimed:      w.BytesRemoved, // each file as it goes, a round that failed part way included
		CopiedForward:       s.maint.copied.Load(),
		OwnRecords:          s.maint.copied.Load() + w.PreambleRecords + s.maint.restoredPreamble.Load() + s.maint.secretRecords.Load() + s.maint.reserveRecords.Load() + s.maint.repairRecords.Load(),
		Commits:             w.Commits,
		Records:             w.Records,
		MaxRecordsPerCommit: w.MaxRecordsPerSync,
	}
	for _, u := range s.idx.SegmentUses() {
		st.LiveBytes += u.Bytes + u.StateBytes
	}
	if p := s.maint.lastCheckpoint.Load(); p != 0 {
		st.LastCheckpoint = wal.Position(p).String()
	}
	if w.Commits > 0 {
		st.MeanRecordsPerCommit = float64(w.Records) / float64(w.Commits)
	}
	if p := s.maint.stopped.Load(); p != nil {
		st.MaintenanceStopped = (*p).Error()
	}
	var failing []error
	for _, p := range []*error{s.maint.reclaimFailing.Load(), s.maint.tableFailing.Load()} {
		if p != nil {
			failing = append(failing, *p)
		}
	}
	if len(failing) > 0 {
		st.ReclaimFailing = errors.Join(failing...).Error()
	}
	st.UnremovedBytes = w.UnremovedBytes + s.idx.Table.LeftoverBytes()
	return st
}

// Close writes a checkpoint (so that the next Open replays nothing), makes
// everything durable and releases the directory. A checkpoint it cannot
// write (on a full disk, say) is skipped and logged at WARN, and Close of
// a working store still returns nil: the log holds everything, and the
// next Open reads it instead (StoreStats.MaintenanceStopped says why,
// after Close too). Once checkpoints have stopped (see
// StoreStats.MaintenanceStopped), Close tries none, and logs nothing more
// of it. Calls queued before Close
// complete; later ones, on the store or any of its queues, fail with
// Closed. A store that stopped for good still releases the directory, so
// that it can be opened again. One stopped by a failed write or fdatasync
// of its log returns that failure from Close too (what it wrote since may
// not be durable). One whose log wrote and synced everything it was given
// returns nil once its files are closed (until Close, Err and every other
// call reported what stopped it; after it, they report Closed): one
// stopped by damage found, whose next Open
// scans the whole log (refusing it with Corrupt while the damage is there;
// see Options.Salvage), and one stopped because the next segment could
// not be made (a full disk, usually: a segment takes its whole size when
// it is made, so the disk fills there first).
//
// Close does not wait for [Consume]: stop it first (cancel its context and
// wait for it to return), so that its running handlers finish and their
// messages are acked. A Consume still running when the store closes
// returns Closed: it learns of the close at once, even with every handler
// slot busy or idle on an empty queue (the store's end is a channel it
// waits on), and it ends the contexts of its running handlers (see
// [Consume]) and returns once they have returned. Their acks are refused: their messages
// are delivered again once their leases lapse.
func (s *Store) Close() error {
	if s.unmade() {
		return nilReceiver("Store")
	}
	left, err, cerr := s.close()
	// Logged once closeMu is released: the handler is the caller's code.
	if cerr != nil {
		s.opts.Logger.Warn("broker: checkpoint at close failed; the next open recovers the index from the log (replaying it from the last whole checkpoint, or all of it)", "dir", s.dir, "err", cerr)
	}
	s.salvageListStays(left)
	return err
}

// close is Close but for its log: it returns what of a salvage's lists it
// could not remove (see finishSalvage), Close's error, and that of the
// checkpoint it tried to write, if any.
func (s *Store) close() (left salvageLeft, err, cerr error) {
	// One Close at a time: a second one's checkpoint must not write the
	// index while the first closes its files and lets the directory go.
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() {
		return salvageLeft{}, fmt.Errorf("broker: store %s: %w", s.dir, Closed), nil
	}
	s.closing.Store(true)
	s.stopMaintenance()
	left = s.finishSalvage()
	// closed is set before ckptMu is let go: a Backup waiting for it would
	// otherwise write a checkpoint into the index after Close returned.
	s.maint.ckptMu.Lock()
	// Checkpoints that stopped before Close (logged at ERROR then, and in
	// StoreStats.MaintenanceStopped) are not tried again: the stop's
	// error, logged as this checkpoint's failure, would repeat it as a
	// new one.
	if s.failed.Load() == nil && s.maint.stopped.Load() == nil {
		cerr = s.checkpointLocked()
	}
	s.closed.Store(true) // only Close sets it, under closeMu
	s.end()
	s.maint.ckptMu.Unlock()
	if s.watchDone != nil {
		<-s.watchDone // over is closed: it ends, or stops the store first
	}
	s.shutQueues() // consumers waiting for a queue look again, and learn it is closed
	// A Receive whose leases the log took reads their payloads after its
	// wait: closing the log under it would report Closed for leases the
	// log keeps, messages then held by nobody until the leases lapse.
	// Readers hold removeMu shared from their positions to their payloads.
	s.maint.removeMu.Lock()
	err = s.log.Close()
	s.maint.removeMu.Unlock()
	// The log wrote the calls queued before Close, and its Stats now
	// describe it as it is on disk; the table is still open.
	final := s.Stats()
	s.closedStats.Store(&final)
	s.freezeQueueStats()
	s.stopOnce.Do(func() {}) // Close shut every queue: no stop starts after it
	if s.stopDone != nil {
		<-s.stopDone
	}
	err = errors.Join(err, s.idx.Table.Close())
	if err != nil {
		return left, fmt.Errorf("broker: close %s: %w", s.dir, err), cerr
	}
	return left, nil, cerr
}

// Err returns nil while the store works, and otherwise the error its
// calls now return: one wrapping Closed after Close, or the failure that
// stopped it for good (a write or fdatasync failed, the disk filled, or
// damage was found), which says so and wraps the cause; such a store must
// be closed and opened again, but for one whose log has no segment number
// left (wal.ErrNoNextSegment): a reopened store stops at the same point,
// and the error says to move its messages to a new store. A failure no
// call waited for (the background fdatasync of SyncPublish and SyncNone) stops the store as
// soon as the log reports it, with no call: its consumers learn of it at
// once (see Consume). A store a failed rotation stopped (nothing lost)
// whose log then fails the background fdatasync of what it wrote before
// the stop returns that failure from then on: events may be lost. Err
// takes no lock and waits for no append: it is meant for health checks.
// The one thing it may write is what any call that first sees damage
// writes: a mark, durably, that makes the next Open rebuild the index
// from the log.
func (s *Store) Err() error {
	if s.unmade() {
		return nilReceiver("Store")
	}
	return s.usable()
}

// usable returns the error every call gets once Close has begun, or the
// store has failed.
func (s *Store) usable() error {
	if s.closing.Load() {
		return fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	return s.working()
}

// working is usable but for the closing flag: what Close's own checkpoint
// asks (the snapshot it takes), which must go on once Close has begun.
func (s *Store) working() error {
	if s.closed.Load() {
		return fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	if p := s.failed.Load(); p != nil {
		return s.laterLoss(p)
	}
	if err := s.log.Err(); err != nil {
		// A write or fdatasync no call waited for failed (the background
		// fdatasync under SyncNone and SyncPublish): stop as if one had.
		return s.failure(err)
	}
	if err := s.idx.Damaged(); err != nil {
		return s.damaged(err)
	}
	return nil
}

// damaged stops the store on damage found in its index or its log, and
// marks the checkpoint suspect (removing it only if the mark cannot be
// written), so that the next Open scans the whole log and rebuilds the
// index from it (refusing a damaged log with Corrupt, naming the file and
// offset; see Options.Salvage).
func (s *Store) damaged(err error) error {
	failure := fmt.Errorf("broker: store %s: %w: %w (close and reopen it: Open scans the log and rebuilds the index, and refuses a log still damaged with Corrupt until Options.Salvage skips the damage)", s.dir, Corrupt, err)
	if s.failed.CompareAndSwap(nil, &failure) {
		markErr, removeErr := s.distrustCheckpoint()
		s.stop(func(log *slog.Logger) {
			log.Error("broker: damage found; close and reopen the store", "dir", s.dir, "err", err)
			if markErr != nil {
				log.Error("broker: could not mark the checkpoint suspect; removing it", "dir", s.dir, "err", markErr)
			}
			if removeErr != nil {
				log.Error("broker: could not remove the checkpoint", "dir", s.dir, "err", removeErr)
			}
		})
	}
	return *s.failed.Load()
}

// distrustCheckpoint makes the next Open verify the whole log and rebuild
// the index from it: it marks the checkpoint suspect, durably (the
// checkpoint stays, to be consulted; see index.MarkSuspect), or, when the
// mark cannot be written, removes the checkpoint and its table files. It
// runs on the goroutine whose call found the damage, which cannot take
// ckptMu (it may hold it already, inside a checkpoint's snapshot, or hold
// a queue's lock, which comes after ckptMu): a checkpoint being written
// meanwhile calls it again once its file is in place (see
// checkpointLocked).
func (s *Store) distrustCheckpoint() (markErr, removeErr error) {
	if markErr = index.MarkSuspect(s.opts.fs(), s.indexDir()); markErr != nil {
		removeErr = index.RemoveCheckpoint(s.opts.fs(), s.indexDir())
	}
	return markErr, removeErr
}

// foundDamage reports whether damage stopped the store (see damaged:
// only its failure wraps Corrupt).
func (s *Store) foundDamage() bool {
	p := s.failed.Load()
	return p != nil && errors.Is(*p, Corrupt)
}

// wait waits for a queued append. Any failure stops the store: the index
// already holds the change the log could not take.
func (s *Store) wait(p *wal.Pending) ([]wal.Position, error) {
	pos, err := p.Wait()
	if err != nil {
		return nil, s.failure(err)
	}
	return pos, nil
}

// failure turns an error of the log into the caller's error, and stops the
// store unless the log was merely closed.
func (s *Store) failure(err error) error {
	if errors.Is(err, wal.ErrClosed) {
		return fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	failure := s.failedWith(err)
	if s.failed.CompareAndSwap(nil, &failure) {
		s.stop(func(log *slog.Logger) {
			if errors.Is(err, wal.ErrNoNextSegment) {
				log.Error("broker: store failed; its log has no segment number left: move its messages to a new store", "dir", s.dir, "err", err)
				return
			}
			log.Error("broker: store failed; close and reopen it", "dir", s.dir, "err", err)
		})
	}
	return *s.failed.Load()
}

// failedWith is the error of a store the log's error err stopped.
func (s *Store) failedWith(err error) error {
	if errors.Is(err, wal.ErrNoNextSegment) {
		// A reopened store stops at the same rotation: its log holds
		// the highest segment number there is.
		return fmt.Errorf("broker: store %s failed: its log has no segment number left, and a reopened store stops at the same point (move its messages to a new store to go on): %w", s.dir, err)
	}
	if errors.Is(err, syscall.ENOSPC) {
		// What the operator must do first, where the operator reads.
		return fmt.Errorf("broker: store %s failed and must be reopened once the disk has room (free space first): %w", s.dir, err)
	}
	return fmt.Errorf("broker: store %s failed and must be reopened: %w", s.dir, err)
}

// laterLoss returns the failure that stopped the store (*p) or, when the
// log stopped it and has failed since, the log's error now. A log a
// failed rotation stopped lost nothing, and its error says so; but it
// still syncs in the background what it wrote before the stop, and when
// that fdatasync fails, events written may be lost: the log's error then
// says both (wal.Log.Err), and so must the store's, once and for good.
func (s *Store) laterLoss(p *error) error {
	if !errors.Is(*p, wal.ErrPoisoned) {
		return *p // not the log's failure (damage, say)
	}
	now := s.log.Err()
	if now == nil || errors.Is(*p, now) {
		return *p
	}
	failure := s.failedWith(now)
	if s.failed.CompareAndSwap(p, &failure) {
		go s.opts.Logger.Error("broker: the stopped store's log failed since; events written before the stop may be lost", "dir", s.dir, "err", now)
	}
	return *s.failed.Load()
}

// stop reports the failure that stopped the store (report logs it) and
// closes every queue's wake signal for good: consumers waiting for a queue
// look again and learn of the failure (Consume then returns it). Both run
// on a goroutine of its own, since the call that found the failure may
// hold a queue's lock (a copy forward does), the store's (a declaration
// does) or all of them (a checkpoint does): shutting the queues takes
// those locks, and the logger's handler, the caller's code, may read
// Stats or Queues, which take them too.
func (s *Store) stop(report func(*slog.Logger)) {
	s.end()
	started := false
	s.stopOnce.Do(func() {
		started = true
		s.stopDone = make(chan struct{})
		go func() {
			defer close(s.stopDone)
			s.shutQueues() // first: the handler may take its time
			report(s.opts.Logger)
		}()
	})
	if !started {
		// Close has shut the queues and waited for any stop: the
		// failure of a call that was still under way (one waiting for
		// Close's last fdatasync, say) is reported on a goroutine of
		// its own too, since that call may hold a lock the handler
		// takes. Close no longer waits for it.
		go report(s.opts.Logger)
	}
}

// end closes over: the store has closed or stopped for good (closed or
// failed is set before).
func (s *Store) end() { s.overOnce.Do(func() { close(s.over) }) }

// ending reports whether Close has begun or the store has stopped.
func (s *Store) ending() bool {
	if s.closing.Load() {
		return true
	}
	select {
	case <-s.over:
		return true
	default:
		return false
	}
}

// shutQueues closes every queue's wake signal for good (see
// Queue.shutLocked).
func (s *Store) shutQueues() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.queues {
		q.mu.Lock()
		q.shutLocked()
		q.mu.Unlock()
	}
}

// freezeQueueStats sets the figures every queue's Stats returns from now
// on, read while the index is still open: Close calls it, once the log is
// closed and nothing can change.
func (s *Store) freezeQueueStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.queues {
		st := q.statsNow()
		q.closedStats.Store(&st)
	}
}

// nonce returns a random lease nonce.
func (s *Store) nonce() uint64 {
	s.nonceMu.Lock()
	defer s.nonceMu.Unlock()
	return s.nonces.Uint64()
}

// nowOpen is now for a call that holds a queue's lock and may change the
// queue: Closed once Close has begun. Such a call passed its begin before
// Close did, and took the lock only after Close's checkpoint had taken its
// snapshot: what it appended would come after the checkpoint, which must
// leave the next Open nothing to replay.
func (s *Store) nowOpen() (int64, error) {
	if s.closing.Load() {
		return 0, fmt.Errorf("broker: store %s: %w", s.dir, Closed)
	}
	return s.now()
}

// now reads the broker clock (Options.Now) in Unix nanoseconds, or fails
// for a reading no store can record and for a clock that panics (see
// readClock). Callers hold a queue's lock: a failure leaves it to them to
// release it, changing nothing.
func (s *Store) now() (int64, error) {
	now, err := readClock("Options.Now", s.opts.Now)
	if err != nil {
		return 0, fmt.Errorf("broker: store %s: %w", s.dir, err)
	}
	return now, nil
}

// deadline returns now + d, or false when that instant cannot be recorded
// (past year 2262 in Unix nanoseconds).
func deadline(now int64, d time.Duration) (int64, bool) {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return 0, false
	}
	return now + int64(d), true
}

func policyRecord(p PolicyValue) index.Policy {
	return index.Policy{
		VisibilityTimeout: int64(p.VisibilityTimeout),
		RetryDelay:        int64(p.RetryDelay),
		MaxRetryDelay:     int64(p.MaxRetryDelay),
		MaxDeliveries:     int64(p.MaxDeliveries),
		MaxMessageBytes:   int64(p.MaxMessageBytes),
		Capacity:          int64(p.Capacity),
		DedupWindow:       int64(p.DedupWindow),
	}
}

func policyValue(p index.Policy) PolicyValue {
	return PolicyValue{
		VisibilityTimeout: time.Duration(p.VisibilityTimeout),
		RetryDelay:        time.Duration(p.RetryDelay),
		MaxRetryDelay:     time.Duration(p.MaxRetryDelay),
		MaxDeliveries:     int(p.MaxDeliveries),
		MaxMessageBytes:   int(p.MaxMessageBytes),
		Capacity:          int(p.Capacity),
		DedupWindow:       time.Duration(p.DedupWindow),
	}
}
