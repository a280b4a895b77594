package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/walbroker/walbroker/internal/shrink"
	"github.com/walbroker/walbroker/segment"
)

// request is one Append (or Sync) waiting for the writer.
type request struct {
	recs [][]byte
	pos  []Position // filled by the writer before the batch is released
	size int        // encoded bytes of recs
	sync bool       // wait for an fdatasync, not just the write
	err  error      // set by the writer before the batch is released
}

// batch is the requests the writer takes in one go. Its waiters are
// released together by closing a channel, so releasing a batch costs the
// writer one operation however many callers wait.
type batch struct {
	reqs    []*request
	written chan struct{} // closed once every request is written, or failed
	synced  chan struct{} // closed once every request is durable, or failed
	// barrier: a Barrier waits in this batch, so the writer does not
	// gather callers before taking it (see gather). Guarded by Log.mu
	// while the batch is open.
	barrier bool
}

func newBatch(reqs []*request) *batch {
	return &batch{reqs: reqs[:0], written: make(chan struct{}), synced: make(chan struct{})}
}

// release gives err to every request not yet released that has no error
// of its own, and releases them all.
func (b *batch) release(err error) {
	wasWritten := b.isWritten()
	for _, r := range b.reqs {
		// A request released at the write has been read by its caller:
		// leave it alone.
		if r.err == nil && (r.sync || !wasWritten) {
			r.err = err
		}
	}
	if !wasWritten {
		close(b.written)
	}
	close(b.synced)
}

// releaseWritten releases the requests that asked only for the write.
func (b *batch) releaseWritten() {
	if !b.isWritten() {
		close(b.written)
	}
}

func (b *batch) isWritten() bool {
	select {
	case <-b.written:
		return true
	default:
		return false
	}
}

// writer is the state of the writer goroutine. Nothing else touches it
// while the log is open.
type writer struct {
	active    *seg
	writeOff  int // where the next frame goes in active
	syncedOff int // bytes of active covered by a completed fdatasync
	unsynced  int64
	buf       []byte
	// The records encoded in buf, and of them the preamble's: counted in
	// Stats once flush has written them, not before (a write that fails
	// appends nothing).
	bufRecords, bufPreamble int64
	spare                   []*request // the slice of the last batch, for the next one

	// After an fdatasync: how many appends it released, how many requests
	// were queued then, when, and how long to wait for them (see gather).
	gather, gatherFrom int
	gatherAt           time.Time
	gatherFor          time.Duration
	gatherSkip         int // fdatasyncs left before the next gather
}

// Append appends recs to the log as one atomic group and returns their
// positions. After a crash either every record of one call is in the log or
// none is. Under SyncAlways (the default) Append returns after an fdatasync
// covers the records; under SyncInterval and SyncNever, once they are
// written to the file.
//
// Concurrent calls are committed together: the writer takes every call
// waiting while the previous fdatasync ran, writes them with one write and
// syncs them with one fdatasync (group commit), and gives each the same
// result (but for a rotation that fails part way: the calls before it
// succeed, in the old segment, unless Options.StopOnRotationFailure fails
// them all; and calls that asked only for the write are
// released once it is done, before the fdatasync). Before it takes the next batch, it gives the callers the last
// fdatasync released a short time (as long as that fdatasync took, at
// most) to come back, so that callers appending in a loop share one fdatasync
// rather than two; it stops doing so for a while when they do not come.
//
// An error means the call may or may not be in the log. After a failed
// write or fdatasync every call fails with ErrPoisoned, and so after a
// failed rotation under Options.StopOnRotationFailure. Append does not
// retain recs after it returns. Appending no records does nothing (on a
// closed or failed log it returns that error).
func (l *Log) Append(recs ...[]byte) ([]Position, error) {
	if l == nil {
		return nil, errNilLog
	}
	return l.append(recs, l.opts.Sync == SyncAlways)
}

// AppendWritten is Append that returns once the records are written to the
// file, in every sync mode: a process crash keeps them, a power loss may
// lose them. They reach the device with the next fdatasync: one another
// caller waits for, or the background one within SyncInterval (none under
// SyncNever until rotation, Sync or Close).
func (l *Log) AppendWritten(recs ...[]byte) ([]Position, error) {
	return l.append(recs, false)
}

