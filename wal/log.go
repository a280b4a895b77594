package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/walbroker/walbroker/segment"
	"github.com/walbroker/walbroker/vfs"
)

// Log is an ordered sequence of segment files in one directory.
//
// A Log is safe for concurrent use. Appends from many goroutines are
// gathered by one writer goroutine, which owns the active segment's writes
// and fdatasyncs. Reads go through the segments' read-only memory maps.
//
// Lock order: removeMu, then salvageMu or listMu, then a seg's cmu. mu (the request queue) is never held while taking another lock
// or doing I/O.
type Log struct {
	dir  string
	opts Options
	lock io.Closer

	// mu guards open (the batch requests join), closed, err, lost, hold
	// and poisonedCh.
	mu     sync.Mutex
	open   *batch
	closed bool
	err    error // the poison (fail, stop), returned forever after
	// lost is the poison of a failed write or fdatasync (fail): what
	// Close returns. A log stopped by a failed rotation (stop, under
	// Options.StopOnRotationFailure) lost nothing it wrote, and its
	// background fdatasync and Close still sync it; a failure of that
	// sync sets lost, and err then names both.
	lost error
	// hold, while the writer gathers released callers, is how many
	// requests open must hold before a new one wakes the writer (0: every
	// request wakes it). One wake-up instead of one per caller keeps the
	// writer from competing with the callers it waits for.
	hold int
	// kick wakes the writer (capacity 1: a wake-up already pending covers
	// every request queued before the writer takes mu). Anyone sends on
	// it, without blocking (wake); only the writer receives.
	kick chan struct{}
	// poisoned is set with err, so that Err need not take mu.
	poisoned atomic.Bool
	// poisonedCh, guarded by mu, is what Poisoned returns: made by its
	// first call, closed when err is set.
	poisonedCh chan struct{}

	// removeMu is held by RemoveBelow for its whole run, by SalvageDone,
	// and by Close from the moment it marks the log closed: no file of the
	// log is renamed or removed once Close has let the directory go
	// (another Log may have it), and two removals do not keep more than
	// maxSpares between them. Taken before salvageMu, listMu and mu.
	removeMu sync.Mutex
	// unremoved, guarded by removeMu: segment files RemoveBelow took out of
	// the log but could not remove, oldest first (see RemoveBelow).
	unremoved []removal

	// listMu serialises changes of segs (rotation, removal) and guards
	// spares. Readers load segs without it.
	listMu sync.Mutex
	segs   atomic.Pointer[[]*seg]
	// closedStats is what Stats returns once Close has written the last
	// records: the log as Close left it.
	closedStats atomic.Pointer[Stats]
	spares      []string // retired segment files, renamed aside, ready for reuse

	w          writer        // owned by the writer goroutine
	writerDone chan struct{} // closed when the writer goroutine returns
	prep       *preparer
	// logs counts the log calls handed to goroutines of their own (see
	// logLater); Close waits for them.
	logs sync.WaitGroup

	recovery Recovery
	// unfinished: the list of a salvage in progress is on disk (see
	// noteSalvage). Open sets it; after Open, salvageMu guards it.
	unfinished bool
	salvageMu  sync.Mutex
	stats      counters
}

// seg is one segment file of the log.
type seg struct {
	file *segment.File
	seq  uint32
	// end is the offset just past the last record readers may see: the
	// valid end of a sealed segment, or the end of the last batch written
	// to the active one (before its fdatasync: see Iterate).
	end atomic.Int64

	// readers counts the calls reading the mapping (see enter), below
	// closingBit, which close sets: once set, no reader is let in, and
	// close waits for those in to leave (drained, closed by the last one,
	// set before the bit) before it unmaps the file. Not a sync.RWMutex: a
	// reader that reads again from its callback (Iterate's fn calling
	// Read) would wait there behind a closer that waits for it.
	readers atomic.Int64
	drained chan struct{}
	// cmu makes a second close wait for the first (RemoveBelow and Close
	// may both close a segment).
	cmu sync.Mutex
}

// closingBit marks a segment's readers count once close has begun.
const closingBit = 1 << 62

