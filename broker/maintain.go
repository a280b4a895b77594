package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbroker/walbroker/index"
	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
	"github.com/walbroker/walbroker/wal"
)

// maintenance is the store's background work: checkpoints and reclaiming
// old segments. One goroutine does it; checkpoints from Open, Close and
// Backup run in the caller's goroutine, serialised with it by ckptMu.
type maintenance struct {
	// kick, stop and done are made by startMaintenance, at the end of
	// Open: the log's writer reads kick at each rotation (kickRotation),
	// and every rotation before then is one Open waited for.
	kick chan struct{} // a rotation happened, or a caller asks for a round
	stop chan struct{} // closed once (once) by stopMaintenance
	done chan struct{} // closed when the maintenance goroutine returns
	once sync.Once

	// ckptMu serialises checkpoints (reclamation runs only on the
	// maintenance goroutine); it guards written.
	ckptMu  sync.Mutex
	written int64 // log bytes written at the last checkpoint
	// stopped is the failure of a checkpoint: none runs after it until
	// the store is reopened. Set once, under ckptMu; read without it too
	// (Stats).
	stopped atomic.Pointer[error]

	// removeMu is held shared by readers of payloads from the moment they
	// take a message's position (under its queue's lock) until they have
	// read it, and by Backup while it copies segments; exclusively to
	// remove segments, and by Close to close the log.
	removeMu sync.RWMutex
	// reclaimMu serialises reclamation and Backups: a Backup must find
	// the segments below its checkpoint where they were. A Backup holds
	// it for all of its copy, and waits for it only as long as its
	// context lets it (another Backup's copy may take minutes);
	// reclamation only tries it, and skips its round while a Backup
	// holds it (see reclaim). Taken before ckptMu. Made by Open.
	reclaimMu ctxMutex

	lastCheckpoint  atomic.Uint64 // wal.Position of the last checkpoint
	checkpointBytes atomic.Int64
	checkpoints     atomic.Int64
	copied          atomic.Int64
	// restoredPreamble counts the preamble records restorePreamble wrote
	// (the log counts those of its rotations, as it writes them).
	restoredPreamble atomic.Int64
	secretRecords    atomic.Int64 // the store's secret, written by Open (see Open)
	reserveRecords   atomic.Int64 // sequence reservations (seqReservation)
	// repairRecords counts the records an Open that met damage, or that
	// opened a backup's copy, wrote: a salvaged event (markSalvaged) and
	// a raised mark (markRaisedSeq).
	repairRecords atomic.Int64
	rotated       atomic.Bool // a rotation since the last round
	// reclaimRetry schedules reclamation after a round of it failed (see
	// reclaim). Guarded by reclaimMu.
	reclaimRetry retry
	// reclaimFailing is the failure of reclamation while it fails, for
	// Stats; set with reclaimRetry, read without reclaimMu.
	reclaimFailing atomic.Pointer[error]
	// tableRetry schedules the removal of the table files checkpoints
	// dropped and could not unlink (index.Table.Leftovers; see
	// removeLeftoverTables). Guarded by ckptMu.
	tableRetry retry
	// tableFailing is the failure of that removal while it fails, for
	// Stats; set with tableRetry, read without ckptMu.
	tableFailing atomic.Pointer[error]
	// stopReported: the checkpoints' stop was logged. Only
	// maintenanceRound uses it.
	stopReported bool
}

// Maintenance tuning.
const (
	// maintainEvery is how often the maintenance goroutine looks for work
	// when no rotation wakes it.
	maintainEvery = time.Second
	// copyForwardShare: the oldest segment is copied forward only when what
	// is live in a run of segments starting with it is at most this share
	// of the run's size (see worthCopying); a larger live share is a real
	// backlog, which copying would only move.
	copyForwardShare = 4
	// keepSealed is how many sealed segments may stay pinned before the
	// oldest is copied forward. None: a store whose messages come and go
	// then holds the active segment, the next one prepared and up to two
	// spares (wal.RemoveBelow keeps two of the segments it retires).
	// The price is copying, at each rotation, the messages in flight at
	// the end of the segment just sealed (a thousand 1 KiB messages per
	// 64 MiB segment: 1.5% more writes).
	keepSealed = 0
)