// Sync returns once every record written before the call is covered by an
// fdatasync.
func (l *Log) Sync() error { return l.Barrier(true) }

// Barrier returns once every record queued before the call is written
// (durable false) or covered by an fdatasync (durable true). It appends
// nothing.
func (l *Log) Barrier(durable bool) error {
	if l == nil {
		return errNilLog
	}
	_, err := l.enqueue(&queued{r: request{sync: durable}}).Wait()
	return err
}

// Pending is an append queued by Enqueue and not yet waited for. Only
// Enqueue makes one: a Pending of the caller's own making stands for no
// append, and its Wait says so.
type Pending struct {
	r     *request
	b     *batch
	err   error // refused before it was queued
	empty bool  // Enqueue of no records: nothing to wait for
}

// errZeroPending is what Wait returns for a Pending Enqueue did not make.
var errZeroPending = errors.New("wal: Wait on a Pending that Enqueue did not return: it stands for no append")

// queued is what an append or a barrier allocates: the Pending, its
// request and room for one position, in one allocation (Enqueue runs once
// per publish).
type queued struct {
	p   Pending
	r   request
	pos [1]Position
}

// Enqueue queues recs as Append does, but returns at once. Appends reach the
// log in the order they were queued, whichever goroutine queued them, so a
// caller that queues while holding its own lock orders its records exactly
// as its lock ordered its decisions. Call Wait for the outcome: durable
// reports whether it waits for an fdatasync (true) or only for the write.
//
// Unlike Append, Enqueue retains recs, the slice and the records it
// holds: the writer encodes them when it takes the batch, after Enqueue
// has returned. The caller must not change either before Wait returns (a
// record changed before then may be written changed, and one that grew
// may no longer fit where the log made room for it).
func (l *Log) Enqueue(durable bool, recs ...[]byte) *Pending {
	if l == nil {
		return &Pending{err: errNilLog}
	}
	if len(recs) == 0 {
		return &Pending{err: l.refusal(), empty: true}
	}
	size := 0
	for i, r := range recs {
		if len(r) > segment.MaxBody {
			return l.tooLarge(fmt.Errorf("%w: record %d is %d bytes", ErrTooLarge, i, len(r)))
		}
		size += segment.Size(len(r))
	}
	if limit := l.opts.maxGroupBytes(); size > limit {
		return l.tooLarge(fmt.Errorf("%w: %d records encode to %d bytes, a segment holds %d (Options.SegmentBytes %d less its header, seal and Options.PreambleBytes %d)",
			ErrTooLarge, len(recs), size, limit, l.opts.SegmentBytes, l.opts.PreambleBytes))
	}
	q := &queued{r: request{recs: recs, size: size, sync: durable}}
	if len(recs) <= len(q.pos) {
		q.r.pos = q.pos[:len(recs)]
	} else {
		q.r.pos = make([]Position, len(recs))
	}
	return l.enqueue(q)
}

// tooLarge returns the Pending of a call whose records cannot be queued:
// its error is err, unless the log refuses every call now (closed or
// poisoned), which a caller must be told first. The state is looked at
// only here, so that a call that fits takes mu once, in enqueue.
func (l *Log) tooLarge(err error) *Pending {
	if rerr := l.refusal(); rerr != nil {
		return &Pending{err: rerr}
	}
	return &Pending{err: err}
}

// Wait returns the positions of the queued records once they are written or
// durable, as Enqueue asked, or the error that stopped them. A Pending
// Enqueue did not make (the zero Pending, or nil) returns an error, not
// success.
func (p *Pending) Wait() ([]Position, error) {
	if p == nil {
		return nil, errZeroPending
	}
	if p.err != nil || p.empty {
		return nil, p.err
	}
	if p.b == nil {
		return nil, errZeroPending
	}
	if p.r.sync {
		<-p.b.synced
	} else {
		<-p.b.written
	}
	if p.r.err != nil {
		return nil, p.r.err
	}
	return p.r.pos, nil
}