// enter lets a reader in, to read the mapping until it calls leave; false
// once the segment is closing or closed.
func (s *seg) enter() bool {
	for {
		v := s.readers.Load()
		if v&closingBit != 0 {
			return false
		}
		if s.readers.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// leave ends what enter began; the last reader out of a closing segment
// lets its close go on.
func (s *seg) leave() {
	if s.readers.Add(-1) == closingBit {
		close(s.drained)
	}
}

// counters are written by the writer goroutine alone (fillsDropped and
// fillsRushed by the preparer's, bytesRemoved and unremoved by RemoveBelow under
// removeMu), so maxPerSync's load and store need no
// compare-and-swap; Stats reads them from any goroutine.
type counters struct {
	records      atomic.Int64 // records appended since open
	preamble     atomic.Int64 // of records, those of Options.Preamble written at rotations
	writes       atomic.Int64 // batches written
	syncs        atomic.Int64 // fdatasyncs of segment files
	commits      atomic.Int64 // of syncs, those that covered appended records
	maxPerSync   atomic.Int64 // most records one fdatasync covered
	bytesWritten atomic.Int64
	rotations    atomic.Int64
	recycled     atomic.Int64
	fillsDropped atomic.Int64
	fillsRushed  atomic.Int64
	bytesRemoved atomic.Int64
	unremoved    atomic.Int64 // bytes of the files in Log.unremoved
}

// Stats are counters of a Log since it was opened.
type Stats struct {
	Segments          int   // segment files in the log
	DiskBytes         int64 // their total size
	LargestSegment    int64 // the size of the largest of them
	Records           int64 // records appended
	PreambleRecords   int64 // of Records, those Options.Preamble gave, written at rotations
	Writes            int64 // write batches (one pwrite each, rotation aside)
	Syncs             int64 // fdatasyncs of segment files
	Commits           int64 // of Syncs, those that made appended records durable (not a rotation's sync of its seal alone)
	MaxRecordsPerSync int64 // most records covered by one fdatasync
	BytesWritten      int64
	Rotations         int64
	RecycledSegments  int64 // rotations to a retired file reused (the others took a new one: written full of zeros, or its rest allocated when rushed)
	ZeroFillsDropped  int64 // zero-fills of new files given up for a retired file that arrived meanwhile
	ZeroFillsRushed   int64 // zero-fills the writer caught up with: the rest of the file allocated (fallocate), not written, where the file system can
	BytesRemoved      int64 // of segment files RemoveBelow removed, or kept aside to reuse, since open
	UnremovedBytes    int64 // of segment files RemoveBelow took out of the log and could not remove: on disk still, counted neither in DiskBytes nor in BytesRemoved
	FirstSegment      uint32
	LastSegment       uint32
}

// Stats returns the counters. It is safe to call at any time; after Close
// it returns them as Close left the log (its last records written and
// synced, its segments on disk as counted).
func (l *Log) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	if s := l.closedStats.Load(); s != nil {
		return *s
	}
	segs := *l.segs.Load()
	s := Stats{
		Segments:          len(segs),
		Records:           l.stats.records.Load(),
		PreambleRecords:   l.stats.preamble.Load(),
		Writes:            l.stats.writes.Load(),
		Syncs:             l.stats.syncs.Load(),
		Commits:           l.stats.commits.Load(),
		MaxRecordsPerSync: l.stats.maxPerSync.Load(),
		BytesWritten:      l.stats.bytesWritten.Load(),
		Rotations:         l.stats.rotations.Load(),
		RecycledSegments:  l.stats.recycled.Load(),
		ZeroFillsDropped:  l.stats.fillsDropped.Load(),
		ZeroFillsRushed:   l.stats.fillsRushed.Load(),
		BytesRemoved:      l.stats.bytesRemoved.Load(),
		UnremovedBytes:    l.stats.unremoved.Load(),
	}
	for _, sg := range segs {
		s.DiskBytes += int64(sg.file.Size())
		s.LargestSegment = max(s.LargestSegment, int64(sg.file.Size()))
	}
	if len(segs) > 0 {
		s.FirstSegment, s.LastSegment = segs[0].seq, segs[len(segs)-1].seq
	}
	return s
}

// Sealed returns, for every sealed segment of the log (all but the active
// one), the offset just past its seal frame: what Options.Sealed takes.
func (l *Log) Sealed() map[uint32]int {
	if l == nil {
		return map[uint32]int{}
	}
	segs := *l.segs.Load()
	out := make(map[uint32]int, len(segs))
	for _, s := range segs[:max(len(segs)-1, 0)] {
		out[s.seq] = int(s.end.Load())
	}
	return out
}

// Dir returns the log's directory.
func (l *Log) Dir() string {
	if l == nil {
		return ""
	}
	return l.dir
}

// SegmentPath returns the path of segment seq's file in the log's
// directory (which may not exist): what a caller names when a record it
// read there turns out to be damage only it can tell (a record that does
// not decode as what it wrote).
func (l *Log) SegmentPath(seq uint32) string {
	if l == nil {
		return ""
	}
	return l.segPath(seq)
}

// Recovery returns what Open found and repaired. The report is the
// caller's own: its slices and its TornTail are copies, which the caller
// may change without changing what the next call returns (the log keeps
// its own to answer it, and the Damage causes are shared, being errors,
// which are not changed).
func (l *Log) Recovery() Recovery {
	if l == nil {
		return Recovery{}
	}
	r := l.recovery
	r.Salvaged = slices.Clone(r.Salvaged)
	r.RemovedEmpty = slices.Clone(r.RemovedEmpty)
	if r.TornTail != nil {
		torn := *r.TornTail
		r.TornTail = &torn
	}
	return r
}

// Close makes every written record durable, stops the writer and releases
// the directory. Appends queued before Close are completed; later calls get
// ErrClosed, a second Close too: at once, without waiting for a first
// still under way (the directory is released when the first returns).
// Close returns the poison error if a write or fdatasync had
// failed, or the directory sync of a RemoveBelow (one Close waited for
// included), and writes no clean mark then. A log stopped by a failed
// rotation (Options.StopOnRotationFailure) lost nothing it wrote: Close
// fdatasyncs it and returns nil, unless that fdatasync fails.
//
// Once every record is durable, Close writes the clean mark, which spares
// the next Open a read of the last segment to its end. A mark it cannot
// write (a full disk) is logged as a warning and not returned: nothing
// depends on it, the log being whole and synced without it, and a mark
// written in part does not read as one. (One refused as planted, a link
// where the mark belongs, is returned: see vfs.ErrForeign.)
func (l *Log) Close() error {
	if l == nil {
		return errNilLog
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	l.removeMu.Lock() // a removal under way ends first
	defer l.removeMu.Unlock()
	l.wake()
	<-l.writerDone
	// The poison as it stands now, not as the writer saw it when it
	// stopped: a removal Close waited for may have failed its directory
	// sync after that, and removeMu, held, lets no other start.
	err := l.lostErr()
	err = errors.Join(err, l.prep.stop())
	if err == nil {
		// Everything is synced: say where the log ends, so that the next
		// Open need not read the rest of the last segment to prove that
		// nothing valid lies beyond.
		end := MakePosition(l.w.active.seq, l.w.writeOff)
		if merr := writeCleanMark(l.opts.FS, l.dir, end); errors.Is(merr, vfs.ErrForeign) {
			err = merr // someone else writes in the directory: say so
		} else if merr != nil {
			l.logLater(func(log *slog.Logger) {
				log.Warn("wal: close: every record is durable, but the clean mark could not be written; the next open reads the last segment to its end",
					"dir", l.dir, "end", end.String(), "err", merr)
			})
		}
	}

	// From now on Stats describes the log as Close leaves it on disk.
	final := l.Stats()
	l.closedStats.Store(&final)
	l.listMu.Lock()
	for _, s := range *l.segs.Load() {
		err = errors.Join(err, s.close())
	}
	l.segs.Store(&[]*seg{})
	// Spares stay on disk for the next Open to reuse.
	l.spares = nil
	l.listMu.Unlock()
	l.logs.Wait()
	return errors.Join(err, l.lock.Close())
}

// logLater makes a log call on a goroutine of its own: the writer and the
// preparer log through it. The Logger's handler is the caller's code, and
// a caller of the log may hold a lock of its own while it waits for the
// writer (a broker's checkpoint holds every queue's for its barrier): a
// handler that reads something under that lock (a queue's figures, say)
// must not keep the writer from releasing the wait, nor the preparer from
// handing the writer its next segment.
func (l *Log) logLater(f func(*slog.Logger)) {
	l.logs.Go(func() { f(l.opts.Logger) })
}

// close lets no reader in any more, waits for those in to leave, and
// closes the file. Only the first call closes it.
func (s *seg) close() error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.readers.Load()&closingBit != 0 {
		return nil
	}
	s.drained = make(chan struct{})
	if s.readers.Or(closingBit) != 0 {
		<-s.drained
	}
	return s.file.Close()
}

// Segment file names: ten decimal digits and ".seg". Files being prepared
// or kept for reuse end in ".tmp": Open keeps a full-size retired one for
// reuse (up to maxSpares) and removes the rest.
const (
	segSuffix = ".seg"
	tmpSuffix = ".tmp"
	lockName  = "LOCK"
	cleanName = "CLEAN"
)

func segName(seq uint32) string { return fmt.Sprintf("%010d%s", seq, segSuffix) }

func (l *Log) segPath(seq uint32) string { return filepath.Join(l.dir, segName(seq)) }

// parseSegName returns the sequence a segment file name carries.
func parseSegName(name string) (uint32, bool) {
	digits, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(digits) != 10 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint32(n), true
}