// ctxMutex is a mutex whose Lock gives up when a context ends: a token in
// a channel of one, which its holder took. Make it with newCtxMutex.
type ctxMutex chan struct{}

func newCtxMutex() ctxMutex { return make(ctxMutex, 1) }

// Lock waits until it holds the mutex, or ctx ends: it then returns ctx's
// error, not holding it.
func (m ctxMutex) Lock(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	default:
	}
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryLock takes the mutex if no one holds it, and reports whether it did.
func (m ctxMutex) TryLock() bool {
	select {
	case m <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock lets the mutex go; the caller holds it.
func (m ctxMutex) Unlock() { <-m }

func (s *Store) startMaintenance() {
	m := &s.maint
	m.kick = make(chan struct{}, 1)
	m.stop = make(chan struct{})
	m.done = make(chan struct{})
	m.written = s.log.Stats().BytesWritten
	if s.opts.manualMaintenance {
		close(m.done)
		return
	}
	go s.maintainLoop()
}

func (s *Store) stopMaintenance() {
	m := &s.maint
	if m.stop == nil {
		return
	}
	m.once.Do(func() { close(m.stop) })
	<-m.done
}

// kickRotation wakes the maintenance goroutine without blocking; the log's
// writer calls it at each rotation.
func (m *maintenance) kickRotation() {
	m.rotated.Store(true)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (s *Store) maintainLoop() {
	m := &s.maint
	defer close(m.done)
	t := time.NewTicker(maintainEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-t.C:
		}
		s.maintenanceRound()
	}
}

// maintenanceRound is one round of the maintenance goroutine's, which it
// runs at each rotation and every maintainEvery: maintain, and the log
// records of what failed. Only that goroutine calls it (tests drive it
// in its place, with ManualMaintenance).
func (s *Store) maintenanceRound() {
	m := &s.maint
	err := s.maintain(false)
	if err == nil {
		return
	}
	if p := m.stopped.Load(); p != nil && err == *p {
		if !m.stopReported {
			m.stopReported = true
			s.opts.Logger.Error("broker: a checkpoint failed; the store goes on, but its directory now grows with every segment until it is reopened (free space first if the disk is full): StoreStats.MaintenanceStopped says why", "dir", s.dir, "err", err)
		}
		return
	}
	if errors.Is(err, Closed) {
		// Close began during the pass (between two queues' copies,
		// say): the pass stops there, and Close writes the
		// checkpoint. Nothing failed.
		return
	}
	var logged *reclaimError
	if errors.As(err, &logged) {
		return // reclaim logs its own failures, on its schedule
	}
	s.opts.Logger.Warn("broker: maintenance", "dir", s.dir, "err", err)
}

// maintain writes a checkpoint if the log grew by half a segment since the
// last one or rotated since the last round (or force is set), then
// reclaims what it can.
func (s *Store) maintain(force bool) error {
	if s.usable() != nil {
		return nil
	}
	s.salvageListStays(s.finishSalvage())
	m := &s.maint
	if p := m.stopped.Load(); p != nil {
		// Reclamation stops with the checkpoints, as documented: it
		// would go on only in the rounds that owe no checkpoint.
		return *p
	}
	m.ckptMu.Lock()
	grown := s.log.Stats().BytesWritten-m.written >= s.opts.segmentBytes()/2
	m.ckptMu.Unlock()
	// The rotation is answered by this round's checkpoint whatever else
	// asks for it: left set behind a growth that asked first, it had the
	// next round write a second checkpoint of nothing new.
	rotated := m.rotated.Swap(false)
	if grown || force || rotated {
		if err := s.checkpoint(); err != nil {
			return err
		}
	}
	s.removeLeftoverTables(force)
	return s.reclaim(force)
}

// checkpoint makes the index durable as of the log's end: it stops every
// queue for one fdatasync (so that what the index holds is exactly the
// log's durable prefix), snapshots what lives on the heap, then — queues
// running again — writes the table's new entries, fdatasyncs them, and
// writes the checkpoint file. A failed checkpoint stops checkpoints until
// the store is reopened, and leaves its marker (index.BeginCheckpoint), so
// that the next open rebuilds from the log: the table may already disagree
// with the previous checkpoint. The store itself goes on (the log is the
// source of truth). No fdatasync is retried. A table file the checkpoint
// drops and cannot unlink fails nothing: it is removed later
// (removeLeftoverTables).
func (s *Store) checkpoint() error {
	s.maint.ckptMu.Lock()
	defer s.maint.ckptMu.Unlock()
	return s.checkpointLocked()
}

// checkpointLocked is checkpoint with ckptMu held.
func (s *Store) checkpointLocked() error {
	m := &s.maint
	if p := m.stopped.Load(); p != nil {
		return *p
	}
	fail := func(err error) error {
		stopped := fmt.Errorf("broker: checkpoints and the reclaiming of disk space stopped until the store is reopened: %w", err)
		m.stopped.Store(&stopped)
		return stopped
	}
	snap, drop, written, err := s.snapshot()
	if err != nil {
		if s.working() != nil {
			return err // the store stopped: not the checkpoint's failure
		}
		// The index refused the snapshot (what a checkpoint cannot
		// hold), which the next round's would refuse again: returned
		// alone, it had every round sync the log and log a WARN, for
		// as long as the store ran.
		return fail(err)
	}
	// From the table's first rewrite until the new checkpoint is durably
	// in place, the table no longer matches the checkpoint in place: an
	// open meanwhile must rebuild (see index.BeginCheckpoint).
	// The index directory is checked again: another user who can write
	// the store's directory could have replaced it since Open.
	if err := vfs.CheckDir(s.opts.fs(), s.indexDir()); err != nil {
		return fail(err)
	}
	if err := index.BeginCheckpoint(s.opts.fs(), s.indexDir()); err != nil {
		return fail(err)
	}
	t := s.idx.Table
	if _, err := t.Flush(true); err != nil {
		return fail(err)
	}
	var chunks []uint64
	for _, c := range t.Chunks() {
		if !slices.Contains(drop, c) {
			chunks = append(chunks, c)
		}
	}
	if err := index.WriteCheckpoint(s.opts.fs(), s.indexDir(), snap, chunks); err != nil {
		return fail(err)
	}
	// Damage found since the snapshot, by a call on another goroutine,
	// may have removed the checkpoint in place, its mark failing (see
	// damaged): the checkpoint just put in place must not undo that. The
	// damage sets failed before it touches the directory, and this looks
	// at failed after the rename: if this finds it unset, the removal
	// comes after the rename and takes the new checkpoint.
	if s.foundDamage() {
		if markErr, removeErr := s.distrustCheckpoint(); removeErr != nil {
			return fail(errors.Join(markErr, removeErr))
		}
	}
	// The checkpoint no longer names them: table files of messages all
	// gone. EndCheckpoint's directory sync makes the removals durable with
	// its own (one directory); a crash before it leaves files Open removes.
	// A file that cannot be unlinked loses nothing: it stays on disk, out
	// of the table (its chunk is never written again), and is removed
	// later on a schedule (removeLeftoverTables), not failing the
	// checkpoint: a failed checkpoint stops every later one until the
	// store is reopened.
	var leftErr error
	for _, c := range drop {
		if err := t.Remove(c); err != nil {
			if errors.Is(err, index.ErrClosed) {
				return fail(err)
			}
			leftErr = errors.Join(leftErr, err)
		}
	}
	if err := index.EndCheckpoint(s.opts.fs(), s.indexDir()); err != nil {
		return fail(err)
	}
	m.written = written
	m.lastCheckpoint.Store(uint64(snap.LogPos))
	m.checkpoints.Add(1)
	m.checkpointBytes.Store(snap.FileSize(chunks))
	if leftErr != nil {
		s.noteLeftoverTablesLocked(leftErr)
	}
	return nil
}

// removeLeftoverTables removes the table files that checkpoints dropped
// and could not unlink (index.Table.Leftovers), on m.tableRetry's
// schedule (force tries now), as reclaim removes segment files: the
// Logger hears of the first failure, of a failure that goes on every
// retryRemindEvery at most, and of its end; Stats gives it in
// ReclaimFailing meanwhile, and the files' size in UnremovedBytes. A
// removal is made durable by the next checkpoint's directory sync; a
// crash before it leaves a file Open removes (the checkpoint names it
// not).
func (s *Store) removeLeftoverTables(force bool) {
	m := &s.maint
	m.ckptMu.Lock()
	t := s.idx.Table
	if m.tableRetry.failed == 0 && len(t.Leftovers()) == 0 {
		m.ckptMu.Unlock()
		return
	}
	now, clockErr := readClock("Options.Now", s.opts.Now)
	known := clockErr == nil
	if !force && !m.tableRetry.isDue(now, known) {
		m.ckptMu.Unlock()
		return
	}
	err := t.RemoveLeftovers()
	note := m.tableRetry.record(now, known, err)
	if err != nil {
		m.tableFailing.Store(&err)
	} else {
		m.tableFailing.Store(nil)
	}
	m.ckptMu.Unlock()
	note.log(s.opts.Logger, leftoverTablesStep, s.dir, err)
}

// noteLeftoverTablesLocked records err, the failure of a checkpoint's
// removal of the table files it dropped, as an attempt of
// removeLeftoverTables's. The caller holds ckptMu.
func (s *Store) noteLeftoverTablesLocked(err error) {
	m := &s.maint
	now, clockErr := readClock("Options.Now", s.opts.Now)
	note := m.tableRetry.record(now, clockErr == nil, err)
	m.tableFailing.Store(&err)
	note.log(s.opts.Logger, leftoverTablesStep, s.dir, err)
}

// leftoverTablesStep names removeLeftoverTables's step in the log.
const leftoverTablesStep = "removing table files the index no longer needs"

// stopQueuesLocked locks every queue, in number order (the order in which
// any code holding two takes them), and returns them with the func that
// unlocks them. The caller holds s.mu.
func (s *Store) stopQueuesLocked() ([]*Queue, func()) {
	qs := make([]*Queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b *Queue) int { return int(a.id) - int(b.id) })
	for _, q := range qs {
		q.mu.Lock()
	}
	return qs, func() {
		for _, q := range qs {
			q.mu.Unlock()
		}
	}
}

// snapshot stops every queue, makes everything queued durable, commits the
// publishes whose records that made durable, and snapshots the index at
// the log's end. It returns the snapshot, the table chunks no live message
// needs, and the log's bytes written.
func (s *Store) snapshot() (*index.Snapshot, []uint64, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	qs, unlock := s.stopQueuesLocked()
	defer unlock()
	if err := s.working(); err != nil { // Close's own checkpoint goes on
		return nil, nil, 0, err
	}
	if err := s.log.Barrier(true); err != nil {
		return nil, nil, 0, s.failure(err)
	}
	for _, q := range qs {
		if err := q.commitInflightLocked(); err != nil {
			return nil, nil, 0, err
		}
	}
	// The index may hold changes the log did not take (it applies them
	// before their records are in the log): a failure met meanwhile, by
	// another call or by the log, leaves no checkpoint. The log stops
	// before it releases a batch it failed (a failed rotation too:
	// wal.Options.StopOnRotationFailure), so this sees any failure of a
	// batch up to the barrier's.
	if err := s.working(); err != nil {
		return nil, nil, 0, err
	}
	pos := s.log.End()
	written := s.log.Stats().BytesWritten
	live := s.idx.LiveChunks()
	next := s.idx.PeekNextSeq()
	var drop []uint64
	for _, c := range s.idx.Table.Chunks() {
		if !slices.Contains(live, c) && c < index.ChunkOf(next) { // every sequence of c is handed out
			drop = append(drop, c)
		}
	}
	snap, err := s.idx.Snapshot(pos, s.log.Sealed())
	if err != nil {
		return nil, nil, 0, err
	}
	// Sequences reserved by a mark (SyncNone) stay taken for an open that
	// replays from here: the barrier made every queued mark durable.
	snap.NextSeq = max(snap.NextSeq, s.seqs.queued.Load())
	return snap, drop, written, nil
}

// reclaim removes the oldest segments while nothing live needs them and a
// checkpoint covers them, copying forward the few live records that pin
// an old segment when that lets it go. While a Backup runs it does
// nothing: the Backup needs the segments where they are, and a round
// that waited for it here would hold the maintenance goroutine, so every
// checkpoint and Close's stop of maintenance, until the Backup returned,
// however far the log grew meanwhile. The first round after it reclaims.
//
// A failure that leaves the store working (a segment file the file
// system will not remove, which holds every later one on disk) is tried
// again on m.reclaimRetry's schedule, not at every round (force tries
// now): until then reclaim returns nil at once, with no sync of the log.
// reclaim logs that failure itself, at its first failure, then in a
// reminder now and then, and when it works again, and returns it in a
// reclaimError, which the round does not log again.
func (s *Store) reclaim(force bool) error {
	m := &s.maint
	if !m.reclaimMu.TryLock() { // reclamation runs on one goroutine: a Backup holds it
		return nil
	}
	// A clock that cannot be read (the calls that read it fail too,
	// naming it) gives the attempt no instant: see retry.
	now, clockErr := readClock("Options.Now", s.opts.Now)
	known := clockErr == nil
	if !force && !m.reclaimRetry.isDue(now, known) {
		m.reclaimMu.Unlock()
		return nil
	}
	err := s.reclaimLocked()
	if err != nil && (s.usable() != nil || m.stopped.Load() != nil) {
		// The store stopped, or is closing, or the checkpoints did:
		// nothing to try again, and the round says what happened.
		m.reclaimMu.Unlock()
		return err
	}
	note := m.reclaimRetry.record(now, known, err)
	if err != nil {
		m.reclaimFailing.Store(&err)
	} else {
		m.reclaimFailing.Store(nil)
	}
	m.reclaimMu.Unlock()
	note.log(s.opts.Logger, "reclaiming disk space", s.dir, err)
	if err != nil {
		return &reclaimError{err}
	}
	return nil
}

// reclaimError is a failure of reclaim that it logged and will try again.
type reclaimError struct{ err error }

func (e *reclaimError) Error() string { return e.err.Error() }
func (e *reclaimError) Unwrap() error { return e.err }

// reclaimLocked is reclaim with reclaimMu held, tried now.
func (s *Store) reclaimLocked() error {
	m := &s.maint
	leftoversTried := false
	for {
		if s.usable() != nil {
			return nil
		}
		st := s.log.Stats()
		ck := wal.Position(m.lastCheckpoint.Load())
		if ck == 0 {
			return nil
		}
		uses := s.idx.SegmentUses()
		first := st.FirstSegment
		x := first
		for x < st.LastSegment && x < ck.Segment() {
			if _, used := uses[x]; used {
				break
			}
			x++
		}
		// Files an earlier removal took out of the log and left on disk
		// go first (RemoveBelow removes them before anything newer),
		// whether or not anything newer can go: taking a round with
		// nothing newer to remove for success, reclamation said it
		// worked again with the files on disk still.
		if x > first || st.UnremovedBytes > 0 && !leftoversTried {
			leftoversTried = true
			if err := s.removeBelow(x); err != nil {
				return err
			}
			continue
		}
		u, used := uses[first]
		if !used || first >= ck.Segment() || st.LastSegment-first <= keepSealed ||
			!worthCopying(uses, s.log.Sealed(), first, min(ck.Segment(), st.LastSegment)) {
			return nil
		}
		if err := s.copyForward(first, u); err != nil {
			return err
		}
		if err := s.checkpoint(); err != nil {
			return err
		}
		if _, still := s.idx.SegmentUses()[first]; still {
			return fmt.Errorf("broker: segment %d still needed after its live records were copied forward", first)
		}
	}
}

// worthCopying reports whether copying the live records of segment first
// forward pays: whether some run of segments from first up to (not
// including) end — sealed segments a checkpoint covers — needs at most
// 1/copyForwardShare of its size in copies (copyBytes). A segment's size
// is what it holds, up to its seal (sealed, from wal.Log.Sealed), not
// Options.SegmentBytes: segments written before a reopen with another
// size keep theirs, and measured at the new size a wholly live run of
// smaller ones looked free to copy, and a mostly dead run of larger ones
// too live to. Copying that run frees all of it for a quarter of its size
// in writes at most, and a segment of copies alone counts as wholly live,
// so copies never make copying pay again: a pass ends. Judging the oldest
// segment alone would let one large record that outlives the rest (a dead
// letter kept for weeks, a message scheduled far ahead) pin every segment
// behind it; judging runs still leaves a real backlog, which copying
// would only move, where it is.
func worthCopying(uses map[uint32]index.SegmentUse, sealed map[uint32]int, first, end uint32) bool {
	var live, size int64
	for x := first; x < end; x++ {
		live += copyBytes(uses[x])
		size += int64(sealed[x])
		if live <= size/copyForwardShare {
			return true
		}
	}
	return false
}

// copyBytes is at most what copying forward what u counts writes: each
// live message's publish record and the event that restates its state (a
// lease, a nack, a dead letter with its reason and public cause), exactly
// but for the dedup keys of those whose key the queue forgot since (the
// copy leaves it out), and at most keyCopyBytes for the dedup keys. Counting the publish
// records alone, a segment of copied dead letters with small payloads
// and long causes looked a few percent live: it was copied again, into a
// segment that looked the same, and one maintenance pass never ended.
func copyBytes(u index.SegmentUse) int64 {
	return u.Bytes + u.StateBytes + keyCopyBytes(u)
}

// keyCopyBytes bounds what copying forward the dedup keys u counts writes:
// for each, a payload-less publish and its ack, each in a frame. Left out
// of worthCopying, a segment pinned by keys alone looked free to copy; once
// a window's keys took more than one segment, their copies filled segments
// pinned by keys alone, and reclamation copied them on for good.
func keyCopyBytes(u index.SegmentUse) int64 {
	return u.KeyBytes + int64(u.Keys)*keyCopyOverhead
}

// keyCopyOverhead is what a key's copy takes beside the key itself: the
// publish and the ack with every field at its longest encoding, the key's
// length prefix included (measured with the longest key, whose prefix
// takes two bytes).
var keyCopyOverhead = func() int64 {
	key := string(make([]byte, maxKeyBytes))
	publish := index.Event{Kind: index.KindPublish, Queue: math.MaxInt32, Seq: math.MaxUint64, Time: math.MinInt64, Key: key}
	ack := index.Event{Kind: index.KindAck, Queue: math.MaxInt32, Seq: math.MaxUint64}
	return int64(segment.Size(len(publish.Append(nil))) + segment.Size(len(ack.Append(nil))) - maxKeyBytes)
}()

// removeBelow removes the log's segments before seg.
func (s *Store) removeBelow(seg uint32) error {
	// The events that left these segments unneeded (acks, deletes) are
	// queued, and under SyncPublish or SyncNone maybe not yet on the
	// device, while the last checkpoint may still name their messages
	// live there: a power loss would keep the removal and lose the
	// events, and the reopened store would hold live messages whose
	// records are gone. Every such event was queued when the index
	// showed it (both under its queue's lock), so one sync covers them.
	if err := s.log.Barrier(true); err != nil {
		return s.failure(err)
	}
	m := &s.maint
	m.removeMu.Lock()
	_, err := s.log.RemoveBelow(wal.MakePosition(seg, 0))
	m.removeMu.Unlock()
	if err != nil {
		return fmt.Errorf("broker: remove segments below %d: %w", seg, err)
	}
	return nil
}

// copyForward appends to the head of the log, for every queue, a copy of
// each live record in segment seg — the same publish record (same ID,
// payload, EnqueuedAt, key), then an event restoring the message's state —
// and, for each dedup key remembered from seg whose message is gone, a
// payload-less publish and its ack, so that the key outlives the segment.
// Each queue's lock is held until its copies are durable and applied, so
// no other event on those messages comes between.
func (s *Store) copyForward(seg uint32, u index.SegmentUse) error {
	s.mu.Lock()
	qs := make([]*Queue, 0, len(s.queues))
	for _, q := range s.queues {
		qs = append(qs, q)
	}
	s.mu.Unlock()
	for _, q := range qs {
		if err := q.copyForward(seg, u); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) copyForward(seg uint32, u index.SegmentUse) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.s.usable(); err != nil {
		return err
	}
	msgs, keys := q.iq.Pinning(seg, u.MinSeq, u.MaxSeq)
	if len(msgs) == 0 && len(keys) == 0 {
		return nil
	}
	limit := q.s.maxGroup()
	var recs [][]byte
	var events []index.Event
	var restates []bool // the event restates a live message's state
	size := 0
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		pos, err := q.s.wait(q.s.log.Enqueue(true, recs...))
		if err != nil {
			return err
		}
		for i := range events {
			if restates[i] {
				// The message's state is what it was: applying its
				// event again would only forget what this process saw
				// of time (a lapse, the end of a retry delay).
				continue
			}
			q.iq.Apply(pos[i], &events[i])
		}
		q.s.maint.copied.Add(int64(len(recs)))
		recs, events, restates, size = recs[:0], events[:0], restates[:0], 0
		return nil
	}
	// add queues records that must stay in one group.
	add := func(restate bool, group ...index.Event) error {
		var rs [][]byte
		n := 0
		for _, e := range group {
			rs = append(rs, e.Append(nil))
			n += segment.Size(len(rs[len(rs)-1]))
		}
		if n > limit {
			// Store.maxPayload leaves room for this; a store written
			// with larger bounds is refused here rather than failed by
			// an append no segment can hold.
			return fmt.Errorf("broker: queue %s: message %s and its state encode to %d bytes, more than one log segment holds (%d): it cannot be copied forward", q.name, messageID(group[0].Seq), n, limit)
		}
		if size+n > limit {
			if err := flush(); err != nil {
				return err
			}
		}
		recs = append(recs, rs...)
		events = append(events, group...)
		for i := range group {
			// A copied publish is applied (it moves the message); the
			// event after it restates the state.
			restates = append(restates, restate && i > 0)
		}
		size += n
		return nil
	}
	for _, m := range msgs {
		rec, err := q.s.log.Read(m.Pos)
		if err != nil {
			return q.s.damaged(fmt.Errorf("copy message %s forward: %w", messageID(m.Seq), err))
		}
		e, err := index.Decode(rec)
		if err != nil || e.Kind != index.KindPublish || e.Seq != m.Seq {
			cause := fmt.Errorf("the record at %v is not the publish of message %s", m.Pos, messageID(m.Seq))
			if err != nil {
				cause = fmt.Errorf("%w: %w", cause, err)
			}
			return q.s.damaged(fmt.Errorf("copy message %s forward: %w", messageID(m.Seq),
				&wal.CorruptionError{File: q.s.log.SegmentPath(m.Pos.Segment()), Offset: m.Pos.Offset(), Cause: cause}))
		}
		if e.Key != "" {
			if seq, _, ok := q.iq.Seen(e.Key); !ok || seq != m.Seq {
				// The key was forgotten (or names a later message): a
				// replay must not remember it again.
				e.Key = ""
			}
		}
		group := []index.Event{e}
		if st, ok := index.StateEvent(q.id, m); ok {
			group = append(group, st)
		}
		if err := add(true, group...); err != nil {
			return err
		}
	}
	for _, k := range keys {
		// One group: a publish without its ack would be a live message.
		if err := add(false,
			index.Event{Kind: index.KindPublish, Queue: q.id, Seq: k.Seq, Time: k.EnqueuedAt, Key: k.Key},
			index.Event{Kind: index.KindAck, Queue: q.id, Seq: k.Seq},
		); err != nil {
			return err
		}
	}
	return flush()
}