func (l *Log) append(recs [][]byte, sync bool) ([]Position, error) {
	return l.Enqueue(sync, recs...).Wait()
}

// enqueue queues q's request and returns its Pending.
func (l *Log) enqueue(q *queued) *Pending {
	p, r := &q.p, &q.r
	l.mu.Lock()
	if err := l.refusalLocked(); err != nil {
		l.mu.Unlock()
		p.err = err
		return p
	}
	b := l.open
	b.reqs = append(b.reqs, r)
	if len(r.recs) == 0 { // only a Barrier queues no records
		b.barrier = true
	}
	quiet := l.hold > 0 && len(b.reqs) < l.hold && !b.barrier
	l.mu.Unlock()
	if !quiet {
		l.wake()
	}
	p.r, p.b = r, b
	return p
}

// refusal returns the error every call gets now: ErrClosed once the log
// is closed, the poison once it failed, nil otherwise.
func (l *Log) refusal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refusalLocked()
}

func (l *Log) refusalLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// isClosed reports whether Close was called.
func (l *Log) isClosed() bool { return l.refusal() == ErrClosed }

func (l *Log) wake() {
	select {
	case l.kick <- struct{}{}:
	default: // a wake-up is already pending; it will see this request
	}
}

// writeLoop is the writer goroutine: the only code that writes to or syncs
// the active segment, and the only code that rotates.
func (l *Log) writeLoop() {
	defer close(l.writerDone)
	w := &l.w
	alarm := startAlarm(l.wake)
	defer alarm.stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	timerArmed := false
	for {
		select {
		case <-l.kick:
		case <-timer.C:
			timerArmed = false
			// A log a failed rotation stopped lost nothing: what it
			// acknowledged as written still gets its fdatasync within
			// the interval (only a failed write or fdatasync ends that).
			if l.lostErr() == nil && w.writeOff > w.syncedOff {
				if err := l.syncActive(); err != nil {
					l.fail(err)
				}
			}
		}
		if w.gather > 0 {
			if !l.gather(alarm) {
				// The callers did not come back in time: they are not
				// appending in a loop, or are slow to. Stop waiting for
				// them, and look again later.
				w.gatherSkip = gatherBackoff
			}
		}
		l.mu.Lock()
		var b *batch
		if len(l.open.reqs) > 0 {
			b, l.open = l.open, newBatch(w.spare)
		}
		closing := l.closed
		l.mu.Unlock()

		if b != nil {
			l.commit(b)
			// Nobody refers to the slice any more: the waiters hold
			// their requests, not the slice.
			clear(b.reqs)
			w.spare = b.reqs[:0]
		}
		if closing {
			// Close set closed under mu before waking us, so every
			// request admitted before it was in the batch just taken.
			// A log stopped by a failed rotation lost nothing: what it
			// wrote is synced too.
			if l.lostErr() == nil && w.writeOff > w.syncedOff {
				if err := l.syncActive(); err != nil {
					l.fail(err)
				}
			}
			timer.Stop()
			return
		}
		if !timerArmed && l.opts.Sync != SyncNever && w.writeOff > w.syncedOff && l.lostErr() == nil {
			timer.Reset(l.opts.SyncInterval)
			timerArmed = true
		}
	}
}

// gather waits, after an fdatasync released its waiters, for them to come
// back with their next records before the writer takes the next batch —
// at most as long as that fdatasync took. Without it, callers that
// append in a loop split into two halves that alternate: one waits for the
// fdatasync in flight while the other is being released, and each
// fdatasync covers about half of them. The wait ends as soon as as many
// requests arrived since the release as it released, when the log closes,
// or at the deadline; it reports whether the requests came (or the log
// closed) rather than the deadline, which the writer's alarm keeps (a
// runtime timer would end the wait about a millisecond late when the
// process is idle; see alarm). While it waits, only the
// request that completes the count wakes it (Log.hold): woken by each,
// the writer would take the CPU from the callers it waits for.
//
// A Barrier ends the wait too, as if the callers had come: it appends
// nothing, and whoever waits on it may be what keeps the callers from
// coming back (a broker's checkpoint holds every queue while it waits,
// and the released callers wait for their queue to record what the
// fdatasync made durable). Waiting would cost the barrier, and every
// caller behind it, the whole wait, and then stop the gathering for
// gatherBackoff commits.
//
// A wait that reaches its deadline costs its commit that much latency and
// buys nothing, which is what happens to callers that do not append in a
// loop (each request from a different, independent caller): after one,
// the writer does not wait for the next gatherBackoff fdatasyncs. So a
// log whose callers loop gathers them at each commit, and one whose
// callers do not pays at most one fdatasync's time every gatherBackoff
// commits.
func (l *Log) gather(alarm *alarm) bool {
	w := &l.w
	want := w.gatherFrom + w.gather
	deadline := w.gatherAt.Add(w.gatherFor)
	w.gather = 0
	defer func() {
		alarm.cancel()
		l.mu.Lock()
		l.hold = 0
		l.mu.Unlock()
	}()
	for {
		l.mu.Lock()
		enough := len(l.open.reqs) >= want || l.closed || l.open.barrier
		l.hold = want
		l.mu.Unlock()
		left := time.Until(deadline)
		if enough {
			return true
		}
		if left <= 0 {
			return false
		}
		// Woken by the request that completes the count, a Barrier,
		// Close, or the alarm; whichever it was, look again.
		alarm.at(deadline)
		<-l.kick
	}
}

// commit writes one batch of requests and releases each with its result.
func (l *Log) commit(b *batch) {
	if err := l.poison(); err != nil {
		b.release(err)
		return
	}
	w := &l.w
	if !l.prep.begun && slices.ContainsFunc(b.reqs, func(r *request) bool { return len(r.recs) > 0 }) {
		// The first write: from now on the next segment is always being
		// prepared (see Open), if there can be one.
		if next, err := l.nextSeq(w.active.seq); err == nil {
			l.prep.request(next, w.active)
		}
	}
	w.buf = w.buf[:0]
	w.bufRecords, w.bufPreamble = 0, 0
	needSync := false
	for i, r := range b.reqs {
		if len(r.recs) > 0 && w.writeOff+len(w.buf)+r.size > w.active.capacity() {
			if err := l.flush(); err != nil {
				b.release(l.fail(err))
				return
			}
			if err := l.rotate(); err != nil {
				if perr := l.poison(); perr != nil {
					b.release(perr)
					return
				}
				if l.opts.StopOnRotationFailure {
					// The log stops before anyone waiting on it is
					// released, so that the caller's first look at
					// Err after this batch already sees it.
					b.release(l.stop(err))
					return
				}
				// The next segment could not be made (a full disk, say):
				// the calls that needed it fail, the log goes on.
				for _, r := range b.reqs[i:] {
					r.err = err
				}
				break
			}
		}
		n, salt := len(r.recs), w.active.file.Salt()
		for j, rec := range r.recs {
			off := w.writeOff + len(w.buf)
			r.pos[j] = MakePosition(w.active.seq, off)
			w.buf = segment.AppendFrame(w.buf, w.active.seq, salt, uint32(w.syncedOff), segment.KindRecord, segment.PlaceOf(j, n), rec)
		}
		w.bufRecords += int64(n)
		needSync = needSync || r.sync
	}
	if err := l.flush(); err != nil {
		b.release(l.fail(err))
		return
	}
	b.releaseWritten() // written is all some of them asked for
	var err error
	if needSync && w.writeOff > w.syncedOff {
		start := time.Now()
		if l.poisoned.Load() {
			// Poisoned while the batch was written (a RemoveBelow's
			// failed directory sync): no fdatasync runs on a poisoned
			// log, and the batch fails with the rest rather than being
			// told success (see rotate).
			err = l.poison()
		} else if serr := l.syncActive(); serr != nil {
			err = l.fail(serr)
		} else if w.gatherSkip > 0 {
			w.gatherSkip--
		} else {
			// Expect back the callers this fdatasync releases.
			l.mu.Lock()
			w.gatherFrom = len(l.open.reqs)
			l.mu.Unlock()
			w.gatherAt = time.Now()
			w.gatherFor = min(w.gatherAt.Sub(start), maxGather)
			for _, r := range b.reqs {
				if r.sync && len(r.recs) > 0 {
					w.gather++
				}
			}
		}
	}
	b.release(err)
}

// The wait for released callers (see gather): at most as long as the
// fdatasync that released them, and never above maxGather; after a wait
// in vain, none for gatherBackoff fdatasyncs.
const (
	maxGather     = time.Millisecond
	gatherBackoff = 8
)

// flush writes the encoded buffer at the write offset of the active segment
// and makes it visible to readers.
//
// The same write puts zeros where the next frame's header goes (as much
// of it as the file holds), so that the fdatasync that makes the batch
// durable makes them durable too. What the page cache shows there may not
// be what the device holds: an Open whose fdatasync of a zeroed torn tail
// failed leaves the zeros in the page cache, marked clean, over the torn
// batch the device keeps, and an Open tried again in the same boot reads
// zeros, zeroes nothing, and appends over the torn batch in the page cache
// only. A torn frame that begins exactly where the appends end, on a page
// they do not write, would then be read after a power loss as the frame
// that follows them (it names the segment and verifies under its salt).
// The zeros write its header's page; torn frames further on are found by
// the scan as ever, claiming no sync past the appends before them: a
// torn tail. Nothing is ever written past the zeros before the next batch
// writes over them, so they hide no frame.
func (l *Log) flush() error {
	w := &l.w
	if len(w.buf) == 0 {
		return nil
	}
	n := len(w.buf)
	if room := w.active.file.Size() - w.writeOff - n; room > 0 {
		w.buf = append(w.buf, nextHeader[:min(room, len(nextHeader))]...)
	}
	err := w.active.file.WriteAt(w.buf, w.writeOff)
	w.buf = w.buf[:n]
	if err != nil {
		return err
	}
	w.writeOff += len(w.buf)
	l.stats.writes.Add(1)
	l.stats.bytesWritten.Add(int64(len(w.buf)))
	l.stats.records.Add(w.bufRecords)
	l.stats.preamble.Add(w.bufPreamble)
	w.unsynced += w.bufRecords
	w.bufRecords, w.bufPreamble = 0, 0
	w.buf = w.buf[:0]
	if cap(w.buf) > bufKeep && shrink.Due(n, cap(w.buf)) {
		// The buffer grew to the largest batch the log ever wrote (a
		// copy forward writes up to a segment's worth in one): give that
		// room back once a batch of a quarter of it or less is written,
		// as every collection of a burst is (package shrink), rather
		// than hold it until Close. A log whose batches stay large keeps
		// its buffer.
		w.buf = nil
	}
	w.active.end.Store(int64(w.writeOff))
	return nil
}

// bufKeep is the capacity of the writer's buffer kept whatever the size of
// the batches: the group commits of many callers of small records (64 of
// 1 KiB take about 70 KiB) vary in size from one commit to the next, and
// must not make the writer, which every caller waits for, allocate its
// buffer anew each time one is small.
const bufKeep = 256 << 10

// nextHeader is what flush writes where the next frame's header goes.
var nextHeader [segment.FrameHeaderSize]byte

// syncActive fdatasyncs the active segment.
func (l *Log) syncActive() error {
	w := &l.w
	if err := w.active.file.Sync(); err != nil {
		return err
	}
	w.syncedOff = w.writeOff
	l.stats.syncs.Add(1)
	if w.unsynced > 0 {
		l.stats.commits.Add(1)
	}
	if w.unsynced > l.stats.maxPerSync.Load() {
		l.stats.maxPerSync.Store(w.unsynced)
	}
	w.unsynced = 0
	return nil
}

// rotate seals the active segment, once what it holds is durable, and
// makes the prepared next one active, with the preamble encoded in the
// write buffer as its first group. An error with the log not poisoned
// means the next segment could not be put in place and nothing changed.
func (l *Log) rotate() error {
	w := &l.w
	// The log may have been poisoned since the batch was taken (a
	// RemoveBelow's failed directory sync): nothing goes on then, and no
	// later fsync's success may stand for what the failed one lost.
	if l.poisoned.Load() {
		return l.poison()
	}
	var pre [][]byte
	if l.opts.Preamble != nil {
		pre = l.opts.Preamble()
		size := 0
		for _, r := range pre {
			size += segment.Size(len(r))
		}
		if size > l.opts.PreambleBytes {
			return fmt.Errorf("wal: rotate: %w: the preamble encodes to %d bytes, Options.PreambleBytes is %d", ErrTooLarge, size, l.opts.PreambleBytes)
		}
	}
	if _, err := l.nextSeq(w.active.seq); err != nil {
		return fmt.Errorf("wal: rotate: %w", err) // nothing was asked for
	}
	p := l.prep.take(w.active)
	if p.err != nil {
		l.prep.failed = true // try again at the next rotation
		return p.err
	}
	next := &seg{file: p.file, seq: p.seq}
	next.end.Store(segment.HeaderSize)
	if err := next.file.Rename(l.opts.FS, l.segPath(next.seq)); err != nil {
		_ = next.file.Close()
		_ = l.opts.FS.Remove(next.file.Path())
		l.prep.failed = true
		return fmt.Errorf("wal: rotate: %w", err)
	}
	// The directory must be durable before a record in the new segment is
	// acknowledged; and the old segment must be sealed and durable before
	// anything is written to the new one, which is what lets recovery
	// remove an empty segment that follows an unsealed one.
	if l.poisoned.Load() {
		_ = next.file.Close()
		return l.poison()
	}
	if err := l.opts.FS.SyncDir(l.dir); err != nil {
		_ = next.file.Close()
		return l.fail(fmt.Errorf("rotate: sync dir: %w", err))
	}
	// The seal vouches for every byte before it (its synced field is its
	// own offset), so that damage there reads as corruption, not as a torn
	// tail recovery may drop. That claim must be true when the seal is
	// written, or a power loss that kept the seal but not the records
	// before it would leave a log refused as corrupt for losing bytes no
	// append waited for: the records flushed since the last fdatasync are
	// made durable first.
	if w.writeOff > w.syncedOff {
		if err := l.syncActive(); err != nil {
			_ = next.file.Close()
			return l.fail(err)
		}
	}
	seal := segment.AppendFrame(nil, w.active.seq, w.active.file.Salt(), uint32(w.writeOff), segment.KindSeal, segment.Full, nil)
	if err := w.active.file.WriteAt(seal, w.writeOff); err != nil {
		_ = next.file.Close()
		return l.fail(err)
	}
	if err := l.syncActive(); err != nil {
		_ = next.file.Close()
		return l.fail(err)
	}
	// Past the seal, as Open finds a sealed segment's end.
	w.active.end.Store(int64(w.writeOff + len(seal)))
	l.addSegment(next)
	w.active, w.writeOff, w.syncedOff = next, segment.HeaderSize, segment.HeaderSize
	l.stats.rotations.Add(1)
	if p.recycled {
		l.stats.recycled.Add(1)
	}
	if after, err := l.nextSeq(next.seq); err == nil {
		l.prep.request(after, next)
	}
	// Each preamble record is a group of its own: damage to one (found
	// by salvage) must not take the others with it — a queue's
	// declaration may be in no other segment.
	salt := next.file.Salt()
	for _, rec := range pre {
		w.buf = segment.AppendFrame(w.buf, next.seq, salt, uint32(w.syncedOff), segment.KindRecord, segment.Full, rec)
	}
	w.bufRecords += int64(len(pre))
	w.bufPreamble += int64(len(pre))
	return nil
}

// capacity is how far records may fill the segment: its size less room for
// the seal frame.
func (s *seg) capacity() int { return s.file.Size() - segment.Size(0) }

// Err returns the error that poisoned the log (ErrPoisoned, wrapping the
// failed write or fdatasync, or the failed rotation that stopped it under
// Options.StopOnRotationFailure, or both when the background fdatasync of
// a stopped log failed after the stop), or nil. A failure no call waited for (the
// background fdatasync of records appended without waiting for one) is
// reported here before any call meets it; a failure a call meets is
// reported here before that call, or any other, is released with it.
func (l *Log) Err() error {
	if l == nil {
		return errNilLog
	}
	if !l.poisoned.Load() {
		return nil
	}
	return l.poison()
}

// Poisoned returns a channel that is closed once the log is poisoned,
// when Err returns the poison: a failure no call waited for (the
// background fdatasync of records appended without waiting for one) is
// so learned of at once, without a call. A nil log's is closed: it
// refuses every call.
func (l *Log) Poisoned() <-chan struct{} {
	if l == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.poisonedCh == nil {
		// Made on demand: most logs are never asked.
		l.poisonedCh = make(chan struct{})
		if l.err != nil {
			close(l.poisonedCh)
		}
	}
	return l.poisonedCh
}

// closePoisoned closes the channel Poisoned returns, if it was asked for;
// mu is held, and err and poisoned have just been set, so that a caller
// the channel wakes finds the poison in Err.
func (l *Log) closePoisoned() {
	if l.poisonedCh != nil {
		close(l.poisonedCh)
	}
}

// poison returns the error that poisoned the log, or nil.
func (l *Log) poison() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lostErr returns the poison of a failed write or fdatasync, or nil: nil
// also for a log a failed rotation stopped (see stop).
func (l *Log) lostErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// fail poisons the log with cause (the first cause wins) and returns the
// poison error.
func (l *Log) fail(cause error) error {
	l.mu.Lock()
	first := l.lost == nil
	if first {
		l.lost = fmt.Errorf("%w (data written since the last good fdatasync may be lost; close and reopen): %w", ErrPoisoned, cause)
		stopped := l.err // a failed rotation stopped it before: see stop
		if stopped == nil {
			l.err = l.lost
			l.poisoned.Store(true)
			l.closePoisoned()
		} else {
			// A stopped log still syncs what it wrote (see writeLoop); that
			// failing loses data, which Err must say, not only the stop.
			l.err = fmt.Errorf("%w; before that, %w", l.lost, stopped)
		}
	}
	err := l.lost
	l.mu.Unlock()
	if first {
		l.logLater(func(log *slog.Logger) {
			log.Error("wal: write or fdatasync failed; the log is stopped until reopened", "err", cause)
		})
	}
	return err
}

// stop poisons the log for a rotation that failed without writing
// anything (Options.StopOnRotationFailure) and returns the poison error;
// a poison already there wins. Nothing written is lost by the stop: the
// background fdatasync and Close still sync what the log wrote (see
// writeLoop), and Close returns nil unless one of those fails (see fail).
func (l *Log) stop(cause error) error {
	l.mu.Lock()
	first := l.err == nil
	// A reopen helps a rotation that failed for want of room or of a
	// working file system, not one that found no segment number left: the
	// reopened log stops at the same rotation (see ErrNoNextSegment), so
	// that error does not say to reopen.
	exhausted := errors.Is(cause, ErrNoNextSegment)
	if first {
		if exhausted {
			l.err = &stoppedError{cause: cause, text: "wal: log stopped at the last segment number (a rotation failed, and Options.StopOnRotationFailure stops the log at one; a reopened log stops at the same rotation, so read its records into a new log, numbered from 1, to go on): " + cause.Error()}
		} else {
			l.err = fmt.Errorf("%w (a rotation failed, and Options.StopOnRotationFailure stops the log at one; close and reopen): %w", ErrPoisoned, cause)
		}
		l.poisoned.Store(true)
		l.closePoisoned()
	}
	err := l.err
	l.mu.Unlock()
	if first {
		l.logLater(func(log *slog.Logger) {
			if exhausted {
				log.Error("wal: rotation failed; the log is stopped, and a reopened log stops at the same rotation: read its records into a new log to go on (Options.StopOnRotationFailure)", "err", cause)
				return
			}
			log.Error("wal: rotation failed; the log is stopped until reopened (Options.StopOnRotationFailure)", "err", cause)
		})
	}
	return err
}
